"""Multiplicity: Holm-Bonferroni over a family of tests, as adjusted p-values (the report's
questions) and as rejections of many simulated families at once (the power planner).

Apart because both the questions of a finished study and the power of a planned one apply it.
"""
from __future__ import annotations

from typing import Any, Sequence

from lab.stats.conventions import ALPHA


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


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
