"""The primary table is the analysis the recipe declared (issue 58): in its declared score, with
the other score beside it and the disagreements said; its convention, alpha and seeds are the
recipe's, whatever the command line asks; few seeds get Student's t, cut to what the effect can
be; a decay compares the same samples at both epoch counts."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.stats import STUDENT_T, effect_interval, interval_method, seed_mean_interval
from lab.study.merge import merge_studies
from lab.study.recipe import load_recipe, recipe_dict
from lab.analysis.report import run_report, run_stats
from tests.test_report import write_contrast_study

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def _declare(study: Path, **statistics) -> None:
    (study / "recipe.json").write_text(json.dumps(
        {"statistics": {"primary": ["contamination"], **statistics},
         "evaluation": {"metrics": ["bleu"]}}))


def _set_corpus_scores(study: Path, by_seed: dict[str, float]) -> None:
    """Give the paired arm's clean corpus score of each seed the placebo's plus `by_seed`."""
    rows = list(csv.DictReader(open(study / "results.csv")))
    placebo = {r["seed"]: float(r["bleu"]) for r in rows
               if r["arm"] == "paired-placebo" and r["group"] == "clean"}
    for r in rows:
        if r["arm"] == "paired" and r["group"] == "clean":
            r["bleu"] = placebo[r["seed"]] + by_seed[r["seed"]]
    _write_csv(study / "results.csv", rows)


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


CORPUS_EFFECTS = {"0": 4.0, "1": -2.0, "2": 1.0, "3": 0.5, "4": -1.5}


def test_the_corpus_score_sits_beside_the_sample_score_and_a_disagreement_is_said(tmp_path):
    study = write_contrast_study(tmp_path / "s")
    _declare(study)
    _set_corpus_scores(study, CORPUS_EFFECTS)
    report = run_report(study)
    primary = report["primary"]
    [row], [corpus] = primary["rows"], primary["secondary"]
    assert row["score"] == "sample" and row["estimate"] > 8  # per sample: +10 in every seed
    assert corpus["score"] == "corpus"
    assert corpus["seed_effects"] == pytest.approx(CORPUS_EFFECTS)
    mean, low, high = seed_mean_interval(list(CORPUS_EFFECTS.values()))
    assert corpus["estimate"] == pytest.approx(mean) and corpus["seeds_positive"] == 3
    assert (corpus["ci_low"], corpus["ci_high"]) == pytest.approx((low, high))
    assert corpus["interval_method"] == STUDENT_T and not corpus["significant"]
    [line] = primary["disagreements"]
    assert "contamination gpt2 paired vs paired-placebo E = 0" in line
    assert "corpus bleu" in line and "3 of 5 seeds positive" in line
    text = (study / "report" / "primary.md").read_text()
    assert line in text and "secondary score [CI]" in text
    assert line in report["console"]  # the terminal says it too


def test_the_recipe_may_declare_the_corpus_score_primary(tmp_path):
    study = write_contrast_study(tmp_path / "s", seeds=6)
    _declare(study, score="corpus")
    _set_corpus_scores(study, {s: 3.0 + int(s) for s in map(str, range(6))})
    primary = run_report(study)["primary"]
    [row], [sample] = primary["rows"], primary["secondary"]
    assert (row["score"], sample["score"]) == ("corpus", "sample")
    assert row["estimate"] == pytest.approx(5.5) and row["p"] == pytest.approx(2 / 64)
    assert row["significant"] and not sample["significant"]  # the secondary is never starred
    assert primary["disagreements"] == []  # same sign, both intervals above zero, both reach


def test_a_wrong_score_in_the_recorded_recipe_is_one_line(tmp_path):
    study = write_contrast_study(tmp_path / "s")
    _declare(study, score="median")
    with pytest.raises(LabError, match="statistics.score"):
        run_report(study)


def test_the_command_line_changes_only_the_secondary_tables_and_says_so(tmp_path):
    study = write_contrast_study(tmp_path / "s")
    _declare(study)
    declared = run_report(study)
    asked = run_report(study, "exact-greater", alpha=0.3)
    assert asked["primary"]["rows"] == declared["primary"]["rows"]
    assert (asked["primary"]["alpha"], asked["primary"]["alternative"]) == (0.05, "two-sided")
    secondary = asked["markdown"].split("## Secondary")[1]
    assert ('chosen after the data (statistics.convention: "exact-two-sided" -> "exact-greater"; '
            'statistics.alpha: 0.05 -> 0.3)') in secondary
    assert "chosen after the data" not in declared["markdown"]
    stats = run_stats(study, "exact-greater", 0.3)
    assert "chosen after the data" in stats["title"] and stats["cells"][0]["alpha"] == 0.3


def _shard(tmp_path: Path, name: str, seeds: list[int], planned: int | None) -> Path:
    """A study folder holding `seeds`' rows; its recipe lists them after seed 0 (whose control
    trains the tokenizer: every shard of one study lists it first)."""
    study = write_contrast_study(tmp_path / name, seeds=6)
    recipe = load_recipe(RECIPES / "mini" / "micro.yaml")
    recipe = dataclasses.replace(recipe, arms=["control", "paired", "paired-placebo"],
                                 seeds=sorted({0, *seeds}), statistics=dataclasses.replace(
                                     recipe.statistics, primary=["contamination"],
                                     descriptive=False, planned_seeds=planned))
    (study / "recipe.json").write_text(json.dumps(recipe_dict(recipe)))
    for table in ("results.csv", "samples.csv"):
        _write_csv(study / table,
                   [r for r in csv.DictReader(open(study / table)) if int(r["seed"]) in seeds])
    return study


def test_seeds_merged_beyond_the_plan_make_the_report_exploratory(tmp_path):
    first = _shard(tmp_path, "first", [0, 1, 2, 3, 4], None)  # planned: the 5 seeds it listed
    more = _shard(tmp_path, "more", [5], None)  # runs seed 5 only: planned 2 (0 and 5)
    merged = tmp_path / "merged"
    # two plans: neither order decides, the user names the one to keep, and it is recorded
    for order in ([first, more], [more, first]):
        with pytest.raises(LabError, match=r"another analysis .*statistics.planned_seeds.* "
                                           r"--plan-from"):
            merge_studies(order, merged)
    merge_studies([more, first], merged, plan_from=first)
    assert json.loads((merged / "recipe.json").read_text())["statistics"]["planned_seeds"] == 5
    assert json.loads((merged / "merged.json").read_text())["analysis"]["plan_from"] == str(first)
    primary = run_report(merged)["primary"]
    [row] = primary["rows"]
    assert row["seeds"] == 6 and row["p"] == pytest.approx(2 / 64)  # would pass alpha ...
    assert primary["beyond_plan"] and not row["significant"]  # ... but was not planned
    text = (merged / "report" / "primary.md").read_text()
    table = next(block for block in text.split("\n\n") if block.startswith("| question |"))
    assert "Exploratory, not confirmatory" in text and "*" not in table
    # Declared up front, the same six seeds are the plan: confirmatory, starred.
    planned = tmp_path / "planned"
    merge_studies([_shard(tmp_path, "p1", [0, 1, 2, 3, 4], 6), _shard(tmp_path, "p2", [5], 6)],
                  planned)
    [row] = run_report(planned)["primary"]["rows"]
    assert row["significant"]


def _parts(effects: list[float], rng) -> dict:
    return {s: [(1.0, {i: e + v for i, v in enumerate(rng.normal(0, 3, 30))})]
            for s, e in enumerate(effects)}


def test_few_seeds_get_students_t_stable_over_bootstrap_seeds_and_cut_to_the_scale():
    rng = np.random.default_rng(0)
    per_seed = _parts([80.0, 86.0, 89.0], rng)
    effects = [sum(p[0][1].values()) / 30 for p in per_seed.values()]
    intervals = {effect_interval(per_seed, seed=s) for s in range(5)}
    assert len(intervals) == 1  # no Monte Carlo noise
    _mean, low, high = seed_mean_interval(effects)
    assert intervals.pop() == pytest.approx((low, high))
    assert high > 90  # Student's t over 3 seeds spreads wide ...
    assert effect_interval(per_seed, bounds=(-100.0, 90.0))[1] == 90.0  # ... cut to the scale
    assert interval_method(4) == STUDENT_T and interval_method(5) != STUDENT_T
    many = _parts([5.0, 6.0, 4.0, 7.0, 5.5, 6.5], rng)
    assert len({effect_interval(many, seed=s) for s in range(2)}) == 2  # the bootstrap-t


def test_a_decay_compares_the_same_samples_at_both_epoch_counts(tmp_path):
    """At E = 1 sample 1 joins the fine-tuning data; the decay leaves it out at E = 0 too."""
    study = write_contrast_study(tmp_path / "s", samples=6)
    rows = list(csv.DictReader(open(study / "samples.csv")))
    later = []
    for r in rows:
        r2 = dict(r, epochs="1", stage=r["stage"] + "-1", score_bleu=float(r["score_bleu"]) / 2)
        if r["id"] == "codetrans:test:1":
            r2["group"] = "in_finetune_data"
        later.append(r2)
    _write_csv(study / "samples.csv", rows + later)
    results = list(csv.DictReader(open(study / "results.csv")))
    _write_csv(study / "results.csv",
               results + [dict(r, epochs="1", stage=r["stage"] + "-1") for r in results])
    (study / "recipe.json").write_text(json.dumps(
        {"statistics": {"primary": ["decay"]}, "evaluation": {"metrics": ["bleu"]}}))
    [row] = run_report(study)["primary"]["rows"]
    score = {(r["arm"], r["seed"], r["epochs"], r["id"]): float(r["score_bleu"])
             for r in rows + later}
    common = [f"codetrans:test:{i}" for i in range(2, 6)]
    expected = {}
    for seed in map(str, range(5)):
        at = {e: sum(score[("paired", seed, e, i)] - score[("paired-placebo", seed, e, i)]
                     for i in common) / len(common) for e in ("0", "1")}
        expected[seed] = at["0"] - at["1"]
    assert row["seed_effects"] == pytest.approx(expected)
    assert row["samples"] == pytest.approx(2 * len(common))  # two parts of the 4 common samples
    assert not math.isnan(row["estimate"])


def test_adding_seeds_until_a_test_passes_inflates_false_positives():
    """Why seeds merged beyond the plan are exploratory: under no effect, one look at 10 seeds
    rejects about 5% of studies, looks at 6, 8 and 10 (stop at the first p <= 0.05) about 8%."""
    from lab.stats import sign_flip_p_values

    rng = np.random.default_rng(58)
    effects = rng.normal(0.0, 1.0, (4000, 10))
    looks = np.stack([sign_flip_p_values(effects[:, :k]) for k in (6, 8, 10)])
    once = float((looks[-1] <= 0.05).mean())
    stopped = float((looks <= 0.05).any(axis=0).mean())
    assert once <= 0.06 and stopped >= 0.07 and stopped - once >= 0.02


def test_a_score_without_a_test_does_not_disagree():
    """One seed: the corpus score has no test and no interval; only a sign can disagree."""
    from lab.analysis.primary import disagreements

    base = {"question": "split-half", "model": "gpt2", "contrast": "paired", "epochs": 0,
            "epochs_to": None, "metric": "bleu", "seeds": 1, "seeds_positive": 1}
    sample = {**base, "score": "sample", "estimate": 20.0, "ci_low": 14.0, "ci_high": 29.0,
              "p_holm": 1e-4}
    corpus = {**base, "score": "corpus", "estimate": 11.0}
    assert disagreements([sample], [corpus], 0.05) == []
    assert len(disagreements([sample], [{**corpus, "estimate": -3.0}], 0.05)) == 1
