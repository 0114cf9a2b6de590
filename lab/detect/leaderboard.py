"""The detectors' leaderboard over a study's seeds: one row per detector and condition (the
scored model's arm and the samples' arm, the fine-tuning epochs E, the dose), the AUC averaged
over seeds with its seed-level interval (lab.stats.seed_mean_interval, cut to [0, 1]), and the
mean TPR at 1% and 5% FPR. Its input is a study's detect.csv (lab.study.collect.detection_rows)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from lab.stats import seed_mean_interval

CONDITION = ("model", "arm", "groups", "epochs", "comparison", "dose", "detector")


def leaderboard(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        cells[tuple(row.get(k) for k in CONDITION)].append(row)
    out = []
    for condition, members in cells.items():
        auc, low, high = seed_mean_interval([r.get("auc") for r in members])
        if low is not None:  # an AUC lies in [0, 1]; so does its interval
            low, high = max(0.0, low), min(1.0, high)
        one = members[0] if len(members) == 1 else {}
        out.append({**dict(zip(CONDITION, condition)), "seeds": len(members), "auc": auc,
                    "auc_low": low, "auc_high": high,
                    # one seed: the interval over that model's samples instead
                    "auc_sample_low": one.get("auc_sample_low"),
                    "auc_sample_high": one.get("auc_sample_high"),
                    **{f"{name}_mean": _mean([r.get(name) for r in members])
                       for name in ("tpr_at_1pct_fpr", "tpr_at_5pct_fpr")}})
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
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
        values = []
        for condition in conditions:
            row = cell.get((detector, condition))
            auc = number(row.get("auc")) if row else None
            if auc is None:
                values.append("-")
                continue
            low, high = number(row.get("auc_low")), number(row.get("auc_high"))
            s_low, s_high = (number(row.get("auc_sample_low")),
                             number(row.get("auc_sample_high")))
            values.append(f"{auc:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else
                                          f" ({s_low:.2f}-{s_high:.2f})" if s_low is not None
                                          else ""))
        lines.append(f"| {detector} | " + " | ".join(values) + " |")
    seeds = sorted({int(float(r["seeds"])) for r in rows})
    lines += ["", "ROC AUC of telling the samples a model was trained on from those it never saw "
              "(0.5: no signal), averaged over "
              + "/".join(map(str, seeds)) + " seeds, with a Student-t interval over seeds "
              "[in square brackets], cut to [0, 1]; with one seed, (in round brackets) a "
              "percentile bootstrap over that model's samples instead: about the model, not "
              "training runs. 'arm on groups': a model that never saw the groups' samples (a "
              "control or placebo): it should stay near 0.5. 'held-out test vs valid': the "
              "distribution-shift check, two groups of samples neither of which the model saw "
              "(its AUC away from 0.5 is a detector reading the split, not membership)."]
    return "\n".join(lines) + "\n"
