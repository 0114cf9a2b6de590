"""The blind baseline and the shift check under no shift (issue 69, rows 5 and 6): before and after.

    LAB_CORPORA=../shared/corpora python benchmarks/blind_null.py > benchmarks/blind_null.md

Row 5, the blind baseline (lab.detect.blind) on random halves of CodeTrans test, text only, as
the audit ran it: each replication draws SIZE + SIZE samples of the 1,000 at random (a string
seed per replication), calls the first SIZE members, and scores them in the paired form with
the replication's number as the fold seed. Nothing tells the halves apart, so a test at 0.05
should reject in 5% of replications. Before (the pooled procedure, as lab detect ran it until
issue 69): the cross-fitted scores' rank test (detection_metrics' one-sided p, and the two-sided
Mann-Whitney p the audit counted) and the percentile bootstrap interval of the AUC. After: the
label-permutation test that refits the cross-fitting (blind.permutation_test, with the
permutations a study's detect stage uses, blind.PERMUTATIONS) and its interval.

Row 6, the shift check's rank test (lab.detect.shift) on normal scores: its rejection under no
shift, its power at a 0.3 SD and a 0.5 SD shift, and at the detectable shift it now states
(shift.DETECTABLE_RULE), for 40 + 40 samples (a smoke study's held-out half) and 200 + 200 (a
study's detect.max_samples); the blind baseline's detectable shift from its permutation null.
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import subprocess
import time

from lab.corpora import load_samples
from lab.detect import blind
from lab.detect.context import DetectContext
from lab.detect.run import detection_metrics
from lab.detect.shift import bound, detectable_shift, rank_null_sd, two_sided_p
from lab.stats import ALPHA, POWER

REPLICATIONS = 200  # the acceptance: the blind baseline's null rejection over 200
SIZE = 40  # members and non-members per replication: the audit's (expected AUC SD 0.065)
SHIFT_REPLICATIONS = 2000  # the shift check's rank test is cheap: SE 0.005 at a rate of 0.05
SHIFT_SIZES = (40, 200)
SHIFTS_SD = (0.3, 0.5)  # the audit's shifts, in SDs of the scores


def rate(flags: list[bool]) -> str:
    share = sum(flags) / len(flags)
    return f"{share:.3f} (SE {math.sqrt(share * (1 - share) / len(flags)):.3f})"


def blind_rows(replications: int, size: int, permutations: int) -> list[str]:
    ctx = DetectContext(model=None, tokenizer=None, family="gpt2", form="paired")
    samples = list(load_samples("codetrans", "test", None).records)
    texts = ["\n".join(ctx.documents(s)) for s in samples]
    labels = [True] * size + [False] * size
    pooled_one, pooled_two, pooled_interval, aucs = [], [], [], []
    permuted, permuted_interval, null_sds = [], [], []
    started = time.perf_counter()
    for replication in range(replications):
        drawn = random.Random(f"blind null {replication}").sample(range(len(texts)), 2 * size)
        chosen = [texts[i] for i in drawn]
        scores = blind.cross_fit(chosen, labels, replication)
        metrics = detection_metrics(scores[:size], scores[size:])
        pooled_one.append(metrics["p"] <= ALPHA)
        pooled_two.append(two_sided_p(scores[:size], scores[size:]) <= ALPHA)
        pooled_interval.append(not metrics["auc_sample_low"] <= 0.5 <= metrics["auc_sample_high"])
        aucs.append(metrics["auc"])
        tested = blind.permutation_test(chosen, ["member"] * size + [None] * size, replication,
                                        permutations)[blind.MEMBER]
        assert tested["auc"] == metrics["auc"]  # the same cross-fitting
        permuted.append(tested["p"] <= ALPHA)
        permuted_interval.append(not tested["low"] <= 0.5 <= tested["high"])
        null_sds.append(tested["null_sd"])
    seconds = (time.perf_counter() - started) / replications
    sd = statistics.stdev(aucs)
    null_sd = statistics.fmean(null_sds)
    return [
        f"## Row 5: the blind baseline on random halves of CodeTrans test ({replications} "
        f"replications, {size} + {size} samples, paired form, text only)",
        "",
        "| procedure | rejects at 0.05 | interval leaves out 0.5 |",
        "|---|---|---|",
        f"| before: pooled rank test, one-sided (detection_metrics' p) | {rate(pooled_one)} | "
        f"{rate(pooled_interval)} (percentile bootstrap) |",
        f"| before: pooled rank test, two-sided (the audit's count) | {rate(pooled_two)} | |",
        f"| after: label permutation, refitted ({permutations} permutations) | {rate(permuted)} "
        f"| {rate(permuted_interval)} (AUC +/- the permutation half-width) |",
        "",
        f"AUC over the replications: mean {statistics.fmean(aucs):.3f}, SD {sd:.3f}; the rank "
        f"test assumes SD {rank_null_sd(size, size):.3f} (independent scores); the permutation "
        f"null's SD, mean over replications: {null_sd:.3f}. Detectable shift of the blind "
        f"check at this size ({shift_rule_name()}): |AUC - 0.5| = "
        f"{detectable_shift(null_sd):.3f} (the rank test's would be "
        f"{detectable_shift(rank_null_sd(size, size)):.3f}).",
        f"Time per replication (one cross-fit for before, {permutations + 1} for after): "
        f"{seconds:.2f} s on this machine (shared: load at start {load()}).",
        ""]


def shift_rule_name() -> str:
    return f"{POWER:.0%} power, two-sided alpha {ALPHA:g}"


def shift_rows(replications: int) -> list[str]:
    from scipy.stats import norm

    rows = [f"## Row 6: the shift check's rank test on normal scores ({replications} "
            "replications per cell)", "",
            "| samples | null rejection | power at 0.3 SD | power at 0.5 SD | stated detectable "
            "shift (AUC) | power there |", "|---|---|---|---|---|---|"]
    rng = random.Random("shift check")
    statements = []
    for size in SHIFT_SIZES:
        smallest = detectable_shift(rank_null_sd(size, size))
        cells = []
        for location in (0.0, *SHIFTS_SD, math.sqrt(2) * norm.ppf(0.5 + smallest)):
            cells.append(rate([two_sided_p([rng.gauss(location, 1) for _ in range(size)],
                                           [rng.gauss(0, 1) for _ in range(size)]) <= ALPHA
                               for _ in range(replications)]))
        rows.append(f"| {size} + {size} | {cells[0]} | {cells[1]} | {cells[2]} | "
                    f"0.5 +/- {smallest:.3f} | {cells[3]} |")
        statements.append(f"- {size} + {size}, a non-significant check (after): "
                          + bound(0.46, 0.33, 0.59, 0.52, smallest, (size, size)))
    return rows + ["", "A 0.3 SD shift is AUC "
                   f"{norm.cdf(0.3 / math.sqrt(2)):.3f}, a 0.5 SD shift AUC "
                   f"{norm.cdf(0.5 / math.sqrt(2)):.3f}. Before, a non-significant check read "
                   "'shift AUC 0.46 [0.33, 0.59] (two-sided p 0.52; valid more member-like): a "
                   "shift larger than the interval allows is excluded, not every shift', with "
                   "nothing on what it could have seen. After:", "", *statements, ""]


def load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as handle:
        return handle.read().split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=REPLICATIONS)
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--permutations", type=int, default=blind.PERMUTATIONS)
    parser.add_argument("--shift-replications", type=int, default=SHIFT_REPLICATIONS)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = ["# The blind baseline and the shift check under no shift (issue 69, rows 5 and 6)",
             "", f"`benchmarks/blind_null.py` at {commit}: {__doc__.splitlines()[0]}", ""]
    lines += blind_rows(args.replications, args.size, args.permutations)
    lines += shift_rows(args.shift_replications)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
