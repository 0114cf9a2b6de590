"""What decontamination leaves of the lift: per contamination form, the split-half lift
(injected vs held-out samples of one model) of the arm as built and of the same arm after each
decontaminator (recipe `injection.decontaminate_with: [null, METHOD, ...]`, swept with
`injection.contamination_form`; lab.study.grid.variants). STUDY/report/decontam.md and .csv.

The injected group of a decontaminated arm is the samples meant to be injected, those the
method removed too (intention to treat, lab.eval.generate.assigned_injected_ids), so the lift
after decontamination is the score inflation the method failed to remove. The arm as built and
the decontaminated arm of one seed split the same samples the same way (the split is seeded by
the seed and the samples, not by the form or the method), so their difference is taken seed by
seed, with its interval over seeds (lab.stats.seed_mean_interval); every figure is descriptive
where the recipe says so.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from lab.stats import CLIPPED_LEGEND, bounds_text, no_interval_reason, seed_mean_interval
from lab.analysis.collect import REMOVED, SAMPLES
from lab.study.grid import swept_labels
from lab.analysis.report_data import read_csv

NONE = "none"  # grid.variants' label of the arm as built
INJECTED_GROUPS = ("injected", "injected_truncated")


def removed_samples(samples: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, int]]:
    """(form, method) -> the evaluated samples of the decontaminated models' injected groups
    (by intention to treat: injected, or cut at the block) and those of them the method removed,
    each sample counted once per model and seed (samples.csv; {} where it has no REMOVED
    column, a study made before it)."""
    seen: dict[tuple[str, str], dict[tuple, bool]] = {}
    for row in samples:
        if REMOVED not in row or row["group"] not in INJECTED_GROUPS:
            continue
        _base, swept = swept_labels(row["model"])
        if swept.get("decontam", NONE) == NONE:
            continue
        key = (swept.get("form", "verbatim"), swept["decontam"])
        removed = str(row[REMOVED]).lower() in ("true", "1")
        seen.setdefault(key, {})[(row["model"], str(row["seed"]), row["id"])] = removed
    return {key: {"intended": len(found), "removed": sum(found.values())}
            for key, found in seen.items()}


def study_removed(study: Path) -> dict[tuple[str, str], dict[str, int]]:
    """removed_samples of a study folder's samples.csv ({} without one)."""
    path = Path(study) / SAMPLES
    if not path.exists():
        return {}
    return removed_samples(read_csv(path, ("model", "seed", "id", "group"), lambda _c: False))


def decontam_lifts(primary: dict[str, Any], removed: dict[tuple[str, str], dict[str, int]]
                   ) -> list[dict[str, Any]]:
    """One row per model, form, E, train size and decontaminator: the lift as built, after,
    and their per-seed difference. [] for a study that does not sweep decontamination."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in primary.get("rows") or []:
        if row["question"] != "split-half":
            continue
        base, swept = swept_labels(row["model"])
        if "decontam" not in swept:
            continue
        key = (base, swept.get("form", "verbatim"), row["arm"], row["metric"], row["epochs"],
               row["train_size"])
        cells.setdefault(key, {})[swept["decontam"]] = row
    out = []
    for (base, form, arm, metric, epochs, size), by_method in sorted(
            cells.items(), key=lambda item: tuple(str(k) for k in item[0])):
        before = by_method.get(NONE)
        for method, after in sorted(by_method.items()):
            if method == NONE:
                continue
            shared = sorted(set(after["seed_effects"]) & set((before or {}).get(
                "seed_effects") or {}))
            differences = [after["seed_effects"][s] - before["seed_effects"][s] for s in shared]
            mean, low, high = seed_mean_interval(differences)
            count = removed.get((form, method), {})
            out.append({
                "model": base, "form": form, "arm": arm, "metric": metric,
                "epochs": epochs, "train_size": size, "method": method,
                "lift_before": before["estimate"] if before else None,
                "lift_before_low": before.get("ci_low") if before else None,
                "lift_before_high": before.get("ci_high") if before else None,
                "lift_after": after["estimate"], "lift_after_low": after.get("ci_low"),
                "lift_after_high": after.get("ci_high"),
                # the primary rows' cut bounds (lab.stats.clipped_side), marked in the table
                "lift_before_clipped": before.get("ci_clipped") if before else None,
                "lift_after_clipped": after.get("ci_clipped"),
                "left_share": (after["estimate"] / before["estimate"]
                               if before and before["estimate"] and after["estimate"] is not None
                               and before["estimate"] > 0 else None),
                "difference": mean, "difference_low": low, "difference_high": high,
                "difference_note": no_interval_reason(differences) if differences else "no seed",
                "seeds": len(shared),
                "samples_intended": count.get("intended"), "samples_removed": count.get("removed"),
                "unit": after.get("unit"),
            })
    return out


def _interval(estimate: float | None, low: float | None, high: float | None,
              note: str | None = None, cut: str | None = None) -> str:
    if estimate is None:
        return "-"
    if low is None or high is None:
        return f"{estimate:+.2f} [n/a ({note or 'no interval'})]"
    return f"{estimate:+.2f} {bounds_text(low, high, cut)}"


def decontam_table(rows: list[dict[str, Any]], descriptive: bool) -> dict[str, str]:
    """report/decontam.md (one line per form and decontaminator) and decontam.csv."""
    lines = ["| model | form | E | decontaminator | samples removed | lift as built [CI] | "
             "lift after [CI] | after - as built, per seed [CI] | left |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        removed = ("-" if r["samples_intended"] is None else
                   f"{r['samples_removed']} of {r['samples_intended']}")
        before_note = "1 seed" if r["seeds"] == 1 else None
        lines.append(
            f"| {r['model']} | {r['form']} | {r['epochs']} | {r['method']} | {removed} | "
            f"{_interval(r['lift_before'], r['lift_before_low'], r['lift_before_high'], before_note, r.get('lift_before_clipped'))}"
            f" | {_interval(r['lift_after'], r['lift_after_low'], r['lift_after_high'], before_note, r.get('lift_after_clipped'))}"
            f" | {_interval(r['difference'], r['difference_low'], r['difference_high'], r['difference_note'])}"
            f" | {'-' if r['left_share'] is None else format(r['left_share'], '.0%')} |")
    metric = rows[0]["metric"] if rows else "the primary metric"
    note = (f"\nLift: the injected samples' mean per-sample {metric} minus the held-out ones' in "
            "the same model (the primary table's split-half row), by intention to treat: a "
            "sample the decontaminator removed stays in the injected group, so the lift after "
            "is what the method failed to remove. Samples removed: those of the injected group "
            "whose every copy the method removed, of the group's evaluated samples, summed over "
            "seeds. Intervals over seeds (Student t); "
            "'left' = lift after / lift as built where the latter is positive. "
            + ("Descriptive: the recipe declares no test for these differences, and its seeds "
               "are too few for one to reach its alpha." if descriptive else
               "The primary table's tests (with Holm) are the confirmatory ones; this table "
               "adds no test.")
            + (f" {CLIPPED_LEGEND}." if any(r.get("lift_before_clipped") or r.get("lift_after_clipped")
                                            for r in rows) else "") + "\n")
    out = io.StringIO()
    fields = list(rows[0]) if rows else ["model"]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return {"md": "\n".join(lines) + "\n" + note, "csv": out.getvalue()}
