"""Power before compute: the exact sign-flip test (vectorised over many simulated studies), Holm
over the family, at a declared effect, spread, shape and correlation; the fewest seeds that
reach a planned power.

Apart because it plans a study rather than reads one: `lab study --dry-run` and the report's
questions state its numbers, and no measured score enters it.
"""
from __future__ import annotations

import math
from typing import Any

from lab.common import LabError
from lab.stats.conventions import ALPHA, POWER
from lab.stats.multiplicity import holm_rejections
from lab.stats.significance import SIGN_FLIP_EXACT


# ---- power before compute: the exact sign-flip test at a declared effect ----------------------
# "Seeds for 80% power" from a normal formula, (z_alpha + z_power)^2 / d^2, is optimistic here
# twice over: it takes the spread as known (z, not t) and the test as continuous, while an exact
# sign-flip test over K seeds has only 2^K patterns (issue 58: 8 seeds at d = 1 give 0.65, not
# 0.8). So the power is simulated with the test itself, Holm and all.
POWER_SIMULATIONS = 4000  # simulated studies: Monte Carlo error about 0.008 at a power of 0.7
POWER_RNG_SEED = 0
POWER_SEARCH_SEEDS = 40  # seeds_for_planned_power searches up to this many
# The power a dry run states is at a declared effect, never at an observed one. Defaults: a
# 2-point lift (BLEU) against a per-seed spread of 2 points (d = 1); the committed rq4 and rq5
# studies' per-seed effects spread 0.4-1.2 points in mean sentence BLEU and up to 2.7 in corpus
# BLEU.
SMALLEST_EFFECT = 2.0
PLANNING_SD = 2.0
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
