"""Output peakedness (CDD): from each sample's input, one greedy output and N sampled ones
(temperature 0.8); the score is the share of sampled outputs within a token edit distance of
alpha x l of the greedy one, l the longest of them in tokens (alpha = 0.05). A contaminated
model's output distribution collapses onto the memorised answer. Causal models only.

Dong et al., "Generalization or Memorization: Data Contamination and Trustworthy Evaluation for
Large Language Models", Findings of ACL 2024."""
from __future__ import annotations

from typing import Any, Sequence

from lab.detect.context import DetectContext
from lab.detect.extraction import continuations

TEMPERATURE = 0.8


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def peakedness(greedy: list[int], sampled: list[list[int]], alpha: float) -> float:
    longest = max([len(greedy), *(len(s) for s in sampled)])
    return sum(edit_distance(s, greedy) <= alpha * longest for s in sampled) / len(sampled)


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    import torch

    from lab.tasks import Decoding

    greedy = continuations(ctx, samples, Decoding())
    torch.manual_seed(ctx.seed)
    repeated = [s.input for s in samples for _ in range(ctx.cdd_samples)]
    drawn = continuations(ctx, samples, Decoding(mode="sample", temperature=TEMPERATURE,
                                                 top_p=1.0, top_k=0), inputs=repeated)

    def ids(text: str) -> list[int]:
        return ctx.tokenizer(text, add_special_tokens=False)["input_ids"]

    n = ctx.cdd_samples
    return [peakedness(ids(g), [ids(t) for t in drawn[i * n:(i + 1) * n]], ctx.cdd_alpha)
            for i, g in enumerate(greedy)]
