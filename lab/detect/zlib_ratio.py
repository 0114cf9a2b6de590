"""zlib ratio: the loss measured against how compressible the text is, so that text which is
easy for any model (repetitive, boilerplate) does not pass for a member: minus the loss divided
by the zlib-compressed size of the sample's documents, in bytes.

Carlini et al., "Extracting Training Data from Large Language Models", USENIX Security 2021
(section 5.2, "zlib entropy")."""
from __future__ import annotations

import zlib
from typing import Any, Sequence

from lab.detect.context import DetectContext, mean


def zlib_bytes(text: str) -> int:
    return len(zlib.compress(text.encode("utf-8")))


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    return [mean(stats.logprob) / zlib_bytes("\n".join(ctx.documents(sample)))
            for sample, stats in zip(samples, ctx.sample_stats(samples))]
