"""Issue 69 items 6-8: a bound cut to the range an effect can take is marked wherever an interval
is printed (and flagged in the rows a CSV or JSON reader gets), and a dose ladder's trend test
takes its sidedness from the recipe (statistics.dose_trend, two-sided by default), a ladder that
rises then falls being reported non-monotone, never as no trend. With the calibration of the
trend tests under no dose effect, for each sidedness."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.stats import (ALPHA, CLIPPED_LEGEND, CLIPPED_MARK, DOSE_TREND_SIDES, clipped,
                       clipped_side, effect_text, seed_mean_interval)
from lab.analysis.dose import NOT_SIGNIFICANT, dose_trend, recipe_dose_trend, turn_shape
from lab.analysis.primary import METRIC_SCALE
from lab.study.recipe import load_recipe
from lab.analysis.report import run_report, run_stats
from tests.test_declared_analysis import _declare, _set_corpus_scores
from tests.test_dose import _cell, write_ladder_study
from tests.test_report import write_contrast_study

BOUNDS = (-METRIC_SCALE, METRIC_SCALE)


# ---- item 6: a clipped bound is marked --------------------------------------------------------

def test_clipped_side_names_the_bound_the_range_cut():
    assert clipped_side((-20.0, 130.0), BOUNDS) == "high"
    assert clipped_side((-130.0, 20.0), BOUNDS) == "low"
    assert clipped_side((-130.0, 130.0), BOUNDS) == "both"
    assert clipped_side((-99.0, 99.0), BOUNDS) is None
    assert clipped_side((-130.0, 130.0), None) is None and clipped_side(None, BOUNDS) is None
    assert effect_text(90.0, 60.0, 100.0, 2, cut="high") == f"+90.00 [+60.00, +100.00{CLIPPED_MARK}]"
    assert effect_text(0.0, -100.0, 100.0, 2, cut="both") == \
        f"+0.00 [-100.00{CLIPPED_MARK}, +100.00{CLIPPED_MARK}]"
    assert CLIPPED_MARK not in effect_text(90.0, 60.0, 99.0, 2)


@pytest.mark.parametrize("seeds", [2, 3, 4])
def test_an_effect_near_the_ceiling_marks_every_cut_bound_and_no_other(seeds):
    """Issue 69 row 9 again: per-seed effects near +100 (Normal(92, 4), none above 100) at 2-4
    seeds, Student t over seeds as the tables use it: many intervals reach beyond +100 and are
    cut there; each cut one is printed with the mark, and none that was not cut."""
    rng = np.random.default_rng(seeds)
    cut = 0
    for _ in range(300):
        effects = np.minimum(METRIC_SCALE, rng.normal(92.0, 4.0, seeds)).tolist()
        mean, low, high = seed_mean_interval(effects)
        side = clipped_side((low, high), BOUNDS)
        text = effect_text(mean, *clipped((low, high), BOUNDS), seeds, cut=side)
        assert (f"+100.00{CLIPPED_MARK}]" in text) == (high > METRIC_SCALE)
        assert text.count(CLIPPED_MARK) == (side is not None) + (side == "both")
        cut += side is not None
    assert cut > 0  # the case the mark is for occurs here


def test_a_clipped_primary_bound_is_marked_in_the_markdown_csv_json_and_html(tmp_path):
    """Two seeds whose corpus effects are +20 and +95: Student t with one degree of freedom
    reaches far beyond [-100, 100], so both bounds are cut; the primary table marks them, its
    note gives the legend, and primary.csv and stats.json carry ci_clipped."""
    study = write_contrast_study(tmp_path / "s", seeds=2)
    _declare(study, score="corpus")
    _set_corpus_scores(study, {"0": 20.0, "1": 95.0})
    report = run_report(study)
    [row] = report["primary"]["rows"]
    assert row["score"] == "corpus" and row["ci_clipped"] == "both"
    assert (row["ci_low"], row["ci_high"]) == (-METRIC_SCALE, METRIC_SCALE)
    assert row["other"].get("ci_clipped") is None  # the sample score's interval is not cut
    shown = f"[-100.00{CLIPPED_MARK}, +100.00{CLIPPED_MARK}]"
    markdown = (study / "report" / "primary.md").read_text(encoding="utf-8")
    [line] = [t for t in markdown.splitlines() if t.startswith("| contamination")]
    assert shown in line and line.count(CLIPPED_MARK) == 2
    assert CLIPPED_LEGEND in markdown
    [written] = [r for r in csv.DictReader(io.StringIO(
        (study / "report" / "primary.csv").read_text(encoding="utf-8"))) if r["role"] == "primary"]
    assert written["ci_clipped"] == "both"
    stats = json.loads((study / "report" / "stats.json").read_text(encoding="utf-8"))
    assert stats["primary"]["rows"][0]["ci_clipped"] == "both"
    page = (study / "report" / "report.html").read_text(encoding="utf-8")
    assert shown in page


def test_a_clipped_dose_lift_is_marked_in_the_dose_table(tmp_path):
    """Two seeds whose top-dose lifts are +50 and +75: the upper bound reaches beyond +100 and
    is cut (marked), the lower one is not."""
    lifts = {1: 2.0, 4: 5.0}
    study = write_ladder_study(tmp_path / "s", seeds=2, epochs=(0,),
                               lift=lambda dose, seed: lifts.get(dose, 50.0 + 25.0 * seed))
    found = run_stats(study)
    top = next(r for r in found["doses"]["levels"] if r["dose"] == 16)
    assert top["lift_ci_clipped"] == "high" and top["lift_ci_high"] == METRIC_SCALE
    assert -METRIC_SCALE < top["lift_ci_low"]
    tables = found["dose_tables"]["bleu"]
    assert f"+100.00{CLIPPED_MARK}]" in tables["md"] and CLIPPED_LEGEND in tables["md"]
    [level] = [r for r in csv.DictReader(io.StringIO(tables["csv"])) if r["dose"] == "16"]
    assert level["lift_ci_clipped"] == "high"
    [unmarked] = [r for r in csv.DictReader(io.StringIO(tables["csv"])) if r["dose"] == "1"]
    assert unmarked["lift_ci_clipped"] == ""


def test_the_decontamination_table_marks_the_primary_rows_cut_bounds():
    """report/decontam.md prints the split-half lifts of the primary table: a bound the primary
    row cut (its ci_clipped) is marked there too, and the legend given; an uncut one is not."""
    from lab.analysis.decontam_lift import decontam_lifts, decontam_table

    def row(method, effects, low, high, cut):
        return {"question": "split-half", "model": f"gpt2/form=verbatim/decontam={method}",
                "arm": "paired", "metric": "bleu", "epochs": 0, "train_size": 100,
                "estimate": sum(effects.values()) / len(effects), "ci_low": low, "ci_high": high,
                "ci_clipped": cut, "seed_effects": effects, "unit": "seed"}

    primary = {"rows": [row("none", {0: 80.0, 1: 98.0}, -34.4, METRIC_SCALE, "high"),
                        row("ngram13", {0: 1.0, 1: 3.0}, -10.7, 14.7, None)]}
    [found] = decontam_lifts(primary, {})
    table = decontam_table([found], descriptive=True)
    [line] = [t for t in table["md"].splitlines() if t.startswith("| gpt2")]
    assert f"+89.00 [-34.40, +100.00{CLIPPED_MARK}]" in line and line.count(CLIPPED_MARK) == 1
    assert CLIPPED_LEGEND in table["md"]
    assert found["lift_before_clipped"] == "high" and found["lift_after_clipped"] is None


# ---- item 7: the trend's sidedness from the recipe, a turn reported as a turn --------------------

def _set_dose_trend(study: Path, side: str) -> None:
    recipe = json.loads((study / "recipe.json").read_text(encoding="utf-8"))
    recipe["statistics"] = {**recipe.get("statistics", {}), "dose_trend": side}
    (study / "recipe.json").write_text(json.dumps(recipe), encoding="utf-8")


FALLING = {1: -4.0, 4: -8.0, 16: -14.0}


@pytest.mark.parametrize("side, verdict", [("two-sided", "falling trend"),
                                           ("less", "falling trend"),
                                           ("greater", NOT_SIGNIFICANT)])
def test_a_falling_ladder_is_a_falling_trend_unless_the_recipe_tests_a_rise(tmp_path, side,
                                                                             verdict):
    study = write_ladder_study(tmp_path / "s", epochs=(0,), lift=lambda dose, seed: FALLING[dose])
    _set_dose_trend(study, side)
    found = run_stats(study)
    cell = _cell(found["doses"])
    assert cell["trend_side"] == side and cell["trend_slope"] < 0
    assert cell["trend_verdict"] == verdict and cell["non_monotone"] is False
    assert f"{side} ({DOSE_TREND_SIDES[side]})" in found["doses"]["trend_test"]["seeds"]
    assert f"{verdict}; slope {cell['trend_slope']:+.3g}" in found["dose_tables"]["bleu"]["md"]


def test_the_trend_is_two_sided_where_the_recipe_does_not_say(tmp_path):
    study = write_ladder_study(tmp_path / "s", epochs=(0,), lift=lambda dose, seed: FALLING[dose])
    assert recipe_dose_trend(study) == "two-sided"
    (study / "recipe.json").unlink()
    assert recipe_dose_trend(study) == "two-sided"


def test_a_ladder_that_rises_then_falls_is_non_monotone_not_no_trend(tmp_path):
    """The lifts rise to dose 4 and fall back to 0 at dose 16: the slope over ln(1 + dose) is
    near 0 and its test does not reach alpha, yet the levels' intervals turn, so the ladder is
    'non-monotone: rises then falls', not a ladder without a trend."""
    rise_and_fall = {1: 8.0, 4: 12.0, 16: 0.0}
    study = write_ladder_study(tmp_path / "s", epochs=(0,),
                               lift=lambda dose, seed: rise_and_fall[dose])
    found = run_stats(study)
    cell = _cell(found["doses"])
    assert cell["trend_p_holm"] > ALPHA and cell["non_monotone"] is True
    assert cell["trend_verdict"] == "non-monotone: rises then falls"
    [line] = [t for t in found["dose_tables"]["bleu"]["md"].splitlines()
              if t.startswith("- gpt2 paired")]
    assert "non-monotone: rises then falls; slope" in line
    assert NOT_SIGNIFICANT not in line and "no trend" not in line


def test_the_turn_is_named_by_its_order():
    assert turn_shape([[0, 4]], [[4, 16]]) == "rises then falls"
    assert turn_shape([[1, 16]], [[0, 1]]) == "falls then rises"  # Jiang et al.'s U
    assert turn_shape([[0, 1], [4, 16]], [[1, 4]]) == "rises and falls"  # a zigzag


def test_a_wrong_dose_trend_is_one_line_naming_the_field(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("statistics:\n  dose_trend: sideways\n", encoding="utf-8")
    with pytest.raises(LabError, match="statistics.dose_trend"):
        load_recipe(recipe)
    study = write_ladder_study(tmp_path / "s", seeds=2, epochs=(0,))
    _set_dose_trend(study, "sideways")
    with pytest.raises(LabError, match="statistics.dose_trend"):
        run_stats(study)
    with pytest.raises(LabError, match="dose trend"):
        dose_trend({"0": {0: {"a": 1.0}, 1: {"b": 2.0}}}, "up")


# ---- item 8: calibration of the trend tests under no dose effect ------------------------------

NULL_DOSES = (0, 1, 4, 16)
# Null ladders per design: the standard error of a 0.05 rejection rate is 0.011 at 400 (one seed:
# 3 x 9,999 permutations each) and 0.006 at 1,200 (seeds: cheap, and the exact sign-flip's size
# with 8 seeds, 0.047, sits closer to the lower bound).
NULL_REPLICATIONS = {1: 400, 8: 1200}


def _null_ladder(rng: np.random.Generator, seeds: int, per_level: int) -> dict:
    """seed -> dose -> sample id -> score, every score Normal(20, 3) whatever the dose."""
    return {str(seed): {dose: {f"{dose}:{i}": float(v)
                               for i, v in enumerate(rng.normal(20.0, 3.0, per_level))}
                        for dose in NULL_DOSES}
            for seed in range(seeds)}


@pytest.mark.parametrize("seeds", sorted(NULL_REPLICATIONS))
def test_the_trend_test_rejects_at_alpha_under_no_dose_effect_for_each_sidedness(seeds):
    """One seed: the permutation test of the slope; 8 seeds: the exact sign-flip test of the
    per-seed slopes (its one- and two-sided p reach 0.05 at 12/256: size 0.047). The same null
    ladders are tested each way; each way rejects within [0.02, 0.08] at alpha 0.05."""
    rng = np.random.default_rng(20240669 + seeds)
    rejected = dict.fromkeys(DOSE_TREND_SIDES, 0)
    for _ in range(NULL_REPLICATIONS[seeds]):
        ladder = _null_ladder(rng, seeds, per_level=10)
        for side in rejected:
            rejected[side] += dose_trend(ladder, side)["trend_p"] <= ALPHA
    rates = {side: count / NULL_REPLICATIONS[seeds] for side, count in rejected.items()}
    assert all(0.02 <= rate <= 0.08 for rate in rates.values()), rates
