"""Min-K% Prob: the mean log-probability of the k% least likely tokens of the sample (k = 20%
by default). A member has fewer outlier tokens of very low probability.

Shi et al., "Detecting Pretraining Data from Large Language Models", ICLR 2024."""
from __future__ import annotations

import math
from typing import Any, Sequence

from lab.detect.context import DetectContext


def lowest_mean(values: Sequence[float], k: float) -> float:
    """Mean of the ceil(k * n) smallest values."""
    lowest = sorted(values)[: max(1, math.ceil(k * len(values)))]
    return sum(lowest) / len(lowest)


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    return [lowest_mean(stats.logprob, ctx.k) for stats in ctx.sample_stats(samples)]
