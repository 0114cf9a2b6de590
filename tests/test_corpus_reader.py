"""The one corpus reader (lab.corpora.shards.verify_corpus) checks what an arm's manifest claims
about its injection (benchmark, benchmark_split, setting, options.samples, contamination form)
against its documents' `sample`, `side` and `form` fields (issue 70, row 7), and refuses a
manifest missing one of them rather than reading it as an older format; and a contamination
form alters, and counts as altered, only the sides its setting injects (row 8)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.soft import FormedSetting, check_form, parse_form
from lab.corpora import load_samples
from lab.corpora.shards import CLAIMS, Injected, check_claims, read_corpus, verify_corpus

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

SAMPLES = 30  # the arms' --samples: small arms, built in about a second each


def arm(root: Path, name: str, **options: Any) -> Path:
    config = dict(benchmark="codetrans", setting="paired", seed=4, base_splits=("valid",),
                  limit=200, samples=SAMPLES, fraction=0.5)
    run_inject(InjectConfig(out=root / name, **{**config, **options}))
    return root / name


@pytest.fixture(scope="module")
def arms(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arms")
    for setting in ("control", "output-only", "unpaired", "paired", "paired-placebo"):
        arm(root, setting, setting=setting,
            **({"placebo_from": ("valid",)} if setting.endswith("placebo") else {}))
    arm(root, "renamed", contamination_form="renamed")
    arm(root, "cross-language", contamination_form="cross-language")
    return root


def edited(arms: Path, tmp_path: Path, name: str, change: Callable[[dict], Any]) -> Path:
    """A copy of an arm whose manifest `change` edited (its shards untouched)."""
    copy = tmp_path / f"{name}-edited"
    shutil.copytree(arms / name, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    change(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize("name", ["control", "output-only", "unpaired", "paired",
                                  "paired-placebo", "renamed", "cross-language"])
def test_every_setting_and_form_as_built_verifies(arms, name):
    manifest = verify_corpus(arms / name)
    sides = {r["side"] for r in read_corpus(arms / name) if r["sample"]}
    expected = {"control": set(), "output-only": {"output"},
                "unpaired": {"input", "output"}, "cross-language": {"output"}}
    assert sides == expected.get(name, {"paired"}), manifest["setting"]


def _set_form(manifest: dict, spec: str) -> None:
    """Both records of the form edited consistently, as lab inject writes them."""
    name, _, fraction = spec.partition(":")
    manifest["options"]["contamination_form"] = spec
    manifest["contamination_form"] = {"name": name, "seed": manifest["seed"],
                                      **({"fraction": float(fraction)} if fraction else {})}


EDITS = [
    ("paired", lambda m: m.update(benchmark="concode"), "field 'benchmark' is 'concode'"),
    ("paired", lambda m: m.update(benchmark="codetrans-paper"), "field 'benchmark'"),
    ("paired", lambda m: m.update(benchmark_split="valid"), "field 'benchmark_split' is 'valid'"),
    ("paired", lambda m: m.update(setting="input-only"), "field 'setting' is 'input-only'"),
    ("paired", lambda m: m.update(setting="unpaired"), "field 'setting' is 'unpaired'"),
    ("paired", lambda m: m.update(setting="control"), "field 'setting' is 'control'"),
    ("paired", lambda m: m.update(setting="paired-placebo"), "lacks field 'placebo_ids'"),
    ("paired", lambda m: m.update(setting="sideways"), "field 'setting' is 'sideways'"),
    ("unpaired", lambda m: m.update(setting="output-only"), "field 'setting' is 'output-only'"),
    ("control", lambda m: m.update(setting="paired"), "no document of the shards is injected"),
    ("paired-placebo", lambda m: m.update(setting="paired"), "has field 'placebo_ids'"),
    ("paired", lambda m: m["options"].update(samples=SAMPLES - 3),
     f"field 'options.samples' is {SAMPLES - 3}"),
    ("paired", lambda m: m["options"].update(samples=None), "field 'options.samples' is null"),
    ("paired", lambda m: _set_form(m, "renamed"), "form fields say none (verbatim)"),
    ("renamed", lambda m: _set_form(m, "reformatted"), "form fields say 'renamed'"),
    ("renamed", lambda m: m["contamination_form"].update(name="partial"),
     "field 'contamination_form' says 'partial'"),
    ("renamed", lambda m: m["options"].pop("contamination_form"),
     "field 'options.contamination_form' missing"),
    ("cross-language", lambda m: _set_form(m, "partial:0.5"), "form fields say 'cross-language'"),
    ("paired", lambda m: m.pop("benchmark_split"), "field 'benchmark_split' missing"),
    ("paired", lambda m: m.pop("setting"), "field 'setting' missing"),
    ("paired", lambda m: m["options"].pop("samples"), "field 'options.samples' missing"),
    ("control", lambda m: m.pop("benchmark"), "field 'benchmark' missing"),
]


@pytest.mark.parametrize("name,change,fragment", EDITS,
                         ids=[f"{name}-{fragment}" for name, _, fragment in EDITS])
def test_an_edited_claim_is_refused_naming_its_field(arms, tmp_path, name, change, fragment):
    copy = edited(arms, tmp_path, name, change)
    with pytest.raises(LabError, match="manifest.json: .*" + _escaped(fragment)):
        verify_corpus(copy)


def _escaped(text: str) -> str:
    import re
    return re.escape(text)


def test_a_manifest_claiming_nothing_over_plain_documents_is_not_an_arm():
    """Documents only (no claim in the manifest, no injected document) verify as they are; a
    manifest with any claim must have them all."""
    plain = Injected(documents=3)
    check_claims(Path("m.json"), {"shards": []}, plain)
    for name in CLAIMS:
        with pytest.raises(LabError, match="field '.*' missing"):
            check_claims(Path("m.json"), {name: None}, plain)
    injected = Injected(copies={"codetrans:test:0": {0}}, documents=3, injected_documents=1)
    with pytest.raises(LabError, match="field 'setting' missing"):
        check_claims(Path("m.json"), {"shards": []}, injected)


def test_a_decontaminated_copy_may_have_lost_a_side_but_not_gained_one():
    manifest = {"kind": "lab-corpus", "setting": "unpaired", "benchmark": "codetrans",
                "benchmark_split": "test", "options": {"samples": 2},
                "injected_ids": ["codetrans:test:0"], "held_out_ids": ["codetrans:test:1"],
                "decontamination": {"removed_injected_ids": []}}

    def found(*sides: str) -> Injected:
        return Injected(copies={"codetrans:test:0": {0}}, sides={("codetrans:test:0", 0):
                                                                  list(sides)},
                        forms={None}, documents=10, injected_documents=len(sides))

    check_claims(Path("m.json"), manifest, found("output"))  # its input document removed
    with pytest.raises(LabError, match="copy 0 of codetrans:test:0 is documents of sides "
                                       "input, input"):
        check_claims(Path("m.json"), manifest, found("input", "input"))
    del manifest["decontamination"]
    with pytest.raises(LabError, match="field 'setting' is 'unpaired'"):
        check_claims(Path("m.json"), manifest, found("output"))


# Row 8: what a form alters is what its setting injects.
FORMS = ("renamed", "reformatted", "partial", "cross-language")
SETTINGS = ("input-only", "output-only", "unpaired", "paired")


def test_every_form_counts_as_altered_exactly_the_samples_whose_injected_documents_changed():
    """Over 40 CodeTrans samples, each setting x form it can take: a sample is counted altered
    (no reason given) exactly when its injected documents differ from the verbatim ones; and
    output-only renamed alters the C# (the Java, which it does not inject, is no excuse)."""
    samples = load_samples("codetrans", "test").records[:40]
    pairs = 0
    for setting_name in SETTINGS:
        setting = settings_table.get(setting_name)
        for name in FORMS:
            form = parse_form(name)
            try:
                check_form(form, "codetrans", setting)
            except LabError:
                continue
            pairs += 1
            formed = FormedSetting.of(setting, form, 3, "codetrans", "csn-java")
            altered = 0
            for sample in samples:
                documents, reason = formed.formed(sample)
                assert (documents == setting.documents(sample)) == (reason is not None), \
                    (setting_name, name, sample.id, reason)
                altered += reason is None
            assert altered >= 0.7 * len(samples), (setting_name, name)
    assert pairs == 13  # renamed, reformatted, partial x 4 settings, and paired cross-language
