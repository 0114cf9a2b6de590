"""The timing study's scored samples by length: per model and seed, each level's median java +
c# characters; then the E = 0 lifts split by sample length: per model and seed, each level's mean
BLEU minus the held-out samples' mean, within the shorter and the longer half of the samples (cut
at the median java + c# characters of the scored injected samples). The levels were drawn at
random and differ in length; this shows whether that explains their difference.

    LAB_CORPORA=... python results/timing/by_length.py results/timing/samples.csv
"""
from __future__ import annotations

import csv
import statistics
import sys

from lab.corpora import load_samples


def main(path: str) -> None:
    test = {s.id: s for s in load_samples("codetrans", "test").records}
    rows = [r for r in csv.DictReader(open(path, newline="")) if r["epochs"] == "0"]

    def length(i: str) -> int:
        return len(test[i].input) + len(test[i].output)

    # The lengths of the scored samples (truncated ones are not scored and carry no level).
    print("| model | seed | early median (n) | late median (n) | held-out median (n) |")
    print("|---|---|---|---|---|")
    for model in sorted({r["model"] for r in rows}):
        for seed in sorted({r["seed"] for r in rows}):
            mine = [r for r in rows if r["model"] == model and r["seed"] == seed]
            cells = []
            for keep in (lambda r: r.get("timing") == "early:0.2",
                         lambda r: r.get("timing") == "late:0.2",
                         lambda r: r["group"] == "held_out"):
                lengths = [length(r["id"]) for r in mine if keep(r)]
                cells.append(f"{statistics.median(lengths):g} ({len(lengths)})")
            print(f"| {model} | {seed} | " + " | ".join(cells) + " |")
    cut = statistics.median(length(r["id"]) for r in rows if r.get("timing"))
    print(f"\ncut: {cut:g} characters\n")
    print("| model | seed | half | early n | late n | early lift | late lift |")
    print("|---|---|---|---|---|---|---|")
    for model in sorted({r["model"] for r in rows}):
        for seed in sorted({r["seed"] for r in rows}):
            mine = [r for r in rows if r["model"] == model and r["seed"] == seed]
            for half, keep in (("short", lambda i: length(i) <= cut),
                               ("long", lambda i: length(i) > cut)):
                held = [float(r["score_bleu"]) for r in mine
                        if r["group"] == "held_out" and keep(r["id"])]
                level = {name: [float(r["score_bleu"]) for r in mine
                                if r.get("timing") == name and keep(r["id"])]
                         for name in ("early:0.2", "late:0.2")}
                lift = {n: f"{statistics.mean(v) - statistics.mean(held):+.1f}" if v else ""
                        for n, v in level.items()}
                print(f"| {model} | {seed} | {half} | {len(level['early:0.2'])} "
                      f"| {len(level['late:0.2'])} | {lift['early:0.2']} | {lift['late:0.2']} |")


if __name__ == "__main__":
    main(sys.argv[1])
