"""The order pre-training visits its packed sequences in, and the steps each injected sample was
trained at.

Uniform (every arm without `injection.timing`): each epoch is a permutation of the sequences
from a generator seeded with seed + epoch, the Trainer's (accelerate's seedable sampler) and the
plain loop's alike.

Timed (an arm with timing levels, lab.contamination.timing): the run is laid out as the uniform
run's slots, epoch after epoch, each slot trained at a known step. The uniform run's visits are
kept as they are, as a multiset: every sequence is visited as often as in the uniform run, so
the arm trains on the same data, as often. Only their places change: each visit of a sequence
holding a timed sample's document goes to a seeded random free slot whose step lies inside the
sample's window (narrowest windows first); the other visits fill the remaining slots in their
uniform order. An epoch is then N slots, not a permutation (a sequence may recur in an epoch and
miss another), and a window too small for its visits is refused before training. A run that
stops inside an epoch (max_steps) trains only some sequences there; a timed sequence is still
trained once in it, in place of that epoch's last clean visit, so a timed sample is trained once
per epoch reached whatever its window.

A slot's step: one step takes batch_size x grad_accum x world_size sequences, the last step of
an epoch the rest; with several ranks the Trainer deals batches round-robin and completes the
epoch's last round from its first sequences (accelerate's even_batches), which the exposures
count and timed visits avoid.

`exposures` maps each injected sample to the steps its documents were trained at, one entry per
visit; tests/test_timing.py checks them against what the model really saw, also across a resume.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lab.common import LabError


@dataclass(frozen=True)
class Stream:
    """How a run turns sequence slots into steps."""
    sequences: int
    batch_size: int
    grad_accum: int
    world_size: int
    steps: int  # the run's last step (the Trainer's max_steps)

    @property
    def per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.world_size

    @property
    def steps_per_epoch(self) -> int:
        per_rank = math.ceil(self.sequences / (self.batch_size * self.world_size))
        return max(1, math.ceil(per_rank / self.grad_accum))

    @property
    def slots_per_epoch(self) -> int:
        """Slots one epoch trains (with several ranks, padded to whole rounds of batches)."""
        if self.world_size == 1:
            return self.sequences
        return math.ceil(self.sequences / (self.batch_size * self.world_size)) \
            * self.batch_size * self.world_size

    @property
    def epochs(self) -> int:
        return math.ceil(self.steps / self.steps_per_epoch)

    def step_of(self, epoch: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """1-based step of slot `slot` of epoch `epoch`."""
        return epoch * self.steps_per_epoch + slot // self.per_step + 1


def total_steps(sequences: int, batch_size: int, grad_accum: int, world_size: int, epochs: float,
                max_steps: int) -> int:
    """The run's steps, as the Trainer counts them (max_steps, else ceil(epochs x steps per
    epoch))."""
    if max_steps > 0:
        return max_steps
    per_epoch = Stream(sequences, batch_size, grad_accum, world_size, 1).steps_per_epoch
    return math.ceil(epochs * per_epoch)


def uniform_order(sequences: int, seed: int, epoch: int) -> list[int]:
    """The sequences of one epoch in training order (accelerate's SeedableRandomSampler: a
    randperm from a generator seeded with seed + epoch, as the Trainer draws it)."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(sequences, generator=generator).tolist()


def window_steps(window: Sequence[float], steps: int) -> tuple[int, int]:
    """First and last step lying wholly inside the window (fractions of `steps`)."""
    start, end = window
    return math.ceil(start * steps - 1e-9) + 1, math.floor(end * steps + 1e-9)


def _rng(seed: int) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}/timing-order".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def timed_orders(stream: Stream, seed: int, level_of: Sequence[int | None],
                 windows: Sequence[tuple[float, float]], names: Sequence[str]) -> list[list[int]]:
    """Each epoch's N sequence slots with every visit of a sequence of level k (level_of[seq])
    inside windows[k]; see the module docstring."""
    n, epochs = stream.sequences, stream.epochs
    uniform = np.array([uniform_order(n, seed, e) for e in range(epochs)], dtype=np.int64)
    epoch = np.repeat(np.arange(epochs), n)
    slot = np.tile(np.arange(n), epochs)
    step = stream.step_of(epoch, slot)
    trained = step <= stream.steps
    # With several ranks the first slots of each epoch are trained again at its end: a timed
    # visit there would be trained outside its window.
    echoed = slot < stream.slots_per_epoch - n
    flat = uniform.reshape(-1).copy()
    levels = np.array([-1 if lv is None else lv for lv in level_of], dtype=np.int64)
    _visit_every_timed_sequence_in_the_last_epoch(flat, levels, trained, epoch, epochs - 1)
    visit_level = levels[flat]
    free = trained.copy()
    out = flat.copy()
    placed = np.zeros(len(flat), dtype=bool)
    rng = _rng(seed)
    spans = [window_steps(w, stream.steps) for w in windows]
    room = [int(np.sum(trained & ~echoed & (step >= a) & (step <= b))) for a, b in spans]
    for k in sorted(range(len(windows)), key=lambda k: (room[k], k)):
        visits = flat[trained & (visit_level == k)]
        if not len(visits):
            continue
        first, last = spans[k]
        eligible = np.flatnonzero(free & ~echoed & (step >= first) & (step <= last))
        if len(eligible) < len(visits):
            raise LabError(
                f"injection.timing {names[k]}: steps {first}-{last} of {stream.steps} hold "
                f"{len(eligible)} free sequence slots for the level's {len(visits)} visits "
                "(widen the window, train longer or inject less)")
        chosen = np.sort(rng.choice(eligible, size=len(visits), replace=False))
        out[chosen] = rng.permutation(visits)
        free[chosen] = False
        placed[chosen] = True
    clean = flat[trained & (visit_level < 0)]
    rest = np.flatnonzero(free)
    if len(rest) != len(clean):  # the slots left are exactly the clean visits' count
        raise AssertionError(f"{len(rest)} slots for {len(clean)} clean visits")
    out[rest] = clean
    return out.reshape(epochs, n).tolist()


def _visit_every_timed_sequence_in_the_last_epoch(flat: np.ndarray, levels: np.ndarray,
                                                  trained: np.ndarray, epoch: np.ndarray,
                                                  last: int) -> None:
    """A run that stops inside an epoch trains only some sequences in it: there a timed sequence
    the uniform order leaves out takes the place of the epoch's last clean visit, so every timed
    sample is trained once in every epoch the run reaches, as in a whole epoch."""
    in_last = trained & (epoch == last)
    seen = set(flat[in_last].tolist())
    missing = [int(s) for s in np.flatnonzero(levels >= 0) if int(s) not in seen]
    if not missing:
        return
    clean = np.flatnonzero(in_last & (levels[flat] < 0))[::-1]
    if len(clean) < len(missing):
        raise LabError(f"injection.timing: the last epoch's {int(in_last.sum())} trained slots "
                       f"cannot hold every timed sequence ({len(missing)} missing)")
    flat[clean[:len(missing)]] = missing


def exposures(stream: Stream, order_of: Any, samples_of: Sequence[Sequence[str]]
              ) -> dict[str, list[int]]:
    """Injected sample id -> the steps (sorted, one per visit) its documents were trained at.
    `order_of(epoch)` gives an epoch's sequence slots; samples_of[seq] the injected samples
    whose documents sequence `seq` holds."""
    n = stream.sequences
    found: dict[str, list[int]] = {}
    timed = [i for i, s in enumerate(samples_of) if s]
    if not timed:
        return found
    holds = np.zeros(n, dtype=bool)
    holds[timed] = True
    slots = np.arange(stream.slots_per_epoch)
    for epoch in range(stream.epochs):
        order = np.asarray(order_of(epoch), dtype=np.int64)
        # slots past N repeat the epoch's first ones (several ranks; accelerate's even_batches)
        seqs = order[slots % n]
        steps = stream.step_of(epoch, slots)
        keep = (steps <= stream.steps) & holds[seqs]
        for seq, step in zip(seqs[keep].tolist(), steps[keep].tolist()):
            for sample in samples_of[seq]:
                found.setdefault(sample, []).append(step)
    return {sample: sorted(steps) for sample, steps in sorted(found.items())}


def exposure_summary(found: dict[str, list[int]], steps: int,
                     groups: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Per group of samples (all injected samples: "all"): visits, the median first and last
    step of exposure and the median steps trained after the last exposure."""
    groups = groups or {"all": sorted(found)}
    out = {}
    for name, ids in groups.items():
        seen = [found[i] for i in ids if found.get(i)]
        if not seen:
            continue
        last = [s[-1] for s in seen]
        out[name] = {"samples": len(seen), "visits": sum(len(s) for s in seen),
                     "median_first_step": float(np.median([s[0] for s in seen])),
                     "median_last_step": float(np.median(last)),
                     "median_steps_since_last": float(np.median([steps - x for x in last]))}
    return out


class TimedSampler:
    """A timed run's epochs as the Trainer's sampler: the epoch is set before each epoch's loader
    starts (pretrain's EpochTracker; accelerate's set_epoch too), so a resume picks up the
    epoch it stopped in."""

    def __init__(self, orders: list[list[int]]):
        self.orders, self.epoch = orders, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.orders[0])

    def __iter__(self):
        return iter(self.orders[min(self.epoch, len(self.orders) - 1)])


@dataclass
class DataOrder:
    """A run's data order: uniform (orders None) or timed, and what it trains when."""
    stream: Stream
    seed: int
    orders: list[list[int]] | None
    samples_of: list[list[str]]  # per sequence, the injected samples it holds
    timing: list[dict[str, Any]] | None  # the corpus's timing levels

    def order_of(self, epoch: int) -> list[int]:
        if self.orders is not None:
            return self.orders[epoch]
        return uniform_order(self.stream.sequences, self.seed, epoch)

    def record(self) -> dict[str, Any]:
        """The manifest's `exposures`: how the order was made, each timing level's steps, and
        per injected sample the steps it was trained at, with a summary."""
        found = exposures(self.stream, self.order_of, self.samples_of)
        steps = self.stream.steps
        levels = groups = None
        if self.timing:
            levels = [{"timing": lv["timing"], "window": lv["window"],
                       "steps": list(window_steps(lv["window"], steps))} for lv in self.timing]
            groups = {lv["timing"]: lv["sources"] for lv in self.timing}
        return {"order": "uniform" if self.orders is None else "timed", "steps": steps,
                "steps_per_epoch": self.stream.steps_per_epoch,
                "sequences_per_step": self.stream.per_step,
                **({"levels": levels} if levels else {}),
                "summary": exposure_summary(found, steps, groups),
                "by_sample": found}


def document_levels(injected: Sequence[str | None], timing: list[dict[str, Any]] | None
                    ) -> list[int | None] | None:
    """Each document's timing level (its injected sample's; None for a base document), or None
    when the corpus has no timing levels."""
    if not timing:
        return None
    level_of_sample = {s: k for k, lv in enumerate(timing) for s in lv["sources"]}
    return [level_of_sample.get(s) if s else None for s in injected]


def plan_data_order(sequences: list[list[int]], injected: Sequence[str | None], seed: int,
                    batch_size: int, grad_accum: int, world_size: int, epochs: float,
                    max_steps: int, timing: list[dict[str, Any]] | None) -> DataOrder:
    """The data order of a run over packed `sequences` (document indices; injected[d]: the
    injected sample of document d, or None), timed when the corpus has timing levels."""
    n = len(sequences)
    stream = Stream(n, batch_size, grad_accum, world_size,
                    total_steps(n, batch_size, grad_accum, world_size, epochs, max_steps))
    samples_of = [[injected[d] for d in seq if injected[d]] for seq in sequences]
    orders = None
    if timing:
        levels = document_levels(injected, timing)
        level_of = [next((levels[d] for d in seq if levels[d] is not None), None)
                    for seq in sequences]
        orders = timed_orders(stream, seed, level_of, [tuple(lv["window"]) for lv in timing],
                              [lv["timing"] for lv in timing])
    return DataOrder(stream, seed, orders, samples_of, timing)
