"""Which of a benchmark split's samples an arm injects, and in which groups: all of them, a
seeded fraction or the --test-ids list, the levels of a dose ladder and the timing levels.
Samples sharing a side verbatim always stay in one group (splitting them between the
injected and held-out halves would leak the held-out one), and every choice has its own seeded
stream, so that arms of one seed choose alike.
"""
from __future__ import annotations

import random

from lab.codetokens import whitespace_hash
from lab.common import LabError
from lab.contamination import timing as timing_table
from lab.contamination.config import InjectConfig
from lab.corpora import Sample
from lab.corpora.base import read_sample_ids


def dose_levels(samples: list[Sample], cfg: InjectConfig) -> list[list[int]]:
    """Sample indices (sorted) of each level of the ladder cfg.doses, in ladder order: seeded,
    equal-size groups that keep duplicate groups whole. The injecting levels are filled first,
    in ladder order, from the seeded order --fraction takes its samples in; the held-out level
    (dose 0) takes the rest, so [0, K] injects the samples --fraction 0.5 --repeat K does."""
    doses = list(cfg.doses or ())
    groups = duplicate_groups(samples)
    random.Random(f"{cfg.seed}/select").shuffle(groups)
    fill = [k for k, d in enumerate(doses) if d] + [k for k, d in enumerate(doses) if not d]
    levels: list[list[int]] = [[] for _ in doses]
    taken, position = 0, 0
    for rank, level in enumerate(fill):
        target = len(samples) if rank == len(fill) - 1 else round((rank + 1) * len(samples)
                                                                  / len(doses))
        while taken < target and position < len(groups):
            levels[level].extend(groups[position])
            taken += len(groups[position])
            position += 1
    empty = [doses[k] for k, level in enumerate(levels) if not level]
    if empty:
        raise LabError(f"--doses {','.join(map(str, doses))}: {len(samples)} samples (in "
                       f"{len(groups)} duplicate groups) leave dose {empty[0]} without samples "
                       "(take part with more samples or use fewer levels)")
    return [sorted(level) for level in levels]


def duplicate_groups(samples: list[Sample]) -> list[list[int]]:
    """Samples sharing a side verbatim form one group: splitting such a group between the
    injected and held-out halves would leak the 'held-out' one."""
    parent = list(range(len(samples)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[bytes, int] = {}
    for i, sample in enumerate(samples):
        for text in (sample.input, sample.output):
            if not text.strip():
                continue
            key = whitespace_hash(text)
            if key in first_seen:
                parent[find(i)] = find(first_seen[key])
            else:
                first_seen[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(samples)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def select_samples(samples: list[Sample], cfg: InjectConfig) -> list[int]:
    """Indices of the samples to inject: all, a seeded fraction (whole duplicate groups), or
    the ids listed in --test-ids."""
    if cfg.test_ids is not None:
        return read_sample_ids(cfg.test_ids, "--test-ids", samples)
    if cfg.fraction is None or cfg.fraction == 1:
        return list(range(len(samples)))
    target = max(1, round(cfg.fraction * len(samples)))
    groups = duplicate_groups(samples)
    random.Random(f"{cfg.seed}/select").shuffle(groups)
    chosen = []
    for group in groups:
        if len(chosen) >= target:
            break
        chosen.extend(group)
    return sorted(chosen)



def plan_timing(cfg: InjectConfig, samples: list[Sample], selected: list[int]) -> list[list[int]]:
    """Positions in `selected` (a placebo's sources stand at the same positions) of each timing
    level: seeded, near-equal groups that keep duplicate groups whole."""
    groups = duplicate_groups([samples[i] for i in selected])  # positions in `selected`
    levels = timing_table.timing_groups(groups, len(cfg.timing), cfg.seed)
    empty = [cfg.timing[k] for k, level in enumerate(levels) if not level]
    if empty:
        raise LabError(f"--timing {','.join(cfg.timing)}: {len(selected)} injected samples leave "
                       f"timing {empty[0]} without samples")
    return levels

