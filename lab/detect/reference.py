"""Reference-model ratio: the sample's loss under a model that never saw it minus its loss under
the probed model (the difference of log-perplexities, a likelihood ratio). What is merely easy
text is easy for both; what the probed model memorised is easy for it alone. The reference is the
study's own control or placebo model (same tokenizer, corpus and training, no injection), so no
outside model is needed.

Carlini et al., "Extracting Training Data from Large Language Models", USENIX Security 2021
(comparison to a second model); Mireshghallah et al., "Quantifying Privacy Risks of Masked
Language Models Using Membership Inference Attacks", EMNLP 2022 (likelihood ratio with a
reference model)."""
from __future__ import annotations

from typing import Any, Sequence

from lab.common import LabError
from lab.detect.context import DetectContext, mean


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    if ctx.reference is None:
        raise LabError("detector reference: no reference model (a study's control or placebo "
                       "model, or --reference)")
    own, theirs = ctx.sample_stats(samples), ctx.reference.sample_stats(samples)
    return [mean(a.logprob) - mean(b.logprob) for a, b in zip(own, theirs)]
