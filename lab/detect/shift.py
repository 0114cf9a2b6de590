"""The validation samples `lab detect` sets against test samples, and the distribution-shift check.

Two uses, one draw. The shift check scores never-seen test samples (a split-half arm's held-out
half) against never-seen validation samples: the model saw neither, so a detector that tells them
apart reads the split, not membership. An arm with no held-out half, and an outside audit, set
their members against validation samples instead; the shift check is what says how much of such
an AUC a split difference alone can give.

The draw (length_matched_draw): from every eligible validation sample (lab.detect.probe's
reference_samples finds them: disjoint from every test sample), one per target sample, each
target (in an order shuffled by the seed) taking at random one of the MATCH_CANDIDATES unused
eligible samples nearest to it in length (characters of the documents it is scored as), without
replacement. Length drives the likelihood detectors' scores, and the valid split's samples are
longer than the test split's, so an unmatched draw confounds the check with length. The seed is
the scored model's (its pre-training seed, the study's seed): each seed draws afresh, so an
interval over seeds includes the draw's variation, and the same seed draws the same samples.

The test (shift_metrics): two-sided. A shift in either direction is a problem: test samples
that read as more member-like than valid ones make an audit of test against valid samples
overstate contamination, valid samples that read as more member-like make it understate it.

What it could have seen (detectable_shift, DETECTABLE_RULE): a check of 40 against 40 samples
misses a 0.3 SD shift most of the time (issue 69: power 0.10-0.25), so a p above alpha is no
reassurance by itself. Every reading states the smallest shift the check had POWER to detect
at its sample size, and a non-significant one says only that a shift below it is not excluded.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Any, Sequence

from lab.contamination.settings import form_documents
from lab.stats import ALPHA, POWER, interval_reason

# Each target picks at random among this many nearest unused valid samples: 1 would make every
# seed's draw nearly the same (the draw's variation would again be left out of the interval over
# seeds); more loosens the match. 5 keeps the median length gap small on a pool of hundreds.
MATCH_CANDIDATES = 5
# The name of the draw: part of a study's detect stage key, so that stages scored with an
# earlier draw are not taken for this one's: one fixed set of validation samples for every seed,
# unmatched in length, and a one-sided shift test (no draw in the key); then "length-matched, per
# seed", whose pool left out the scored model's own placebo samples only, so a placebo and its
# arm drew different samples (lab.detect.probe.SHARED_POOL_RULE).
DRAW = "length-matched, per seed, one pool per seed"
DETECTABLE_RULE = (f"the smallest |AUC - 0.5| the check detects with {POWER:.0%} power at "
                   f"two-sided alpha {ALPHA:g}: (z(1 - alpha/2) + z(power)) x the AUC's standard "
                   "deviation under no shift (normal approximation); for the rank test that SD "
                   "is sqrt((n1 + n2 + 1) / (12 n1 n2)), for a detector with its own permutation "
                   "test (the blind baseline) the SD of its permutation AUCs")
DRAW_RULE = (f"each target sample, in an order shuffled by the seed, takes at random one of the "
             f"{MATCH_CANDIDATES} unused eligible validation samples nearest to it in length "
             "(characters of its scored documents); without replacement")


def scored_length(sample: Any, form: str) -> int:
    """Characters of the documents the sample is scored as in `form`."""
    return sum(len(text) for _side, text in form_documents(form, sample))


def length_summary(lengths: Sequence[int]) -> dict[str, Any]:
    """n, median, mean, quartiles and range of a group's lengths (None-valued when empty)."""
    if not lengths:
        return {"n": 0, "median": None, "mean": None, "q1": None, "q3": None, "min": None,
                "max": None}
    ordered = sorted(lengths)
    quartiles = (statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1
                 else [ordered[0]] * 3)
    return {"n": len(ordered), "median": statistics.median(ordered),
            "mean": round(statistics.fmean(ordered), 1), "q1": quartiles[0], "q3": quartiles[2],
            "min": ordered[0], "max": ordered[-1]}


def draw_rng(seed: int) -> random.Random:
    """The draw's generator: a string seed, so it is the same in every Python process."""
    return random.Random(f"lab.detect.shift:{seed}")


def length_matched_draw(pool: Sequence[Any], targets: Sequence[Any], seed: int, form: str
                        ) -> tuple[list[Any], dict[str, Any]]:
    """One pool sample per target, matched in length (DRAW_RULE), returned in the pool's order,
    with the record a manifest keeps: the seed, the rule and the lengths of the targets, the
    whole pool (before matching) and the drawn samples (after). The whole pool when it holds no
    more samples than there are targets."""
    rng = draw_rng(seed)
    lengths = [scored_length(s, form) for s in pool]
    target_lengths = [scored_length(s, form) for s in targets]
    if len(pool) <= len(targets):
        picked = list(range(len(pool)))
    else:
        unused = sorted(range(len(pool)), key=lambda i: lengths[i])
        picked = []
        for target in rng.sample(target_lengths, len(target_lengths)):
            nearest = sorted(unused, key=lambda i: abs(lengths[i] - target))[:MATCH_CANDIDATES]
            choice = rng.choice(nearest)
            unused.remove(choice)
            picked.append(choice)
    picked.sort()
    drawn = [pool[i] for i in picked]
    record = {"seed": seed, "rule": DRAW_RULE, "pool": len(pool), "requested": len(targets),
              "count": len(drawn), "fewer_eligible": len(pool) < len(targets),
              "lengths": {"unit": f"characters of the {form} form's documents",
                          "targets": length_summary(target_lengths),
                          "pool_before_matching": length_summary(lengths),
                          "drawn_after_matching": length_summary([lengths[i] for i in picked])}}
    return drawn, record


def two_sided_p(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided asymptotic Mann-Whitney p that the groups' scores differ in either direction
    (1.0 when every score is the same; None without both groups)."""
    from scipy.stats import mannwhitneyu

    if not len(first) or not len(second):
        return None
    if len(set(first) | set(second)) == 1:  # no spread: no shift, and scipy's test is undefined
        return 1.0
    return float(mannwhitneyu(list(first), list(second), alternative="two-sided",
                              method="asymptotic").pvalue)


def direction(auc: float | None) -> str | None:
    """Which group the detector scores as more member-like (AUC of test against valid)."""
    if auc is None:
        return None
    return ("test more member-like" if auc > 0.5 else "valid more member-like" if auc < 0.5
            else "neither")


def rank_null_sd(first: int, second: int) -> float:
    """The AUC's (Mann-Whitney U / (n1 n2)) standard deviation when two groups of these sizes
    do not differ (no ties)."""
    return math.sqrt((first + second + 1) / (12 * first * second))


def detectable_shift(null_sd: float) -> float:
    """The smallest |AUC - 0.5| a two-sided test at ALPHA detects with POWER (DETECTABLE_RULE),
    given the AUC's standard deviation under no shift."""
    from scipy.stats import norm

    return (norm.ppf(1 - ALPHA / 2) + norm.ppf(POWER)) * null_sd


def bound(auc: float | None, low: float | None, high: float | None, p: float | None,
          detectable: float | None = None, sizes: tuple[int, int] | None = None) -> str:
    """The check's reading, never 'no shift': the AUC with its interval and p; significant, a
    shift found; otherwise, with `detectable` (detectable_shift: the smallest |AUC - 0.5| the
    check had POWER to see with `sizes` samples), that a shift below it is not excluded."""
    if auc is None:
        return "no shift check: a group is empty"
    # every resample giving one AUC: no interval (lab.stats.INTERVAL_RULE); none recorded: none
    reason = interval_reason(auc, low, high, 1, over_samples=True) if low is not None else None
    interval = ("" if low is None else f" [n/a ({reason})]" if reason else
                f" [{low:.2f}, {high:.2f}]")
    reading = (f"shift AUC {auc:.2f}{interval} (two-sided p {p:.2g}; {direction(auc)})"
               if p is not None else f"shift AUC {auc:.2f}{interval} ({direction(auc)})")
    if p is not None and p <= ALPHA:
        return reading + f": a shift (p <= {ALPHA:g})"
    if detectable is None:
        return reading
    samples = f" with {sizes[0]} vs {sizes[1]} samples" if sizes else ""
    return (reading + f": not significant; a shift below |AUC - 0.5| = {detectable:.2f} (AUC "
            f"{0.5 - detectable:.2f}-{0.5 + detectable:.2f}) is not excluded, the smallest this "
            f"check had {POWER:.0%} power to detect{samples}")


def shift_metrics(metrics: dict[str, Any], test: Sequence[float], valid: Sequence[float],
                  p: float | None = None, null_sd: float | None = None) -> dict[str, Any]:
    """A detector's membership metrics (lab.detect.run.detection_metrics) of the test samples
    against the valid ones, made the shift check's: p two-sided (the rank test's, unless the
    detector's own test gives `p` and the AUC's SD under no shift, `null_sd`), the direction,
    the detectable shift (DETECTABLE_RULE) and the bound."""
    if p is None:
        p = two_sided_p(test, valid)
    if null_sd is None and len(test) and len(valid):
        null_sd = rank_null_sd(len(test), len(valid))
    detectable = detectable_shift(null_sd) if null_sd is not None else None
    return {**metrics, "p": p, "alternative": "two-sided", "direction": direction(metrics["auc"]),
            "detectable_shift": detectable,
            "bound": bound(metrics["auc"], metrics.get("auc_sample_low"),
                           metrics.get("auc_sample_high"), p, detectable,
                           (len(test), len(valid)))}
