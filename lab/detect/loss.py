"""Loss: the mean log-probability of the sample's tokens as injected (minus the loss; the
perplexity's logarithm, negated). Trained-on text has a lower loss.

Yeom, Giacomelli, Fredrikson and Jha, "Privacy Risk in Machine Learning: Analyzing the Connection
to Overfitting", CSF 2018; as a language-model membership score, Carlini et al., "Extracting
Training Data from Large Language Models", USENIX Security 2021."""
from __future__ import annotations

from typing import Any, Sequence

from lab.detect.context import DetectContext, mean


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    return [mean(stats.logprob) for stats in ctx.sample_stats(samples)]
