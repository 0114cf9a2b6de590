"""What decontamination leaves of the lift: per contamination form, the split-half lift
(injected vs held-out samples of one model) of the arm as built, of the same arm after each
decontaminator and of its oracle arm (recipe `injection.decontaminate_with: [null, oracle,
METHOD, ...]`, swept with `injection.contamination_form`; lab.study.grid.variants).
STUDY/report/decontam.md and .csv.

The injected group of a decontaminated arm is the samples meant to be injected, those the
method removed too (intention to treat, lab.eval.generate.assigned_injected_ids). A removed copy
is replaced by a placebo copy of the same form and length (lab.contamination.decontaminated), so
every arm of a form sees as much of the target language; the oracle arm has every injected copy
replaced so, and its lift is what an arm with nothing leaked still shows (near 0). Per seed:

- residual inflation = lift(decontaminated) - lift(oracle): what the method failed to remove;
- removed = lift(as built) - lift(decontaminated): what it removed;
- fraction removed = removed / (lift(as built) - lift(oracle)), the ratio of the seed means,
  with Fieller's interval (the ratios whose paired per-seed difference numerator - ratio x
  denominator a t-test over seeds keeps), given only where the denominator's own interval
  excludes 0 (else it is unbounded). No fraction where the method removed every copy ("all
  removed": the arm then differs from the oracle's only in its refilled base documents).

The arms of one seed split the same samples the same way (the split is seeded by the seed and
the samples, not by the form or the method), so each difference is taken seed by seed, with its
interval over seeds (lab.stats.seed_mean_interval); every figure is descriptive where the recipe
says so. The residual is also the primary question `residual` (lab.analysis.questions): its
exact sign-flip p over the same per-seed residuals, and Holm's over the primary family, stand
beside it; in a descriptive study, with the power the study was planned with (study.json's
planned_power: per test at its seeds, and the seeds that give 80%).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from lab.stats import (CLIPPED_LEGEND, bounds_text, checked_interval, no_interval_reason,
                       seed_mean_interval)
from lab.analysis.collect import REMOVED, SAMPLES
from lab.analysis.questions import NOT_DECONTAMINATED as NONE, ORACLE, swept_labels
from lab.analysis.report_data import read_csv
LEVEL = 0.95
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
    """One row per model, form, E, train size and decontaminator (the oracle's too): the lift
    as built, after and of the oracle, and the per-seed estimands (module docstring). [] for a
    study that does not sweep decontamination."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    tested = _residual_tests(primary)
    # Every row gets the test's columns where any has them (the CSV's header is the first row's).
    untested = dict.fromkeys(next(iter(tested.values())), None) if tested else {}
    for row in _rows_of(primary, "split-half"):
        base, swept = swept_labels(row["model"])
        if "decontam" not in swept:
            continue
        key = (base, swept.get("form", "verbatim"), row["arm"], row["metric"], row["epochs"],
               row["train_size"])
        cells.setdefault(key, {})[swept["decontam"]] = row
    out = []
    for (base, form, arm, metric, epochs, size), by_method in sorted(
            cells.items(), key=lambda item: tuple(str(k) for k in item[0])):
        before, oracle = by_method.get(NONE), by_method.get(ORACLE)
        for method, after in sorted(by_method.items()):
            if method == NONE:
                continue
            count = removed.get((form, method), {})
            out.append({
                "model": base, "form": form, "arm": arm, "metric": metric,
                "epochs": epochs, "train_size": size, "method": method,
                **_lift("lift_before", before), **_lift("lift_after", after),
                **_lift("lift_oracle", oracle),
                **estimands(before, after, oracle if method != ORACLE else None,
                            all_removed=bool(count.get("intended"))
                            and count.get("removed") == count.get("intended")),
                "samples_intended": count.get("intended"), "samples_removed": count.get("removed"),
                "unit": after.get("unit"),
                **tested.get((after["model"], arm, metric, epochs, size), untested),
            })
    return out


def _rows_of(primary: dict[str, Any], question: str) -> list[dict[str, Any]]:
    """The primary table's rows of one question: the family's, else (a question the study did
    not declare) the exploratory ones."""
    for role in ("rows", "exploratory"):
        found = [r for r in primary.get(role) or [] if r["question"] == question]
        if found:
            return found
    return []


def _residual_tests(primary: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """(decontaminated model, arm, metric, E, train size) -> the residual question's test of
    it: p, Holm's p over the primary family (None outside it) and whether it is starred."""
    family = any(r["question"] == "residual" for r in primary.get("rows") or [])
    return {(r["model"], r["arm"], r["metric"], r["epochs"], r["train_size"]): {
        "residual_p": r.get("p"), "residual_p_holm": r.get("p_holm") if family else None,
        "residual_significant": bool(r.get("significant")), "residual_primary": family,
        "residual_floor": r.get("floor"), "residual_missing": r.get("missing")} for r in _rows_of(primary, "residual")}


def _lift(name: str, row: dict[str, Any] | None) -> dict[str, Any]:
    """A primary row's lift, its interval and the bound it cut (lab.stats.clipped_side)."""
    return {name: row["estimate"] if row else None,
            f"{name}_low": row.get("ci_low") if row else None,
            f"{name}_high": row.get("ci_high") if row else None,
            f"{name}_clipped": row.get("ci_clipped") if row else None}


def _per_seed(minuend: dict[str, Any] | None, subtrahend: dict[str, Any] | None
              ) -> dict[Any, float]:
    """seed -> minuend's lift - subtrahend's, over the seeds both have."""
    if not minuend or not subtrahend:
        return {}
    first, second = minuend.get("seed_effects") or {}, subtrahend.get("seed_effects") or {}
    return {s: first[s] - second[s] for s in sorted(set(first) & set(second), key=str)
            if first[s] is not None and second[s] is not None}


def _mean(name: str, values: dict[Any, float], missing: str) -> dict[str, Any]:
    """A per-seed estimand's mean over seeds, its interval, why it has none, its seeds."""
    mean, low, high = seed_mean_interval(list(values.values()), LEVEL)
    note = (no_interval_reason(list(values.values())) if values else missing)
    return {name: mean, f"{name}_low": low, f"{name}_high": high, f"{name}_note": note,
            f"{name}_seeds": len(values)}


def estimands(before: dict[str, Any] | None, after: dict[str, Any], oracle: dict[str, Any] | None,
              all_removed: bool) -> dict[str, Any]:
    """Residual inflation, removed and fraction removed (module docstring) of one method's row
    against the arm as built (`before`) and the oracle (None: the study has none, or this row is
    the oracle's own)."""
    residual = _per_seed(after, oracle)
    taken = _per_seed(before, after)
    out = {**_mean("residual", residual, "no oracle arm" if oracle is None else "no seed"),
           **_mean("removed", taken, "no arm as built" if before is None else "no seed")}
    if all_removed:
        return {**out, "fraction_removed": None, "fraction_removed_low": None,
                "fraction_removed_high": None, "fraction_removed_note": "all removed"}
    leak = _per_seed(before, oracle)
    seeds = [s for s in taken if s in leak]
    fraction, low, high, note = ratio_of_means([taken[s] for s in seeds],
                                               [leak[s] for s in seeds])
    if oracle is None:
        note = "no oracle arm"
    return {**out, "fraction_removed": fraction, "fraction_removed_low": low,
            "fraction_removed_high": high, "fraction_removed_note": note}


def ratio_of_means(numerators: list[float], denominators: list[float], level: float = LEVEL
                   ) -> tuple[float | None, float | None, float | None, str | None]:
    """(mean numerator / mean denominator, low, high, why none) over paired seeds.
    Fieller's interval: the ratios r for which a t-test over seeds keeps the mean of
    numerator - r x denominator at 0; bounded exactly where the denominator's own t interval
    excludes 0. Where it holds 0 the seeds cannot tell the leak's lift from none, so no ratio is
    given at all (a point estimate there is a quotient of noise), only the reason."""
    import math

    from scipy.stats import t as t_distribution

    n = len(numerators)
    if not n:
        return None, None, None, "no seed"
    a, b = sum(numerators) / n, sum(denominators) / n
    if b == 0:
        return None, None, None, "as built - oracle is 0"
    ratio = a / b
    if n < 2:
        return ratio, None, None, no_interval_reason(numerators)
    q = t_distribution.ppf((1 + level) / 2, n - 1) ** 2 / n
    s_aa = sum((x - a) ** 2 for x in numerators) / (n - 1)
    s_bb = sum((y - b) ** 2 for y in denominators) / (n - 1)
    s_ab = sum((x - a) * (y - b) for x, y in zip(numerators, denominators)) / (n - 1)
    quad = b * b - q * s_bb
    if quad <= 0:
        return None, None, None, "the interval of as built - oracle holds 0"
    linear = -2 * (a * b - q * s_ab)
    constant = a * a - q * s_aa
    root = math.sqrt(max(linear * linear - 4 * quad * constant, 0.0))
    bounds = checked_interval(ratio, (-linear - root) / (2 * quad), (-linear + root) / (2 * quad))
    if bounds is None:
        return ratio, None, None, "zero spread"
    return ratio, bounds[0], bounds[1], None


def _interval(estimate: float | None, low: float | None, high: float | None,
              note: str | None = None, cut: str | None = None) -> str:
    if estimate is None:
        return "-" if note is None else f"- ({note})"
    if low is None or high is None:
        return f"{estimate:+.2f} [n/a ({note or 'no interval'})]"
    return f"{estimate:+.2f} {bounds_text(low, high, cut)}"


def _residual_note(descriptive: bool, power: dict[str, Any] | None) -> str:
    """What the residual test column is."""
    text = ("Residual test: the primary question `residual`, the exact sign-flip test of the "
            "per-seed residuals (lab.analysis.questions), p and Holm's p over the primary "
            "family ('*': at most alpha). ")
    if not descriptive:
        return text
    at = (f" (per test, Holm over its {power['tests']} tests, {power['alternative']} alpha "
          f"{power['alpha']:g}, at statistics.smallest_effect {power['effect']:g} and "
          f"planning_sd {power['sd']:g})" if power else "")
    target = f"{power['target']:g}" if power else "0.8"
    return (text + "Descriptive (statistics.descriptive): nothing is starred; the power is the "
            f"study's planned power{at}, with the seeds it would take for {target}.")


def fraction_text(r: dict[str, Any]) -> str:
    """The fraction removed as a number (never a share): 'all removed' where the method removed
    every copy, the number and a note where it falls outside [0, 1]."""
    if r["method"] == ORACLE:
        return "(the floor)"
    note = r.get("fraction_removed_note")
    fraction = r.get("fraction_removed")
    if note == "all removed":
        return "all removed"
    if fraction is None:
        return f"n/a ({note})" if note else "-"
    text = _interval(fraction, r.get("fraction_removed_low"), r.get("fraction_removed_high"), note)
    return text + (" (outside [0, 1])" if not 0 <= fraction <= 1 else "")


def power_text(power: dict[str, Any] | None) -> str:
    """The power a study was planned with (lab.analysis.questions.planned_power, study.json's
    planned_power) in a few words: 'power 0.00 at 3 seeds; 16 seeds for 0.8'."""
    if not power:
        return "power not recorded"
    needed = (f"{power['seeds_for_target']} seeds for {power['target']:g}"
              if power.get("seeds_for_target") else
              f"more than {power.get('searched_to')} seeds for {power['target']:g}")
    return f"power {power['power']:.2f} at {power['seeds']} seeds; {needed}"


def residual_test_text(r: dict[str, Any], descriptive: bool,
                       power: dict[str, Any] | None = None) -> str:
    """The residual question's test of a row (lab.analysis.questions: `residual`): its p and
    Holm's p over the primary family (starred where it reaches alpha), '(exploratory)' where
    the study declared other questions; in a descriptive study the planned power beside it."""
    if r["method"] == ORACLE or "residual_p" not in r:
        return "-"
    if r.get("residual_missing"):  # the primary table's reason (the metric's floor, ...)
        return r["residual_missing"]
    if r.get("residual_p") is None:  # one seed: no test over seeds
        seeds = r.get("residual_seeds") or 0
        return f"no test ({seeds} seed{'' if seeds == 1 else 's'})"
    holm = r.get("residual_p_holm")
    text = f"p {r['residual_p']:.3g}" + (
        f", Holm {holm:.3g}{'*' if r.get('residual_significant') else ''}"
        if holm is not None else " (exploratory)")
    return text + (f"; descriptive: {power_text(power)}" if descriptive else "")


def decontam_table(rows: list[dict[str, Any]], descriptive: bool,
                   power: dict[str, Any] | None = None) -> dict[str, str]:
    """report/decontam.md (one line per form and decontaminator) and decontam.csv. Where the
    primary table tests the residual (the study has an oracle arm), its p stands beside it;
    `power`: the power the study was planned with, stated where it is descriptive."""
    tested = any("residual_p" in r for r in rows)
    lines = ["| model | form | E | decontaminator | samples removed | lift as built [CI] | "
             "lift after [CI] | oracle lift [CI] | residual = after - oracle [CI] | "
             + ("residual test | " if tested else "")
             + "removed = as built - after [CI] | fraction removed [CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if tested else "")]
    for r in rows:
        removed = ("-" if r["samples_intended"] is None else
                   f"{r['samples_removed']} of {r['samples_intended']}")
        one_seed = "1 seed" if r["removed_seeds"] == 1 else None
        residual = ("-" if r["method"] == ORACLE else
                    _interval(r["residual"], r["residual_low"], r["residual_high"],
                              r["residual_note"]))
        lines.append(
            f"| {r['model']} | {r['form']} | {r['epochs']} | {r['method']} | {removed} | "
            f"{_interval(r['lift_before'], r['lift_before_low'], r['lift_before_high'], one_seed, r.get('lift_before_clipped'))}"
            f" | {_interval(r['lift_after'], r['lift_after_low'], r['lift_after_high'], one_seed, r.get('lift_after_clipped'))}"
            f" | {_interval(r['lift_oracle'], r['lift_oracle_low'], r['lift_oracle_high'], one_seed, r.get('lift_oracle_clipped'))}"
            f" | {residual}"
            + (f" | {residual_test_text(r, descriptive, power)}" if tested else "")
            + f" | {_interval(r['removed'], r['removed_low'], r['removed_high'], r['removed_note'])}"
            f" | {fraction_text(r)} |")
    metric = rows[0]["metric"] if rows else "the primary metric"
    note = (f"\nLift: the injected samples' mean per-sample {metric} minus the held-out ones' in "
            "the same model (the primary table's split-half row), by intention to treat: a "
            "sample the decontaminator removed stays in the injected group. A removed copy is "
            "replaced by a placebo copy (a non-test benchmark pair of the same form and length), "
            "so every arm of a form sees as much of the target language; the oracle arm has "
            "every injected copy replaced so, and its lift is what an arm with nothing leaked "
            "still shows. Per seed: residual inflation = lift after - oracle lift (what the "
            "method failed to remove), removed = lift as built - lift after, fraction removed = "
            "removed / (lift as built - oracle lift), the ratio of the seed means with Fieller's "
            "interval, given only where the denominator's interval excludes 0 (else the seeds "
            "cannot tell the leak's lift from none, and n/a says so); a number, not a share: "
            "outside [0, 1] it is noise or a method that took more than the leak, and where the "
            "method removed every copy none is given (all removed). Samples removed: those of "
            "the injected group whose every copy the method removed, of the group's evaluated "
            "samples, summed over seeds. Intervals over seeds (Student t). "
            + ("This study has no oracle arm (`oracle` not among injection.decontaminate_with; "
               "a study made before it refilled removed copies with base documents, which took "
               "the target language away with the leak): no residual and no fraction. "
               if not any(r["method"] == ORACLE for r in rows) else "")
            + (_residual_note(descriptive, power) if tested else
               "Descriptive: the recipe declares no test for these differences, and its seeds "
               "are too few for one to reach its alpha." if descriptive else
               "The primary table's tests (with Holm) are the confirmatory ones; this table "
               "adds no test.")
            + (f" {CLIPPED_LEGEND}." if any(r.get("lift_before_clipped") or r.get("lift_after_clipped")
                                            or r.get("lift_oracle_clipped") for r in rows) else "")
            + "\n")
    out = io.StringIO()
    fields = list(rows[0]) if rows else ["model"]
    if power and tested:
        rows = [{**r, "residual_power": power.get("power"),
                 "residual_seeds_for_power": power.get("seeds_for_target")} for r in rows]
        fields += ["residual_power", "residual_seeds_for_power"]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return {"md": "\n".join(lines) + "\n" + note, "csv": out.getvalue()}
