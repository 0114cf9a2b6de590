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
import json
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.stats import no_interval_reason, seed_mean_interval

NONE = "none"  # grid.variants' label of the arm as built
SWEPT = ("form", "decontam")


def _parts(model: str) -> tuple[str, dict[str, str]]:
    """'gpt2/form=renamed/decontam=ngram13' -> ('gpt2', {'form': ..., 'decontam': ...})."""
    base, swept = [], {}
    for part in model.split("/"):
        key, _, value = part.partition("=")
        if key in SWEPT and value:
            swept[key] = value
        else:
            base.append(part)
    return "/".join(base), swept


def removed_samples(study: Path) -> dict[tuple[str, str], dict[str, int]]:
    """(form, method) -> samples meant to be injected and samples the method removed, summed
    over the seeds' contaminated arms (their corpus manifests)."""
    from lab.study.grid import expand
    from lab.study.collect import recorded_recipe

    counts: dict[tuple[str, str], dict[str, int]] = {}
    recipe = recorded_recipe(study)
    for stage in expand(recipe) if recipe is not None else []:
        labels = stage.labels
        if stage.kind != "inject" or "decontam" not in labels or labels["decontam"] == NONE \
                or not settings_table.get(labels["arm"]).injects_test:
            continue
        path = stage.out(study) / "manifest.json"
        if not path.is_file():
            continue  # not run yet: the table counts the arms there are
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LabError(f"{path}: cannot read ({exc})") from None
        record = manifest.get("decontamination") or {}
        key = (labels.get("form", ""), labels["decontam"])
        found = counts.setdefault(key, {"intended": 0, "removed": 0, "arms": 0})
        found["intended"] += len(manifest.get("intended_injected_ids") or [])
        found["removed"] += len(record.get("removed_injected_ids") or [])
        found["arms"] += 1
    return counts


def decontam_lifts(primary: dict[str, Any], removed: dict[tuple[str, str], dict[str, int]]
                   ) -> list[dict[str, Any]]:
    """One row per model, form, E, train size and decontaminator: the lift as built, after,
    and their per-seed difference. [] for a study that does not sweep decontamination."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in primary.get("rows") or []:
        if row["question"] != "split-half":
            continue
        base, swept = _parts(row["model"])
        if "decontam" not in swept:
            continue
        key = (base, swept.get("form", ""), row["arm"], row["metric"], row["epochs"],
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
                "model": base, "form": form or "verbatim", "arm": arm, "metric": metric,
                "epochs": epochs, "train_size": size, "method": method,
                "lift_before": before["estimate"] if before else None,
                "lift_before_low": before.get("ci_low") if before else None,
                "lift_before_high": before.get("ci_high") if before else None,
                "lift_after": after["estimate"], "lift_after_low": after.get("ci_low"),
                "lift_after_high": after.get("ci_high"),
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
              note: str | None = None) -> str:
    if estimate is None:
        return "-"
    if low is None or high is None:
        return f"{estimate:+.2f} [n/a ({note or 'no interval'})]"
    return f"{estimate:+.2f} [{low:+.2f}, {high:+.2f}]"


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
            f"{_interval(r['lift_before'], r['lift_before_low'], r['lift_before_high'], before_note)}"
            f" | {_interval(r['lift_after'], r['lift_after_low'], r['lift_after_high'], before_note)}"
            f" | {_interval(r['difference'], r['difference_low'], r['difference_high'], r['difference_note'])}"
            f" | {'-' if r['left_share'] is None else format(r['left_share'], '.0%')} |")
    metric = rows[0]["metric"] if rows else "the primary metric"
    note = (f"\nLift: the injected samples' mean per-sample {metric} minus the held-out ones' in "
            "the same model (the primary table's split-half row), by intention to treat: a "
            "sample the decontaminator removed stays in the injected group, so the lift after "
            "is what the method failed to remove. Samples removed: those with every copy "
            "removed, summed over the seeds' arms. Intervals over seeds (Student t); "
            "'left' = lift after / lift as built where the latter is positive. "
            + ("Descriptive: the recipe declares no test for these differences, and its seeds "
               "are too few for one to reach its alpha." if descriptive else
               "The primary table's tests (with Holm) are the confirmatory ones; this table "
               "adds no test.") + "\n")
    out = io.StringIO()
    fields = list(rows[0]) if rows else ["model"]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return {"md": "\n".join(lines) + "\n" + note, "csv": out.getvalue()}
