"""The detectors' leaderboard over a study's seeds: one row per detector and condition (the
scored model's arm and the samples' arm, the fine-tuning epochs E, the dose), the AUC averaged
over seeds with its seed-level interval (lab.stats.seed_mean_interval, cut to [0, 1]), and the
mean TPR at 1% and 5% FPR. Its input is a study's detect.csv (lab.study.collect.detection_rows)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from lab.stats import seed_mean_interval

CONDITION = ("model", "arm", "groups", "epochs", "dose", "detector")


def leaderboard(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        cells[tuple(row.get(k) for k in CONDITION)].append(row)
    out = []
    for condition, members in cells.items():
        auc, low, high = seed_mean_interval([r.get("auc") for r in members])
        if low is not None:  # an AUC lies in [0, 1]; so does its interval
            low, high = max(0.0, low), min(1.0, high)
        out.append({**dict(zip(CONDITION, condition)), "seeds": len(members), "auc": auc,
                    "auc_low": low, "auc_high": high,
                    **{f"{name}_mean": _mean([r.get(name) for r in members])
                       for name in ("tpr_at_1pct_fpr", "tpr_at_5pct_fpr")}})
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None
