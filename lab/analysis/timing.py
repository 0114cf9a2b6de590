"""The forgetting curve of a study whose arms inject timing levels (injection.timing): per
level, how far its samples score above the held-out samples of the same models, against how
many steps pre-training went on after the level's last exposure; and each level against the
most recently seen one.

The seed (one trained model) is the unit of inference, as for a dose ladder (lab.analysis.dose):
each seed's lift of a level is its mean per-sample score minus the held-out samples' mean; the
level's lift is their mean over seeds, tested by a sign-flip test over the seeds, Holm-corrected
across the levels of a cell, with an interval over seeds (lab.stats.SEED_INTERVAL). A contrast between two levels
is each seed's mean over the one level minus its mean over the other (both inside the same
model), tested and bounded the same way. One seed: a rank test over that model's samples, an
interval over its samples. The steps since the last exposure are the median over the level's
samples and seeds (each sample's last trained step is in its pre-training manifest:
lab.train.schedule).

A family of tests whose smallest attainable Holm p (every test at its floor: NOT_TESTABLE)
exceeds alpha cannot reject whatever the data, so its verdict reads "not testable here" with that
floor, never "no difference detected".
"""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from lab.stats import (ALPHA, SEED_INTERVAL, ONE_MODEL_TEST, SAMPLE_BOOTSTRAP, SIGN_FLIP_TEST,
                       effect_text, holm, one_model_rank_test, seed_effect, sign_flip_test)
from lab.analysis.collect import SAMPLES
from lab.analysis.dose import seed_interval
from lab.analysis.questions import SAMPLE_UNIT, SEED_UNIT, rank_floor, sign_flip_floor
from lab.analysis.report_data import train_size_order

HELD_OUT = "held_out"
COLUMNS = ("model", "task", "metric", "epochs", "train_size", "arm", "level", "window",
           "steps_since_last", "seeds", "samples", "lift", "lift_ci_low", "lift_ci_high", "p",
           "p_holm", "p_holm_floor", "unit", "against", "contrast", "contrast_ci_low",
           "contrast_ci_high", "contrast_p", "contrast_p_holm", "contrast_p_holm_floor")
NOT_TESTABLE = ("not testable here: the smallest p the family's tests can reach (K seeds: "
                "sides/2^K for a sign-flip test; one seed: 1 of the rank test's splits), times "
                "the family's size under Holm, exceeds alpha")


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _test(per_seed: dict[Any, list], alpha: float, alternative: str) -> dict[str, Any]:
    """Mean of the per-seed effects, its interval and test (one seed: over its samples), and
    `floor`: the smallest p that test can give with these seeds or samples."""
    effects = {seed: seed_effect(parts) for seed, parts in per_seed.items()}
    low, high = seed_interval(per_seed, alpha)
    out = {"effect": sum(effects.values()) / len(effects), "low": low, "high": high,
           "seeds": len(effects)}
    if len(per_seed) > 1:
        out["p"], _ = sign_flip_test(list(effects.values()), alternative)
        out["unit"] = SEED_UNIT
        out["floor"] = sign_flip_floor(len(effects), alternative)
    else:
        [parts] = per_seed.values()
        (_, mine), (_, theirs) = parts
        out["p"], _ = one_model_rank_test(list(mine.values()), list(theirs.values()), alternative)
        out["unit"] = SAMPLE_UNIT
        out["floor"] = rank_floor(len(mine), len(theirs), alternative)
    return out


def _adjust(family: list[dict[str, Any]], p: str, floor: str) -> None:
    """Holm across `family` into record[p + '_holm'], and into record[p + '_holm_floor'] the
    smallest Holm p the family can reach: its size times its smallest floor (the test that
    would be ranked first)."""
    if not family:
        return
    reachable = min(1.0, len(family) * min(r[floor] for r in family))
    for record, adjusted in zip(family, holm([r[p] for r in family])):
        record[f"{p}_holm"], record[f"{p}_holm_floor"] = adjusted, reachable
        record[f"{p}_family"] = len(family)


def untestable(record: dict[str, Any], p: str, floor: str, alpha: float) -> str | None:
    """'not testable here (3 seeds: smallest p 0.25; 0.5 after Holm over 2 tests)' where the
    family of record[p] cannot reach alpha (NOT_TESTABLE), else None."""
    reachable = record.get(f"{p}_holm_floor")
    if reachable is None or reachable <= alpha:
        return None
    unit = f"{record['seeds']} seeds" if record["seeds"] > 1 else "one seed"
    tests = record[f"{p}_family"]
    return (f"not testable here ({unit}: smallest p {record[floor]:.3g}"
            + (f"; {reachable:.3g} after Holm over {tests} tests)" if tests > 1 else ")"))


def verdict(record: dict[str, Any], p: str, floor: str, alpha: float) -> str:
    """'difference detected', 'no difference detected', or 'not testable here' with the floor
    (a null that could not have failed is no finding)."""
    if record.get(f"{p}_holm") is None:
        return ""
    return untestable(record, p, floor, alpha) or (
        "difference detected" if record[f"{p}_holm"] <= alpha else "no difference detected")


def timing_stats(study: Path, metrics: list[str], alpha: float, read_csv: Any,
                 alternative: str = "two-sided") -> dict[str, Any]:
    """{"levels": one record per (model, task, metric, epochs, train size, arm, timing level)};
    empty when no arm injected timing levels. `read_csv`: lab.analysis.report_data's reader."""
    path = Path(study) / SAMPLES
    if not path.exists():
        return {"levels": []}
    rows = read_csv(path, ("model", "task", "arm", "epochs", "train_size", "group", "seed", "id"),
                    lambda c: (c.startswith("score_")
                               or c in ("steps_since_last_exposure", "weight_decay")))
    if not any(r.get("timing") for r in rows):
        return {"levels": []}
    cells: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[(r["model"], r["task"], int(r["epochs"]), r["train_size"], r["arm"])].append(r)
    windows = _windows(Path(study))
    levels: list[dict[str, Any]] = []
    scores: dict[tuple, Any] = {}  # (metric, cell key) -> seed -> level -> id -> score
    for metric in metrics:
        column = f"score_{metric}"
        for key in sorted(cells, key=lambda k: (k[0], k[1], k[2], train_size_order(k[3]), k[4])):
            mine = cells[key]
            names = list(dict.fromkeys(r["timing"] for r in mine if r.get("timing")))
            if not names:
                continue
            by_seed: dict[Any, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
            since: dict[str, list[float]] = defaultdict(list)
            for r in mine:
                if r.get(column) is None:
                    continue
                level = r.get("timing") or (HELD_OUT if r["group"] == HELD_OUT else None)
                if level is None:
                    continue
                by_seed[r["seed"]][level][r["id"]] = r[column]
                if r.get("steps_since_last_exposure") is not None:
                    since[level].append(r["steps_since_last_exposure"])
            scores[(metric, key)] = by_seed
            cell = []
            for name in names:
                per_seed = {seed: [(1.0, lv[name]), (-1.0, lv[HELD_OUT])]
                            for seed, lv in by_seed.items() if lv.get(name) and lv.get(HELD_OUT)}
                if not per_seed:
                    continue
                found = _test(per_seed, alpha, alternative)
                cell.append({"model": key[0], "task": key[1], "metric": metric, "epochs": key[2],
                             "train_size": key[3], "arm": key[4], "level": name,
                             "window": windows.get(name), "steps_since_last": _median(since[name]),
                             "seeds": found["seeds"],
                             "samples": sum(len(lv[name]) for lv in by_seed.values()),
                             "lift": found["effect"], "lift_ci_low": found["low"],
                             "lift_ci_high": found["high"], "p": found["p"],
                             "floor": found["floor"], "unit": found["unit"]})
            _contrasts(cell, by_seed, alpha, alternative)
            _adjust(cell, "p", "floor")
            levels += cell
    return {"levels": levels, "weight_decay": _decay_contrasts(levels, scores, cells, alpha,
                                                               alternative),
            "alternative": alternative, "alpha": alpha,
            "test": f"{SIGN_FLIP_TEST}, {alternative}, over the per-seed lifts",
            "one_model_test": f"{ONE_MODEL_TEST}, {alternative}",
            "interval": SEED_INTERVAL, "one_model_interval": SAMPLE_BOOTSTRAP}


def _contrasts(cell: list[dict[str, Any]], by_seed: Any, alpha: float, alternative: str) -> None:
    """Each level against the most recently seen one (fewest steps since its last exposure):
    within each model, the difference of the two levels' mean scores; Holm across the cell."""
    timed = [r for r in cell if r["steps_since_last"] is not None]
    if len(timed) < 2:
        return
    recent = min(timed, key=lambda r: r["steps_since_last"])
    tested = []
    for record in timed:
        if record is recent:
            continue
        per_seed = {seed: [(1.0, lv[record["level"]]), (-1.0, lv[recent["level"]])]
                    for seed, lv in by_seed.items()
                    if lv.get(record["level"]) and lv.get(recent["level"])}
        if not per_seed:
            continue
        found = _test(per_seed, alpha, alternative)
        record.update({"against": recent["level"], "contrast": found["effect"],
                       "contrast_ci_low": found["low"], "contrast_ci_high": found["high"],
                       "contrast_p": found["p"], "contrast_floor": found["floor"]})
        tested.append(record)
    _adjust(tested, "contrast_p", "contrast_floor")


def _decay_contrasts(levels: list[dict[str, Any]], scores: dict[tuple, Any],
                     cells: dict[tuple, list[dict[str, Any]]], alpha: float, alternative: str
                     ) -> list[dict[str, Any]]:
    """Where weight decay is swept: each level's lift under the largest weight decay minus its
    lift under the smallest, per seed (the same corpus and samples: only the decay differs),
    tested and bounded over seeds; Holm across a cell's levels."""
    decay_of = {key: cells[key][0].get("weight_decay") for key in cells}
    family: dict[tuple, dict[float, tuple]] = defaultdict(dict)
    for key, decay in decay_of.items():
        if decay is not None:
            model = key[0].replace(f"/wd={decay:g}", "")
            family[(model,) + key[1:]][decay] = key
    out = []
    for metric in dict.fromkeys(r["metric"] for r in levels):
        for group, by_decay in sorted(family.items(), key=lambda kv: str(kv[0])):
            if len(by_decay) < 2:
                continue
            low, high = min(by_decay), max(by_decay)
            lo, hi = scores.get((metric, by_decay[low])), scores.get((metric, by_decay[high]))
            if lo is None or hi is None:
                continue
            tested = []
            names = dict.fromkeys(level for seeds in hi.values() for level in seeds)
            for name in [n for n in names if n != HELD_OUT]:
                per_seed = {seed: [(1.0, hi[seed][name]), (-1.0, hi[seed][HELD_OUT]),
                                   (-1.0, lo[seed][name]), (1.0, lo[seed][HELD_OUT])]
                            for seed in hi if seed in lo
                            and all(part.get(n) for part in (hi[seed], lo[seed])
                                    for n in (name, HELD_OUT))}
                if len(per_seed) < 2:
                    continue
                found = _test(per_seed, alpha, alternative)
                tested.append({"model": group[0], "task": group[1], "metric": metric,
                               "epochs": group[2], "train_size": group[3], "arm": group[4],
                               "level": name, "weight_decay": [low, high],
                               "difference": found["effect"], "ci_low": found["low"],
                               "ci_high": found["high"], "p": found["p"], "seeds": found["seeds"],
                               "floor": found["floor"], "unit": found["unit"]})
            _adjust(tested, "p", "floor")
            out += tested
    return out


def _windows(study: Path) -> dict[str, str]:
    try:
        recipe = json.loads((study / "recipe.json").read_text(encoding="utf-8"))
        specs = recipe["injection"]["timing"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    from lab.contamination.timing import parse_timing

    return {spec: f"{parse_timing(spec).start:g}-{parse_timing(spec).end:g}" for spec in specs}


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def timing_table(found: dict[str, Any], metric: str) -> dict[str, str]:
    """The forgetting table of `metric` as markdown and CSV."""
    rows = [r for r in found["levels"] if r["metric"] == metric]
    alpha = found.get("alpha", ALPHA)

    def p_cell(record: dict[str, Any], p: str, floor: str) -> str:
        adjusted = _fmt(record.get(f"{p}_holm"), ".3g")
        why = untestable(record, p, floor, alpha)
        return f"{adjusted}: {why}" if why else adjusted

    lines = [f"Lift of each timing level over the held-out samples of the same models ({metric}; "
             "mean over seeds, interval over seeds; p: sign-flip over seeds, Holm across levels), "
             "and each level against the most recently seen one.", "",
             "| model | E | n | arm | timing | window | steps since last exposure | lift [CI] "
             "| p (Holm) | vs most recent [CI] | p (Holm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        over_samples = r.get("unit") == SAMPLE_UNIT  # one seed: the interval over its samples
        lift = effect_text(r["lift"], r["lift_ci_low"], r["lift_ci_high"], r["seeds"],
                           over_samples)
        contrast = (effect_text(r["contrast"], r.get("contrast_ci_low"), r.get("contrast_ci_high"),
                                r["seeds"], over_samples) + f" vs {r['against']}"
                    if r.get("contrast") is not None else "")
        lines.append(f"| {r['model']} | {r['epochs']} | {r['train_size'] or 'all'} | {r['arm']} "
                     f"| {r['level']} | {r['window'] or ''} | {_fmt(r['steps_since_last'], '.0f')} "
                     f"| {lift} | {p_cell(r, 'p', 'floor')} | {contrast} "
                     f"| {p_cell(r, 'contrast_p', 'contrast_floor')} |")
    decays = [r for r in found.get("weight_decay", []) if r["metric"] == metric]
    if decays:
        lines += ["", "Weight decay: each level's lift under the larger decay minus under the "
                  "smaller (the same seeds' corpora and samples; interval over seeds; p: "
                  f"sign-flip over seeds, Holm across levels; {NOT_TESTABLE} {alpha:g}).", "",
                  "| model | E | n | arm | timing | weight decay | difference [CI] | p (Holm) "
                  "| verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in decays:
            lines.append(f"| {r['model']} | {r['epochs']} | {r['train_size'] or 'all'} "
                         f"| {r['arm']} | {r['level']} | {r['weight_decay'][1]:g} - "
                         f"{r['weight_decay'][0]:g} | "
                         f"{effect_text(r['difference'], r['ci_low'], r['ci_high'], r['seeds'])} "
                         f"| {_fmt(r.get('p_holm'), '.3g')} | {verdict(r, 'p', 'floor', alpha)} |")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return {"md": "\n".join(lines) + "\n", "csv": out.getvalue()}
