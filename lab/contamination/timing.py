"""When in pre-training an arm's injected copies are trained on (`injection.timing`).

A timing is a window of pre-training, in fractions of its optimizer steps: every copy of a
timed sample is trained on at a step inside it (lab.train.schedule places them). `uniform` is
the default and the seed study's: the corpus is shuffled as it always was, no window is kept
and nothing about the arm changes. Several timings make levels inside one model, as a dose
ladder does: the injected samples are split into as many seeded, equal-size groups (duplicate
groups kept whole), each trained on inside its own window, so one model holds samples last
seen at different times.

The corpus itself is the same under every timing (same documents, same shards, same
corpus_sha256); the manifest's `timing_levels` tells pre-training which sample is trained when.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from lab.common import LabError

# name -> (form of its spec, what it means); a spec is NAME or NAME:ARGUMENT.
TIMINGS = {
    "uniform": ("uniform", "spread over all of pre-training (the corpus's own shuffled order)"),
    "early": ("early:X", "every copy within the first X of pre-training's steps (0 < X < 1)"),
    "late": ("late:X", "every copy within the last X of pre-training's steps (0 < X < 1)"),
    "window": ("window:A-B", "every copy within steps A to B, as fractions of pre-training "
                             "(0 <= A < B <= 1)"),
}
DEFAULT = ("uniform",)
SPEC_HELP = "; ".join(f"{form}: {meaning}" for form, meaning in TIMINGS.values())


@dataclass(frozen=True)
class Timing:
    spec: str
    start: float  # fraction of pre-training's steps
    end: float

    def record(self) -> dict[str, Any]:
        return {"timing": self.spec, "window": [self.start, self.end]}


def parse_timing(spec: str, field: str = "--timing") -> Timing:
    """A timing spec (TIMINGS) as its window; a one-line error naming `field` otherwise."""
    text = str(spec).strip()
    name, _, argument = text.partition(":")
    if name not in TIMINGS:
        raise LabError(f"{field} {text}: unknown timing (choose from "
                       f"{', '.join(form for form, _ in TIMINGS.values())})")
    if name == "uniform":
        if argument:
            raise LabError(f"{field} {text}: uniform takes no argument")
        return Timing(text, 0.0, 1.0)
    try:
        if name == "window":
            low, high = (float(x) for x in argument.split("-"))
        else:
            share = float(argument)
            low, high = (0.0, share) if name == "early" else (1.0 - share, 1.0)
    except ValueError:
        raise LabError(f"{field} {text}: write it as {TIMINGS[name][0]}") from None
    if name != "window" and not 0 < float(argument) < 1:
        raise LabError(f"{field} {text}: X must be in (0, 1)")
    if not 0 <= low < high <= 1:
        raise LabError(f"{field} {text}: the window needs 0 <= A < B <= 1")
    return Timing(text, round(low, 12), round(high, 12))


def check_timing(specs: tuple[str, ...], doses: tuple[int, ...] | None,
                 field: str = "--timing") -> list[Timing]:
    """The parsed timings of one arm (its levels, in order), refusing what cannot be built."""
    if not specs:
        raise LabError(f"{field}: give at least one timing")
    timings = [parse_timing(spec, field) for spec in specs]
    if len({t.spec for t in timings}) != len(timings):
        raise LabError(f"{field} {','.join(specs)}: a timing is listed twice")
    if len(timings) > 1 and any(t.spec == "uniform" for t in timings):
        # "uniform" alone keeps the corpus's order; inside a ladder it would be a window of
        # everything, placed by the schedule: say so explicitly.
        raise LabError(f"{field} {','.join(specs)}: inside a ladder write the whole run as "
                       "window:0-1, not uniform")
    if len(timings) > 1 and doses and sum(1 for d in doses if d) > 1:
        raise LabError(f"{field} {','.join(specs)}: timing levels split the injected samples of "
                       "one dose; a ladder of several injecting doses takes one timing")
    return timings


def is_uniform(specs: tuple[str, ...] | list[str] | None) -> bool:
    return not specs or tuple(specs) == DEFAULT


def timing_groups(groups: list[list[int]], levels: int, seed: int) -> list[list[int]]:
    """`groups` (lists of positions that stay together) dealt into `levels` seeded, near-equal
    groups of positions (sorted), each level filled in turn from a seeded shuffle."""
    order = list(groups)
    random.Random(f"{seed}/timing").shuffle(order)
    total = sum(len(g) for g in order)
    out: list[list[int]] = [[] for _ in range(levels)]
    taken, position = 0, 0
    for level in range(levels):
        target = total if level == levels - 1 else round((level + 1) * total / levels)
        while taken < target and position < len(order):
            out[level].extend(order[position])
            taken += len(order[position])
            position += 1
    return [sorted(level) for level in out]
