"""Dose-response of a study whose arms inject a dose ladder (injection.doses): per level, how
far the level's samples score above the held-out level (dose 0) of the same models, and above
the control's (and placebo's) models on the same samples; the smallest dose whose lift is
significant; a monotone curve fitted to the lifts against exposures (lab.stats.DOSE_CURVE).

Exposures of a level: its dose (copies in the arm's corpus) times the pre-training epochs.
Within a model each level is tested against level 0 (Mann-Whitney U, one-sided, per-sample
scores pooled over seeds), Holm-corrected across the levels of a cell; against a reference arm
each sample is paired with itself under the same seed (Wilcoxon signed-rank, one-sided), Holm
across levels too.
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.stats import (DOSE_BOOTSTRAP, DOSE_CURVE, PAIRED_SAMPLES_TEST, dose_bootstrap,
                       dose_curve_values, fit_dose_curve, holm, membership_auc,
                       paired_sample_differences, paired_within_model, signed_rank_test,
                       within_model_seeds)
from lab.study.figure import train_size_order
from lab.study.runner import DOSE_GROUP, PROBE_COLUMNS, PROBES, RESULTS, SAMPLES

WITHIN_LEVEL_TEST = "Mann-Whitney U, greater, asymptotic: the level's samples vs dose 0's, pooled over seeds"
GRID_POINTS = 40  # exposures at which the fitted curve and its band are drawn


def pretrain_epochs(study: Path, model: str | None = None) -> float | None:
    """The study's pre-training epochs (STUDY/recipe.json), a model's own where the recipe's
    by_model sets them: exposures = dose x epochs."""
    try:
        recipe = json.loads((Path(study) / "recipe.json").read_text(encoding="utf-8"))
        own = (((recipe.get("by_model") or {}).get(model) or {}).get("pretrain") or {}) \
            .get("epochs") if model else None
        return float(own if own is not None else recipe["pretrain"]["epochs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def dose_stats(study: Path, metrics: list[str], alpha: float, read_csv: Any, band_metric: str | None = None
               ) -> dict[str, Any]:
    """{"levels": one record per (model, task, metric, epochs, train size, arm, dose),
    "cells": one per ladder (its threshold, fit and band)}; empty lists when no arm injected a
    ladder. `read_csv` is lab.study.report's reader (errors name file, line and column); the
    curve's band is drawn for `band_metric` only (it refits the curve on every resample)."""
    study = Path(study)
    results = read_csv(study / RESULTS, ("model", "task", "arm", "seed", "epochs", "train_size",
                                         "group"), lambda c: c in metrics or c == "injected_token_fraction")
    ladder = [r for r in results if str(r["group"]).startswith(DOSE_GROUP)]
    if not ladder or not (study / SAMPLES).exists():
        return {"levels": [], "cells": []}
    samples = read_csv(study / SAMPLES, ("model", "task", "arm", "epochs", "train_size", "group",
                                         "seed", "id", "dose"), lambda c: c.startswith("score_"))
    epochs_pretrain = pretrain_epochs(study)
    # Per (model, task, epochs, train size, arm): seed -> sample id -> (dose, row).
    scored: dict[tuple, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    dose_of: dict[tuple, dict[tuple[str, str], int]] = defaultdict(dict)
    for s in samples:
        key = (s["model"], s["task"], int(s["epochs"]), s["train_size"], s["arm"])
        scored[key][(s["seed"], s["id"])] = s
        if s.get("dose") not in (None, ""):
            dose_of[key][(s["seed"], s["id"])] = int(float(s["dose"]))
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
                members = dose_of[key]
                by_level = {d: {k: scored[key][k][column] for k, dose in members.items()
                                if dose == d and scored[key][k].get(column) is not None}
                            for d in doses}
                model_epochs = pretrain_epochs(study, model)
                exposures = {d: d * model_epochs if model_epochs else float(d) for d in doses}
                cell_levels = []
                for d in doses:
                    rows = runs[key + (d,)]
                    values = [r[metric] for r in rows if r.get(metric) is not None]
                    shares = [r["injected_token_fraction"] for r in rows
                              if r.get("injected_token_fraction") is not None]
                    record = {"model": model, "task": task, "metric": metric, "epochs": epochs,
                              "train_size": size, "arm": arm, "dose": d, "exposures": exposures[d],
                              "seeds": len(values), "score": _mean(values), "score_std": _std(values),
                              "samples": len(by_level[d]),
                              "sample_mean": _mean(list(by_level[d].values())),
                              "token_share": _mean(shares), **probes.get((model, arm, d), {})}
                    cell_levels.append(record)
                _within(cell_levels, by_level, doses)
                for reference in ("control", settings_table.placebo_of(arm)):
                    if reference:
                        _against(cell_levels, by_level, scored.get(key[:4] + (reference,), {}),
                                 column, reference)
                held = by_level.get(0, {})
                cell = {"model": model, "task": task, "metric": metric, "epochs": epochs,
                        "train_size": size, "arm": arm, "alpha": alpha,
                        "threshold": next((r["dose"] for r in cell_levels if r["dose"]
                                           and r.get("p_holm") is not None
                                           and r["p_holm"] <= alpha and r["lift"] > 0), None)}
                cell["threshold_exposures"] = (exposures[cell["threshold"]]
                                               if cell["threshold"] is not None else None)
                injected = [r for r in cell_levels if r["dose"] and r.get("lift") is not None]
                if held and injected:
                    points = {exposures[d]: list(by_level[d].values()) for d in doses}
                    points[0] = list(held.values())
                    grid = _grid([r["exposures"] for r in injected]) if metric == band_metric else []
                    boot = dose_bootstrap(points, grid)
                    for r in injected:
                        r["lift_ci_low"], r["lift_ci_high"] = boot["intervals"][r["exposures"]]
                    fit = fit_dose_curve([r["exposures"] for r in injected],
                                         [r["lift"] for r in injected])
                    cell.update(fit=fit, fitted_to=DOSE_CURVE, band=boot["band"],
                                curve=({"exposures": grid, "lift": dose_curve_values(fit, grid)}
                                       if fit and grid else None))
                levels += cell_levels
                cells.append(cell)
    return {"levels": levels, "cells": cells, "within_test": WITHIN_LEVEL_TEST,
            "paired_test": PAIRED_SAMPLES_TEST, "bootstrap_resamples": DOSE_BOOTSTRAP,
            "pretrain_epochs": epochs_pretrain}


def _grid(exposures: list[float]) -> list[float]:
    low, high = math.log(min(exposures)), math.log(max(exposures))
    return [math.exp(low + (high - low) * i / (GRID_POINTS - 1)) for i in range(GRID_POINTS)]


def _within(cell_levels: list[dict[str, Any]], by_level: dict[int, dict], doses: list[int]) -> None:
    """Each injected level against dose 0 of the same models; Holm across the levels."""
    held = by_level.get(0, {})
    tested = []
    for record in cell_levels:
        mine = by_level[record["dose"]]
        if not record["dose"] or not held or not mine:
            continue
        record["lift"] = record["sample_mean"] - _mean(list(held.values()))
        _u, record["p"] = paired_within_model(list(mine.values()), list(held.values()))
        seeds = {seed for seed, _id in mine}
        if len(seeds) > 1:  # over seeds: per-seed gaps, and samples injected by some seeds only
            rows = [(seed, sample, group, score) for group, level in (("injected", mine),
                                                                      ("held_out", held))
                    for (seed, sample), score in level.items()]
            found = within_model_seeds(rows)
            record.update(p_seeds=found["p_seeds"], gap_per_seed=found["gap_per_seed"])
        tested.append(record)
    for record, adjusted in zip(tested, holm([r["p"] for r in tested])):
        record["p_holm"] = adjusted


def _against(cell_levels: list[dict[str, Any]], by_level: dict[int, dict],
             reference: dict[tuple[str, str], dict[str, Any]], column: str, name: str) -> None:
    """Each level's samples against the same samples under `name`'s models of the same seed
    (which never saw them); Holm across the levels."""
    theirs = {k: row[column] for k, row in reference.items() if row.get(column) is not None}
    tested = []
    for record in cell_levels:
        differences = paired_sample_differences(by_level[record["dose"]], theirs)
        if not differences:
            continue
        p, _test = signed_rank_test(differences, PAIRED_SAMPLES_TEST)
        record[f"lift_vs_{name}"] = sum(differences) / len(differences)
        if p is not None and record["dose"]:
            record[f"p_vs_{name}"] = p
            tested.append(record)
    for record, adjusted in zip(tested, holm([r[f"p_vs_{name}"] for r in tested])):
        record[f"p_vs_{name}_holm"] = adjusted


def _probe_levels(study: Path, read_csv: Any) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(model, arm, dose) -> the loss probe's AUC and p at telling the level's samples from dose
    0's, within the arm's own models (pooled over seeds)."""
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


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


TABLE_HEADER = ["model", "arm", "E", "dose", "exposures", "token share", "samples", "score",
                "lift [95% CI]", "p (Holm)", "vs control", "probe AUC"]


def dose_table(found: dict[str, Any], metric: str) -> dict[str, str]:
    """The dose-response table of one metric (Markdown) and every metric's levels (CSV)."""
    levels = [r for r in found["levels"] if r["metric"] == metric]
    if not levels:
        raise LabError(f"no dose-ladder levels with metric '{metric}'")
    lines = []
    for r in levels:
        lift = "-" if r.get("lift") is None else (
            f"{r['lift']:+.2f} [{_fmt(r.get('lift_ci_low'), '+.2f')}, "
            f"{_fmt(r.get('lift_ci_high'), '+.2f')}]")
        versus = "-" if r.get("lift_vs_control") is None else (
            f"{r['lift_vs_control']:+.2f} (p {_fmt(r.get('p_vs_control_holm'), '.2g')})")
        lines.append([r["model"], r["arm"], str(r["epochs"]), str(r["dose"]),
                      f"{r['exposures']:g}", _fmt(r.get("token_share"), ".1%"), str(r["samples"]),
                      _fmt(r.get("score"), ".2f"), lift, _fmt(r.get("p_holm"), ".2g"), versus,
                      _fmt(r.get("probe_auc"), ".2f")])
    thresholds = []
    for cell in (c for c in found["cells"] if c["metric"] == metric):
        at = ("none of the doses" if cell["threshold"] is None else
              f"dose {cell['threshold']} ({cell['threshold_exposures']:g} exposures)")
        fit = cell.get("fit")
        curve = (f"; fit: top {fit['top']:+.1f}, midpoint {fit['midpoint']:.3g} exposures, "
                 f"slope {fit['slope']:.2f}, rmse {fit['rmse']:.2f}" if fit else "; no fit")
        thresholds.append(f"- {cell['model']} {cell['arm']} E={cell['epochs']}"
                          f"{'' if cell['train_size'] in ('', 'None', None) else ' train ' + str(cell['train_size'])}"
                          f": threshold {at}{curve}")
    note = (f"{metric}: corpus-level score per level (mean over seeds); lift: the level's mean "
            f"per-sample {metric} minus dose 0's in the same models, 95% percentile bootstrap "
            f"interval ({found['bootstrap_resamples']} resamples of each level's samples); "
            f"p: {found['within_test']}, Holm across a cell's levels; vs control: the same samples "
            f"in the control's models of the same seed ({found['paired_test']}; Holm). Token "
            "share: the level's share of the trained tokens. Exposures: dose x "
            f"{found.get('pretrain_epochs') or 1:g} pre-training epochs. Threshold: the smallest "
            f"dose whose lift is positive with Holm p <= {found['cells'][0]['alpha']:g}. "
            f"Curve: {DOSE_CURVE}.")
    markdown = ("| " + " | ".join(TABLE_HEADER) + " |\n|" + "---|" * len(TABLE_HEADER) + "\n"
                + "".join("| " + " | ".join(line) + " |\n" for line in lines)
                + "\n" + "\n".join(thresholds) + "\n\n" + note + "\n")
    columns = ["model", "task", "metric", "arm", "epochs", "train_size", "dose", "exposures",
               "token_share", "seeds", "samples", "score", "score_std", "sample_mean", "lift",
               "lift_ci_low", "lift_ci_high", "p", "p_holm", "p_seeds", "lift_vs_control",
               "p_vs_control", "p_vs_control_holm", "probe_auc", "probe_p"]
    placebo = sorted({k for r in found["levels"] for k in r if "_vs_" in k and "control" not in k})
    columns += placebo
    handle = io.StringIO()
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(columns)
    for r in found["levels"]:
        writer.writerow(["" if r.get(c) is None else (f"{r[c]:.6g}" if isinstance(r[c], float)
                                                      else r[c]) for c in columns])
    return {"md": markdown, "csv": handle.getvalue()}
