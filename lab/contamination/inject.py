"""Injection: build one arm's pre-training corpus from a base corpus and a benchmark's test set.

Every arm holds the same number of documents: for each injected document one seeded random
base document is removed. Each random choice has its own seeded stream (limit, selection,
removal, order), so arms that share a seed share their base subset and their removals are
nested (paired removes the first k documents of the same permutation unpaired removes 2k of).

What a setting injects (documents per sample, sides, references) comes from the one table in
lab/contamination/settings.py. A placebo setting injects, instead of the test samples its base
setting would inject, as many train/valid samples that the audit finds neither exactly nor
near-duplicated in the test split: same form, same repeat, same removals, and (by default)
matched one by one on the length of the test sample each stands for.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.codetokens import code_tokens, whitespace_hash
from lab.common import (DataNotFound, LabError, atomic_output_dir, check_numbers, check_output,
                        corpora_param, environment_record, param, write_json_atomic)
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.contamination.arm import ArmTally, Built, too_few_documents
from lab.contamination.audit import audit_samples
from lab.contamination.overlap import CODE_LANGUAGES, OverlapIndex, SampleSideIndex
from lab.contamination.settings import Setting
from lab.contamination.streaming import build_streaming
from lab.corpora import (DATASETS, Document, Loaded, Sample, check_references, corpora_inputs,
                         get_spec, load_documents, load_samples)
from lab.corpora.base import DatasetSpec, read_sample_ids
from lab.corpora.shards import CORPUS_SUBDIR, MANIFEST, shards_digest, write_shards
from lab.executor import ExecutorConfig, check_executor


# How a placebo picks its pool samples.
PLACEBO_MATCHES = ("length", "random")
# The most copies of one sample an arm injects (--repeat, a dose): the plan holds every copy,
# so a count beyond any study's (the paper's ladder tops at 64) is refused before it is built.
MAX_COPIES = 10_000
# A length-matched placebo is refused when its injected share of the corpus differs from its
# arm's by more than this, relative to the arm's share. The share is measured in characters:
# the study's BPE tokenizer is trained after injection (on a control corpus), so no token count
# exists yet; characters track the token share each run reports (injected_token_fraction).
PLACEBO_SHARE_TOLERANCE = 0.05


@dataclass
class InjectConfig(ExecutorConfig):
    """One arm's corpus. Every option of `lab inject` and the fields of a recipe's `corpus` and
    `injection` sections are declared here, once (the executor's in lab.executor)."""
    benchmark: str = param(help="codetrans or concode (or their -paper subsets).")
    setting: str = param(help=", ".join(settings_table.names()) + " (a placebo injects as many "
                         "train/valid samples disjoint from the test split, in its base "
                         "setting's form).")
    seed: int = param(help="Seeds every random choice of the arm.")
    out: Path = param(help="Output directory (must not exist unless --force).")
    split: str = param("test", "Benchmark split whose samples are injected.")
    base: str = param("csn-java", "Base pre-training corpus.")
    base_splits: tuple[str, ...] = param(("train", "valid", "test"),
                                         "Splits of the base corpus that become documents.")
    limit: int | None = param(None, "Seeded subset of N base documents.")
    repeat: int = param(1, "Inject every document K times.")
    fraction: float | None = param(None, "Inject a seeded fraction of the samples.")
    doses: tuple[int, ...] | None = param(
        None, "Dose ladder, e.g. 0,1,4,16,64: the samples are split into as many seeded, "
              "equal-size groups (duplicates kept together), the k-th group injected as often "
              "as the k-th dose says, 0 = held out. Replaces repeat and fraction: 0,K injects "
              "what fraction 0.5 with repeat K does.")
    samples: int | None = param(None, "Only the split's first N samples take part (a benchmark "
                                      "subset).")
    timing: tuple[str, ...] = param(
        timing_table.DEFAULT, "When in pre-training the injected copies are trained on: "
        + timing_table.SPEC_HELP + ". Several timings split the injected samples into as many "
        "seeded, equal-size levels (duplicates kept together), each in its own window "
        "(lab.contamination.timing).")
    contamination_form: str = param(
        soft.VERBATIM, soft.FORM_HELP[0].upper() + soft.FORM_HELP[1:] + "; a placebo's own "
        "samples get the same. Recorded per injected document (its form field) and in the "
        "manifest (lab.contamination.soft).")
    test_ids: Path | None = param(None, "File of sample ids to inject.")
    decontaminate: bool = param(False, "First drop base near-duplicates of the test set.")
    decontaminate_with: str | None = param(
        None, "Decontaminate the built arm with this lab.decontam method (exact, ngram13, "
              "minhash, ...; its default options) against the benchmark split: every document it "
              "flags (injected copies and base documents alike) is dropped and as many unflagged "
              "base documents from outside the arm take their places (seeded), so the arm keeps "
              "its size; injected_ids become the samples left in the arm, intended_injected_ids "
              "and the manifest's `decontamination` record what was meant and removed. Not "
              "--decontaminate, which drops base near-duplicates before injection.")
    placebo_from: tuple[str, ...] | None = param(
        None, "Splits a placebo draws from (lab inject's default: every split but test and the "
              "injected one). A study's default: the splits no model fine-tunes on (codetrans: "
              "valid) where they hold enough eligible samples, else every non-test split with the "
              "placebo pairs left out of every arm's fine-tuning; a split named here is used as "
              "given, and its overlap with fine-tuning is recorded (finetune manifest "
              "data.placebo_overlap), not removed.")
    placebo_match: str = param(
        "length", "How a placebo picks its samples: length (each test sample its base arm injects "
                  "gets the unused eligible sample nearest in length, in lab code tokens of its "
                  "documents, then in characters; a placebo whose share of the corpus's characters "
                  f"differs from its arm's by more than {PLACEBO_SHARE_TOLERANCE:.0%} is refused) or "
                  "random (the uniform draw of placebos made before length matching, kept to "
                  "rebuild those; its lengths and shares are recorded, not checked).")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()
    corpus_format: int = param(
        1, "1: the arm is built in memory (the study's corpora); 2: streamed shard by shard in "
           "bounded memory, on --executor's --tasks (the --limit subset, the removed documents "
           "and the order follow a seeded hash of each document id: FORMATS).",
        option="--format")
    shard_size: int = param(50_000, "Documents per corpus shard (format 2: on average).",
                            cli=False)

    def __post_init__(self) -> None:
        # The rules of the options, alone and together, checked where the config is made: by
        # `lab inject` and by a recipe's `corpus` and `injection` sections alike
        # (lab.study.recipe names the recipe's field). What needs files, the benchmark or the
        # machine is checked when the run starts (validate).
        base = DATASETS.get(self.base)
        if base is None or base.kind != "corpus":
            corpora = [name for name, spec in DATASETS.items() if spec.kind == "corpus"]
            what = f"{self.base} is a {base.kind}, not" if base else "not"
            raise LabError(f"--base {self.base}: {what} a pre-training corpus (choose from "
                           f"{', '.join(corpora)})")
        if not self.base_splits:
            raise LabError("--base-splits: give at least one split")
        if len(set(self.base_splits)) != len(self.base_splits):
            raise LabError(f"--base-splits {','.join(self.base_splits)}: a split is listed twice")
        for split in self.base_splits:
            if split not in base.splits:
                raise LabError(f"--base-splits {split}: unknown split of {self.base} (choose "
                               f"from {', '.join(base.splits)})")
        for name, value in (("--repeat", self.repeat), ("--limit", self.limit),
                            ("--samples", self.samples)):
            if value is not None and value < 1:
                raise LabError(f"{name} {value}: must be >= 1")
        if self.repeat > MAX_COPIES:
            raise LabError(f"--repeat {self.repeat}: at most {MAX_COPIES:,} copies of a sample")
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise LabError(f"--fraction {self.fraction}: must be in (0, 1]")
        if self.fraction is not None and self.test_ids is not None:
            raise LabError("--fraction and --test-ids: give one of them, not both")
        if self.samples is not None and self.test_ids is not None:
            raise LabError("--samples and --test-ids: give one of them, not both")
        if self.doses is not None:
            check_doses(self)
        timing_table.check_timing(tuple(self.timing), self.doses)
        soft.parse_form(self.contamination_form)
        if self.decontaminate_with is not None:
            from lab.decontam import DECONTAMINATORS
            if self.decontaminate_with not in DECONTAMINATORS:
                raise LabError(f"--decontaminate-with {self.decontaminate_with}: unknown method "
                               f"(choose from {', '.join(DECONTAMINATORS)})")
            if self.corpus_format != 1:
                raise LabError(f"--decontaminate-with {self.decontaminate_with}: only a format 1 "
                               "arm (built in memory) is decontaminated")
        if self.placebo_match not in PLACEBO_MATCHES:
            raise LabError(f"--placebo-match {self.placebo_match}: choose from "
                           f"{', '.join(PLACEBO_MATCHES)}")
        if self.corpus_format not in FORMATS:
            raise LabError(f"--format {self.corpus_format}: unknown corpus format (choose from "
                           f"{', '.join(map(str, FORMATS))})")


# How each corpus format makes its seeded choices; a manifest names its format, and every
# reader takes both (they differ in which documents are removed and in the order, not in form).
FORMATS = {
    1: "in memory: Python's random.Random(seed/limit).sample over document positions, "
       "random.Random(seed/remove).shuffle of the arm's positions (the first k removed), "
       "random.Random(seed/order).shuffle of the arm",
    2: "streaming: each document's key is blake2b(seed/stream/id) (8 bytes); --limit keeps the "
       "N smallest 'limit' keys, the k clean documents with the smallest 'remove' keys are "
       "removed (nested across arms, like format 1), and the arm is ordered by 'order' key, "
       "written in ceil(documents / shard_size) hash buckets",
}

def injected_sides(setting: str, sample: Sample) -> list[tuple[str, str]]:
    """(side, text) documents one sample contributes under a setting (the settings table's)."""
    return settings_table.get(setting).documents(sample)


def validate(cfg: InjectConfig) -> None:
    if cfg.setting not in settings_table.SETTINGS:
        raise LabError(f"--setting {cfg.setting}: unknown setting (choose from "
                       f"{', '.join(settings_table.names())})")
    spec = get_spec(cfg.benchmark)
    if spec.kind != "benchmark":
        raise LabError(f"--benchmark {cfg.benchmark}: not a benchmark")
    soft.check_form(soft.parse_form(cfg.contamination_form), cfg.benchmark,
                    settings_table.get(cfg.setting), cfg.base)
    if cfg.test_ids is not None and not Path(cfg.test_ids).is_file():
        raise LabError(f"--test-ids {cfg.test_ids}: no such file")
    if cfg.placebo_from is not None:
        if not settings_table.get(cfg.setting).placebo:
            raise LabError(f"--placebo-from: only a placebo setting draws from other splits, "
                           f"not {cfg.setting}")
        placebo_splits(cfg.benchmark, cfg.split, cfg.placebo_from)
    check_numbers(seed=cfg.seed)
    check_executor(cfg)
    if cfg.corpus_format == 1 and (cfg.tasks > 1 or cfg.executor != "local"):
        raise LabError(f"--executor {cfg.executor} --tasks {cfg.tasks}: format 1 builds the arm "
                       "in one process; use --format 2")
    check_output(Path(cfg.out), cfg.force, "lab-corpus", _inputs(cfg))


def check_doses(cfg: InjectConfig) -> None:
    """A ladder replaces --repeat, --fraction and --test-ids; its doses are distinct whole
    numbers >= 0, at least one of them injecting."""
    shown = ",".join(str(d) for d in cfg.doses or ())
    if not cfg.doses:
        raise LabError("--doses: give at least one dose")
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in cfg.doses):
        raise LabError(f"--doses {shown}: doses are whole numbers >= 0")
    if len(set(cfg.doses)) != len(cfg.doses):
        raise LabError(f"--doses {shown}: a dose is listed twice")
    if not any(cfg.doses):
        raise LabError(f"--doses {shown}: no level is injected (every dose is 0)")
    if max(cfg.doses) > MAX_COPIES:
        raise LabError(f"--doses {shown}: at most {MAX_COPIES:,} copies of a sample")
    for name, value, default in (("--repeat", cfg.repeat, 1), ("--fraction", cfg.fraction, None),
                                 ("--test-ids", cfg.test_ids, None)):
        if value != default:
            raise LabError(f"--doses and {name}: a dose ladder sets how often and which samples "
                           "are injected; give one of them")


def dose_levels(samples: list[Sample], cfg: InjectConfig) -> list[list[int]]:
    """Sample indices (sorted) of each level of the ladder cfg.doses, in ladder order: seeded,
    equal-size groups that keep duplicate groups whole. The injecting levels are filled first,
    in ladder order, from the seeded order --fraction takes its samples in; the held-out level
    (dose 0) takes the rest, so [0, K] injects the samples --fraction 0.5 --repeat K does."""
    doses = list(cfg.doses or ())
    groups = _duplicate_groups(samples)
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


def _inputs(cfg: InjectConfig) -> list[Any]:
    return [cfg.test_ids, *corpora_inputs(cfg.corpora_dir)]


def _duplicate_groups(samples: list[Sample]) -> list[list[int]]:
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
    groups = _duplicate_groups(samples)
    random.Random(f"{cfg.seed}/select").shuffle(groups)
    chosen = []
    for group in groups:
        if len(chosen) >= target:
            break
        chosen.extend(group)
    return sorted(chosen)


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
    groups = [g for g in _duplicate_groups(clean) if not any(clean[i].id in exclude for i in g)]
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


def placebo_pool(cfg: InjectConfig, setting: Setting, tests: list[Sample]) -> PlaceboPool:
    """Samples of the benchmark's other splits that the audit finds neither exactly nor as
    near-duplicates in `tests` (the whole injected split, on either side), one per group of
    samples sharing a side verbatim (`disjoint_from`). Splits missing here (CONCODE's train
    offline) are named."""
    spec = get_spec(cfg.benchmark)
    wanted = placebo_splits(cfg.benchmark, cfg.split, cfg.placebo_from)
    parts: list[Loaded] = []
    missing: list[str] = []
    for split in wanted:
        try:
            parts.append(load_samples(cfg.benchmark, split, cfg.corpora_dir))
        except DataNotFound:
            missing.append(split)
    if not parts:
        raise LabError(f"--setting {cfg.setting}: a placebo draws from {cfg.benchmark}'s "
                       f"{', '.join(wanted) or 'non-test'} split(s), and none is available")
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


@dataclass
class Plan:
    """What an arm injects, decided from the benchmark alone (before any base document is
    read): the same for both corpus formats."""

    bench: Loaded
    samples: list[Sample]           # the samples taking part (--samples)
    setting: Setting
    levels: list[list[int]] | None  # a dose ladder's levels (sample indices)
    timing_levels: list[list[int]] | None  # positions in `selected` of each timing level
    selected: list[int]             # samples the setting selects (a placebo matches their count)
    chosen: list[int]               # test samples injected
    pool: PlaceboPool | None
    sources: list[Sample]           # samples whose documents are injected
    copies: list[int]               # copies of each source
    injected: list[dict[str, Any]]  # the injected documents


def plan_injection(cfg: InjectConfig) -> Plan:
    bench = load_samples(cfg.benchmark, cfg.split, cfg.corpora_dir)
    samples: list[Sample] = bench.records
    if not samples:
        raise LabError(f"{cfg.benchmark} split '{cfg.split}': no samples")
    if cfg.samples is not None:
        if cfg.samples > len(samples):
            raise LabError(f"--samples {cfg.samples}: {cfg.benchmark} {cfg.split} holds only "
                           f"{len(samples)} samples")
        samples = samples[: cfg.samples]
    setting = settings_table.get(cfg.setting)
    form = soft.parse_form(cfg.contamination_form)
    if not form.verbatim:  # its documents come in the contamination form
        setting = soft.FormedSetting.of(setting, form, cfg.seed, cfg.benchmark, cfg.base)
    # A placebo selects the test samples its base setting would inject with this seed (their
    # count is what it matches) and injects none of them.
    levels = dose_levels(samples, cfg) if cfg.doses and setting.injects else None
    dose_of = ({i: dose for dose, level in zip(cfg.doses or (), levels) for i in level}
               if levels is not None else {})
    selected = (sorted(i for i, dose in dose_of.items() if dose) if levels is not None
                else select_samples(samples, cfg) if setting.injects else [])
    chosen = selected if setting.injects_test else []
    if setting.injects_test and setting.needs_output:
        check_references(bench)
    pool = placebo_pool(cfg, setting, bench.records) if setting.placebo else None
    sources = (choose_placebo(pool, [samples[i] for i in selected], setting, cfg)
               if pool is not None else [samples[i] for i in chosen])
    # Copies of each source: its level's dose (a placebo sample stands for the test sample of
    # the same rank), else --repeat.
    copies = [dose_of[i] for i in selected] if levels is not None else [cfg.repeat] * len(sources)
    injected = []
    for sample, times in zip(sources, copies):
        for side, text in setting.documents(sample):
            for copy in range(times):
                injected.append({
                    "id": f"inject:{sample.id}:{side}:{copy}", "text": text,
                    "sample": sample.id, "side": side, "copy": copy,
                    **({"form": form.name} if not form.verbatim else {}),
                })
    timing_levels = None
    if setting.injects and not timing_table.is_uniform(cfg.timing):
        timing_levels = plan_timing(cfg, samples, selected)
    return Plan(bench, samples, setting, levels, timing_levels, selected, chosen, pool, sources,
                copies, injected)


def plan_timing(cfg: InjectConfig, samples: list[Sample], selected: list[int]) -> list[list[int]]:
    """Positions in `selected` (a placebo's sources stand at the same positions) of each timing
    level: seeded, near-equal groups that keep duplicate groups whole."""
    groups = _duplicate_groups([samples[i] for i in selected])  # positions in `selected`
    levels = timing_table.timing_groups(groups, len(cfg.timing), cfg.seed)
    empty = [cfg.timing[k] for k, level in enumerate(levels) if not level]
    if empty:
        raise LabError(f"--timing {','.join(cfg.timing)}: {len(selected)} injected samples leave "
                       f"timing {empty[0]} without samples")
    return levels


def build_in_memory(cfg: InjectConfig, plan: Plan, tmp: Path) -> Built:
    """Format 1: the whole base corpus in memory, choices by Python's seeded random."""
    base_parts = load_documents(cfg.base, cfg.base_splits, cfg.corpora_dir)
    base: list[Document] = [doc for part in base_parts for doc in part.records]
    everything = base
    base_total = len(base)
    if cfg.limit is not None:
        if cfg.limit > base_total:
            raise LabError(f"--limit {cfg.limit}: the base corpus holds only {base_total} documents")
        keep = sorted(random.Random(f"{cfg.seed}/limit").sample(range(base_total), cfg.limit))
        base = [base[i] for i in keep]
    after_limit = len(base)
    decontaminated: list[str] = []
    if cfg.decontaminate:
        spec = get_spec(cfg.benchmark)
        index = SampleSideIndex(plan.samples, spec.input_language, spec.output_language)
        dirty = {d.id for d in base if any(index.scan(d.text))}
        decontaminated = sorted(dirty)
        base = [d for d in base if d.id not in dirty]
    if len(plan.injected) > len(base):
        raise too_few_documents(cfg, len(plan.injected), len(base))
    order = list(range(len(base)))
    random.Random(f"{cfg.seed}/remove").shuffle(order)
    removed = set(order[: len(plan.injected)])
    extra = soft.base_fields(cfg.contamination_form)
    kept = [d for i, d in enumerate(base) if i not in removed]
    injected, refill, decontamination = plan.injected, [], None
    intended_chars = (sum(len(d.text) for d in kept) + sum(len(r["text"]) for r in injected))
    if cfg.decontaminate_with is not None:
        # The refill's candidates in one seeded order of the whole base corpus, so that arms
        # of one seed draw their refills alike (nested, like their removals).
        dirty = set(decontaminated)
        in_arm = {d.id for d in kept}
        rank = list(range(len(everything)))
        random.Random(f"{cfg.seed}/refill").shuffle(rank)
        outside = [everything[j] for j in rank
                   if everything[j].id not in in_arm and everything[j].id not in dirty]
        kept, injected, refill, decontamination = decontaminate_arm(cfg, plan, kept, outside)
    final: list[dict[str, Any]] = [
        {"id": d.id, "text": d.text, **extra} for d in kept + refill] + injected
    random.Random(f"{cfg.seed}/order").shuffle(final)
    tally = ArmTally.for_plan(plan.samples, injected)
    kept_ids = {d.id for d in kept}
    for d in base:
        tally.add_base(d.text, kept=d.id in kept_ids)
    for d in refill:  # base documents from outside the arm's base, in the arm now
        tally.add_base(d.text, kept=True)
    for record in final:
        tally.add_final(record["text"], injected="sample" in record)
    shards = write_shards(tmp / CORPUS_SUBDIR, final, cfg.shard_size)
    return Built([part.provenance() for part in base_parts], base_total, after_limit,
                 decontaminated, len(base), sorted(base[i].id for i in removed), shards,
                 len(final), sum(len(r["text"]) for r in final), tally,
                 injected=injected if decontamination is not None else None,
                 decontamination=decontamination,
                 intended_total_chars=intended_chars if decontamination is not None else None)


# How many refill candidates a decontaminated arm flags at a time (the methods judge each
# document alone, so the chunks change nothing but the work done).
REFILL_CHUNK = 2_000


def decontaminate_arm(cfg: InjectConfig, plan: Plan, kept: list[Document],
                      outside: list[Document]
                      ) -> tuple[list[Document], list[dict[str, Any]], list[Document],
                                 dict[str, Any]]:
    """`--decontaminate-with METHOD` on a built arm (its kept base documents and its injected
    ones): the method (lab.decontam, default options) flags documents against the arm's
    benchmark samples (the --samples subset, as `lab decontam` reads them); every flagged one
    goes, injected copy or base document, and as many base documents from `outside` the arm
    (the base corpus's documents the --limit subset or the injection's removals left out, in
    the seeded order of random.Random(seed/refill) over the whole base corpus, skipping those
    the method flags) take their places. Returns the kept base documents, the surviving
    injected ones, the refill and the manifest's `decontamination` record."""
    from dataclasses import asdict

    from lab.decontam import DECONTAMINATORS
    from lab.decontam.base import Options, Reference

    name = str(cfg.decontaminate_with)
    method = DECONTAMINATORS[name]
    options = Options()
    spec = get_spec(cfg.benchmark)
    reference = Reference(plan.samples, spec.input_language, spec.output_language)
    flags = method.flag([d.text for d in kept] + [r["text"] for r in plan.injected], reference,
                        options)
    base_flags, injected_flags = flags[:len(kept)], flags[len(kept):]
    flagged_base = sorted(d.id for d, f in zip(kept, base_flags) if f)
    clean_base = [d for d, f in zip(kept, base_flags) if not f]
    surviving = [r for r, f in zip(plan.injected, injected_flags) if not f]
    needed = len(flagged_base) + sum(injected_flags)
    refill: list[Document] = []
    checked = skipped = 0
    while len(refill) < needed and checked < len(outside):
        chunk = outside[checked:checked + max(REFILL_CHUNK, 2 * needed)]
        checked += len(chunk)
        for d, f in zip(chunk, method.flag([d.text for d in chunk], reference, options)):
            if len(refill) == needed:
                break
            if f:
                skipped += 1
            else:
                refill.append(d)
    if len(refill) < needed:
        raise LabError(
            f"--decontaminate-with {name}: {needed} documents flagged in the {cfg.setting} arm, "
            f"but only {len(refill)} unflagged base documents outside the arm to take their "
            "places (keep the arm's size: take a --limit subset of a larger base corpus)")
    copies_of: dict[str, set[int]] = {}
    for r in surviving:
        copies_of.setdefault(r["sample"], set()).add(r["copy"])
    changed = {s.id: len(copies_of.get(s.id, ())) for s, times in zip(plan.sources, plan.copies)
               if len(copies_of.get(s.id, ())) != times}
    record = {
        "method": name, "source": method.source, "rule": method.summary,
        "parameters": method.parameters(options), "options": asdict(options),
        "flagged_documents": needed,
        "flagged_injected_documents": sum(injected_flags),
        "flagged_base_documents": len(flagged_base),
        "removed_injected_ids": [s for s, n in changed.items() if n == 0],
        "surviving_copies": changed,
        "removed_base_documents": len(flagged_base),
        "removed_base_document_ids": flagged_base,
        "refilled": len(refill),
        "refilled_ids": sorted(d.id for d in refill),
        "refill_candidates": len(outside), "refill_candidates_flagged": skipped,
        "refill_rule": "base documents outside the arm (the --limit subset's rest and the "
                       "injection's removals), in random.Random(seed/refill) order of the whole "
                       "base corpus, those the method flags skipped",
    }
    return clean_base, surviving, refill, record


def run_inject(cfg: InjectConfig) -> dict[str, Any]:
    """Entry point of `lab inject`: write one arm's corpus and its manifest to cfg.out."""
    started = time.perf_counter()
    validate(cfg)
    plan = plan_injection(cfg)
    setting, samples, pool = plan.setting, plan.samples, plan.pool
    with atomic_output_dir(Path(cfg.out), force=cfg.force, kind="lab-corpus",
                           inputs=_inputs(cfg)) as tmp:
        if cfg.corpus_format == 2:
            built = build_streaming(cfg, plan, tmp)
        else:
            built = build_in_memory(cfg, plan, tmp)
        chosen_set = set(plan.chosen)
        arm_injected = built.injected if built.injected is not None else plan.injected
        guards, pre_existing = check_guards(cfg, samples, chosen_set, built, arm_injected)
        guards.update(check_counts(cfg, setting, plan.selected, plan.sources, plan.copies,
                                   plan.injected, len(built.removed)))
        length_match = None
        if pool is not None:
            guards.update(check_placebo(cfg, setting, pool, plan.sources, plan.injected))
            length_match = placebo_length_match(cfg, plan, built)
        manifest = _manifest(cfg, plan, built, guards, pre_existing, length_match)
        manifest["shards"] = built.shards
        manifest["corpus_sha256"] = shards_digest(built.shards)
        manifest["wall_seconds"] = round(time.perf_counter() - started, 2)
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def _manifest(cfg: InjectConfig, plan: Plan, built: Built, guards: dict[str, Any],
              pre_existing: list[str], length_match: dict[str, Any] | None) -> dict[str, Any]:
    samples, chosen, pool, injected = plan.samples, plan.chosen, plan.pool, plan.injected
    chosen_set = set(chosen)
    decontamination = built.decontamination
    sources = plan.sources
    if decontamination is not None:  # the samples left in the arm; the intended ones recorded
        injected = built.injected if built.injected is not None else injected
        gone = set(decontamination["removed_injected_ids"])
        chosen = [i for i in chosen if samples[i].id not in gone]
        sources = [s for s in sources if s.id not in gone]
    injected_chars = sum(len(r["text"]) for r in injected)
    manifest: dict[str, Any] = {
        "kind": "lab-corpus",
        "corpus_format": cfg.corpus_format,
        "selection": FORMATS[cfg.corpus_format],
        "setting": cfg.setting,
        "benchmark": cfg.benchmark,
        "benchmark_split": plan.bench.split,
        "seed": cfg.seed,
        "options": {
            "base": cfg.base, "base_splits": list(cfg.base_splits), "limit": cfg.limit,
            "repeat": cfg.repeat, "fraction": cfg.fraction, "samples": cfg.samples,
            **({"doses": list(cfg.doses)} if cfg.doses else {}),
            **({"timing": list(cfg.timing)} if not timing_table.is_uniform(cfg.timing) else {}),
            "test_ids": str(cfg.test_ids) if cfg.test_ids else None,
            "decontaminate": cfg.decontaminate, "shard_size": cfg.shard_size,
            **({"decontaminate_with": cfg.decontaminate_with}
               if cfg.decontaminate_with is not None else {}),
            **({"placebo_from": list(cfg.placebo_from)} if cfg.placebo_from else {}),
            **({"placebo_match": cfg.placebo_match} if pool is not None else {}),
            **({"contamination_form": cfg.contamination_form}
               if isinstance(plan.setting, soft.FormedSetting) else {}),
        },
        **({"executor": {"executor": cfg.executor, "tasks": cfg.tasks}}
           if cfg.corpus_format == 2 else {}),
        "counts": {
            "base_documents": built.base_total,
            "after_limit": built.after_limit,
            "decontaminated_removed": len(built.decontaminated),
            "arm_documents": built.arm_documents,
            "injected_samples": len(chosen),
            "held_out_samples": len(samples) - len(plan.chosen),
            "injected_documents": len(injected),
            "removed_documents": len(built.removed),
            "final_documents": built.final_documents,
            "injected_document_fraction": (round(len(injected) / built.final_documents, 6)
                                           if built.final_documents else 0.0),
            "injected_char_fraction": (round(injected_chars / built.total_chars, 6)
                                       if built.total_chars else 0.0),
            **({"placebo_samples": len(sources)} if pool is not None else {}),
        },
        "injected_ids": [samples[i].id for i in chosen],
        **({"intended_injected_ids": [samples[i].id for i in plan.chosen]}
           if decontamination is not None else {}),
        "held_out_ids": [s.id for i, s in enumerate(samples) if i not in chosen_set],
        "removed_base_ids": built.removed,
        "decontaminated_ids": built.decontaminated,
        **({"dose_levels": dose_record(cfg, plan.setting, samples, plan.levels, plan.sources,
                                       plan.copies, injected)}
           if plan.levels is not None else {}),
        **({"timing_levels": timing_record(cfg, plan)} if plan.timing_levels is not None else {}),
        **({"contamination_form": form_record(plan.setting, plan.sources)}
           if isinstance(plan.setting, soft.FormedSetting) else {}),
        **({"decontamination": decontamination} if decontamination is not None else {}),
        "pre_existing_verbatim": pre_existing,
        "guards": guards,
        "inputs": {
            "base": built.provenance,
            "benchmark": plan.bench.provenance(),
            **({"placebo_pool": [part.provenance() for part in pool.parts]} if pool else {}),
        },
        "environment": environment_record(),
    }
    if pool is not None:
        manifest["placebo_ids"] = [s.id for s in sources]
        if decontamination is not None:
            manifest["intended_placebo_ids"] = [s.id for s in plan.sources]
        manifest["placebo"] = {
            "base_setting": plan.setting.base,
            "samples": [{"id": s.id, "split": s.split} for s in plan.sources],
            "by_split": dict(Counter(s.split for s in plan.sources)),
            # The test samples the base arm injects with this seed: the placebo injects as many
            # samples, and its models are probed on these (like the control's).
            "matched_test_ids": [samples[i].id for i in plan.selected],
            "pool": pool.record,
            "length_match": length_match,
        }
    return manifest


def form_record(setting: soft.FormedSetting, sources: list[Sample]) -> dict[str, Any]:
    """The arm's contamination form and its options, how many of the injected samples (a
    placebo's own) it altered, and those it left as verbatim writes them, with the reason."""
    unchanged = []
    for sample in sources:
        _documents, reason = setting.formed(sample)
        if reason is not None:
            unchanged.append({"id": sample.id, "reason": reason})
    return {**setting.contamination.record(), "seed": setting.seed,
            "altered_samples": len(sources) - len(unchanged), "unchanged": unchanged}


def dose_record(cfg: InjectConfig, setting: Setting, samples: list[Sample], levels: list[list[int]],
                sources: list[Sample], copies: list[int], injected: list[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """Per level of the ladder, in ladder order: its dose, the test sample ids it holds (a
    placebo injects other samples in their place: `placebo_ids`), and its documents and
    characters in the arm."""
    source_dose = {s.id: times for s, times in zip(sources, copies)}
    records = []
    for dose, level in zip(cfg.doses or (), levels):
        documents = [r for r in injected if source_dose[r["sample"]] == dose] if dose else []
        record = {"dose": dose, "samples": len(level), "ids": [samples[i].id for i in level],
                  "documents": len(documents),
                  "characters": sum(len(r["text"]) for r in documents)}
        if setting.placebo and dose:
            record["placebo_ids"] = [s.id for s, times in zip(sources, copies) if times == dose]
        records.append(record)
    return records


def timing_record(cfg: InjectConfig, plan: Plan) -> list[dict[str, Any]]:
    """Per timing level, in the order given: its window, the test sample ids it holds and the
    sample ids whose documents pre-training keeps inside the window (`sources`: a placebo's own
    samples, else the same ids)."""
    records = []
    for spec, positions in zip(cfg.timing, plan.timing_levels or []):
        timing = timing_table.parse_timing(spec)
        records.append({**timing.record(), "samples": len(positions),
                        "ids": [plan.samples[plan.selected[k]].id for k in positions],
                        "sources": [plan.sources[k].id for k in positions]})
    return records


def check_guards(cfg: InjectConfig, samples: list[Sample], chosen: set[int], built: Built,
                 injected: list[dict]) -> tuple[dict[str, Any], list[str]]:
    """Fail loudly if the written arm is not what its setting promises: as many documents as
    the arm's base; every injected text as often as injected plus kept verbatim in the base;
    no test side verbatim in the arm unless injected or already in the base (pre-existing)."""
    if built.final_documents != built.arm_documents:
        raise LabError(f"internal guard: arm has {built.final_documents} documents, expected "
                       f"{built.arm_documents}")
    tally = built.tally
    expected = Counter(whitespace_hash(r["text"]) for r in injected)
    for key, times in expected.items():
        if tally.final[key] != times + tally.kept[key]:
            raise LabError(
                f"internal guard: an injected document occurs {tally.final[key]} times, "
                f"expected {times + tally.kept[key]}"
            )
    setting = settings_table.get(cfg.setting)
    exposed_sides = setting.sides if setting.injects_test else ()
    pre_existing = []
    for i, sample in enumerate(samples):
        for side, text in (("input", sample.input), ("output", sample.output)):
            if not text.strip():
                continue
            key = whitespace_hash(text)
            if key in tally.base_hits:
                pre_existing.append(f"{sample.id}/{side}")
                continue
            if not (i in chosen and side in exposed_sides) and key in tally.final_hits:
                raise LabError(
                    f"guard: {side} of sample {sample.id} occurs verbatim in the {cfg.setting} "
                    "arm although it was not injected and was not pre-existing"
                )
    guards = {
        "equal_size": True,
        "injected_multiplicity": list(cfg.doses) if cfg.doses else cfg.repeat,
        "held_out_absent_unless_pre_existing": True,
    }
    return guards, pre_existing


def check_counts(cfg: InjectConfig, setting: Setting, selected: list[int], sources: list[Sample],
                 copies: list[int], injected: list[dict], removed: int) -> dict[str, Any]:
    """Documents added = samples x the setting's documents per sample x their dose (--repeat,
    or their level's) = documents removed, sample by sample; a placebo injects exactly as many
    samples per level as its base arm injects test samples."""
    if len(sources) != len(selected):
        raise LabError(f"internal guard: {len(sources)} samples injected, expected {len(selected)}")
    per_sample = Counter(r["sample"] for r in injected)
    for sample, times in zip(sources, copies):
        if per_sample[sample.id] != times * setting.documents_per_sample:
            raise LabError(f"internal guard: sample {sample.id} has {per_sample[sample.id]} "
                           f"documents, expected {times * setting.documents_per_sample}")
    expected = setting.documents_per_sample * sum(copies)
    if len(injected) != expected or removed != expected:
        raise LabError(f"internal guard: {len(injected)} documents injected and {removed} "
                       f"removed, expected {expected} of each")
    counts = {"documents_per_sample": setting.documents_per_sample}
    if cfg.doses:
        counts["samples_per_dose"] = {str(d): copies.count(d) for d in cfg.doses if d}
    return counts


def placebo_length_match(cfg: InjectConfig, plan: Plan, built: Built) -> dict[str, Any]:
    """The lengths of the test samples the base arm injects and of the placebo samples standing
    for them, and each arm's injected share of its corpus's characters. The base arm of this
    seed keeps the very same base documents, so its share is exact without its corpus. A
    length-matched placebo whose share strays from its arm's by more than
    PLACEBO_SHARE_TOLERANCE is refused (inside the output's temporary folder: nothing is left)."""
    arm = [plan.samples[i] for i in plan.selected]
    arm_chars = injected_chars(plan.setting, arm, plan.copies)
    placebo_chars = injected_chars(plan.setting, plan.sources, plan.copies)
    total = built.intended_total_chars or built.total_chars  # before --decontaminate-with
    kept_base_chars = total - placebo_chars
    arm_share = arm_chars / (kept_base_chars + arm_chars)
    placebo_share = placebo_chars / (kept_base_chars + placebo_chars)
    difference = placebo_share / arm_share - 1
    lengths = {"arm": length_summary(plan.setting, arm),
               "placebo": length_summary(plan.setting, plan.sources)}
    if cfg.placebo_match == "length" and abs(difference) > PLACEBO_SHARE_TOLERANCE:
        raise LabError(
            f"--placebo-match length: the placebo injects {placebo_share:.4%} of its corpus's "
            f"characters and its arm {arm_share:.4%} ({difference:+.1%}, tolerance "
            f"{PLACEBO_SHARE_TOLERANCE:.0%}; mean length {lengths['placebo']['mean']} vs "
            f"{lengths['arm']['mean']} lab code tokens): the pool lacks samples of the arm's "
            "lengths (draw from more splits with --placebo-from, or lower --samples)")
    return {
        "method": cfg.placebo_match,
        "unit": "lab code tokens",
        **lengths,
        "mean_ratio": round(lengths["placebo"]["mean"] / lengths["arm"]["mean"], 4),
        "share_of_characters": {
            "arm": round(arm_share, 6), "placebo": round(placebo_share, 6),
            "relative_difference": round(difference, 4), "tolerance": PLACEBO_SHARE_TOLERANCE,
            "checked": cfg.placebo_match == "length",
        },
    }


def injected_chars(setting: Setting, samples: list[Sample], copies: list[int]) -> int:
    return sum(times * len(text) for sample, times in zip(samples, copies)
               for _side, text in setting.documents(sample))


def length_summary(setting: Setting, samples: list[Sample]) -> dict[str, Any]:
    """Distribution of the samples' lengths in the arm's form (one copy each)."""
    tokens, chars = np.asarray([form_length(setting, s) for s in samples]).T
    p10, p50, p90 = np.quantile(tokens, (0.1, 0.5, 0.9))
    return {"samples": len(samples), "mean": round(float(tokens.mean()), 1),
            "std": round(float(tokens.std()), 1), "p10": float(p10), "p50": float(p50),
            "p90": float(p90), "max": int(tokens.max()),
            "mean_chars": round(float(chars.mean()), 1)}


def check_placebo(cfg: InjectConfig, setting: Setting, pool: PlaceboPool, sources: list[Sample],
                  injected: list[dict]) -> dict[str, Any]:
    """No placebo document may hold a test sample's side, exactly or as a near-duplicate, and
    none may come from the injected split."""
    spec = get_spec(cfg.benchmark)
    language = {"input": spec.input_language, "output": spec.output_language}
    by_id = {s.id: s for s in sources}
    for record in injected:
        sample = by_id.get(record["sample"])
        if sample is None or sample.split not in pool.record["splits"]:
            raise LabError(f"guard: placebo document {record['id']} is not from "
                           f"{', '.join(pool.record['splits'])}")
        for side in setting.sides:
            text = getattr(sample, side)
            match = pool.index.match(text, near=language[side] in CODE_LANGUAGES)
            if match.leaked:
                raise LabError(f"guard: placebo sample {sample.id} ({side}) matches "
                               f"{sorted(match.matched_ids())[0]} of the {cfg.split} split")
    return {"placebo_disjoint_from_test": True, "placebo_samples": len(sources)}
