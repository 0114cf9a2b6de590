"""The loss probe per timing level of a finished timing study: for each pre-trained model, the
ROC AUC of each level's samples against the held-out ones by the probe's per-sample loss (lower
loss: seen), the mean over seeds with a Student-t 95% interval over seeds.

    python results/timing/membership.py STUDY
"""
from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import t as student_t
from sklearn.metrics import roc_auc_score


def main(study: Path) -> None:
    with open(study / "samples.csv", newline="") as handle:
        timing = {(r["model"], r["seed"], r["id"]): r["timing"]
                  for r in csv.DictReader(handle) if r.get("timing")}
    with open(study / "probes.csv", newline="") as handle:
        probes = [r for r in csv.DictReader(handle) if r["loss"]]
    auc: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_model: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in probes:
        by_model[(r["model"], r["seed"])].append(r)
    for (model, seed), rows in sorted(by_model.items()):
        held = [float(r["loss"]) for r in rows if r["group"] == "held_out"]
        for level in sorted({timing.get((model, seed, r["id"])) for r in rows} - {None}):
            mine = [float(r["loss"]) for r in rows if timing.get((model, seed, r["id"])) == level]
            labels = [1] * len(mine) + [0] * len(held)
            auc[(model, level)].append(roc_auc_score(labels, [-x for x in mine + held]))
    print("| model | timing | seeds | loss AUC vs held-out [95% t over seeds] |")
    print("|---|---|---|---|")
    for (model, level), values in sorted(auc.items()):
        mean = statistics.mean(values)
        half = (student_t.ppf(0.975, len(values) - 1) * statistics.stdev(values)
                / len(values) ** 0.5) if len(values) > 1 else float("nan")
        print(f"| {model} | {level} | {len(values)} | {mean:.2f} "
              f"[{max(0.0, mean - half):.2f}, {min(1.0, mean + half):.2f}] |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
