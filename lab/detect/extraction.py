"""Extraction: the sample's output continued greedily from its input, `<s> input <SEP>`, scored
by sentence BLEU against the true output (0 to 100). A model that memorised the pair
reproduces it. Causal models only.

Carlini et al., "Extracting Training Data from Large Language Models", USENIX Security 2021;
for benchmark contamination, Golchin and Surdeanu, "Time Travel in LLMs: Tracing Data
Contamination in Large Language Models", ICLR 2024 (completion of a test instance from its
first part)."""
from __future__ import annotations

from typing import Any, Sequence

from lab.detect.context import DetectContext


def continuations(ctx: DetectContext, samples: Sequence[Any], decoding: Any,
                  inputs: Sequence[str] | None = None) -> list[str]:
    from lab.eval import generate as generation
    from lab.models import positions_of

    positions = min(positions_of(ctx.model.config), ctx.max_tokens)
    longest = max(len(ctx.tokenizer(" " + s.output, add_special_tokens=False)["input_ids"])
                  for s in samples)
    return generation.generate(ctx.model, ctx.tokenizer, "causal-lm",
                               list(inputs if inputs is not None else [s.input for s in samples]),
                               decoding, (positions - 3) // 2, longest + 1, ctx.batch_size,
                               positions)


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    from lab.eval import metrics
    from lab.tasks import Decoding

    return [float(b) for b in metrics.bleu_per_sample([s.output for s in samples],
                                                      continuations(ctx, samples, Decoding()))]
