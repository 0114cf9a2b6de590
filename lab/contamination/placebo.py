"""A placebo's samples: the benchmark's other splits, less every sample the audit finds in the
injected split (exactly or as a near-duplicate, either side), matched one by one to the test
samples its base arm injects (by length, or a seeded uniform draw).

`disjoint_from` and `split_sides_index` are also the probe's rule for never-seen reference
samples (lab.detect.probe): one rule for both.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.codetokens import code_tokens
from lab.common import DataNotFound, LabError
from lab.contamination import soft
from lab.contamination.audit import audit_samples
from lab.contamination.config import InjectConfig
from lab.contamination.overlap import OverlapIndex
from lab.contamination.selection import duplicate_groups
from lab.contamination.settings import Setting
from lab.corpora import Loaded, Sample, check_references, get_spec, load_samples
from lab.corpora.base import DatasetSpec


def placebo_splits(benchmark: str, split: str, chosen: tuple[str, ...] | None = None
                   ) -> tuple[str, ...]:
    """The splits a placebo draws from: `chosen`, else the benchmark's others; never a test
    split nor the injected one."""
    spec = get_spec(benchmark)
    barred = (spec.canonical_split(split), "test")
    if chosen is None:
        return tuple(s for s in spec.splits if s not in barred)
    if not chosen:
        raise LabError("--placebo-from: name at least one split")
    picked: dict[str, None] = {}  # canonical names, first mention first
    for name in chosen:
        try:
            canonical = spec.canonical_split(name)
        except LabError:
            raise LabError(f"--placebo-from {name}: {benchmark} has no such split (choose from "
                           f"{', '.join(s for s in spec.splits if s not in barred)})") from None
        if canonical in barred:
            raise LabError(f"--placebo-from {name}: a placebo never draws from the test split or "
                           f"the injected one ({barred[0]})")
        picked[canonical] = None
    return tuple(picked)


@dataclass
class PlaceboPool:
    """Train/valid samples a placebo may inject, and how they were found."""

    samples: list[Sample]           # eligible, in split order
    index: OverlapIndex             # the injected split's sides: what a placebo must not touch
    parts: list[Loaded]
    record: dict[str, Any]


def split_sides_index(tests: list[Sample]) -> OverlapIndex:
    """Both sides of every test sample, as `lab audit --against benchmark:test` indexes them."""
    return OverlapIndex([(f"{s.id}/input", s.input) for s in tests]
                        + [(f"{s.id}/output", s.output) for s in tests if s.output.strip()])


def disjoint_from(candidates: list[Sample], index: OverlapIndex, spec: DatasetSpec,
                  exclude: frozenset[str] = frozenset()) -> tuple[list[Sample], dict[str, Any]]:
    """The candidates (non-test samples) that may stand for never-seen data: those the audit
    finds neither exactly nor as near-duplicates of any side in `index` (a test split's, from
    `split_sides_index`; either side of the candidate), one per group of candidates sharing a
    side verbatim (in split order). One rule for the placebo pool and the probe's reference
    samples. A group holding an `exclude`d id goes whole: its members share a side verbatim with
    a sample the model trained on. Returns (eligible, the record of how they were found)."""
    rows = audit_samples(candidates, index, spec.input_language, spec.output_language)
    overlapping = {row["id"] for row in rows if row["leaked"]}
    exact = sum(row["exact"] for row in rows)
    clean = [s for s in candidates if s.id not in overlapping]
    groups = [g for g in duplicate_groups(clean) if not any(clean[i].id in exclude for i in g)]
    kept = sorted(min(group) for group in groups)
    eligible = [clean[i] for i in kept]
    record = {
        "candidates": len(candidates), "overlapping_test": len(overlapping),
        "overlapping_test_exact": exact, "overlapping_test_near_only": len(overlapping) - exact,
        **({"excluded": len(clean) - sum(len(g) for g in groups)} if exclude else {}),
        "duplicates_dropped": sum(len(g) for g in groups) - len(eligible),
        "eligible": len(eligible),
        "method": "lab audit of every candidate against the whole injected split (both sides): "
                  "exact after normalisation, and near-duplicates (SourcererCC-style) on code "
                  "sides; one sample kept per group sharing a side verbatim",
    }
    return eligible, record


@dataclass(frozen=True)
class PlaceboSplits:
    """The benchmark's splits a placebo draws from, as far as they are here: the loaded ones and
    the names of those missing (CONCODE's train offline)."""

    parts: list[Loaded]
    missing: list[str]


def load_placebo_splits(cfg: InjectConfig) -> PlaceboSplits:
    """Read the splits `placebo_splits` names for the config; a missing one is named, not fatal
    (`placebo_pool` refuses when none is here)."""
    parts: list[Loaded] = []
    missing: list[str] = []
    for split in placebo_splits(cfg.benchmark, cfg.split, cfg.placebo_from):
        try:
            parts.append(load_samples(cfg.benchmark, split, cfg.corpora_dir))
        except DataNotFound:
            missing.append(split)
    return PlaceboSplits(parts, missing)


def placebo_pool(cfg: InjectConfig, spec: DatasetSpec, setting: Setting, tests: list[Sample],
                 splits: PlaceboSplits) -> PlaceboPool:
    """Samples of the benchmark's other splits (`splits`, read by `load_placebo_splits`) that
    the audit finds neither exactly nor as near-duplicates in `tests` (the whole injected split,
    on either side), one per group of samples sharing a side verbatim (`disjoint_from`). Splits
    missing here are named in the record."""
    parts, missing = splits.parts, splits.missing
    if not parts:  # every wanted split is missing
        raise LabError(f"--setting {cfg.setting}: a placebo draws from {cfg.benchmark}'s "
                       f"{', '.join(missing) or 'non-test'} split(s), and none is available")
    if setting.needs_output:
        for part in parts:
            check_references(part)
    candidates = [s for part in parts for s in part.records]
    index = split_sides_index(tests)
    eligible, found = disjoint_from(candidates, index, spec)
    by_split = Counter(s.split for s in eligible)
    record = {"splits": [p.split for p in parts], "splits_missing": missing, **found,
              "eligible_by_split": {p.split: by_split[p.split] for p in parts}}
    return PlaceboPool(eligible, index, parts, record)


def choose_placebo(pool: PlaceboPool, selected: list[Sample], setting: Setting,
                   cfg: InjectConfig) -> list[Sample]:
    """One pool sample per selected test sample, the i-th standing for selected[i] (it takes
    that sample's dose): the nearest in length (--placebo-match length), else a seeded uniform
    draw in pool order (random)."""
    if len(selected) > len(pool.samples):
        raise LabError(
            f"--setting {cfg.setting}: {len(selected)} placebo samples needed, but "
            f"{cfg.benchmark} {' + '.join(pool.record['splits'])} holds only {len(pool.samples)} "
            f"samples disjoint from the {cfg.split} split (lower --samples or --fraction)")
    rng = random.Random(f"{cfg.seed}/placebo")
    if cfg.placebo_match == "random":
        picked = rng.sample(range(len(pool.samples)), len(selected))
        return [pool.samples[i] for i in sorted(picked)]
    matched = nearest_lengths([form_length(setting, s) for s in selected],
                              [form_length(setting, s) for s in pool.samples], rng)
    return [pool.samples[i] for i in matched]


def form_length(setting: Setting, sample: Sample) -> tuple[int, int]:
    """A sample's length as the arm injects it (one copy): lab code tokens of its documents,
    then their characters."""
    texts = [text for _side, text in soft.length_documents(setting, sample)]
    return sum(len(code_tokens(text)) for text in texts), sum(map(len, texts))


def nearest_lengths(targets: list[tuple[int, int]], candidates: list[tuple[int, int]],
                    rng: random.Random) -> list[int]:
    """For each target (tokens, characters), the index of a distinct candidate nearest in both:
    the smallest sum of the relative differences in tokens and in characters. Tokens alone gave
    200 CodeTrans test samples of 397 characters placebos of 420 (train holds more characters
    per code token than test: the share, hence the study's BPE token share, 5-8% above the
    arm's); tokens first and characters only among equal token counts left a few samples 40%
    off in characters where the pool was small (4 samples, or the -paper subsets' valid split:
    12.7% and 6.7% off in share). Greedy, so the targets take their turn in a seeded random
    order (none is favoured by its position), and equally near candidates are told apart by a
    seeded random key."""
    turns = list(range(len(targets)))
    rng.shuffle(turns)
    tokens, chars = (np.asarray(column, dtype=float).reshape(-1)
                     for column in zip(*candidates)) if candidates else (np.zeros(0),) * 2
    keys = np.asarray([rng.random() for _ in candidates])
    taken = np.zeros(len(candidates), dtype=bool)
    matched = [0] * len(targets)
    for t in turns:
        want_tokens, want_chars = targets[t]
        distance = (np.abs(tokens - want_tokens) / max(want_tokens, 1)
                    + np.abs(chars - want_chars) / max(want_chars, 1))
        distance[taken] = np.inf
        nearest = np.flatnonzero(distance == distance.min())
        chosen = int(nearest[np.argmin(keys[nearest])])
        taken[chosen] = True
        matched[t] = chosen
    return matched
