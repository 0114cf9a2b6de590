"""Min-K%++: each token's log-probability standardised by the model's distribution at that
position, (log p(x_t) - mu_t) / sigma_t with mu_t and sigma_t the mean and standard deviation of
log p(z) for z drawn from that distribution; the mean of the k% lowest. A member sits at a mode
of the distribution (its tokens are local maxima of the likelihood), not merely at a high
probability. A position whose distribution is a point mass (sigma 0) counts 0.

Zhang et al., "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language
Models", ICLR 2025 (arXiv 2404.02936)."""
from __future__ import annotations

from typing import Any, Sequence

from lab.detect.context import DetectContext
from lab.detect.min_k import lowest_mean


def standardised(logprob: Sequence[float], mean: Sequence[float], std: Sequence[float]
                 ) -> list[float]:
    return [(lp - mu) / sigma if sigma > 1e-12 else 0.0
            for lp, mu, sigma in zip(logprob, mean, std)]


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    return [lowest_mean(standardised(s.logprob, s.mean, s.std), ctx.k)
            for s in ctx.sample_stats(samples)]
