"""The before/after lifts of results/decontam on the samples both models of a seed score as
injected (and held out): the arm as built leaves its injected samples cut at the block size out
of the injected group (injected_truncated), the decontaminated arm, whose long samples were
removed, keeps them in it (intention to treat), so the two injected groups differ by those
samples. Usage: python results/decontam/common_samples.py [results/decontam]"""
import collections
import csv
import statistics
import sys
from pathlib import Path

from lab.stats import seed_mean_interval


def shown(values):
    mean, low, high = seed_mean_interval(values)
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]" if low is not None else f"{mean:+.2f}"


folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
scores = collections.defaultdict(dict)
for r in csv.DictReader(open(folder / "samples.csv", newline="")):
    if r["score_bleu"]:
        scores[(r["model"], r["seed"])][r["id"]] = (r["group"], float(r["score_bleu"]))
seeds = sorted({seed for _model, seed in scores})
print("| form | injected samples in both, per seed | lift as built | lift after | after - as built |")
print("|---|---|---|---|---|")
for form in ("verbatim", "renamed", "reformatted", "partial:0.5"):
    lifts, counts = {"none": [], "ngram13": []}, []
    for seed in seeds:
        built = scores[(f"gpt2/form={form}/decontam=none", seed)]
        after = scores[(f"gpt2/form={form}/decontam=ngram13", seed)]
        both = {g: [i for i in built if built[i][0] == g and after.get(i, ("",))[0] == g]
                for g in ("injected", "held_out")}
        counts.append(len(both["injected"]))
        for method, model in (("none", built), ("ngram13", after)):
            lifts[method].append(statistics.mean(model[i][1] for i in both["injected"])
                                 - statistics.mean(model[i][1] for i in both["held_out"]))
    difference = [a - b for a, b in zip(lifts["ngram13"], lifts["none"])]
    print(f"| {form} | {', '.join(map(str, counts))} | {shown(lifts['none'])} | "
          f"{shown(lifts['ngram13'])} | {shown(difference)} |")
