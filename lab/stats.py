"""Statistics of a contamination study: is the contaminated arm's score above the control's?

Mann-Whitney U over seeds, with the convention named in every result. The lab's default is
the most defensible test for five runs a side: exact (no normal approximation) where there are
no ties, two-sided. The study's conventions are one option away:
- its published tables: two-sided, asymptotic (normal approximation, continuity correction);
- its replication package's later README: one-sided "greater", exact.
With five runs per group and complete separation these give 0.0122, 0.0040 and (default) 0.0079.
Tied scores do not make an exact convention asymptotic: U (midranks) gets its exact permutation
distribution, every split of the pooled scores counted, up to EXACT_SPLITS splits.

Within a split-half model: the per-seed gap (injected minus held-out), tested over seeds by an
exact sign-flip test, and, where seeds drew different splits, each sample injected against itself
held out (Wilcoxon signed-rank).

Between two arms of one seed (arm vs placebo, placebo vs control, arm vs control): each test
sample's score under one model minus its score under the other (Wilcoxon signed-rank), beside the
Mann-Whitney test over seeds.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from lab.common import LabError

CONVENTIONS = {
    "exact-two-sided": ("two-sided", "exact"),
    "study-tables": ("two-sided", "asymptotic"),
    "replication-package": ("greater", "exact"),
    "exact-greater": ("greater", "exact"),
}
DEFAULT_CONVENTION = "exact-two-sided"  # the lab's choice (module docstring); recipes default to it
ALPHA = 0.05  # every convention's significance level; the power notes use it
POWER = 0.8
# The two scores a contrast can be stated in (recipe statistics.score): the mean of the samples'
# scores (sentence BLEU per sample; resampled within seeds), or the arm's corpus-level score
# (corpus BLEU, as the study's tables give it; one number per arm and seed).
SAMPLE_SCORE = "sample"
CORPUS_SCORE = "corpus"
SCORES = {SAMPLE_SCORE: "mean per-sample score", CORPUS_SCORE: "corpus-level score, as the study's "
          "tables give it"}
# The power a dry run states is at a declared effect, never at an observed one. Defaults: a
# 2-point lift (BLEU) against a per-seed spread of 2 points (d = 1); the committed rq4 and rq5
# studies' per-seed effects spread 0.4-1.2 points in mean sentence BLEU and up to 2.7 in corpus
# BLEU.
SMALLEST_EFFECT = 2.0
PLANNING_SD = 2.0
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


def _doubled_midranks(values: Sequence[float]) -> list[int]:
    """Midranks (1-based, ties averaged) times two: whole numbers, so sums compare exactly."""
    from scipy.stats import rankdata

    return [int(round(2 * r)) for r in rankdata(list(values))]


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


def cliffs_delta(experimental: Sequence[float], control: Sequence[float]) -> float:
    """P(E > C) - P(E < C) over all pairs: -1 .. 1."""
    greater = sum(1 for e in experimental for c in control if e > c)
    smaller = sum(1 for e in experimental for c in control if e < c)
    return (greater - smaller) / (len(experimental) * len(control))


# The lift of two groups of a few values each (seeds, repetitions): a percentile bootstrap of so
# few values holds the true lift well under 95% of the time (docs/calibration.md), since
# resampling them cannot show how far their mean may be; Welch's t, near exact for normal values
# with unequal spreads, keeps its level.
LIFT_INTERVAL = "Welch t interval of mean(E) - mean(C) (Welch-Satterthwaite degrees of freedom)"


def lift_interval(experimental: Sequence[float], control: Sequence[float], level: float = 0.95
                  ) -> tuple[float, float] | None:
    """LIFT_INTERVAL; None where INTERVAL_RULE says none can be estimated: a group of one value
    (its spread is unknown), no spread in either group, a value not finite."""
    from scipy.stats import ttest_ind

    groups = (list(experimental), list(control))
    reasons = [no_interval_reason(g) for g in groups]
    if min(map(len, groups)) < 2 or NOT_FINITE in reasons or reasons == [ZERO_SPREAD] * 2:
        return None
    estimate = sum(groups[0]) / len(groups[0]) - sum(groups[1]) / len(groups[1])
    low, high = ttest_ind(*groups, equal_var=False).confidence_interval(level)
    return checked_interval(estimate, float(low), float(high))


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


def seed_mean_interval(values: Sequence[float], level: float = 0.95
                       ) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of a per-seed quantity (the seed is the unit): Student's t interval
    with k - 1 degrees of freedom; no interval (None, None) where INTERVAL_RULE says none can
    be estimated (one seed, all seeds equal, a value not finite)."""
    import numpy as np
    from scipy.stats import t as t_distribution

    values = np.asarray([v for v in values if v is not None], dtype=float)
    if not len(values):
        return None, None, None
    mean = float(values.mean())
    if no_interval_reason(values.tolist()):
        return mean, None, None
    half = float(t_distribution.ppf((1 + level) / 2, len(values) - 1)
                 * values.std(ddof=1) / math.sqrt(len(values)))
    return (mean, *(checked_interval(mean, mean - half, mean + half) or (None, None)))


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
    """Split-half design: per-sample scores of injected vs held-out samples, pooled over the
    seeds' models (Mann-Whitney U, one-sided 'greater'; asymptotic for large n). It takes every
    score as independent, which a sample scored by several seeds' models is not: a description
    of the pooled scores; seed_level_test and crossover_test are the tests over seeds."""
    from scipy.stats import mannwhitneyu

    result = mannwhitneyu(list(injected), list(held_out), alternative="greater", method="asymptotic")
    return float(result.statistic), float(result.pvalue)


SIGN_FLIP_EXACT = 16  # seeds: up to 2^16 sign patterns enumerated, beyond a normal approximation
SIGNED_RANK_EXACT = 200  # crossover samples with a nonzero difference: exact up to this many
SEEDS_TEST = "sign-flip permutation test of the mean per-seed gap"
CROSSOVER_TEST = "Wilcoxon signed-rank, greater"
# Two arms on the same test samples (same seed): a description of these models, since a sample
# scored under several seeds counts once per seed; the tests over seeds are Mann-Whitney's.
PAIRED_SAMPLES_TEST = "Wilcoxon signed-rank over per-sample differences (same sample, same seed), greater"


def _seed_order(seed: Any) -> tuple[int, float, str]:
    text = str(seed)
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def seed_gaps(scores: Iterable[tuple[Any, str, float]]) -> dict[str, float]:
    """(seed, group, per-sample score) -> per seed with both groups scored: the mean injected
    score minus the mean held-out score of that seed's model; other groups are ignored."""
    by_seed: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for seed, group, score in scores:
        by_seed[str(seed)][group].append(score)
    gaps = {}
    for seed in sorted(by_seed, key=_seed_order):
        injected, held = by_seed[seed]["injected"], by_seed[seed]["held_out"]
        if injected and held:
            gaps[seed] = sum(injected) / len(injected) - sum(held) / len(held)
    return gaps


def seed_level_test(gaps: Sequence[float]) -> tuple[float | None, str]:
    """(p, test) for 'the per-seed gaps are above zero': sign_flip_test, one-sided 'greater'."""
    p, test = sign_flip_test(gaps, "greater")
    return p, test.replace(SIGN_FLIP_TEST, SEEDS_TEST, 1)


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


# ---- effects over seeds, with their interval ---------------------------------------------------
# A seed's effect is a signed sum of means over its evaluated samples ("parts"): one part for two
# arms compared sample by sample (arm minus reference per sample), two for a split-half gap
# (injected minus held out), twice as many for the change of an effect between two epoch counts.
# A part maps sample id -> value; parts that share ids are resampled together within a seed.
SeedParts = Sequence[tuple[float, dict[Any, float]]]
CLUSTER_BOOTSTRAP = ("cluster bootstrap-t: seeds resampled with replacement, then each drawn "
                     "seed's samples, the mean of the drawn per-seed effects studentised by their "
                     "spread over seeds (each tail at least Student's t, k - 1 df)")
BOOTSTRAP_RESAMPLES = 2000
# With this many seeds or fewer a bootstrap-t draws from too few distinct resamples: its tails
# move by whole points between bootstrap seeds (issue 58: 80.7-92.0 at 3 seeds), so the
# interval is Student's t over the per-seed effects, which is exact for normal effects.
STUDENT_T_SEEDS = 4
STUDENT_T = "Student t over the per-seed effects (k - 1 df)"
SAMPLE_BOOTSTRAP = "expanded percentile bootstrap of the samples (one seed: about this model)"
# A plain percentile bootstrap of a mean over few samples (20 a part: a dose level) holds the
# truth less often than its level says (docs/calibration.md): the resampled spread is the
# samples' own (divisor n, not n - 1) and z-quantiled. Expanding its tails (Hesterberg, "What teachers should
# know about the bootstrap", 2015) to those of Student's t with n - 1 df times sqrt(n / (n - 1)),
# n the fewest samples of a part, fixes both and fades out with many samples.


def seed_effect(parts: SeedParts) -> float | None:
    """A seed's effect: the signed sum of its parts' means (None if a part has no sample)."""
    if any(not values for _sign, values in parts):
        return None
    return sum(sign * sum(values.values()) / len(values) for sign, values in parts)


def _resampled_effects(parts: SeedParts, shape: tuple[int, ...], rng: Any) -> Any:
    """The seed's effect over `shape` resamples of its samples: ids resampled with replacement
    within each stratum (the ids that belong to the same parts), so parts that share ids keep
    them paired (an effect's change between epochs), and parts that do not (the injected and
    held-out halves) keep their sizes."""
    import numpy as np

    ids = sorted({i for _sign, values in parts for i in values}, key=str)
    matrix = np.array([[values.get(i, np.nan) for _sign, values in parts] for i in ids], dtype=float)
    present = ~np.isnan(matrix)
    values = np.nan_to_num(matrix)
    sums = np.zeros(shape + (len(parts),))
    counts = np.zeros(shape + (len(parts),))
    strata: dict[tuple[bool, ...], list[int]] = defaultdict(list)
    for row, pattern in enumerate(map(tuple, present)):
        strata[pattern].append(row)
    for rows in strata.values():
        drawn = np.asarray(rows)[rng.integers(0, len(rows), shape + (len(rows),))]
        sums += values[drawn].sum(axis=-2)
        counts += present[drawn].sum(axis=-2)
    signs = np.array([sign for sign, _values in parts], dtype=float)
    return (sums / np.maximum(counts, 1)) @ signs


def cluster_resamples(per_seed: dict[Any, SeedParts], resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = 0, with_seeds: bool = False) -> Any:
    """resamples x k per-seed effects: each row draws k seeds with replacement and, for each
    drawn seed, its samples (_resampled_effects). None with fewer than two seeds. `with_seeds`:
    (effects, the drawn seeds' indices), both resamples x k."""
    import numpy as np

    seeds = [s for s in per_seed if seed_effect(per_seed[s]) is not None]
    k = len(seeds)
    if k < 2:
        return None
    rng = np.random.default_rng(seed)
    drawn_seeds = rng.integers(0, k, (resamples, k))
    resampled = np.stack([_resampled_effects(per_seed[s], (resamples, k), rng) for s in seeds])
    effects = resampled[drawn_seeds, np.arange(resamples)[:, None], np.arange(k)[None, :]]
    return (effects, drawn_seeds) if with_seeds else effects


SEED_INTERVAL = (f"{STUDENT_T} with {STUDENT_T_SEEDS} seeds or fewer, else a "
                 f"{CLUSTER_BOOTSTRAP}")


def interval_method(seeds: int) -> str:
    """How effect_interval makes the interval of `seeds` per-seed effects."""
    return STUDENT_T if seeds <= STUDENT_T_SEEDS else CLUSTER_BOOTSTRAP


def clipped(interval: tuple[float, float], bounds: tuple[float, float] | None
            ) -> tuple[float, float]:
    """An interval cut to what the effect can be (a difference of two 0-100 scores cannot leave
    [-100, 100]); unchanged without bounds."""
    if bounds is None:
        return interval
    low, high = bounds
    return max(low, min(high, interval[0])), max(low, min(high, interval[1]))


CLIPPED_MARK = "§"  # not †: the secondary table marks a score below the floor with it
CLIPPED_LEGEND = (f"{CLIPPED_MARK}: a bound cut to the range the effect can take (the interval "
                  "reached beyond it, so the printed bound is that range's end, not an estimate)")
CLIPPED_SIDES = ("low", "high", "both")  # a row's `ci_clipped`: the bounds `clipped` cut


def clipped_side(interval: tuple[float, float] | None, bounds: tuple[float, float] | None
                 ) -> str | None:
    """Which bound of `interval` (as estimated, before clipped) `clipped` cuts: one of
    CLIPPED_SIDES, or None where it cuts neither (or there is no interval or no bounds)."""
    if interval is None or bounds is None:
        return None
    low, high = bounds
    cut = (interval[0] < low, interval[1] > high)
    return {(True, True): "both", (True, False): "low", (False, True): "high"}.get(cut)


# ---- the one rule for every interval the lab prints ----------------------------------------
INTERVAL_RULE = ("an interval is printed only where it can be estimated: over two or more seeds "
                 "whose effects differ (one seed: over its samples, where resampling them moves "
                 "the effect), every value finite, the estimate inside it; otherwise 'n/a "
                 "(reason)' stands in its place, never a number")
ZERO_SPREAD = "zero spread"
NOT_FINITE = "not finite"
# Values this close, as a share of their size, are equal: the spread of rounding, not of data
# (a Student t over it would print a point as an interval, a bootstrap-t divide by it).
SAME_VALUES = 1e-9


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def no_interval_reason(values: Sequence[float], unit: str = "seed") -> str | None:
    """Why `values` (the per-seed effects an interval is over, or one model's resampled
    effects) give no interval (INTERVAL_RULE): '1 seed', 'not finite', 'zero spread'; None
    where they give one."""
    values = [float(v) for v in values]
    if not all(map(math.isfinite, values)):
        return NOT_FINITE
    if len(values) < 2:
        return _count(len(values), unit)
    if max(values) - min(values) <= SAME_VALUES * max(1.0, max(map(abs, values))):
        return ZERO_SPREAD
    return None


def checked_interval(estimate: float, low: float, high: float) -> tuple[float, float] | None:
    """(low, high) where it is an interval of `estimate` (INTERVAL_RULE: finite, wider than a
    point, holding the estimate), else None."""
    return None if _bad_interval(estimate, low, high) else (float(low), float(high))


def _bad_interval(estimate: float, low: float, high: float) -> str | None:
    if not all(math.isfinite(v) for v in (estimate, low, high)):
        return NOT_FINITE
    if high - low <= SAME_VALUES * max(1.0, abs(low), abs(high)):
        return ZERO_SPREAD
    if not low <= estimate <= high:
        return "estimate outside it"
    return None


def interval_reason(estimate: float | None, low: float | None, high: float | None, seeds: int,
                    over_samples: bool = False) -> str | None:
    """Why a table prints no interval beside `estimate` (INTERVAL_RULE), None where it prints
    [low, high]. `seeds`: how many seeds the estimate is over; `over_samples`: the interval is
    one model's, over its samples (SAMPLE_BOOTSTRAP)."""
    if estimate is None or not math.isfinite(estimate):
        return NOT_FINITE
    if low is None or high is None:
        # the interval functions leave it out for too few seeds, or a spread of zero
        return ZERO_SPREAD if over_samples or seeds >= 2 else _count(seeds, "seed")
    return _bad_interval(estimate, low, high)


def effect_text(estimate: float | None, low: float | None, high: float | None, seeds: int,
                over_samples: bool = False, spec: str = "+.2f", cut: str | None = None) -> str:
    """An effect as every table prints it: '+1.23 [+0.40, +2.06]', '+1.23 [n/a (1 seed)]'
    (INTERVAL_RULE), '-' without an estimate, 'n/a (not finite)' for a NaN or infinite one.
    `cut`: the bounds clipped cut (clipped_side), each then marked CLIPPED_MARK."""
    if estimate is None:
        return "-"
    if not math.isfinite(estimate):
        return f"n/a ({NOT_FINITE})"
    reason = interval_reason(estimate, low, high, seeds, over_samples)
    if reason:
        return format(estimate, spec) + f" [n/a ({reason})]"
    return format(estimate, spec) + " " + bounds_text(low, high, cut, spec)


def bounds_text(low: float, high: float, cut: str | None = None, spec: str = "+.2f") -> str:
    """'[+0.40, +100.00†]': an interval's bounds, each one clipped cut (`cut`, clipped_side)
    marked CLIPPED_MARK."""
    marks = {side: CLIPPED_MARK if cut in (side, "both") else "" for side in ("low", "high")}
    return f"[{format(low, spec)}{marks['low']}, {format(high, spec)}{marks['high']}]"


def effect_interval(per_seed: dict[Any, SeedParts], level: float = 0.95,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                    bounds: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """A `level` interval of the mean per-seed effect over these samples (the seed is the unit):
    CLUSTER_BOOTSTRAP. Each resample (cluster_resamples) gives k effects; their mean minus the
    observed mean, over their spread, is t*, and the interval is the observed mean minus the
    t* quantiles times the observed spread, each tail at least Student's t with k - 1 degrees
    of freedom. Studentising by the spread over seeds keeps it honest with few seeds, where a
    percentile interval of the resampled means is far too narrow
    (benchmarks/inference_calibration.py measures both). None where INTERVAL_RULE says none
    can be estimated (one seed: see sample_interval; seeds whose effects are equal; a value not
    finite). With STUDENT_T_SEEDS seeds or fewer: Student's t over the per-seed effects
    (interval_method). `bounds`: what the effect can be (clipped)."""
    import numpy as np
    from scipy.stats import t as t_distribution

    effects = np.array([e for e in map(seed_effect, per_seed.values()) if e is not None])
    k = len(effects)
    if no_interval_reason(effects.tolist()):
        return None
    estimate = float(effects.mean())
    if k <= STUDENT_T_SEEDS:
        _mean, low, high = seed_mean_interval(effects.tolist(), level)
        return None if low is None else checked_interval(estimate, *clipped((low, high), bounds))
    spread = effects.std(ddof=1) / math.sqrt(k)
    drawn, drawn_seeds = cluster_resamples(per_seed, resamples, seed, with_seeds=True)
    # A resample with no spread over its drawn effects (one seed drawn k times, or seeds whose
    # sparse per-sample differences all resampled to the same mean) has nothing to studentise
    # by: dividing by its ~0 spread is what printed [-220938541681.45, +5.50] (issue 59). Such
    # resamples say nothing of the spread over seeds and are left out.
    spreads = drawn.std(axis=1, ddof=1) / math.sqrt(k)
    scale = np.maximum(1.0, np.abs(drawn).max(axis=1))
    kept = (drawn_seeds.min(axis=1) != drawn_seeds.max(axis=1)) & (spreads > SAME_VALUES * scale)
    if not kept.any():
        return None
    t_star = (drawn[kept].mean(axis=1) - estimate) / spreads[kept]
    low_t, high_t = np.percentile(t_star, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    # Resampling a handful of seeds understates the studentised tails a little (k seeds drawn
    # with repeats); Student's t with k - 1 degrees of freedom, exact for normal per-seed
    # effects, is the least either tail may reach.
    student = float(t_distribution.ppf((1 + level) / 2, k - 1))
    low_t, high_t = min(low_t, -student), max(high_t, student)
    return checked_interval(estimate, *clipped((float(estimate - high_t * spread),
                                                float(estimate - low_t * spread)), bounds))


def sample_interval(parts: SeedParts, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = 0) -> tuple[float, float] | None:
    """One seed's effect with an interval over its samples (SAMPLE_BOOTSTRAP): what the samples
    say of this one trained model, not of training runs. None where INTERVAL_RULE
    says none can be estimated (no samples; samples whose every resample gives the same effect,
    as one sample a part does; a value not finite)."""
    import numpy as np

    estimate = seed_effect(parts)
    if estimate is None:
        return None
    drawn = _resampled_effects(parts, (resamples,), np.random.default_rng(seed))
    if no_interval_reason([estimate, *drawn.tolist()], "resample"):
        return None
    tail = expanded_tail(min(len(values) for _sign, values in parts), level)
    low, high = np.percentile(drawn, [100 * tail, 100 * (1 - tail)])
    return checked_interval(estimate, float(low), float(high))


def expanded_tail(samples: int, level: float) -> float:
    """The share of resamples left out in each tail by SAMPLE_BOOTSTRAP's expanded percentile
    interval at `level` over a part of `samples` samples: below (1 - level) / 2."""
    from scipy.stats import norm, t as t_distribution

    if samples < 2:
        return (1 - level) / 2
    return float(norm.sf(math.sqrt(samples / (samples - 1))
                         * t_distribution.ppf((1 + level) / 2, samples - 1)))


# The noise of a between-arm contrast in the committed rq4 study (results/mini-rq4-paired:
# RoBERTa, placebo minus control, per-sample BLEU of 189 clean samples x 4 seeds), split by a
# two-way analysis of variance into a seed effect, a sample effect and the rest:
# benchmarks/inference_calibration.py measures it again and checks the tests against it.
RQ4_NOISE = {"seed": 0.95, "sample": 1.53, "residual": 14.68, "samples": 189}


def simulated_null(seeds: int, rng: Any, noise: dict[str, float] = RQ4_NOISE,
                   samples: int | None = None) -> dict[int, SeedParts]:
    """A study's per-seed, per-sample differences between two arms that do not differ: a seed
    effect shared by the seed's samples, a sample effect shared by the sample's seeds and a
    heavy-tailed rest (Student t, 5 degrees of freedom), at `noise`'s spreads. With other
    `samples` than the noise's, the sample effects and the rest are scaled so that a seed's
    mean over its samples is as noisy as in rq4 (a cheaper simulation of the same study). For
    the calibration of the tests over seeds (tests/test_inference.py, the benchmark)."""
    import numpy as np

    n = samples or int(noise["samples"])
    scale = math.sqrt(n / noise["samples"])
    residual = noise["residual"] * scale
    seed_effects = rng.normal(0.0, noise["seed"], seeds)
    sample_effects = rng.normal(0.0, noise["sample"] * scale, n)
    rest = rng.standard_t(5, (seeds, n)) * residual / math.sqrt(5 / 3)
    values = seed_effects[:, None] + sample_effects[None, :] + rest
    return {k: [(1.0, dict(enumerate(values[k].tolist())))] for k in range(seeds)}


# ---- power before compute: the exact sign-flip test at a declared effect ----------------------
# "Seeds for 80% power" from a normal formula, (z_alpha + z_power)^2 / d^2, is optimistic here
# twice over: it takes the spread as known (z, not t) and the test as continuous, while an exact
# sign-flip test over K seeds has only 2^K patterns (issue 58: 8 seeds at d = 1 give 0.65, not
# 0.8). So the power is simulated with the test itself, Holm and all.
POWER_SIMULATIONS = 4000  # simulated studies: Monte Carlo error about 0.008 at a power of 0.7
POWER_RNG_SEED = 0
POWER_SEARCH_SEEDS = 40  # seeds_for_planned_power searches up to this many
# The shapes a planned per-seed effect may take (statistics.planning_shape): each draws a
# standardised part (mean 0, SD 1) that the simulation scales, effect + sd x part, so every shape
# has the declared mean and SD and the shape alone moves the power.
HEAVY_TAIL_DF = 3  # heavy-tailed: Student t, this many degrees of freedom (the fewest with an SD)
BIMODAL_OFFSET = 0.95  # bimodal: two equal halves, their centres this many SDs either side
PLANNING_SHAPES = {
    "normal": "Normal",
    "heavy-tailed": f"Student t with {HEAVY_TAIL_DF} degrees of freedom scaled to the SD (now and "
                    "then a seed far out)",
    "bimodal": f"two equal halves, Normal around the effect -/+ {BIMODAL_OFFSET:g} SD with SD "
               f"{math.sqrt(1 - BIMODAL_OFFSET ** 2):.2g} (some seeds memorise: at d = 1 half the "
               f"seeds centre on {1 + BIMODAL_OFFSET:g} x the effect, half on "
               f"{1 - BIMODAL_OFFSET:.2g} x)",
}
PLANNING_SHAPE = "normal"
# The share of a per-seed effect's variance that the seed gives every test of the family at once
# (statistics.planning_correlation, the correlation between two tests' effects of one seed): the
# family's tests are run on the same seeds' models. 0: each test's seeds are independent.
PLANNING_CORRELATION = 0.0
SENSITIVITY_CORRELATIONS = (0.0, 0.5, 0.9)  # with every shape: the dry run's sensitivity line
POWER_ASSUMPTIONS = ("per-seed effect = effect + sd x (a part the seed shares with every test of "
                     "the family, weight sqrt(correlation), plus the test's own part, weight "
                     "sqrt(1 - correlation)), both parts drawn from the shape")
# A flip's sum within this share of the set's summed |effect| below the observed sum counts as
# reaching it: the observed pattern must count itself, whatever the rounding of its two halves.
_TIE_TOLERANCE = 1e-9
_ROWS_AT_ONCE = 16384  # sets counted together: bounds the memory, and keeps 4 x rows exact


def _sign_patterns(k: int) -> Any:
    """All 2^k sign patterns, one row each (+1 / -1)."""
    import numpy as np

    bits = (np.arange(2 ** k)[:, None] >> np.arange(k)[None, :]) & 1
    return 1.0 - 2.0 * bits


def _patterns_reaching(effects: Any, threshold: Any) -> Any:
    """Per row of `effects` (n x k), how many of the 2^k sign flips have a sum >= threshold
    (less a tolerance, so that the observed pattern counts itself). Meet in the middle: the sums
    of the first half's flips against the sorted sums of the second half's, all rows at once,
    which is 2^(k/2) work per row where enumerating the flips is 2^k."""
    import numpy as np

    if len(effects) > _ROWS_AT_ONCE:
        return np.concatenate([_patterns_reaching(effects[i:i + _ROWS_AT_ONCE],
                                                  threshold[i:i + _ROWS_AT_ONCE])
                               for i in range(0, len(effects), _ROWS_AT_ONCE)])
    n, k = effects.shape
    half = k // 2
    scale = np.maximum(np.abs(effects).sum(axis=1), 1e-300)
    first = (effects[:, :half] / scale[:, None]) @ _sign_patterns(half).T       # n x 2^half
    second = np.sort((effects[:, half:] / scale[:, None]) @ _sign_patterns(k - half).T, axis=1)
    # Each row's flip sums lie in [-1, 1] after the scaling, so shifting row r by 4r keeps the
    # rows apart and one sorted array serves every row's counting (4 x _ROWS_AT_ONCE keeps the
    # shifted sums' rounding far below _TIE_TOLERANCE).
    offsets = 4.0 * np.arange(n)[:, None]
    needed = threshold[:, None] / scale[:, None] - first - _TIE_TOLERANCE + offsets
    below = np.searchsorted((second + offsets).ravel(), needed.ravel()).reshape(n, -1)
    below -= (np.arange(n) * second.shape[1])[:, None]
    return (second.shape[1] - below).sum(axis=1)


def sign_flip_p_values(effects: Any, alternative: str = "two-sided") -> Any:
    """sign_flip_test's p for each row of `effects` (n sets of k per-seed effects) at once:
    exact over the 2^k flips up to SIGN_FLIP_EXACT seeds, else its normal approximation."""
    import numpy as np
    from scipy.stats import norm

    if alternative not in ("two-sided", "greater", "less"):
        raise LabError(f"sign-flip alternative '{alternative}': choose two-sided, greater or less")
    effects = np.asarray(effects, dtype=float)
    if effects.ndim != 2 or effects.shape[1] < 2:
        raise LabError(f"sign-flip p values: expected rows of 2 or more per-seed effects, got "
                       f"shape {effects.shape}")
    if alternative == "less":
        effects = -effects
    k = effects.shape[1]
    total = effects.sum(axis=1)
    if k > SIGN_FLIP_EXACT:
        spread = np.sqrt((effects ** 2).sum(axis=1))
        z = np.divide(total, spread, out=np.zeros_like(total), where=spread > 0)
        return np.minimum(1.0, 2 * norm.sf(np.abs(z)) if alternative == "two-sided" else norm.sf(z))
    if alternative == "two-sided":
        # The flips are symmetric: as many sums reach -|total| from above as |total| from below.
        return np.minimum(1.0, 2 * _patterns_reaching(effects, np.abs(total)) / 2 ** k)
    return np.minimum(1.0, _patterns_reaching(effects, total) / 2 ** k)


def holm_rejections(p_values: Any, alpha: float = ALPHA) -> Any:
    """Holm at alpha along the last axis (one family per row): which tests are rejected."""
    import numpy as np

    p_values = np.asarray(p_values, dtype=float)
    m = p_values.shape[-1]
    order = np.argsort(p_values, axis=-1)
    ordered = np.take_along_axis(p_values, order, axis=-1)
    # Step down: the j-th smallest is rejected while every smaller one met alpha / (m - i).
    passes = np.cumprod(ordered <= alpha / (m - np.arange(m)), axis=-1).astype(bool)
    rejected = np.zeros_like(passes)
    np.put_along_axis(rejected, order, passes, axis=-1)
    return rejected


def standardised_effects(shape: str, rng: Any, size: tuple[int, ...]) -> Any:
    """Draws of PLANNING_SHAPES[shape]'s standardised part: mean 0, SD 1, symmetric."""
    import numpy as np

    if shape == "normal":
        return rng.standard_normal(size)
    if shape == "heavy-tailed":
        return rng.standard_t(HEAVY_TAIL_DF, size) / math.sqrt(HEAVY_TAIL_DF / (HEAVY_TAIL_DF - 2))
    if shape == "bimodal":
        halves = np.where(rng.random(size) < 0.5, -BIMODAL_OFFSET, BIMODAL_OFFSET)
        return halves + math.sqrt(1 - BIMODAL_OFFSET ** 2) * rng.standard_normal(size)
    raise _unknown_shape(shape)


def _unknown_shape(shape: str) -> LabError:
    return LabError(f"power: shape (statistics.planning_shape) '{shape}': choose "
                    f"{', '.join(PLANNING_SHAPES)}")


def simulated_powers(seeds: int, effect: float = SMALLEST_EFFECT, sd: float = PLANNING_SD,
                     tests: int = 1, alpha: float = ALPHA, alternative: str = "two-sided",
                     simulations: int = POWER_SIMULATIONS, rng_seed: int = POWER_RNG_SEED,
                     shape: str = PLANNING_SHAPE, correlation: float = PLANNING_CORRELATION
                     ) -> dict[str, float]:
    """A family of `tests` sign-flip tests (sign_flip_test, exact up to SIGN_FLIP_EXACT seeds)
    over `seeds` per-seed effects, Holm at alpha over the family, every test's true mean effect
    `effect` (in the direction the alternative tests; 0: the null, whose rejections are the
    tests' size), simulated `simulations` times. Keys: per_test, the share of tests rejected
    (the power of one test: they are exchangeable); family, the share of studies in which every
    test is rejected (the whole family confirmed); any, in which at least one is (at effect 0:
    the family-wise error). The effects: POWER_ASSUMPTIONS, at `shape` and `correlation`. The
    same arguments give the same numbers (the simulation's generator is seeded)."""
    import numpy as np

    _check_power_arguments(effect, sd, tests, alpha, simulations, shape, correlation)
    if seeds < 2:
        return dict.fromkeys(("per_test", "family", "any"), 0.0)  # one seed: no test over seeds
    floor = (2 if alternative == "two-sided" else 1) / 2 ** seeds  # the exact test's smallest p
    if seeds <= SIGN_FLIP_EXACT and tests * floor > alpha:
        # Holm's first step is out of the test's reach: nothing is ever rejected
        return dict.fromkeys(("per_test", "family", "any"), 0.0)
    rng = np.random.default_rng([rng_seed, seeds, tests])
    signed = -effect if alternative == "less" else effect
    parts = standardised_effects(shape, rng, (simulations, tests, seeds))
    if correlation > 0:  # drawn after the tests' own parts: at 0 the draws are as they were
        shared = standardised_effects(shape, rng, (simulations, 1, seeds))
        parts = math.sqrt(1 - correlation) * parts + math.sqrt(correlation) * shared
    drawn = (signed + sd * parts).reshape(simulations * tests, seeds)
    p_values = sign_flip_p_values(drawn, alternative).reshape(simulations, tests)
    rejected = holm_rejections(p_values, alpha)
    return {"per_test": float(rejected.mean()), "family": float(rejected.all(axis=1).mean()),
            "any": float(rejected.any(axis=1).mean())}


def simulated_power(seeds: int, effect: float = SMALLEST_EFFECT, sd: float = PLANNING_SD,
                    tests: int = 1, alpha: float = ALPHA, alternative: str = "two-sided",
                    simulations: int = POWER_SIMULATIONS, rng_seed: int = POWER_RNG_SEED,
                    shape: str = PLANNING_SHAPE, correlation: float = PLANNING_CORRELATION
                    ) -> float:
    """The power of one of `tests` sign-flip tests, Holm at alpha over the family: the share of
    the simulated tests rejected (simulated_powers' per_test)."""
    return simulated_powers(seeds, effect, sd, tests, alpha, alternative, simulations, rng_seed,
                            shape, correlation)["per_test"]


def seeds_for_planned_power(effect: float = SMALLEST_EFFECT, sd: float = PLANNING_SD,
                            tests: int = 1, alpha: float = ALPHA, alternative: str = "two-sided",
                            power: float = POWER, simulations: int = POWER_SIMULATIONS,
                            rng_seed: int = POWER_RNG_SEED,
                            most: int = POWER_SEARCH_SEEDS, shape: str = PLANNING_SHAPE,
                            correlation: float = PLANNING_CORRELATION) -> int | None:
    """The fewest seeds (2 .. `most`) at which simulated_power (per test) reaches `power`; None
    when `most` seeds do not. A declared effect, never an observed one: fed the effect a study
    measured, the answer only restates that study's p."""
    if not 0 < power < 1:
        raise LabError(f"power: expected a number between 0 and 1, got {power}")
    for seeds in range(2, most + 1):
        if simulated_power(seeds, effect, sd, tests, alpha, alternative, simulations,
                           rng_seed, shape, correlation) >= power:
            return seeds
    return None


def _check_power_arguments(effect: float, sd: float, tests: int, alpha: float,
                           simulations: int, shape: str = PLANNING_SHAPE,
                           correlation: float = PLANNING_CORRELATION) -> None:
    # The recipe fields these come from are named: a recipe checks them too, on loading (where
    # the smallest effect must be > 0; a simulation at 0 is the null, for the tests' size).
    if not effect >= 0:
        raise LabError(f"power: effect (statistics.smallest_effect): expected a number >= 0, got "
                       f"{effect}")
    if not sd > 0:
        raise LabError(f"power: sd (statistics.planning_sd): expected a number > 0, got {sd}")
    if not 0 < alpha < 1:
        raise LabError(f"power: alpha (statistics.alpha): expected a number between 0 and 1, got "
                       f"{alpha}")
    if shape not in PLANNING_SHAPES:
        raise _unknown_shape(shape)
    if not 0 <= correlation <= 1:
        raise LabError(f"power: correlation (statistics.planning_correlation): expected a number "
                       f"from 0 to 1, got {correlation}")
    if tests < 1 or simulations < 1:
        raise LabError(f"power simulation: expected 1 or more tests and simulations, got "
                       f"{tests} tests, {simulations} simulations")


def crossover_differences(scores: Iterable[tuple[str, str, float]]) -> dict[str, float]:
    """(sample id, group, per-sample score) over the seeds of one cell -> for each sample scored
    injected by some seeds' models and held out by others': its mean score when injected minus
    its mean score when held out. Empty when every seed used the same split."""
    by_id: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample, group, score in scores:
        by_id[sample][group].append(score)
    return {sample: (sum(g["injected"]) / len(g["injected"])
                     - sum(g["held_out"]) / len(g["held_out"]))
            for sample, g in sorted(by_id.items()) if g["injected"] and g["held_out"]}


def signed_rank_test(differences: Sequence[float], name: str = CROSSOVER_TEST,
                     alternative: str = "greater") -> tuple[float | None, str]:
    """(p, test): Wilcoxon signed-rank over paired differences, one-sided 'greater' or
    'two-sided'; zero differences dropped (Wilcoxon's rule), ties as midranks; exact (the
    signed-rank sum over all 2^n signs) up to SIGNED_RANK_EXACT nonzero differences, else
    asymptotic. p None without a nonzero difference. `name` names the pairing in the returned
    test. With n pairs the exact p is at least 2^-n one-sided, 2^(1-n) two-sided (5 pairs:
    0.031, 0.062)."""
    if alternative not in ("greater", "two-sided"):
        raise LabError(f"signed-rank alternative '{alternative}': choose greater or two-sided")
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return None, f"{name}: no nonzero difference"
    if n > SIGNED_RANK_EXACT:
        from scipy.stats import wilcoxon

        result = wilcoxon(nonzero, alternative=alternative, method="asymptotic")
        return float(result.pvalue), f"{name}, asymptotic ({n} nonzero differences)"
    import numpy as np

    ranks = _doubled_midranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    distribution = np.zeros(sum(ranks) + 1)  # P(doubled positive-rank sum = index)
    distribution[0] = 1.0
    for rank in ranks:  # each rank positive or negative with probability 1/2
        shifted = np.zeros_like(distribution)
        shifted[rank:] = distribution[:-rank]
        distribution = (distribution + shifted) / 2
    upper = float(distribution[observed:].sum())
    p = upper if alternative == "greater" else 2 * min(upper, float(distribution[:observed + 1].sum()))
    return min(1.0, p), f"{name}, exact ({n} nonzero differences, ties as midranks)"


def crossover_test(differences: Sequence[float]) -> tuple[float | None, str]:
    """signed_rank_test over the per-sample differences injected minus held out."""
    return signed_rank_test(differences, CROSSOVER_TEST)


def paired_sample_differences(experimental: dict[Any, float], reference: dict[Any, float]
                              ) -> list[float]:
    """Two arms' per-sample scores keyed by (seed, sample id) -> experimental minus reference
    for every key both scored: the same test sample, scored by two models of the same seed
    that differ only in their pre-training corpus."""
    return [experimental[key] - reference[key] for key in sorted(experimental, key=str)
            if key in reference]


def within_model_net_of(scores: Iterable[tuple[Any, str, str, float]],
                        reference: dict[tuple[Any, str], float]) -> dict[str, Any]:
    """The split-half gap net of a reference model that saw neither half. The two halves hold
    different samples, so the raw gap (injected minus held out) mixes what the model memorised
    with how hard each half happens to be; a reference model of the same seed (the control, the
    placebo) scores the same halves, and the difference of differences keeps the former.
    scores: (seed, sample id, group, per-sample score) of one split-half cell; reference: the
    reference arm's per-sample scores keyed by (seed, sample id). Per seed: the arm's mean lift
    over the reference on its injected samples minus its mean lift on its held-out samples.
    Keys: net_gap (the mean over seeds), net_seed_gaps, net_samples (differences used), p_net
    (injected vs held-out differences pooled over seeds, paired_within_model: a description),
    p_net_seeds (seed_level_test over the per-seed net gaps; None with one seed)."""
    differences = [(seed, group, score - reference[(seed, sample)])
                   for seed, sample, group, score in scores
                   if group in ("injected", "held_out") and (seed, sample) in reference]
    gaps = seed_gaps(differences)
    if not gaps:
        return {}
    differences = [d for d in differences if str(d[0]) in gaps]
    _u, p_net = paired_within_model([d for _s, g, d in differences if g == "injected"],
                                    [d for _s, g, d in differences if g == "held_out"])
    return {"net_gap": sum(gaps.values()) / len(gaps), "net_seed_gaps": gaps,
            "net_samples": len(differences), "p_net": p_net,
            "p_net_seeds": seed_level_test(list(gaps.values()))[0]}


def within_model_seeds(scores: Iterable[tuple[Any, str, str, float]]) -> dict[str, Any]:
    """(seed, sample id, group, per-sample score) of one split-half cell -> the per-seed gaps
    with their seed-level test and, where seeds drew different splits, the crossover
    comparison. Keys: seed_gaps, gap_per_seed (their mean), seeds_positive, p_seeds, seeds_test,
    crossover_samples, crossover_gap (the mean difference), p_crossover, crossover_test."""
    rows = list(scores)
    gaps = seed_gaps((seed, group, score) for seed, _id, group, score in rows)
    p_seeds, seeds_test = seed_level_test(list(gaps.values()))
    found: dict[str, Any] = {
        "seed_gaps": gaps, "gap_per_seed": sum(gaps.values()) / len(gaps) if gaps else None,
        "seeds_positive": sum(1 for g in gaps.values() if g > 0), "p_seeds": p_seeds,
        "seeds_test": seeds_test}
    differences = list(crossover_differences((sample, group, score)
                                             for _seed, sample, group, score in rows).values())
    p_crossover, test = (crossover_test(differences) if differences
                         else (None, f"{CROSSOVER_TEST}: no sample both injected and held out"))
    found.update(crossover_samples=len(differences), p_crossover=p_crossover, crossover_test=test,
                 crossover_gap=sum(differences) / len(differences) if differences else None)
    return found


def starred_p(p: float | None, lift: float | None, alpha: float = ALPHA, spec: str = ".4g") -> str:
    """A p-value as the lab's tables show it: '-' when untested, starred at or below alpha, and
    a significant difference in the wrong direction (lift < 0) says '(lower)', since a
    two-sided test fires either way."""
    if p is None:
        return "-"
    if p > alpha:
        return format(p, spec)
    return format(p, spec) + "*" + (" (lower)" if (lift or 0) < 0 else "")



# ---- dose-response ---------------------------------------------------------------------------
# A ladder's x is a level's copies per corpus epoch: every base document is also seen once per
# corpus epoch, so that is its exposure relative to a base document's (lab.study.dose.DOSE_SCALE).
DOSE_CURVE = ("monotone: lift = top / (1 + exp(-slope * (ln c - ln midpoint))) in the copies per "
              "corpus epoch c, least squares on the levels' mean lifts over seeds; slope >= 0, so "
              "the curve is monotone and 0 at dose 0")
DOSE_CURVE_UNCONSTRAINED = ("unconstrained: lift = linear * u + quadratic * u^2 with "
                            "u = ln(1 + c), least squares on the same mean lifts; 0 at dose 0 and "
                            "free to bend (linear < 0 < quadratic: a dip, then a rise)")
NON_MONOTONE_RULE = ("non-monotone: the lifts both rise and fall beyond their intervals, i.e. some "
                     "level's interval lies wholly above a smaller dose's and some level's wholly "
                     "below a smaller dose's (dose 0: the point 0)")
# The sidedness of a ladder's trend test (recipe statistics.dose_trend) and the direction each
# tests. Two-sided by default: a contamination can lower a score as well as raise it, and a
# one-sided test cannot see a falling ladder.
DOSE_TREND_SIDES = {"two-sided": "rising or falling", "greater": "rising", "less": "falling"}
DEFAULT_DOSE_TREND = "two-sided"
DOSE_BAND = ("percentile band of both curves refitted to every resample: seeds drawn with "
             "replacement, then each drawn seed's samples within each level (dose 0's draw "
             "shared by the seed's levels); with few seeds narrower than the level intervals")
DOSE_BOOTSTRAP = 500  # resamples for the band (each refits both curves)
DOSE_GRID = (81, 60)  # midpoints (ln c, 3 beyond the ladder each side) x slopes (0.05-20)
TOP_BOUND = 4  # |top| at most 4 x the largest |lift|: a curve still rising at the top dose
#               would otherwise put its plateau anywhere
ONE_MODEL_TEST = "Mann-Whitney U over the level's and dose 0's samples of one model"


def _logistic(log_doses: Any, top: float, log_mid: float, slope: float) -> Any:
    import numpy as np

    return top / (1.0 + np.exp(-slope * (log_doses - log_mid)))


def _grid_fits(log_doses: Any, lifts: Any) -> tuple[Any, Any, Any, Any]:
    """DOSE_CURVE fitted to each row of `lifts` (resamples x levels) over a grid of midpoints
    and slopes, with the least-squares top in closed form (for a fixed shape s, top = s.y / s.s):
    vectorised, so hundreds of refits take milliseconds. Returns top, ln midpoint, slope and
    residual sum of squares per row."""
    import numpy as np

    x = np.asarray(log_doses, dtype=float)
    mids = np.linspace(x.min() - 3, x.max() + 3, DOSE_GRID[0])
    slopes = np.concatenate([[0.0], np.geomspace(0.05, 20.0, DOSE_GRID[1] - 1)])
    mid, slope = (a.ravel() for a in np.meshgrid(mids, slopes, indexing="ij"))
    shapes = 1.0 / (1.0 + np.exp(-slope[:, None] * (x[None, :] - mid[:, None])))  # grid x levels
    norms = (shapes ** 2).sum(axis=1)
    y = np.atleast_2d(np.asarray(lifts, dtype=float))
    projections = y @ shapes.T
    bound = TOP_BOUND * np.maximum(np.abs(y).max(axis=1), 1e-9)[:, None]
    tops = np.clip(projections / norms, -bound, bound)
    sse = (y ** 2).sum(axis=1)[:, None] - 2 * tops * projections + tops ** 2 * norms
    best = np.argmin(sse, axis=1)
    rows = np.arange(len(y))
    return tops[rows, best], mid[best], slope[best], np.maximum(sse[rows, best], 0.0)


def fit_dose_curve(doses: Sequence[float], lifts: Sequence[float]) -> dict[str, float] | None:
    """DOSE_CURVE fitted to (copies per corpus epoch > 0, mean lift) points: top, midpoint
    (copies per epoch at half of top) and slope, with the root-mean-square residual; the grid's
    best fit polished by least squares. None where it cannot be fitted (fewer than two levels)."""
    import warnings

    import numpy as np
    from scipy.optimize import OptimizeWarning, curve_fit

    x = np.log(np.asarray(doses, dtype=float))
    y = np.asarray(lifts, dtype=float)
    if len(x) < 2 or not np.all(np.isfinite(y)):
        return None
    top, log_mid, slope, _sse = (float(v[0]) for v in _grid_fits(x, y))
    params = np.array([top, log_mid, slope])
    span = TOP_BOUND * max(float(np.abs(y).max()), 1e-9)
    low, high = [-span, x.min() - 3, 0.0], [span, x.max() + 3, 20.0]
    try:
        with warnings.catch_warnings():  # 3 parameters from 3 to 5 levels: no covariance, fine
            warnings.simplefilter("ignore", OptimizeWarning)
            polished, _ = curve_fit(_logistic, x, y, p0=np.clip(params, low, high),
                                    bounds=(low, high), maxfev=2000)
        if np.sum((y - _logistic(x, *polished)) ** 2) <= np.sum((y - _logistic(x, *params)) ** 2):
            params = polished
    except (RuntimeError, ValueError):
        pass  # the grid's fit stands
    residual = y - _logistic(x, *params)
    return {"top": float(params[0]), "midpoint": float(np.exp(params[1])),
            "slope": float(params[2]), "rmse": float(np.sqrt(np.mean(residual ** 2)))}


def dose_curve_values(fit: dict[str, float], doses: Sequence[float]) -> list[float]:
    import numpy as np

    return [float(v) for v in _logistic(np.log(np.asarray(doses, dtype=float)), fit["top"],
                                        math.log(fit["midpoint"]), fit["slope"])]


def _bend_basis(doses: Any) -> Any:
    import numpy as np

    u = np.log1p(np.asarray(doses, dtype=float))
    return np.stack([u, u ** 2], axis=-1)


def fit_unconstrained_curve(doses: Sequence[float], lifts: Sequence[float]
                            ) -> dict[str, float | None] | None:
    """DOSE_CURVE_UNCONSTRAINED fitted to (copies per corpus epoch > 0, mean lift) points:
    linear and quadratic coefficients, the copies per epoch where its slope turns (None when it
    does not turn above dose 0) and the root-mean-square residual. None with fewer than two
    levels.

    Why this curve: it is the simplest one that can bend either way (a U, as Jiang et al. report
    for low doses, or a rise and decline) while keeping what the monotone curve assumes of dose
    0, a lift of 0 (dose 0 is the reference the lifts are measured from); a dip below dose 0 at
    low doses followed by a rise is then a curve, not a residual. In u = ln(1 + c) a geometric
    ladder is evenly spread, as in the monotone curve's ln c, and dose 0 sits at u = 0. It has
    two parameters, one fewer than the logistic, so a lower rmse than the monotone fit is not
    bought with freedom; and it is linear in them, so the fit is exact least squares, vectorised
    for the band's refits (unconstrained_refits)."""
    import numpy as np

    y = np.asarray(lifts, dtype=float)
    if len(y) < 2 or not np.all(np.isfinite(y)):
        return None
    basis = _bend_basis(doses)
    (linear, quadratic), *_rest = np.linalg.lstsq(basis, y, rcond=None)
    turn = -linear / (2 * quadratic) if quadratic else 0.0
    residual = y - basis @ np.array([linear, quadratic])
    return {"linear": float(linear), "quadratic": float(quadratic),
            "turning_point": float(np.expm1(turn)) if turn > 0 else None,
            "rmse": float(np.sqrt(np.mean(residual ** 2)))}


def unconstrained_curve_values(fit: dict[str, Any], doses: Sequence[float]) -> list[float]:
    import numpy as np

    return [float(v) for v in _bend_basis(doses) @ np.array([fit["linear"], fit["quadratic"]])]


def dose_turns(levels: Sequence[tuple[float, float | None, float | None]]) -> dict[str, Any]:
    """(dose, interval low, interval high) of a ladder's injected levels -> NON_MONOTONE_RULE:
    rises and falls ([smaller dose, larger dose] whose intervals do not overlap; dose 0 enters
    as the point 0) and the flag; None where a level has no interval."""
    if any(low is None or high is None for _dose, low, high in levels):
        return {"non_monotone": None, "rises": [], "falls": []}
    points = [(0, 0.0, 0.0)] + sorted(levels)
    rises = [[a, b] for i, (a, _al, a_high) in enumerate(points)
             for b, b_low, _bh in points[i + 1:] if b_low > a_high]
    falls = [[a, b] for i, (a, a_low, _ah) in enumerate(points)
             for b, _bl, b_high in points[i + 1:] if b_high < a_low]
    return {"non_monotone": bool(rises and falls), "rises": rises, "falls": falls}


def one_model_rank_test(level: Sequence[float], held_out: Sequence[float], alternative: str
                        ) -> tuple[float, str]:
    """(p, test) of one model's level samples against its dose-0 samples: ONE_MODEL_TEST. The
    levels are random groups of samples, so this is a randomisation test, about this model;
    exact (ties kept as midranks) up to EXACT_SPLITS splits of the pooled samples."""
    from scipy.stats import mannwhitneyu

    if math.comb(len(level) + len(held_out), len(level)) <= EXACT_SPLITS:
        return permutation_mann_whitney(level, held_out, alternative)[1], \
            f"{ONE_MODEL_TEST}, {alternative}, exact"
    result = mannwhitneyu(list(level), list(held_out), alternative=alternative, method="asymptotic")
    return float(result.pvalue), f"{ONE_MODEL_TEST}, {alternative}, asymptotic"


def _resampled_lifts(per_seed: dict[Any, dict[int, dict[Any, float]]], doses: Sequence[int],
                     resamples: int, rng: Any) -> Any:
    """Each resample's mean lift per level (resamples x doses): k seeds drawn with replacement,
    then each drawn seed's samples within each level, its dose-0 draw shared by its levels."""
    import numpy as np

    seeds = list(per_seed)
    k = len(seeds)
    shape = (resamples, k)
    by_seed = []
    for s in seeds:
        held = _resampled_effects([(1.0, per_seed[s][0])], shape, rng)
        by_seed.append(np.stack([_resampled_effects([(1.0, per_seed[s][d])], shape, rng) - held
                                 for d in doses], axis=-1))
    drawn = np.stack(by_seed)[rng.integers(0, k, shape), np.arange(resamples)[:, None],
                              np.arange(k)[None, :]]
    return drawn.mean(axis=1)


def dose_band(per_seed: dict[Any, dict[int, dict[Any, float]]], grid: Sequence[float],
              resamples: int = DOSE_BOOTSTRAP, level: float = 0.95, seed: int = 0
              ) -> dict[str, Any] | None:
    """seed -> dose -> sample id -> score (dose 0 the held-out level; seeds lacking a level are
    left out) -> DOSE_BAND over `grid` (copies per corpus epoch > 0) for both curves. None with
    fewer than two injected levels or no seed that has them all."""
    import numpy as np

    doses = sorted({d for levels in per_seed.values() for d in levels if d > 0})
    complete = {s: levels for s, levels in per_seed.items()
                if all(levels.get(d) for d in [0] + doses)}
    if len(doses) < 2 or not complete or not len(grid):
        return None
    lifts = _resampled_lifts(complete, doses, resamples, np.random.default_rng(seed))
    tops, mids, slopes, _sse = _grid_fits(np.log(doses), lifts)
    at = np.asarray(grid, dtype=float)
    monotone = _logistic(np.log(at)[None, :], tops[:, None], mids[:, None], slopes[:, None])
    coefficients = np.linalg.pinv(_bend_basis(doses)) @ lifts.T  # 2 x resamples
    unconstrained = (_bend_basis(at) @ coefficients).T
    quantiles = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def spread(curves: Any) -> dict[str, list[float]]:
        low, high = np.percentile(curves, quantiles, axis=0)
        return {"low": low.tolist(), "high": high.tolist()}
    return {"copies_per_epoch": list(grid), "monotone": spread(monotone),
            "unconstrained": spread(unconstrained), "seeds": len(complete),
            "resamples": resamples}
