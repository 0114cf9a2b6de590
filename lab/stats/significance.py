"""Tests of two groups and over seeds: Mann-Whitney U under a convention (exact with ties by
counting every split), the secondary comparison (`compare`: U, p, Cliff's delta, the Welch lift
interval), and the exact sign-flip permutation test of per-seed effects.

These are the tests a study's tables and questions report; the paired designs built on them
(lab.stats.paired) and the power planner that simulates the sign-flip test (lab.stats.power)
import them from here.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from lab.common import LabError
from lab.stats.conventions import CONVENTIONS, DEFAULT_CONVENTION
from lab.stats.intervals import lift_interval
from lab.stats.ranks import _doubled_midranks, cliffs_delta


EXACT_SPLITS = 10 ** 6  # tied scores: enumerate up to this many splits, beyond it asymptotic
PERMUTATION_TIES = "exact permutation (ties)"  # the method named when ties were kept exactly
ASYMPTOTIC_TIES = "asymptotic (ties; too many splits to enumerate)"


@dataclass(frozen=True)
class Comparison:
    n_experimental: int
    n_control: int
    mean_experimental: float
    mean_control: float
    lift: float
    lift_pct: float | None
    u: float
    p: float
    alternative: str
    method: str
    cliffs_delta: float
    a12: float
    lift_ci: tuple[float, float] | None  # None where INTERVAL_RULE says none can be estimated

    def convention(self) -> str:
        return f"Mann-Whitney U, {self.alternative}, {self.method}"


def mann_whitney(experimental: Sequence[float], control: Sequence[float],
                 convention: str = DEFAULT_CONVENTION) -> tuple[float, float, str, str]:
    """(U of the experimental group, p, alternative, method actually used)."""
    from scipy.stats import mannwhitneyu

    if convention not in CONVENTIONS:
        raise LabError(f"statistics convention '{convention}': choose from {', '.join(CONVENTIONS)}")
    if len(experimental) < 1 or len(control) < 1:
        raise LabError("Mann-Whitney U needs at least one value in each group")
    alternative, method = CONVENTIONS[convention]
    has_ties = len(set(experimental) | set(control)) < len(experimental) + len(control)
    if method == "exact" and has_ties:
        # scipy's exact distribution assumes no ties, and the normal approximation is
        # anti-conservative for a handful of seeds: count the splits instead, where they are few.
        if math.comb(len(experimental) + len(control), len(experimental)) <= EXACT_SPLITS:
            u, p = permutation_mann_whitney(experimental, control, alternative)
            return u, p, alternative, PERMUTATION_TIES
        result = mannwhitneyu(list(experimental), list(control), alternative=alternative,
                              method="asymptotic")
        return float(result.statistic), float(result.pvalue), alternative, ASYMPTOTIC_TIES
    result = mannwhitneyu(list(experimental), list(control), alternative=alternative, method=method)
    return float(result.statistic), float(result.pvalue), alternative, method


def permutation_mann_whitney(experimental: Sequence[float], control: Sequence[float],
                             alternative: str = "two-sided") -> tuple[float, float]:
    """(U of the experimental group, p) from the exact permutation distribution of U with ties
    kept as midranks: every one of the C(n1 + n2, n1) splits of the pooled scores counted once
    (by subset sums of the ranks, not one by one). Two-sided: the splits whose U is at least as
    far from its mean n1 n2 / 2 as the observed one; 'greater' / 'less': U at least / at most the
    observed."""
    n1, n2 = len(experimental), len(control)
    if n1 < 1 or n2 < 1:
        raise LabError("Mann-Whitney U needs at least one value in each group")
    ranks = _doubled_midranks(list(experimental) + list(control))
    # counts[j][s]: subsets of j of the items seen so far whose doubled ranks sum to s.
    counts: list[dict[int, int]] = [defaultdict(int) for _ in range(n1 + 1)]
    counts[0][0] = 1
    for seen, rank in enumerate(ranks):
        for j in range(min(seen + 1, n1), 0, -1):
            for total, ways in list(counts[j - 1].items()):
                counts[j][total + rank] += ways
    observed = sum(ranks[:n1])
    centre = n1 * (n1 + n2 + 1)  # the doubled rank sum's mean
    if alternative == "greater":
        hits = sum(w for s, w in counts[n1].items() if s >= observed)
    elif alternative == "less":
        hits = sum(w for s, w in counts[n1].items() if s <= observed)
    elif alternative == "two-sided":
        hits = sum(w for s, w in counts[n1].items() if abs(s - centre) >= abs(observed - centre))
    else:
        raise LabError(f"alternative '{alternative}': choose two-sided, greater or less")
    u = observed / 2 - n1 * (n1 + 1) / 2
    return u, hits / math.comb(n1 + n2, n1)


def compare(experimental: Sequence[float], control: Sequence[float],
            convention: str = DEFAULT_CONVENTION) -> Comparison:
    u, p, alternative, method = mann_whitney(experimental, control, convention)
    mean_e = sum(experimental) / len(experimental)
    mean_c = sum(control) / len(control)
    delta = cliffs_delta(experimental, control)
    return Comparison(
        n_experimental=len(experimental), n_control=len(control), mean_experimental=mean_e,
        mean_control=mean_c, lift=mean_e - mean_c,
        lift_pct=100 * (mean_e - mean_c) / mean_c if mean_c else None, u=u, p=p,
        alternative=alternative, method=method, cliffs_delta=delta, a12=(delta + 1) / 2,
        lift_ci=lift_interval(experimental, control),
    )


SIGN_FLIP_EXACT = 16  # seeds: up to 2^16 sign patterns enumerated, beyond a normal approximation
SIGN_FLIP_TEST = "exact sign-flip permutation test of the mean per-seed effect"


def sign_flip_test(effects: Sequence[float], alternative: str = "two-sided"
                   ) -> tuple[float | None, str]:
    """(p, test) of 'the per-seed effects are centred on zero': the mean effect against its
    value under all 2^k sign flips (under no effect each seed's effect is as likely negative as
    positive), exact up to SIGN_FLIP_EXACT seeds, else a normal approximation. Two-sided: flips
    whose |mean| reaches the observed one; 'greater' / 'less': those at least / at most it. With
    k seeds p is at least 2/2^k two-sided, 1/2^k one-sided. One seed: no test (p None)."""
    if alternative not in ("two-sided", "greater", "less"):
        raise LabError(f"sign-flip alternative '{alternative}': choose two-sided, greater or less")
    k = len(effects)
    if k < 2:
        return None, f"{SIGN_FLIP_TEST}: not testable with {k} seed{'' if k == 1 else 's'}"
    if k > SIGN_FLIP_EXACT:
        from scipy.stats import norm

        spread = math.sqrt(sum(g * g for g in effects))
        z = 0.0 if spread == 0 else sum(effects) / spread
        p = {"greater": norm.sf(z), "less": norm.cdf(z), "two-sided": 2 * norm.sf(abs(z))}
        return min(1.0, float(p[alternative])), f"{SIGN_FLIP_TEST}, {alternative}, asymptotic ({k} seeds)"
    import numpy as np
    from scipy.stats import permutation_test

    # One sample with permutation_type "samples" is scipy's sign-flip test; n_resamples=inf
    # enumerates all 2^k patterns. Its two-sided p, twice the smaller tail, equals the share of
    # flips with |mean| at least the observed one, the null distribution being symmetric.
    result = permutation_test((np.asarray(effects, dtype=float),), _mean_along, vectorized=True,
                              permutation_type="samples", n_resamples=np.inf,
                              alternative=alternative)
    return min(1.0, float(result.pvalue)), f"{SIGN_FLIP_TEST}, {alternative}, exact (2^{k} sign patterns)"


def _mean_along(values: Any, axis: int) -> Any:
    return values.mean(axis=axis)
