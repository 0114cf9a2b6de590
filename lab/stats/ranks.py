"""Rank statistics: midranks, Cliff's delta, and a detector's or probe's ROC numbers (AUC, its
points, its bootstrap interval, the true positive rate at a low false positive rate).

Apart because they describe how two groups of scores are ordered, with no test over seeds: the
detectors and the memorisation probe read only these, and the tests (lab.stats.significance,
lab.stats.paired) rank with `_doubled_midranks`.
"""
from __future__ import annotations

from typing import Sequence

from lab.stats.intervals import BOOTSTRAP_RESAMPLES


def _doubled_midranks(values: Sequence[float]) -> list[int]:
    """Midranks (1-based, ties averaged) times two: whole numbers, so sums compare exactly."""
    from scipy.stats import rankdata

    return [int(round(2 * r)) for r in rankdata(list(values))]


def cliffs_delta(experimental: Sequence[float], control: Sequence[float]) -> float:
    """P(E > C) - P(E < C) over all pairs: -1 .. 1."""
    greater = sum(1 for e in experimental for c in control if e > c)
    smaller = sum(1 for e in experimental for c in control if e < c)
    return (greater - smaller) / (len(experimental) * len(control))


def membership_auc(injected: Sequence[float], held_out: Sequence[float], higher_is_member: bool
                   ) -> tuple[float | None, float | None]:
    """Within one model, for a memorisation probe: the ROC AUC at telling injected from
    never-seen samples (ties count half) and the one-sided asymptotic Mann-Whitney p that
    injected samples look more seen (many samples a side, so the normal approximation holds)."""
    from scipy.stats import mannwhitneyu

    if not injected or not held_out:
        return None, None
    sign = 1.0 if higher_is_member else -1.0
    a, b = [sign * v for v in injected], [sign * v for v in held_out]
    if len(set(a + b)) == 1:  # no spread at all: no signal, and scipy's test is undefined
        return 0.5, 1.0
    result = mannwhitneyu(a, b, alternative="greater", method="asymptotic")
    return float(result.statistic) / (len(a) * len(b)), float(result.pvalue)


def roc_points(members: Sequence[float], nonmembers: Sequence[float]
               ) -> tuple[list[float], list[float]]:
    """(false positive rates, true positive rates) of calling a sample a member when its score
    is >= t, for t at every distinct score from the highest down, after (0, 0): the points of
    scikit-learn's roc_curve(drop_intermediate=False). Higher scores mean member."""
    import numpy as np

    m, n = np.sort(np.asarray(members, float)), np.sort(np.asarray(nonmembers, float))
    thresholds = np.unique(np.concatenate([m, n]))[::-1]
    tpr = 1.0 - np.searchsorted(m, thresholds, side="left") / len(m)
    fpr = 1.0 - np.searchsorted(n, thresholds, side="left") / len(n)
    return [0.0, *fpr.tolist()], [0.0, *tpr.tolist()]


def roc_auc(members: Sequence[float], nonmembers: Sequence[float]) -> float | None:
    """The probability that a member scores above a non-member, ties counting half (the area
    under roc_points; scikit-learn's roc_auc_score). None without both groups."""
    if not len(members) or not len(nonmembers):
        return None
    from scipy.stats import rankdata

    ranks = rankdata([*members, *nonmembers])
    wins = float(ranks[:len(members)].sum()) - len(members) * (len(members) + 1) / 2
    return wins / (len(members) * len(nonmembers))


def auc_interval(members: Sequence[float], nonmembers: Sequence[float], level: float = 0.95,
                 resamples: int | None = None, seed: int = 0) -> tuple[float, float] | None:
    """A percentile bootstrap interval of roc_auc over the samples, members and non-members
    resampled apart (like SAMPLE_BOOTSTRAP, what the samples say of this one model, not of
    training runs; unexpanded: it keeps its level at a detector's sizes, docs/calibration.md).
    None without both groups."""
    import numpy as np

    if not len(members) or not len(nonmembers):
        return None
    resamples = resamples or BOOTSTRAP_RESAMPLES
    m, n = np.asarray(members, float), np.asarray(nonmembers, float)
    rng = np.random.default_rng(seed)
    drawn_members = rng.integers(0, len(m), (resamples, len(m)))
    drawn_nonmembers = rng.integers(0, len(n), (resamples, len(n)))
    # A resample's AUC counts, for each drawn member, the drawn non-members below it (ties half):
    # with the non-members in sorted order, a running count of how often each was drawn gives
    # that for every member at once, O(resamples x samples) where ranking each resample sorts it.
    order = np.argsort(n, kind="stable")
    position = np.empty(len(n), dtype=int)
    position[order] = np.arange(len(n))
    width = len(n) + 1
    slots = (np.arange(resamples)[:, None] * width + position[drawn_nonmembers] + 1).ravel()
    drawn_below = np.cumsum(np.bincount(slots, minlength=resamples * width)
                            .reshape(resamples, width), axis=1)
    below = np.searchsorted(n[order], m, side="left")[drawn_members]
    at_or_below = np.searchsorted(n[order], m, side="right")[drawn_members]
    wins = (np.take_along_axis(drawn_below, below, axis=1)
            + np.take_along_axis(drawn_below, at_or_below, axis=1)).sum(axis=1) / 2
    aucs = wins / (len(m) * len(n))
    low, high = np.percentile(aucs, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(low), float(high)


def tpr_at_fpr(members: Sequence[float], nonmembers: Sequence[float], fpr: float
               ) -> float | None:
    """The highest true positive rate of a threshold whose false positive rate is at most `fpr`
    (Carlini et al., "Membership Inference Attacks From First Principles", S&P 2022: the
    low-FPR regime an attack is judged by). None without both groups."""
    if not len(members) or not len(nonmembers):
        return None
    rates, hits = roc_points(members, nonmembers)
    return max(t for f, t in zip(rates, hits) if f <= fpr + 1e-12)
