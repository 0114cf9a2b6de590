"""Dose-response: the monotone (logistic) and unconstrained curves fitted to a ladder's lifts,
their bootstrap band, where a ladder turns (NON_MONOTONE_RULE), the trend's sidedness and one
model's rank test of a level against dose 0.

Apart because only a dose ladder (lab.study.dose, lab.study.timing) uses it, and it is the
largest single concern of the statistics.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from lab.stats.intervals import _resampled_effects
from lab.stats.significance import EXACT_SPLITS, permutation_mann_whitney


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
