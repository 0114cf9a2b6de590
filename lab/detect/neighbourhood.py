"""Neighbourhood comparison: the mean loss of the sample's neighbours minus its own loss. A
neighbour keeps the sample's meaning and form but not its text: here the lab's consistent
identifier renaming (`lab perturb`, lab.llm.perturb), one seeded renaming per neighbour, in
every code side (natural language sides get the same renames where a name occurs verbatim). A
memorised sample is much likelier than its renamed twins; a merely typical one is not. A sample
with nothing to rename is its own neighbour and scores 0.

Mattern et al., "Membership Inference Attacks against Language Models via Neighbourhood
Comparison", Findings of ACL 2023."""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Sequence

from lab.detect.context import DetectContext, mean

NL_LANGUAGES = ("nl", "en", "english")
TOLERANCE = 0.15  # how far the renames may change a side's length (lab perturb's default)


def neighbours(ctx: DetectContext, sample: Any) -> list[Any]:
    from lab.llm.perturb import perturb_record

    sides = ("input", "output")
    code = [side for side, language in zip(sides, ctx.languages)
            if language.lower() not in NL_LANGUAGES]
    nl = [side for side in sides if side not in code]
    record = {"input": sample.input, "output": sample.output}
    out = []
    for n in range(ctx.neighbours):
        rng = random.Random(f"neighbour:{ctx.seed}:{sample.id}:{n}")
        new, _renames, _reason = perturb_record(record, code, nl, rng, TOLERANCE)
        out.append(dataclasses.replace(sample, input=new["input"], output=new["output"]))
    return out


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    own = ctx.sample_stats(samples)
    twins = [neighbours(ctx, sample) for sample in samples]
    twin_stats = ctx.sample_stats([t for group in twins for t in group])
    scores, at = [], 0
    for stats, group in zip(own, twins):
        theirs = twin_stats[at:at + len(group)]
        at += len(group)
        # their mean loss minus its own: its log-probability minus theirs
        scores.append(mean(stats.logprob) - mean([mean(t.logprob) for t in theirs])
                      if theirs else 0.0)
    return scores
