"""The one rule for every interval the lab prints (INTERVAL_RULE): when an interval can be
estimated, why not where it cannot, an effect with its interval as every table writes it, and
an interval cut to the range the effect can take (with the mark that says so).

Apart from the estimators (lab.stats.intervals) because it is the part every table and report
applies to any interval, whatever made it; it needs nothing but `math`.
"""
from __future__ import annotations

import math
from typing import Sequence


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


# ---- an interval cut to the range the effect can take ----------------------------------
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
