"""The one table of settings (lab/contamination/settings.py): every module that needs to know
what a setting injects (the injector, the recipe check, the study runner, the cost estimate and
the probes) derives it from the table, for every setting, the placebos included. Runs on the
tiny synthetic corpora: no LAB_CORPORA needed."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

from lab.common import LabError
from lab.contamination import settings as table
from lab.corpora.shards import read_corpus
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.settings import Setting
from lab.corpora import Sample, load_samples

LAB = Path(__file__).resolve().parents[1] / "lab"
CONTAMINATED = ("input-only", "output-only", "unpaired", "paired", "paired-reversed")
REPEAT, FRACTION = 2, 0.5


def write_recipe(path: Path, arms: list[str], limit: int, samples: int = 30) -> Path:
    path.write_text(f"name: t\narms: [{', '.join(arms)}]\nseeds: [0, 1]\n"
                    f"corpus:\n  base_splits: [valid]\n  limit: {limit}\n"
                    f"injection:\n  samples: {samples}\n  repeat: {REPEAT}\n  fraction: {FRACTION}\n"
                    f"evaluation:\n  max_samples: {samples}\n")
    return path


def arms_for(name: str) -> list[str]:
    setting = table.get(name)
    return ["control"] + ([setting.base] if setting.placebo else []) + ([name] if name != "control" else [])


def test_the_table():
    assert table.names() == ("control", *CONTAMINATED, *(f"{n}-placebo" for n in CONTAMINATED))
    expected = {  # name: (form, sides, documents per sample, needs output)
        "control": (None, (), 0, False),
        "input-only": ("input", ("input",), 1, False),
        "output-only": ("output", ("output",), 1, True),
        "unpaired": ("unpaired", ("input", "output"), 2, True),
        "paired": ("paired", ("input", "output"), 1, True),
        "paired-reversed": ("paired-reversed", ("input", "output"), 1, True),
    }
    for name, (form, sides, per_sample, needs_output) in expected.items():
        for setting in filter(None, (table.get(name), table.find(f"{name}-placebo"))):
            assert (setting.form, setting.sides, setting.documents_per_sample,
                    setting.needs_output) == (form, sides, per_sample, needs_output), setting
    for name in CONTAMINATED:
        placebo = table.get(f"{name}-placebo")
        assert placebo.placebo and placebo.base == name and not placebo.injects_test
        assert placebo.injects and table.placebo_of(name) == placebo.name
        assert table.get(name).injects_test and not table.get(name).placebo
    assert not table.CONTROL.injects and table.placebo_of("control") is None
    sample = Sample(id="x:test:0", split="test", index=0, input="int a;", output="int b;")
    assert table.get("paired").documents(sample) == [("paired", "int a; <SEP> int b;")]
    assert table.get("paired-reversed-placebo").documents(sample) == [
        ("paired", "int b; <SEP> int a;")]
    assert table.get("unpaired-placebo").documents(sample) == [("input", "int a;"), ("output", "int b;")]
    with pytest.raises(LabError, match="unknown setting 'sideways'.*paired-placebo"):
        table.get("sideways")
    with pytest.raises(ValueError):
        Setting("broken", "paired", placebo=True)  # a placebo without a base
    with pytest.raises(ValueError):
        Setting("broken", "triple")


def test_no_module_spells_out_a_setting():
    """Setting names appear as string literals only in the table (and as the recipe's default
    arm list); a module that kept its own tuple, dict or if-chain of settings would show here."""
    allowed = {"study/recipe_schema.py": {"paired"}}  # Recipe.arms' default: [control, paired]
    pattern = re.compile(r"""["']((?:input-only|output-only|unpaired|paired(?:-reversed)?)(?:-placebo)?)["']""")
    found = defaultdict(set)
    for path in LAB.rglob("*.py"):
        relative = path.relative_to(LAB).as_posix()
        if relative == "contamination/settings.py":
            continue
        found[relative] |= set(pattern.findall(path.read_text(encoding="utf-8")))
    spelled = {k: v for k, v in found.items() if v - allowed.get(k, set())}
    assert spelled == {}


@pytest.mark.parametrize("name", table.names())
def test_every_module_agrees_with_the_table(tiny_corpora, tmp_path, name):
    from lab.detect import probe
    from lab.study import cost
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand

    setting = table.get(name)
    per_sample = setting.documents_per_sample
    tests = load_samples("codetrans", "test", tiny_corpora).records
    # The injector: documents per sample, their sides and texts, as many removed.
    manifest = run_inject(InjectConfig(benchmark="codetrans", setting=name, seed=4, out=tmp_path / name,
                                       corpora_dir=tiny_corpora, fraction=FRACTION, repeat=REPEAT))
    counts = manifest["counts"]
    samples = counts.get("placebo_samples", counts["injected_samples"])
    assert samples == (0 if name == "control" else round(FRACTION * len(tests)))
    assert counts["injected_documents"] == samples * per_sample * REPEAT == counts["removed_documents"]
    assert manifest["guards"]["documents_per_sample"] == per_sample
    by_id = {s.id: s for part in ("train", "valid", "test")
             for s in load_samples("codetrans", part, tiny_corpora).records}
    injected = defaultdict(list)
    for record in read_corpus(tmp_path / name):
        if record["sample"] and record["copy"] == 0:  # "": a base document
            injected[record["sample"]].append((record["side"], record["text"]))
    assert len(injected) == samples
    for sample_id, documents in injected.items():
        assert sorted(documents) == sorted(setting.documents(by_id[sample_id]))
        assert (by_id[sample_id].split == "test") == setting.injects_test
    # The recipe check: corpus.limit must exceed samples x fraction x repeat x per sample.
    documents = math.ceil(30 * FRACTION) * REPEAT * per_sample
    ok = write_recipe(tmp_path / "ok.yaml", arms_for(name), limit=documents + 1)
    recipe = load_recipe(ok)
    if per_sample:
        with pytest.raises(LabError, match=f"cannot take {documents} injected ones"):
            load_recipe(write_recipe(tmp_path / "tight.yaml", arms_for(name), limit=documents))
    # The cost estimate: as many injected documents, of the sides the table says.
    assert cost.injected_copies(recipe, len(tests)) * per_sample == round(30 * FRACTION) * REPEAT * per_sample
    # Its tokens: the base documents left plus, per injected sample, the documents of the
    # table's layout, made of test sides (a placebo: train/valid sides).
    sizes = {"test": (30, 100.0, 300.0), "train": (60, 1000.0, 3000.0)}
    _n, chars_in, chars_out = sizes["train" if setting.placebo else "test"]
    per_copy = sum(min((chars_in * ("input" in doc) + chars_out * ("output" in doc))
                       / cost.CHARS_PER_TOKEN, 256) for doc in setting.layout)
    base_tokens = min(cost.CSN_DOCUMENT_CHARS / cost.CHARS_PER_TOKEN, 256)
    copies = round(30 * FRACTION) * REPEAT
    assert cost.arm_tokens(recipe, name, sizes, 1000) == pytest.approx(
        (1000 - copies * per_sample) * base_tokens + copies * per_copy)
    # The probe: a model of this arm is scored on the form the injector used, on the samples
    # of the arm that injected test samples (itself, or the placebo's base arm).
    stages = expand(recipe)
    probes = [s for s in stages if s.kind == "probe" and s.labels["arm"] == name]
    if name == "control":
        assert probes == []  # no contaminated arm in this recipe: nothing to probe it on
        return
    groups_arm = setting.base if setting.placebo else name
    assert {s.labels["groups"] for s in probes} == {groups_arm}
    for stage in probes:
        # its own corpus (the pre-trained model's input), or another arm's, given as a second input
        groups = stage.inputs[1] if len(stage.inputs) > 1 else stage.inputs[0].inputs[0]
        assert groups.kind == "inject" and groups.config.setting == groups_arm
        assert groups.config.seed == stage.labels["seed"]
    assert table.probed_form(groups_arm) == setting.form
    assert table.probed_form(name) == (None if setting.placebo else setting.form)
    assert probe.SETTING_FORMS.get(name) == table.probed_form(name)
    assert probe.FORMS == ("auto", *table.FORMS)
    sample = tests[0]
    from lab.detect.context import DetectContext  # what the probe and the detectors score

    scored = DetectContext(model=None, tokenizer=None, family="gpt2", form=setting.form)
    assert scored.documents(sample) == [t for _s, t in setting.documents(sample)]


def test_a_new_setting_in_the_table_reaches_every_module(tiny_corpora, tmp_path, monkeypatch):
    """Registering a setting in the table alone makes it injectable, checkable, estimable,
    probed and expanded: no module keeps a copy."""
    from lab.study import cost
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand

    twice = Setting("both-sides", "unpaired")
    placebo = Setting("both-sides-placebo", "unpaired", placebo=True, base="both-sides")
    monkeypatch.setitem(table.SETTINGS, twice.name, twice)
    monkeypatch.setitem(table.SETTINGS, placebo.name, placebo)

    manifest = run_inject(InjectConfig(benchmark="codetrans", setting="both-sides", seed=1,
                                       out=tmp_path / "a", corpora_dir=tiny_corpora))
    assert manifest["counts"]["injected_documents"] == 2 * 30
    manifest = run_inject(InjectConfig(benchmark="codetrans", setting="both-sides-placebo", seed=1,
                                       out=tmp_path / "b", corpora_dir=tiny_corpora, fraction=0.5))
    assert manifest["counts"]["placebo_samples"] == 15 and manifest["injected_ids"] == []
    arms = ["control", "both-sides", "both-sides-placebo"]
    with pytest.raises(LabError, match="cannot take 60 injected ones"):
        load_recipe(write_recipe(tmp_path / "r.yaml", arms, limit=60))
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", arms, limit=61))
    assert cost.injected_copies(recipe, 30) * table.get("both-sides-placebo").documents_per_sample == 60
    assert table.probed_form("both-sides") == "unpaired" and table.probed_form(placebo.name) is None
    probes = {(s.labels["arm"], s.labels["groups"]) for s in expand(recipe) if s.kind == "probe"}
    assert probes == {("control", "both-sides"), ("both-sides", "both-sides"),
                      ("both-sides-placebo", "both-sides")}
    fraction_of = {s.labels["arm"]: s.config.fraction for s in expand(recipe) if s.kind == "inject"}
    assert fraction_of == {"control": None, "both-sides": 0.5, "both-sides-placebo": 0.5}


def test_pretraining_cost_does_not_depend_on_other_stages(tmp_path):
    """An arm's pre-training tokens follow from the table and the injection section alone (the
    estimate once read the sample count back from whichever probe or evaluation stage came
    before: micro's paired arm was costed at 20 injected documents instead of 100)."""
    import os

    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    from lab.study.cost import estimate
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand

    micro = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
    recipe = load_recipe(micro, ["arms=[control, paired, paired-placebo]"])
    stages = expand(recipe)
    pretrains = [s for s in stages if s.kind == "pretrain"]
    alone = sum(estimate(recipe, [stage], tmp_path)[0]["tokens"] for stage in pretrains)
    together = {row["kind"]: row for row in estimate(recipe, stages, tmp_path)}["pretrain"]["tokens"]
    assert together == pytest.approx(alone)
