"""The detectors' leaderboard over a study's seeds: one row per detector and condition (the
scored model's arm and the samples' arm, the fine-tuning epochs E, the dose), the AUC averaged
over seeds with its seed-level interval (lab.stats.seed_mean_interval, cut to [0, 1]), the
per-model AUCs' range and group sizes, and the mean TPR at 1% and 5% FPR; for the shift check,
the range of the per-model two-sided p. Its input is a study's detect.csv
(lab.analysis.collect.detection_rows).

Where the seeds' AUCs do not differ (all at the ceiling, as 40 members perfectly separated from
40 non-members are, or otherwise equal), a t-interval over seeds collapses to a point; the table
then says what the models showed ("each of 3 models >= 0.996 (40 vs 40)") instead, since perfect
separation of a few dozen samples does not show a true AUC of 1.

Rows scored since issue 60 also carry the arm's contamination form (`lab inject
--contamination-form`): conditions are then told apart by it too (a form other than verbatim
is named in the condition), and the TPR at 0.1% FPR, averaged where every seed's model had
enough non-members for it (lab.detect.run.LOW_FPR_NONMEMBERS) and otherwise n/a with why.
Rows without them render as before."""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from lab.common import LabError
from lab.detect.shift import DETECTABLE_RULE, detectable_shift, rank_null_sd
from lab.stats import (ALPHA, INTERVAL_RULE, checked_interval, interval_reason,
                       seed_mean_interval)

# An AUC that prints as 1.00 (or 0.00) at two decimals: at the ceiling (floor) for the table.
CEILING = 0.995
CONDITION = ("model", "arm", "groups", "epochs", "comparison", "dose", "detector")
FORM = "contamination_form"  # a condition too, in rows that carry it
LOW_FPR_KEY = "tpr_at_0.1pct_fpr"  # lab.detect.run.LOW_FPR_KEY
VERBATIM = "verbatim"


def leaderboard(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    with_form = any(FORM in row for row in rows)
    with_low_fpr = any(LOW_FPR_KEY in row for row in rows)
    for row in rows:
        cells[(*(row.get(k) for k in CONDITION),
               *((row.get(FORM) or VERBATIM,) if with_form else ()))].append(row)
    out = []
    for key, members in cells.items():
        condition = key[:len(CONDITION)]
        aucs = [number(r.get("auc")) for r in members if number(r.get("auc")) is not None]
        # No spread (auc_min == auc_max says so), one seed, a NaN: no interval (INTERVAL_RULE)
        auc, low, high = seed_mean_interval(aucs)
        if low is not None:  # an AUC lies in [0, 1]; so does its interval
            low, high = checked_interval(auc, max(0.0, low), min(1.0, high)) or (None, None)
        one = members[0] if len(members) == 1 else {}
        out.append({**dict(zip(CONDITION, condition)), "seeds": len(members), "auc": auc,
                    "auc_low": low, "auc_high": high,
                    "auc_min": min(aucs) if aucs else None, "auc_max": max(aucs) if aucs else None,
                    # the smallest group sizes over seeds: what "n vs n" may claim
                    **{f"{group}_min": _smallest([r.get(group) for r in members])
                       for group in ("members", "nonmembers")},
                    **(_two_sided_range(members) if condition[CONDITION.index("comparison")]
                       == "shift" else {}),
                    # one seed: the interval over that model's samples instead
                    "auc_sample_low": one.get("auc_sample_low"),
                    "auc_sample_high": one.get("auc_sample_high"),
                    **{f"{name}_mean": _mean([r.get(name) for r in members])
                       for name in ("tpr_at_1pct_fpr", "tpr_at_5pct_fpr")},
                    **({FORM: key[-1]} if with_form else {}),
                    **(_low_fpr(members) if with_low_fpr else {})})
    return out


def _low_fpr(members: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The mean TPR at 0.1% FPR where every seed's model gave one; else n/a and why."""
    values = [number(r.get(LOW_FPR_KEY)) for r in members]
    if values and all(v is not None for v in values):
        return {f"{LOW_FPR_KEY}_mean": sum(values) / len(values), f"{LOW_FPR_KEY}_note": None}
    notes = [r.get(f"{LOW_FPR_KEY}_note") for r in members if r.get(f"{LOW_FPR_KEY}_note")]
    return {f"{LOW_FPR_KEY}_mean": None,
            f"{LOW_FPR_KEY}_note": notes[0] if notes else "n/a (not recorded for every seed)"}


def _smallest(values: Sequence[Any]) -> int | None:
    kept = [int(number(v)) for v in values if number(v) is not None]
    return min(kept) if kept else None


def two_sided_p(row: dict[str, Any]) -> float | None:
    """A shift row's two-sided p. Rows scored since issue 58 hold it (alternative 'two-sided');
    older ones hold the one-sided asymptotic Mann-Whitney p that the test samples score higher
    (scipy, continuity-corrected), from which the two-sided one follows: the standard deviation
    of U (ties included) is backed out of that p, then both tails are taken."""
    from scipy.stats import norm

    p = number(row.get("p"))
    if p is None or row.get("alternative") == "two-sided":
        return p
    auc, n1, n2 = (number(row.get(k)) for k in ("auc", "members", "nonmembers"))
    if auc is None or not n1 or not n2:
        return None
    if row.get("alternative") not in (None, "", "greater"):
        raise LabError(f"detect.csv alternative {row.get('alternative')!r}: expected "
                       "two-sided or greater")
    centre = n1 * n2 / 2
    u = auc * n1 * n2  # the test group's U
    # scipy: p = sf((U - centre - 0.5) / sd) for 'greater'; 2 sf((max(U, n1 n2 - U) - centre
    # - 0.5) / sd) two-sided. Back sd out of p where that is well defined, else no ties.
    z = float(norm.isf(p)) if 0 < p < 1 else 0.0
    no_ties = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    # near z = 0 the ratio is rounding over rounding (and the two-sided p near 1 either way)
    sd = (u - centre - 0.5) / z if abs(z) > 0.05 and (u - centre - 0.5) / z > 0 else no_ties
    return min(1.0, 2 * float(norm.sf((max(u, n1 * n2 - u) - centre - 0.5) / sd)))


def _two_sided_range(members: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    ps = [p for p in (two_sided_p(r) for r in members) if p is not None]
    # what the least sensitive model could have seen: rows scored since issue 69 hold it, an
    # older row's rank test gives it from its group sizes (DETECTABLE_RULE)
    smallest = [number(r.get("detectable_shift")) if number(r.get("detectable_shift"))
                is not None else _rank_detectable(r) for r in members]
    return {"p_two_sided_min": min(ps) if ps else None,
            "p_two_sided_max": max(ps) if ps else None,
            "detectable_shift_max": max(smallest) if smallest and None not in smallest else None}


def _rank_detectable(row: dict[str, Any]) -> float | None:
    sizes = [number(row.get(k)) for k in ("members", "nonmembers")]
    if row.get("test") or not all(sizes):  # a detector's own test: its row states its own
        return None
    return detectable_shift(rank_null_sd(int(sizes[0]), int(sizes[1])))


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.1 else f"{value:.2f}"


def _mean(values: Sequence[Any]) -> float | None:
    kept = [number(v) for v in values if number(v) is not None]
    return sum(kept) / len(kept) if kept else None


def number(value: Any) -> float | None:
    """A number of a leaderboard row, as leaderboard() or its CSV holds it."""
    if value in (None, ""):
        return None
    return float(value)


def _condition(row: dict[str, Any]) -> str:
    scored = row["arm"] if row["arm"] == row["groups"] else f"{row['arm']} on {row['groups']}"
    stage = "pre-trained" if row.get("epochs") in (None, "") else f"E={int(float(row['epochs']))}"
    dose = "" if str(row.get("dose")) in ("all", "") else f", dose {row['dose']}"
    if row.get(FORM) not in (None, "", VERBATIM):
        scored += f" ({row[FORM]})"
    if row.get("comparison") == "shift":
        return f"{row['model']} {scored}, {stage}: held-out test vs valid"
    return f"{row['model']} {scored}, {stage}{dose}"


def leaderboard_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Detectors as rows, conditions as columns: AUC over seeds [its interval]; the legend
    below. `rows` as leaderboard() makes them or as detect_leaderboard.csv holds them."""
    conditions = list(dict.fromkeys(_condition(r) for r in rows))
    detectors = list(dict.fromkeys(r["detector"] for r in rows))
    cell = {(r["detector"], _condition(r)): r for r in rows}
    lines = ["| detector | " + " | ".join(conditions) + " |",
             "|---|" + "---|" * len(conditions)]
    for detector in detectors:
        values = [_cell(cell.get((detector, condition))) for condition in conditions]
        lines.append(f"| {detector} | " + " | ".join(values) + " |")
    seeds = sorted({int(float(r["seeds"])) for r in rows})
    lines += ["", "ROC AUC of telling the samples a model was trained on from those it never saw "
              "(0.5: no signal), averaged over "
              + "/".join(map(str, seeds)) + " seeds, with a Student-t interval over seeds "
              "[in square brackets], cut to [0, 1]; with one seed, (in round brackets) a "
              "percentile bootstrap over that model's samples instead: about the model, not "
              "training runs. 'each of N models >= x (m vs n)': every seed's AUC rounds to 1.00 "
              f"(>= {CEILING}; '<= x' where all round to 0.00; '= x' where all are equal), where a t-interval "
              "over seeds would collapse to a point: x is the smallest (largest) per-model AUC, "
              "m and n the members and non-members each model was scored on; perfect separation "
              "of so few samples does not show a true AUC of 1. 'x in each of N models (spread 0)': the "
              "seeds' AUCs are equal, so there is no interval over them; 'x (m vs n; no spread "
              "over resamples)': one model whose every bootstrap resample gives the same AUC; "
              f"'[n/a (reason)]': {INTERVAL_RULE}. 'arm on groups': a "
              "model that never saw the groups' samples (a control or placebo): it should stay "
              "near 0.5. 'held-out test vs valid': the distribution-shift check, two groups of "
              "samples neither of which the model saw (an AUC away from 0.5 is a detector "
              "reading the split, not membership; below 0.5: the valid samples read as more "
              "member-like), with the range of the per-model two-sided p; where none reaches "
              f"{ALPHA:g}, 'a shift below x is not excluded': x the largest per-model "
              f"detectable |AUC - 0.5| ({DETECTABLE_RULE})."]
    if any(f"{LOW_FPR_KEY}_mean" in r for r in rows):
        lines += ["", _low_fpr_legend(rows)]
    if any(r.get(FORM) not in (None, "", VERBATIM) for r in rows):
        lines += ["", "'arm (form)': the arm's samples were injected in that contamination form "
                      "(`lab inject --contamination-form`); an arm named alone injected them "
                      "verbatim."]
    return "\n".join(lines) + "\n"


def _low_fpr_legend(rows: Sequence[dict[str, Any]]) -> str:
    """The TPR at 0.1% FPR, where every model of a condition had enough non-members."""
    given = [r for r in rows if number(r.get(f"{LOW_FPR_KEY}_mean")) is not None]
    notes = sorted({str(r.get(f"{LOW_FPR_KEY}_note")) for r in rows
                    if number(r.get(f"{LOW_FPR_KEY}_mean")) is None})
    text = ("TPR at 0.1% FPR (detect_leaderboard.csv, tpr_at_0.1pct_fpr_mean): given where "
            "every seed's model had at least 1000 non-members (with fewer, no threshold has an "
            "FPR of 0.1% but 0); ")
    if not given:
        return text + "none here: " + "; ".join(notes) + "."
    return text + f"given for {len(given)} of {len(rows)} rows" + (
        f", n/a for the rest: {'; '.join(notes)}." if notes else ".")


def _cell(row: dict[str, Any] | None) -> str:
    """One condition's AUC as the table prints it (the legend of leaderboard_markdown)."""
    auc = number(row.get("auc")) if row else None
    if auc is None:
        return "-"
    if not math.isfinite(auc):
        return f"n/a ({interval_reason(auc, None, None, 0)})"
    seeds = int(number(row.get("seeds")) or 1)
    smallest, largest = number(row.get("auc_min")), number(row.get("auc_max"))
    sizes = ""
    if row.get("members_min") not in (None, "") and row.get("nonmembers_min") not in (None, ""):
        sizes = f" ({int(number(row['members_min']))} vs {int(number(row['nonmembers_min']))})"
    p_low, p_high = number(row.get("p_two_sided_min")), number(row.get("p_two_sided_max"))
    p_range = ("" if p_low is None else f", p {_p(p_low)}" if p_low == p_high
               else f", p {_p(p_low)}-{_p(p_high)}")
    detectable = number(row.get("detectable_shift_max"))
    if p_low is not None and p_low > ALPHA and detectable is not None:
        p_range += f"; a shift below {detectable:.2f} is not excluded"
    if seeds > 1 and smallest is not None and largest is not None:
        if smallest >= CEILING or largest <= 1 - CEILING:
            bound = ("=" if smallest == largest else ">=" if smallest >= CEILING else "<=")
            edge = smallest if smallest >= CEILING else largest
            return f"each of {seeds} models {bound} {edge:.3f}{sizes}"
        if smallest == largest:
            return f"{auc:.2f} in each of {seeds} models (spread 0){p_range}"
    low, high = number(row.get("auc_low")), number(row.get("auc_high"))
    s_low, s_high = number(row.get("auc_sample_low")), number(row.get("auc_sample_high"))
    if low is None and s_low is not None and s_low == s_high:
        # one model's bootstrap collapses too where every resample separates perfectly
        return f"{auc:.3f} ({sizes.strip(' ()') or 'one model'}; no spread over resamples)" \
               + p_range
    if seeds > 1:
        reason = interval_reason(auc, low, high, seeds)
        interval = f" [n/a ({reason})]" if reason else f" [{low:.2f}, {high:.2f}]"
    elif s_low is None:  # one model, scored before detect.csv kept its samples' interval
        interval = ""
    else:  # one model: its samples' interval, in round brackets
        reason = interval_reason(auc, s_low, s_high, seeds, over_samples=True)
        interval = f" (n/a: {reason})" if reason else f" ({s_low:.2f}-{s_high:.2f})"
    return f"{auc:.2f}{interval}{p_range}"


def rerender(detect_csv: Path) -> tuple[Path, Path]:
    """detect_leaderboard.csv and leaderboard.md beside a study's detect.csv, made anew from it
    (`python -m lab.detect.leaderboard DETECT_CSV`): a committed result re-rendered without its
    study folder."""
    import csv
    import io

    from lab.common import table_cell, write_text_atomic

    detect_csv = Path(detect_csv)
    if not detect_csv.is_file():
        raise LabError(f"DETECT_CSV {detect_csv}: no such file (a study's detect.csv)")
    with detect_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = [c for c in (*CONDITION, "auc") if rows and c not in rows[0]]
    if not rows or missing:
        raise LabError(f"DETECT_CSV {detect_csv}: "
                       + (f"no column {missing[0]}" if rows else "no rows"))
    board = leaderboard(rows)
    columns: list[str] = []
    for row in board:
        columns += [c for c in row if c not in columns]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows({c: table_cell(row.get(c)) for c in columns} for row in board)
    table, markdown = detect_csv.with_name("detect_leaderboard.csv"), detect_csv.with_name(
        "leaderboard.md")
    write_text_atomic(table, text.getvalue())
    write_text_atomic(markdown, leaderboard_markdown(board))
    return table, markdown


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m lab.detect.leaderboard DETECT_CSV")
    try:
        for written in rerender(Path(sys.argv[1])):
            print(written)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
