"""Statistics of a contamination study: is the contaminated arm's score above the control's?

Mann-Whitney U over seeds, with the convention named in every result. The lab's default is
the most defensible test for five runs a side: exact (no normal approximation) where there are
no ties, two-sided. The study's conventions are one option away:
- its published tables: two-sided, asymptotic (normal approximation, continuity correction);
- its replication package's later README: one-sided "greater", exact.
With five runs per group and complete separation these give 0.0122, 0.0040 and (default) 0.0079.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from lab.common import LabError

CONVENTIONS = {
    "exact-two-sided": ("two-sided", "exact"),
    "study-tables": ("two-sided", "asymptotic"),
    "replication-package": ("greater", "exact"),
    "exact-greater": ("greater", "exact"),
}


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
    lift_ci: tuple[float, float]

    def convention(self) -> str:
        return f"Mann-Whitney U, {self.alternative}, {self.method}"


def mann_whitney(experimental: Sequence[float], control: Sequence[float],
                 convention: str = "exact-two-sided") -> tuple[float, float, str, str]:
    """(U of the experimental group, p, alternative, method actually used)."""
    from scipy.stats import mannwhitneyu

    if convention not in CONVENTIONS:
        raise LabError(f"statistics convention '{convention}': choose from {', '.join(CONVENTIONS)}")
    if len(experimental) < 1 or len(control) < 1:
        raise LabError("Mann-Whitney U needs at least one value in each group")
    alternative, method = CONVENTIONS[convention]
    has_ties = len(set(experimental) | set(control)) < len(experimental) + len(control)
    if method == "exact" and has_ties:
        method = "asymptotic"  # scipy's exact distribution assumes no ties; say what was used
    result = mannwhitneyu(list(experimental), list(control), alternative=alternative, method=method)
    return float(result.statistic), float(result.pvalue), alternative, method


def cliffs_delta(experimental: Sequence[float], control: Sequence[float]) -> float:
    """P(E > C) - P(E < C) over all pairs: -1 .. 1."""
    greater = sum(1 for e in experimental for c in control if e > c)
    smaller = sum(1 for e in experimental for c in control if e < c)
    return (greater - smaller) / (len(experimental) * len(control))


def bootstrap_lift_ci(experimental: Sequence[float], control: Sequence[float], level: float = 0.95,
                      resamples: int = 5000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(E) - mean(C), resampling each group."""
    rng = random.Random(seed)
    lifts = []
    for _ in range(resamples):
        e = [rng.choice(experimental) for _ in experimental]
        c = [rng.choice(control) for _ in control]
        lifts.append(sum(e) / len(e) - sum(c) / len(c))
    lifts.sort()
    low = lifts[int(math.floor((1 - level) / 2 * resamples))]
    high = lifts[min(resamples - 1, int(math.ceil((1 + level) / 2 * resamples)) - 1)]
    return low, high


def compare(experimental: Sequence[float], control: Sequence[float],
            convention: str = "exact-two-sided", seed: int = 0) -> Comparison:
    u, p, alternative, method = mann_whitney(experimental, control, convention)
    mean_e = sum(experimental) / len(experimental)
    mean_c = sum(control) / len(control)
    delta = cliffs_delta(experimental, control)
    return Comparison(
        n_experimental=len(experimental), n_control=len(control), mean_experimental=mean_e,
        mean_control=mean_c, lift=mean_e - mean_c,
        lift_pct=100 * (mean_e - mean_c) / mean_c if mean_c else None, u=u, p=p,
        alternative=alternative, method=method, cliffs_delta=delta, a12=(delta + 1) / 2,
        lift_ci=bootstrap_lift_ci(experimental, control, seed=seed),
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def paired_within_model(injected: Sequence[float], held_out: Sequence[float]) -> tuple[float, float]:
    """Split-half design: per-sample scores of injected vs held-out samples of one model
    (independent samples, so Mann-Whitney U, one-sided 'greater'; asymptotic for large n)."""
    from scipy.stats import mannwhitneyu

    result = mannwhitneyu(list(injected), list(held_out), alternative="greater", method="asymptotic")
    return float(result.statistic), float(result.pvalue)


ALPHA = 0.05  # every convention's significance level; the power notes use it
POWER = 0.8
EFFICIENCY = 0.955  # Mann-Whitney's asymptotic efficiency relative to the t-test (3/pi)


def _normal_n(effect: float, variance_sum: float, alpha: float, power: float, sides: int) -> float:
    """Per-group n of a two-sample z-test: (z_alpha + z_power)^2 (s1^2 + s2^2) / effect^2,
    inflated for Mann-Whitney's efficiency."""
    from scipy.stats import norm

    z = norm.ppf(1 - alpha / sides) + norm.ppf(power)
    return z * z * variance_sum / effect ** 2 / EFFICIENCY


def min_seeds(alpha: float = ALPHA, alternative: str = "two-sided") -> int:
    """Fewest seeds per arm at which the exact test can reach alpha at all (complete
    separation): below it no spread, however small, gives a significant result."""
    sides = 1 if alternative == "greater" else 2
    n = 2
    while sides / math.comb(2 * n, n) > alpha:
        n += 1
    return n


def seeds_needed(lift: float, std: float, alpha: float = ALPHA, power: float = POWER,
                 alternative: str = "two-sided") -> int | None:
    """Seeds per arm for the arm-vs-control test to detect `lift` with the observed spread
    `std` (one pooled standard deviation over seeds); normal approximation, never fewer than
    the exact test needs to reach alpha. None: no number of seeds shows this lift."""
    if lift == 0 or (alternative == "greater" and lift < 0):
        return None
    floor = min_seeds(alpha, alternative)
    if std == 0:
        return floor
    sides = 1 if alternative == "greater" else 2
    return max(floor, math.ceil(_normal_n(abs(lift), 2 * std * std, alpha, power, sides)))


def samples_needed(effect: float, std_injected: float, std_held_out: float, alpha: float = ALPHA,
                   power: float = POWER) -> int | None:
    """Samples per group for the within-model test (one-sided 'greater', as
    paired_within_model) to detect a per-sample mean difference `effect` (injected minus
    held-out) given each group's per-sample spread; normal approximation. None: the injected
    samples do not score higher, so more samples would not help."""
    if effect <= 0:
        return None
    variance_sum = std_injected ** 2 + std_held_out ** 2
    if variance_sum == 0:
        return 2
    return max(2, math.ceil(_normal_n(effect, variance_sum, alpha, power, 1)))
