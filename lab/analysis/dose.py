"""Dose-response of a study whose arms inject a dose ladder (injection.doses): per level, how
far the level's samples score above the held-out level (dose 0) of the same models, and above
the control's (and placebo's) models on the same samples; the smallest dose whose lift is
significant; two curves fitted to the lifts, one monotone and one free to bend
(lab.stats.DOSE_CURVE, DOSE_CURVE_UNCONSTRAINED), and whether the ladder is non-monotone
(lab.stats.NON_MONOTONE_RULE). A lift's interval is cut to what a lift can be (LIFT_BOUNDS) and a
cut bound is marked (lab.stats.CLIPPED_MARK; `*_ci_clipped` in the rows).

Scale: a level's dose is its copies per corpus epoch. Every base document is seen once per
corpus epoch too, so the dose is the level's exposure relative to a base document's
(DOSE_SCALE); how often it was seen in all of pre-training (dose x pre-training epochs) is a
secondary column, as it grows with the epochs for every document alike.

The seed (one trained model) is the unit of inference. Within a model each seed's lift of a
level is its mean per-sample score minus dose 0's; the level's lift is their mean over seeds,
tested by a sign-flip test over the seeds (the study's alternative), Holm-corrected across the
levels of a cell, with an interval over seeds (lab.stats.effect_interval: SEED_INTERVAL). With one seed
the levels are random groups of samples within one model: a rank test over those samples is a
randomisation test about that model (SAMPLE_UNIT), with a percentile interval over its
samples. Against a reference arm (control, placebo) each seed's effect is its mean per-sample
difference on the same samples, tested the same way over seeds (one seed: the estimate only).
The pooled (seed, sample) Mann-Whitney p is kept as a description: it decides nothing.

The first level whose Holm p clears alpha is a detection limit of this design (this model, these
samples), not a dose below which nothing happens; whether scores change with the dose is the
trend test (TREND_ONE_MODEL, TREND_SEEDS), one per ladder, its sidedness the recipe's
statistics.dose_trend (two-sided unless it says greater or less), Holm across the ladders of a
metric. A slope cannot see a ladder that rises then falls: such a ladder (NON_MONOTONE_RULE) is
reported non-monotone whatever its trend p (trend_verdict), never as no trend. A
level whose interval and test disagree (the interval excludes 0 and the Holm p exceeds alpha, or
the reverse) is marked: the interval is neither adjusted for the family nor, with one seed,
about the same statistic as the rank test (a mean against ranks).

The table as text is lab.analysis.dose_text.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.stats import (DEFAULT_DOSE_TREND, DOSE_TREND_SIDES, SEED_INTERVAL,
                       DOSE_BAND, DOSE_CURVE, DOSE_CURVE_UNCONSTRAINED,
                       NON_MONOTONE_RULE, ONE_MODEL_TEST, SAMPLE_BOOTSTRAP, SIGN_FLIP_TEST,
                       checked_interval, clipped, clipped_side, dose_band, dose_curve_values,
                       dose_turns, effect_interval, fit_dose_curve,
                       fit_unconstrained_curve, holm, membership_auc, one_model_rank_test,
                       paired_within_model, sample_interval, seed_effect, sign_flip_test,
                       unconstrained_curve_values)
from lab.analysis.primary import METRIC_SCALE
from lab.analysis.questions import SAMPLE_UNIT, SEED_UNIT, seeds_for_family, sign_flip_floor
from lab.analysis.report_data import train_size_order
from lab.analysis.collect import DOSE_GROUP, PROBE_COLUMNS, PROBES, RESULTS, SAMPLES

DOSE_SCALE = "copies per corpus epoch (a base document: 1)"
TIMES_SEEN = "times seen in pre-training: copies per corpus epoch x pre-training epochs"
POOLED_DESCRIPTION = ("Mann-Whitney U, greater, asymptotic, over (seed, sample) pairs pooled: "
                      "a description, never a verdict (a sample scored by several seeds' models "
                      "counts once per seed)")
GRID_POINTS = 40  # copies per epoch at which the fitted curves and their band are drawn
TREND_PERMUTATIONS = 9999  # one seed: p is at least 1 / (TREND_PERMUTATIONS + 1)
TREND_X = "ln(1 + copies per corpus epoch)"  # dose 0 at 0, a geometric ladder evenly spread
# The trend tests, '{side}' filled by trend_tests from the recipe's statistics.dose_trend.
TREND_ONE_MODEL = (f"permutation test of the least-squares slope of the per-sample score on "
                   f"{TREND_X} over every level, dose 0 included, {{side}}: the "
                   f"levels are random groups of one model's samples, so the dose labels are "
                   f"permuted ({TREND_PERMUTATIONS} permutations, seeded)")
TREND_SEEDS = (f"{SIGN_FLIP_TEST}, {{side}}, over the per-seed least-squares slopes "
               f"of the per-sample score on {TREND_X}, dose 0 included")
# A lift is a difference of two 0-100 scores: its interval is cut to this (lab.stats.clipped).
LIFT_BOUNDS = (-METRIC_SCALE, METRIC_SCALE)
NOT_SIGNIFICANT = "trend not significant"  # a monotone ladder's slope above alpha: never 'no trend'
DISAGREES = "‡"

Levels = dict[Any, dict[int, dict[str, float]]]  # seed -> dose -> sample id -> score


def pretrain_epochs(study: Path, model: str | None = None) -> float | None:
    """The study's pre-training epochs (STUDY/recipe.json), a model's own where the recipe's
    by_model sets them: times seen = dose x epochs."""
    try:
        recipe = json.loads((Path(study) / "recipe.json").read_text(encoding="utf-8"))
        own = (((recipe.get("by_model") or {}).get(model) or {}).get("pretrain") or {}) \
            .get("epochs") if model else None
        return float(own if own is not None else recipe["pretrain"]["epochs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def trend_tests(side: str) -> dict[str, str]:
    """TREND_ONE_MODEL and TREND_SEEDS of a ladder tested `side` (lab.stats.DOSE_TREND_SIDES)."""
    words = f"{side} ({DOSE_TREND_SIDES[side]})"
    return {"one_model": TREND_ONE_MODEL.format(side=words), "seeds": TREND_SEEDS.format(side=words)}


def recipe_dose_trend(study: Path) -> str:
    """The sidedness of the study's trend tests: its recipe's statistics.dose_trend
    (STUDY/recipe.json), DEFAULT_DOSE_TREND where the study has no recipe.json or predates the
    field."""
    path = Path(study) / "recipe.json"
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        return DEFAULT_DOSE_TREND
    except ValueError:
        raise LabError(f"{path}: unreadable (not the JSON lab study writes)") from None
    statistics = (recorded.get("statistics") if isinstance(recorded, dict) else None) or {}
    side = statistics.get("dose_trend", DEFAULT_DOSE_TREND) if isinstance(statistics, dict) \
        else DEFAULT_DOSE_TREND
    if side not in DOSE_TREND_SIDES:
        raise LabError(f"{path}: statistics.dose_trend {side!r}: choose from "
                       f"{', '.join(DOSE_TREND_SIDES)}")
    return side


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def dose_stats(study: Path, metrics: list[str], alpha: float, read_csv: Any,
               band_metric: str | None = None, alternative: str = "two-sided",
               trend_side: str | None = None) -> dict[str, Any]:
    """{"levels": one record per (model, task, metric, epochs, train size, arm, dose),
    "cells": one per ladder (its threshold, fits and band)}; empty lists when no arm injected a
    ladder. `read_csv` is lab.analysis.report_data's reader (errors name file, line and column);
    the tests take the study's `alternative`, intervals have level 1 - alpha; the curves' band
    is drawn for `band_metric` only (it refits both curves on every resample). The trend tests
    are `trend_side` (lab.stats.DOSE_TREND_SIDES), by default the recipe's (recipe_dose_trend)."""
    study = Path(study)
    if trend_side is None:
        trend_side = recipe_dose_trend(study)
    elif trend_side not in DOSE_TREND_SIDES:
        raise LabError(f"dose trend {trend_side!r}: choose from {', '.join(DOSE_TREND_SIDES)}")
    results = read_csv(study / RESULTS, ("model", "task", "arm", "seed", "epochs", "train_size",
                                         "group"), lambda c: c in metrics or c == "injected_token_fraction")
    ladder = [r for r in results if str(r["group"]).startswith(DOSE_GROUP)]
    if not ladder or not (study / SAMPLES).exists():
        return {"levels": [], "cells": []}
    samples = read_csv(study / SAMPLES, ("model", "task", "arm", "epochs", "train_size", "group",
                                         "seed", "id", "dose"), lambda c: c.startswith("score_"))
    # Per (model, task, epochs, train size, arm): the sample rows of every seed.
    scored: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        scored[(s["model"], s["task"], int(s["epochs"]), s["train_size"], s["arm"])].append(s)
    runs: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in ladder:
        runs[(r["model"], r["task"], int(r["epochs"]), r["train_size"], r["arm"],
              int(r["group"][len(DOSE_GROUP):]))].append(r)
    probes = _probe_levels(study, read_csv)

    levels: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    arms = sorted({k[4] for k in runs})
    keys = sorted({k[:4] for k in runs}, key=lambda k: (k[0], k[1], k[2], train_size_order(k[3])))
    for metric in metrics:
        column = f"score_{metric}"
        for model, task, epochs, size in keys:
            for arm in arms:
                key = (model, task, epochs, size, arm)
                doses = sorted({k[5] for k in runs if k[:5] == key})
                if not doses:
                    continue
                by_seed = _ladder_scores(scored[key], column)
                model_epochs = pretrain_epochs(study, model)
                cell_levels = []
                for d in doses:
                    rows = runs[key + (d,)]
                    values = [r[metric] for r in rows if r.get(metric) is not None]
                    shares = [r["injected_token_fraction"] for r in rows
                              if r.get("injected_token_fraction") is not None]
                    mine = [v for levels_of in by_seed.values() for v in levels_of.get(d, {}).values()]
                    cell_levels.append({
                        "model": model, "task": task, "metric": metric, "epochs": epochs,
                        "train_size": size, "arm": arm, "dose": d,
                        "times_seen": d * model_epochs if model_epochs else None,
                        "seeds": len(values), "score": _mean(values), "score_std": _std(values),
                        "samples": len(mine), "sample_mean": _mean(mine),
                        "token_share": _mean(shares), **probes.get((model, arm, d), {})})
                _within(cell_levels, by_seed, alpha, alternative)
                for reference in ("control", settings_table.placebo_of(arm)):
                    if reference:
                        _against(cell_levels, by_seed,
                                 _ladder_scores(scored.get(key[:4] + (reference,), []), column,
                                                every_sample=True),
                                 reference, alpha, alternative)
                cell = {"model": model, "task": task, "metric": metric, "epochs": epochs,
                        "train_size": size, "arm": arm, "alpha": alpha,
                        "unit": next((r["unit"] for r in cell_levels if r.get("unit")), None),
                        "threshold": next((r["dose"] for r in cell_levels if r["dose"]
                                           and r.get("p_holm") is not None
                                           and r["p_holm"] <= alpha and r["lift"] > 0), None)}
                cell["threshold_times_seen"] = next(
                    (r["times_seen"] for r in cell_levels if r["dose"] == cell["threshold"]), None)
                cell.update(_reach(cell_levels, alpha, alternative) if cell["unit"] == SEED_UNIT
                            else {})
                cell.update(_curves(cell_levels, by_seed, alpha, metric == band_metric))
                cell.update(dose_trend(by_seed, trend_side))
                _mark_disagreements(cell_levels, alpha)
                levels += cell_levels
                cells.append(cell)
        _adjust_trends([c for c in cells if c["metric"] == metric])
        for cell in cells:
            if cell["metric"] == metric:
                cell["trend_verdict"] = trend_verdict(cell, alpha)
    return {"levels": levels, "cells": cells, "dose_scale": DOSE_SCALE, "times_seen": TIMES_SEEN,
            "alternative": alternative,
            "within_test": f"{SIGN_FLIP_TEST}, {alternative}, over the per-seed lifts",
            "one_model_test": f"{ONE_MODEL_TEST}, {alternative}",
            "pooled_description": POOLED_DESCRIPTION,
            "paired_test": (f"{SIGN_FLIP_TEST}, {alternative}, over each seed's mean per-sample "
                            "difference (same sample, same seed; one seed: no test)"),
            "interval": SEED_INTERVAL, "one_model_interval": SAMPLE_BOOTSTRAP,
            "curves": {"monotone": DOSE_CURVE, "unconstrained": DOSE_CURVE_UNCONSTRAINED},
            "non_monotone_rule": NON_MONOTONE_RULE, "band": DOSE_BAND,
            "trend_side": trend_side, "trend_test": trend_tests(trend_side),
            "pretrain_epochs": pretrain_epochs(study)}


def _ladder_scores(rows: list[dict[str, Any]], column: str, every_sample: bool = False) -> Levels:
    """seed -> dose -> sample id -> score of one arm's sample rows; `every_sample`: a reference
    arm's rows, which carry no dose, under dose 0."""
    found: Levels = defaultdict(lambda: defaultdict(dict))
    for s in rows:
        if s.get(column) is None or (s.get("dose") in (None, "") and not every_sample):
            continue
        dose = 0 if every_sample else int(float(s["dose"]))
        found[s["seed"]][dose][s["id"]] = s[column]
    return found


def seed_interval(per_seed: dict[Any, list], alpha: float) -> tuple[float | None, float | None]:
    """The effect's 1 - alpha interval: over seeds, or with one seed over its samples."""
    if len(per_seed) == 1:
        [parts] = per_seed.values()
        return sample_interval(parts, 1 - alpha) or (None, None)
    return effect_interval(per_seed, 1 - alpha) or (None, None)


def lift_interval(per_seed: dict[Any, list], alpha: float
                  ) -> tuple[float | None, float | None, str | None]:
    """seed_interval cut to LIFT_BOUNDS (lab.stats.clipped), and the bound it cut
    (lab.stats.clipped_side: what a table marks), None where it cut none."""
    low, high = seed_interval(per_seed, alpha)
    if low is None or high is None:
        return None, None, None
    return (*clipped((low, high), LIFT_BOUNDS), clipped_side((low, high), LIFT_BOUNDS))


def _within(cell_levels: list[dict[str, Any]], by_seed: Levels, alpha: float, alternative: str
            ) -> None:
    """Each injected level against dose 0 of the same models (SEED_UNIT, or with one seed
    SAMPLE_UNIT); Holm across the levels."""
    tested = []
    for record in cell_levels:
        dose = record["dose"]
        per_seed = {seed: [(1.0, levels[dose]), (-1.0, levels[0])]
                    for seed, levels in by_seed.items() if dose and levels.get(dose) and levels.get(0)}
        if not per_seed:
            continue
        lifts = {seed: seed_effect(parts) for seed, parts in per_seed.items()}
        record["lift"] = _mean(list(lifts.values()))
        record["seed_lifts"] = lifts
        record["lift_ci_low"], record["lift_ci_high"], record["lift_ci_clipped"] = \
            lift_interval(per_seed, alpha)
        if len(per_seed) > 1:
            record["p"], record["test"] = sign_flip_test(list(lifts.values()), alternative)
            record["unit"] = SEED_UNIT
        else:
            [(_plus, mine), (_minus, held)] = next(iter(per_seed.values()))
            record["p"], record["test"] = one_model_rank_test(list(mine.values()),
                                                              list(held.values()), alternative)
            record["unit"] = SAMPLE_UNIT
        pooled = [[v for parts in per_seed.values() for v in parts[side][1].values()]
                  for side in (0, 1)]  # the level's, then dose 0's (seed, sample) scores
        _u, record["p_pooled_description"] = paired_within_model(*pooled)
        tested.append(record)
    for record, adjusted in zip(tested, holm([r["p"] for r in tested])):
        record["p_holm"] = adjusted


def _slope(doses: Any, scores: Any) -> Any:
    """Least-squares slope of `scores` (one row per permutation, or one row) on TREND_X."""
    import numpy as np

    x = np.log1p(np.asarray(doses, dtype=float))
    centred = x - x.mean()
    return (np.asarray(scores, dtype=float) @ centred) / (centred @ centred)


def dose_trend(by_seed: Levels, side: str = DEFAULT_DOSE_TREND) -> dict[str, Any]:
    """Do scores change with the dose, in the direction `side` tests (lab.stats.DOSE_TREND_SIDES)?
    Per seed the slope of its per-sample scores on TREND_X (dose 0 included); one seed:
    TREND_ONE_MODEL, more: TREND_SEEDS. `trend_floor`: the smallest p the test can give. Empty
    where no seed has two levels."""
    import numpy as np

    if side not in DOSE_TREND_SIDES:
        raise LabError(f"dose trend {side!r}: choose from {', '.join(DOSE_TREND_SIDES)}")
    points = {seed: [(dose, score) for dose, level in levels.items() for score in level.values()]
              for seed, levels in by_seed.items()}
    points = {seed: pairs for seed, pairs in points.items()
              if len({dose for dose, _score in pairs}) > 1}
    if not points:
        return {}
    slopes = {seed: float(_slope(*zip(*pairs))) for seed, pairs in points.items()}
    found: dict[str, Any] = {"trend_slope": _mean(list(slopes.values())), "trend_x": TREND_X,
                             "trend_seeds": len(slopes), "trend_side": side}
    if len(points) > 1:
        found["trend_p"], _test = sign_flip_test(list(slopes.values()), side)
        found["trend_floor"] = sign_flip_floor(len(points), side)
        found["trend_test"] = trend_tests(side)["seeds"]
        return found
    [pairs] = points.values()
    doses, scores = (np.asarray(v, dtype=float) for v in zip(*pairs))
    shuffled = np.random.default_rng(0).permuted(np.tile(scores, (TREND_PERMUTATIONS, 1)), axis=1)
    # A permutation tying the observed slope counts against it; the tolerance absorbs the
    # rounding of the same sum taken in another order. Two-sided: a slope as far from 0 either
    # way (the permutation distribution of a slope is centred on 0).
    observed, permuted = found["trend_slope"], _slope(doses, shuffled)
    tolerance = 1e-12 * (1 + abs(observed))
    reached = np.sum({"greater": permuted >= observed - tolerance,
                      "less": permuted <= observed + tolerance,
                      "two-sided": np.abs(permuted) >= abs(observed) - tolerance}[side])
    found["trend_p"] = float((1 + reached) / (TREND_PERMUTATIONS + 1))
    found["trend_floor"] = 1 / (TREND_PERMUTATIONS + 1)
    found["trend_test"] = trend_tests(side)["one_model"]
    return found


def turn_shape(rises: list[list[float]], falls: list[list[float]]) -> str:
    """How a non-monotone ladder turns (lab.stats.dose_turns' rises and falls): 'rises then
    falls' where a rise ends at or below the dose a fall starts from, 'falls then rises' the
    other way round, 'rises and falls' where both or neither order holds (a zigzag, or steps
    that overlap)."""
    rise_first = any(rise[1] <= fall[0] for rise in rises for fall in falls)
    fall_first = any(fall[1] <= rise[0] for rise in rises for fall in falls)
    if rise_first != fall_first:
        return "rises then falls" if rise_first else "falls then rises"
    return "rises and falls"


def trend_verdict(cell: dict[str, Any], alpha: float) -> str | None:
    """What a ladder's levels and its trend test say together: 'non-monotone: rises then falls'
    where its levels turn (NON_MONOTONE_RULE), whatever the trend p (a slope cannot see a
    turn); else 'rising trend' or 'falling trend' where the trend's Holm p is at most alpha,
    else NOT_SIGNIFICANT; None where neither could be judged."""
    if cell.get("non_monotone"):
        return f"non-monotone: {turn_shape(cell['rises'], cell['falls'])}"
    if cell.get("trend_p_holm") is None:
        return None
    if cell["trend_p_holm"] <= alpha:
        return f"{'rising' if cell['trend_slope'] > 0 else 'falling'} trend"
    return NOT_SIGNIFICANT


def _adjust_trends(cells: list[dict[str, Any]]) -> None:
    """Holm across the trend tests of one metric's ladders, read together; `trend_p_holm_floor`
    is the smallest Holm p they can reach (their number times the smallest floor)."""
    tested = [c for c in cells if c.get("trend_p") is not None]
    if not tested:
        return
    reachable = min(1.0, len(tested) * min(c["trend_floor"] for c in tested))
    for cell, adjusted in zip(tested, holm([c["trend_p"] for c in tested])):
        cell["trend_p_holm"], cell["trend_p_holm_floor"] = adjusted, reachable
        cell["trend_family"] = len(tested)


def disagrees(low: float | None, high: float | None, p_holm: float | None, alpha: float) -> bool:
    """An interval excluding 0 beside a Holm p above alpha, or one holding 0 beside a Holm p at
    or below it: the estimate and the test say different things."""
    if low is None or high is None or p_holm is None:
        return False
    return (low > 0 or high < 0) != (p_holm <= alpha)


def _mark_disagreements(cell_levels: list[dict[str, Any]], alpha: float) -> None:
    """Each level's `disagrees` (its lift over dose 0) and `disagrees_vs_control`."""
    for r in cell_levels:
        r["disagrees"] = disagrees(r.get("lift_ci_low"), r.get("lift_ci_high"), r.get("p_holm"),
                                   alpha)
        r["disagrees_vs_control"] = disagrees(r.get("lift_vs_control_ci_low"),
                                              r.get("lift_vs_control_ci_high"),
                                              r.get("p_vs_control_holm"), alpha)


def _reach(cell_levels: list[dict[str, Any]], alpha: float, alternative: str) -> dict[str, Any]:
    """The smallest Holm p the cell's seeds and levels allow (every seed's lift of one sign at
    every level), and the seeds that would let it reach alpha: with too few seeds no threshold
    can be found, whatever the lifts."""
    tested = [r for r in cell_levels if r.get("p") is not None]
    seeds = min(len(r["seed_lifts"]) for r in tested)
    return {"holm_floor": min(1.0, len(tested) * sign_flip_floor(seeds, alternative)),
            "seeds_for_alpha": seeds_for_family(len(tested), alpha, alternative)}


def _against(cell_levels: list[dict[str, Any]], by_seed: Levels, reference: Levels, name: str,
             alpha: float, alternative: str) -> None:
    """Each level's samples against the same samples under `name`'s model of the same seed
    (which never saw them): per seed the mean per-sample difference; over seeds their mean, a
    sign-flip test and an interval (one seed: the estimate only); Holm across the levels."""
    tested = []
    for record in cell_levels:
        per_seed = {}
        for seed, levels in by_seed.items():
            theirs = reference.get(seed, {}).get(0, {})
            differences = {i: score - theirs[i] for i, score in levels.get(record["dose"], {}).items()
                           if i in theirs}
            if differences:
                per_seed[seed] = [(1.0, differences)]
        if not per_seed:
            continue
        effects = [seed_effect(parts) for parts in per_seed.values()]
        record[f"lift_vs_{name}"] = _mean(effects)
        if len(per_seed) > 1:
            (record[f"lift_vs_{name}_ci_low"], record[f"lift_vs_{name}_ci_high"],
             record[f"lift_vs_{name}_ci_clipped"]) = lift_interval(per_seed, alpha)
            if record["dose"]:
                record[f"p_vs_{name}"], _test = sign_flip_test(effects, alternative)
                tested.append(record)
    for record, adjusted in zip(tested, holm([r[f"p_vs_{name}"] for r in tested])):
        record[f"p_vs_{name}_holm"] = adjusted


def _curves(cell_levels: list[dict[str, Any]], by_seed: Levels, alpha: float, with_band: bool
            ) -> dict[str, Any]:
    """A cell's monotone and unconstrained fits to its levels' mean lifts, the non-monotone
    flag, and (with_band) both curves over a grid with their band."""
    injected = [r for r in cell_levels if r["dose"] and r.get("lift") is not None]
    if not injected:
        return {"monotone_fit": None, "unconstrained_fit": None, "non_monotone": None}
    doses, lifts = [r["dose"] for r in injected], [r["lift"] for r in injected]
    found = {"monotone_fit": fit_dose_curve(doses, lifts),
             "unconstrained_fit": fit_unconstrained_curve(doses, lifts),
             **dose_turns([(r["dose"], r["lift_ci_low"], r["lift_ci_high"]) for r in injected])}
    if with_band and len(doses) >= 2:
        low, high = math.log(min(doses)), math.log(max(doses))
        grid = [math.exp(low + (high - low) * i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)]
        found["curve"] = {"copies_per_epoch": grid,
                          "monotone": dose_curve_values(found["monotone_fit"], grid),
                          "unconstrained": unconstrained_curve_values(found["unconstrained_fit"], grid)}
        found["band"] = dose_band(by_seed, grid, level=1 - alpha)
    return found


def _probe_levels(study: Path, read_csv: Any) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(model, arm, dose) -> the loss probe's AUC and p at telling the level's samples from dose
    0's, within the arm's own models (pooled over seeds: a description)."""
    path = study / PROBES
    if not path.exists():
        return {}
    rows = read_csv(path, ("model", "arm", "groups", "id", "loss"), lambda c: c in PROBE_COLUMNS)
    rows = [r for r in rows if r.get("dose") not in (None, "") and r["groups"] == r["arm"]
            and r["loss"] is not None]
    found = {}
    for model, arm in {(r["model"], r["arm"]) for r in rows}:
        mine = [r for r in rows if (r["model"], r["arm"]) == (model, arm)]
        held = [r["loss"] for r in mine if int(float(r["dose"])) == 0]
        for dose in sorted({int(float(r["dose"])) for r in mine} - {0}):
            level = [r["loss"] for r in mine if int(float(r["dose"])) == dose]
            auc, p = membership_auc(level, held, False)
            found[(model, arm, dose)] = {"probe_auc": auc, "probe_p": p}
        if held:
            found[(model, arm, 0)] = {"probe_auc": 0.5}
    return found
