"""The intervals the lab estimates: Welch's interval of a lift, Student's t over per-seed values,
the cluster bootstrap-t of a mean per-seed effect (seeds, then samples within a seed), one
model's expanded percentile bootstrap over its samples, and a simulated null study to calibrate
them on.

Each returns None where lab.stats.interval_rule says no interval can be estimated; the rule
itself, and how an interval prints, live there.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

from lab.stats.interval_rule import (NOT_FINITE, SAME_VALUES, ZERO_SPREAD, checked_interval,
                                     clipped, no_interval_reason)


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
