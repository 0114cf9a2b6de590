"""Decontamination as a study axis (issue 60, item 3): `injection.contamination_form` and
`injection.decontaminate_with` sweep like seeds (one corpus and model per form x method, named
gpt2/form=F/decontam=M), a decontaminated arm's injected group is scored by intention to treat
(the samples its method removed stay in it), and report/decontam.md gives per form the lift
before and after."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.common import LabError
from tests.test_decontam_arm import ROOT, arm, needs_corpora

RECIPE = ROOT / "recipes" / "decontam.yaml"


def test_the_decontam_recipe_sweeps_forms_and_methods_into_models_of_their_own():
    from lab.study.grid import expand, model_name
    from lab.study.recipe import load_recipe

    stages = expand(load_recipe(RECIPE))
    injects = [s for s in stages if s.kind == "inject"]
    # 3 forms x (none, oracle, ngram13, winnow) x 3 seeds paired arms, and the tokenizer's
    # control corpus
    assert len(injects) == 3 * 4 * 3 + 1
    pairs = {(s.config.contamination_form, s.config.decontaminate_with)
             for s in injects if s.labels["arm"] == "paired"}
    assert pairs == {(f, m) for f in ("verbatim", "renamed", "partial:0.5")
                     for m in (None, "oracle", "ngram13", "winnow")}
    control = [s for s in injects if s.labels["arm"] == "control"]
    assert len(control) == 1 and control[0].config.contamination_form == "verbatim"
    assert len([s for s in stages if s.kind == "tokenizer"]) == 1
    pretrains = [s for s in stages if s.kind == "pretrain"]
    names = {model_name(s.labels) for s in pretrains}
    assert "gpt2/form=renamed/decontam=ngram13" in names
    assert "gpt2/form=verbatim/decontam=none" in names
    assert len(names) == 12 and len(pretrains) == 36
    assert len({s.key for s in stages}) == len(stages)
    # each model reads its own variant's corpus
    for stage in pretrains:
        corpus = stage.inputs[0]
        assert corpus.labels["form"] == stage.labels["form"]
        assert corpus.labels["decontam"] == stage.labels["decontam"]


def test_one_value_is_a_scalar_and_keeps_every_key():
    from lab.study.grid import expand, model_name
    from lab.study.recipe import load_recipe, recipe_dict

    recipe = ROOT / "recipes" / "quickstart.yaml"
    plain = expand(load_recipe(recipe))
    listed = expand(load_recipe(recipe, ["injection.contamination_form=[verbatim]",
                                         "injection.decontaminate_with=[null]"]))
    assert [s.key for s in listed] == [s.key for s in plain]
    assert all(model_name(s.labels) == "gpt2" for s in plain if s.kind == "pretrain")
    recorded = recipe_dict(load_recipe(recipe))["injection"]
    assert recorded["contamination_form"] == "verbatim" and recorded["decontaminate_with"] is None
    one = expand(load_recipe(recipe, ["injection.contamination_form=renamed"]))
    assert {s.config.contamination_form for s in one
            if s.kind == "inject" and s.labels["arm"] == "paired"} == {"renamed"}
    assert all(model_name(s.labels) == "gpt2" for s in one if s.kind == "pretrain")


@pytest.mark.parametrize("override, field, reason", [
    ("injection.contamination_form=[verbatim, verbatim]", "injection.contamination_form",
     "values repeat"),
    ("injection.decontaminate_with=[null, null]", "injection.decontaminate_with",
     "values repeat"),
    ("injection.contamination_form=[]", "injection.contamination_form", "at least one"),
    ("injection.contamination_form=[verbatim, nl-reworded]",
     "injection.contamination_form[1]", "arms[0] paired"),
    ("injection.decontaminate_with=[null, nope]", "injection.decontaminate_with", "unknown method"),
])
def test_a_bad_sweep_is_one_line_naming_the_field(override, field, reason):
    from lab.study.recipe import load_recipe

    with pytest.raises(LabError) as refused:
        load_recipe(ROOT / "recipes" / "quickstart.yaml", [override])
    message = str(refused.value)
    assert "\n" not in message, message
    assert field in message and reason in message, message


def test_a_decontaminated_arm_is_scored_by_intention_to_treat(tmp_path):
    """Every verbatim copy removed by `exact`: the model saw none of the injected samples, but
    they are still its injected group (for the lift), each marked removed; the probe does not
    refuse the arm as one that injected nothing."""
    needs_corpora()
    from lab.eval.generate import assign_groups, pretraining_membership
    from lab.detect.probe import probe_groups

    manifest = arm(tmp_path / "arm", decontaminate_with="exact")
    assert manifest["injected_ids"] == [] and len(manifest["intended_injected_ids"]) == 6
    record = {"kind": "lab-pretrained", "corpus": {
        key: manifest[key] for key in ("setting", "benchmark", "benchmark_split", "injected_ids",
                                       "held_out_ids", "intended_injected_ids")}
        | {"decontamination": manifest["decontamination"]}}
    membership = pretraining_membership(record)
    intended = set(manifest["intended_injected_ids"])
    assert membership["injected"] == intended
    assert membership["removed_by_decontamination"] == intended
    assert membership["held_out"] == set(manifest["held_out_ids"])
    groups = probe_groups(record, None)
    assert groups["injected"] == manifest["intended_injected_ids"]
    # an arm as built (no decontamination) is unchanged: injected = what it injects
    plain = arm(tmp_path / "plain")
    built = pretraining_membership({"kind": "lab-pretrained", "corpus": {
        key: plain[key] for key in ("setting", "benchmark", "injected_ids", "held_out_ids")}})
    assert built["injected"] == set(plain["injected_ids"]) == intended
    assert built["removed_by_decontamination"] == set()
    from lab.corpora import Sample

    samples = [Sample(id=i, split="test", index=n, input="x", output="y")
               for n, i in enumerate(sorted(intended))]
    assert set(assign_groups(samples, membership).values()) == {"injected"}


def test_pretraining_copies_the_intended_samples_and_what_was_removed(tmp_path):
    needs_corpora()
    from lab.tokenizer import TokenizerConfig, run_tokenizer
    from lab.train.pretrain import PretrainConfig, run_pretrain

    manifest = arm(tmp_path / "arm", decontaminate_with="exact")
    arm(tmp_path / "control", setting="control", doses=None)
    run_tokenizer(TokenizerConfig(corpus=tmp_path / "control", out=tmp_path / "tok",
                                  vocab_size=400, benchmarks=()))
    made = run_pretrain(PretrainConfig(corpus=tmp_path / "arm", tokenizer=tmp_path / "tok",
                                       out=tmp_path / "pt", model="gpt2", preset="micro",
                                       max_steps=1, batch_size=2, block_size=64))
    corpus = made["corpus"]
    assert corpus["intended_injected_ids"] == manifest["intended_injected_ids"]
    assert corpus["injected_ids"] == []
    assert corpus["decontamination"]["method"] == "exact"
    assert sorted(corpus["decontamination"]["removed_injected_ids"]) == \
        sorted(manifest["intended_injected_ids"])


def test_the_report_table_pairs_each_method_with_the_arm_as_built_seed_by_seed():
    from lab.analysis.decontam_lift import decontam_lifts, decontam_table

    def row(model, effects):
        mean = sum(effects.values()) / len(effects)
        return {"question": "split-half", "model": model, "arm": "paired", "metric": "bleu",
                "epochs": 0, "train_size": 100, "estimate": mean, "ci_low": mean - 1,
                "ci_high": mean + 1, "seed_effects": effects, "unit": "seed"}

    primary = {"rows": [
        row("gpt2/form=renamed/decontam=none", {0: 10.0, 1: 12.0, 2: 8.0}),
        row("gpt2/form=renamed/decontam=ngram13", {0: 9.0, 1: 12.0, 2: 6.0}),
        row("gpt2/form=verbatim/decontam=none", {0: 20.0, 1: 22.0, 2: 18.0}),
        row("gpt2/form=verbatim/decontam=ngram13", {0: 0.0, 1: 2.0, 2: -2.0}),
        {**row("gpt2/form=verbatim/decontam=none", {0: 1.0}), "question": "decay"},
    ]}
    removed = {("renamed", "ngram13"): {"intended": 120, "removed": 3},
               ("verbatim", "ngram13"): {"intended": 120, "removed": 120}}
    rows = decontam_lifts(primary, removed)
    assert [(r["form"], r["method"]) for r in rows] == [("renamed", "ngram13"),
                                                        ("verbatim", "ngram13")]
    renamed, verbatim = rows
    assert renamed["removed"] == pytest.approx(1.0)  # (1, 0, 2) seed by seed
    assert renamed["removed_low"] < 1.0 < renamed["removed_high"]
    assert verbatim["removed"] == pytest.approx(20.0)
    assert verbatim["removed_low"] is None  # every seed's difference is 20: zero spread
    assert verbatim["removed_note"] == "zero spread"
    # no oracle arm in this study: no residual, no fraction; all removed says so, no share
    assert renamed["residual"] is None and renamed["residual_note"] == "no oracle arm"
    assert renamed["fraction_removed"] is None
    assert renamed["fraction_removed_note"] == "no oracle arm"
    assert verbatim["fraction_removed_note"] == "all removed"
    table = decontam_table(rows, descriptive=True)
    assert "| gpt2 | renamed | 0 | ngram13 | 3 of 120 | +10.00 [+9.00, +11.00] |" in table["md"]
    assert "+20.00 [n/a (zero spread)]" in table["md"] and "Descriptive" in table["md"]
    assert "| all removed |" in table["md"] and "%" not in table["md"]
    assert table["csv"].splitlines()[0].startswith("model,form,arm,metric")
    # a study that sweeps no decontamination has no table
    assert decontam_lifts({"rows": [row("gpt2/form=renamed", {0: 1.0})]}, {}) == []


def test_the_estimands_against_the_oracle_by_hand():
    """Two seeds. As built (10, 10.2), oracle (0, 0.2), ngram13 after (4, 2.2): residual
    inflation (4, 2) mean 3; removed (6, 8) mean 7; fraction 7 / 10 = 0.7, whose Fieller interval
    (the denominator 10 on both seeds, no spread) is removed's t interval / 10:
    7 +- 12.706 x sd(6, 8) / sqrt(2) = 7 +- 12.706. exact removed every copy: all removed, no
    share. The oracle's row: its own lift, removed = the whole leak, no residual."""
    from lab.analysis.decontam_lift import decontam_lifts, decontam_table, ratio_of_means

    def row(method, effects):
        return {"question": "split-half", "model": f"gpt2/form=verbatim/decontam={method}",
                "arm": "paired", "metric": "bleu", "epochs": 0, "train_size": 100,
                "estimate": sum(effects.values()) / 2, "ci_low": None, "ci_high": None,
                "seed_effects": effects, "unit": "seed"}

    primary = {"rows": [row("none", {0: 10.0, 1: 10.2}), row("oracle", {0: 0.0, 1: 0.2}),
                        row("ngram13", {0: 4.0, 1: 2.2}), row("exact", {0: 0.5, 1: 0.1})]}
    removed = {("verbatim", "ngram13"): {"intended": 80, "removed": 50},
               ("verbatim", "exact"): {"intended": 80, "removed": 80},
               ("verbatim", "oracle"): {"intended": 80, "removed": 80}}
    exact, ngram, oracle = decontam_lifts(primary, removed)
    assert (exact["method"], ngram["method"], oracle["method"]) == ("exact", "ngram13", "oracle")
    t = 12.7062047361747  # Student t, 1 degree of freedom, 97.5%
    assert ngram["residual"] == pytest.approx(3.0)
    assert (ngram["residual_low"], ngram["residual_high"]) == pytest.approx((3 - t, 3 + t))
    assert ngram["removed"] == pytest.approx(7.0)
    assert (ngram["removed_low"], ngram["removed_high"]) == pytest.approx((7 - t, 7 + t))
    assert ngram["fraction_removed"] == pytest.approx(0.7)
    assert (ngram["fraction_removed_low"], ngram["fraction_removed_high"]) == pytest.approx(
        ((7 - t) / 10, (7 + t) / 10))
    assert ngram["lift_oracle"] == pytest.approx(0.1)
    assert exact["residual"] == pytest.approx(0.2) and exact["fraction_removed"] is None
    assert exact["fraction_removed_note"] == "all removed"
    assert oracle["lift_after"] == pytest.approx(0.1) and oracle["removed"] == pytest.approx(10.0)
    table = decontam_table([exact, ngram, oracle], descriptive=True)["md"]
    [line] = [t for t in table.splitlines() if "| ngram13 |" in t]
    assert line.endswith("| +0.70 [-0.57, +1.97] |") and "+3.00 [-9.71, +15.71]" in line
    [line] = [t for t in table.splitlines() if "| exact |" in t]
    assert line.endswith("| all removed |") and "%" not in table
    # a denominator whose interval holds 0 gives no ratio, only why; outside [0, 1] noted
    assert ratio_of_means([6.0, 8.0], [9.0, 1.0]) == (
        None, None, None, "the interval of as built - oracle holds 0")
    from lab.analysis.decontam_lift import fraction_text
    assert fraction_text({"method": "x", "fraction_removed": 1.3, "fraction_removed_low": None,
                          "fraction_removed_high": None, "fraction_removed_note": "1 seed"}
                         ) == "+1.30 [n/a (1 seed)] (outside [0, 1])"


def test_samples_removed_are_counted_from_the_samples_table_once_per_model_and_seed():
    """The 'samples removed' column comes from samples.csv (so a copy of a study recomputes
    it), over the injected group of the decontaminated models only, each sample once per model
    and seed whatever the evaluations (E, train sizes) it was scored in; a table without the
    column (a study made before it) gives none."""
    from lab.analysis.collect import REMOVED
    from lab.analysis.decontam_lift import removed_samples
    from lab.study.grid import model_name, swept_labels

    def sample(model, seed, i, group, removed, epochs=0):
        return {"model": model, "seed": seed, "id": f"codetrans:test:{i}", "group": group,
                "epochs": epochs, REMOVED: removed}

    after = "gpt2/form=renamed/decontam=ngram13"
    rows = [sample(after, 0, 0, "injected", "True"), sample(after, 0, 0, "injected", "True", 3),
            sample(after, 0, 1, "injected_truncated", "True"), sample(after, 0, 2, "injected", "False"),
            sample(after, 1, 0, "injected", "True"), sample(after, 1, 3, "held_out", "False"),
            sample("gpt2/form=renamed/decontam=none", 0, 0, "injected", "False"),
            sample("gpt2/form=verbatim/decontam=exact", 0, 5, "pre_existing", "True")]
    assert removed_samples(rows) == {("renamed", "ngram13"): {"intended": 4, "removed": 3}}
    assert removed_samples([{k: v for k, v in r.items() if k != REMOVED} for r in rows]) == {}
    # the name the tables give a model, and its labels read back from it
    labels = {"model": "gpt2", "preset": "micro", "form": "partial:0.5", "decontam": "ngram13"}
    assert model_name(labels) == "gpt2/micro/form=partial:0.5/decontam=ngram13"
    assert swept_labels(model_name(labels)) == ("gpt2/micro", {"form": "partial:0.5",
                                                               "decontam": "ngram13"})
    assert swept_labels("gpt2/wd=0.1") == ("gpt2/wd=0.1", {})
