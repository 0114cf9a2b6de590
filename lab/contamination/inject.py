"""Injection: build one arm's pre-training corpus from a base corpus and a benchmark's test set.

Every arm holds the same number of documents: for each injected document one seeded random
base document is removed. Each random choice has its own seeded stream (limit, selection,
removal, order), so arms that share a seed share their base subset and their removals are
nested (paired removes the first k documents of the same permutation unpaired removes 2k of).
"""
from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.codetokens import whitespace_hash
from lab.common import LabError, atomic_output_dir, environment_record, write_json_atomic
from lab.contamination import SEP_MARKER, paired_document, segments
from lab.contamination.audit import OverlapIndex, audit_samples
from lab.contamination.corpus_files import CORPUS_SUBDIR, MANIFEST, write_shards
from lab.corpora import Document, Sample, check_references, get_spec, load_documents, load_samples

SETTINGS = ("control", "input-only", "output-only", "unpaired", "paired")
NEEDS_OUTPUT = ("output-only", "unpaired", "paired")
EXPOSED_SIDES = {
    "control": (), "input-only": ("input",), "output-only": ("output",),
    "unpaired": ("input", "output"), "paired": ("input", "output"),
}


@dataclass
class InjectConfig:
    benchmark: str
    setting: str
    seed: int
    out: Path
    split: str = "test"
    base: str = "csn-java"
    base_splits: tuple[str, ...] = ("train", "valid", "test")
    limit: int | None = None
    repeat: int = 1
    fraction: float | None = None
    samples: int | None = None  # only the split's first N samples take part (a benchmark subset)
    test_ids: Path | None = None
    decontaminate: bool = False
    force: bool = False
    corpora_dir: Path | None = None
    shard_size: int = 50_000


def injected_sides(setting: str, sample: Sample) -> list[tuple[str, str]]:
    """(side, text) documents one sample contributes under a setting."""
    if setting == "control":
        return []
    if setting == "input-only":
        return [("input", sample.input)]
    if setting == "output-only":
        return [("output", sample.output)]
    if setting == "unpaired":
        return [("input", sample.input), ("output", sample.output)]
    return [("paired", paired_document(sample.input, sample.output))]


def validate(cfg: InjectConfig) -> None:
    if cfg.setting not in SETTINGS:
        raise LabError(f"--setting {cfg.setting}: unknown setting (choose from {', '.join(SETTINGS)})")
    spec = get_spec(cfg.benchmark)
    if spec.kind != "benchmark":
        raise LabError(f"--benchmark {cfg.benchmark}: not a benchmark")
    if cfg.repeat < 1:
        raise LabError(f"--repeat {cfg.repeat}: must be >= 1")
    if cfg.fraction is not None and not 0 < cfg.fraction <= 1:
        raise LabError(f"--fraction {cfg.fraction}: must be in (0, 1]")
    if cfg.fraction is not None and cfg.test_ids is not None:
        raise LabError("--fraction and --test-ids: give one of them, not both")
    if cfg.limit is not None and cfg.limit < 1:
        raise LabError(f"--limit {cfg.limit}: must be >= 1")
    if cfg.samples is not None and cfg.samples < 1:
        raise LabError(f"--samples {cfg.samples}: must be >= 1")
    if cfg.samples is not None and cfg.test_ids is not None:
        raise LabError("--samples and --test-ids: give one of them, not both")
    if cfg.test_ids is not None and not Path(cfg.test_ids).is_file():
        raise LabError(f"--test-ids {cfg.test_ids}: no such file")
    if Path(cfg.out).exists() and not cfg.force:
        raise LabError(f"{cfg.out}: output directory exists (use --force to replace it)")


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
        by_id = {s.id: i for i, s in enumerate(samples)}
        chosen = []
        for lineno, line in enumerate(Path(cfg.test_ids).read_text(encoding="utf-8").splitlines(), 1):
            token = line.strip()
            if not token or token.startswith("#"):
                continue
            key = token if ":" in token else f"{cfg.benchmark}:{samples[0].split}:{token}"
            if key not in by_id:
                raise LabError(f"{cfg.test_ids}:{lineno}: unknown test id '{token}'")
            chosen.append(by_id[key])
        if not chosen:
            raise LabError(f"{cfg.test_ids}: lists no test ids")
        return sorted(set(chosen))
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


def _digest_of_shards(shards: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(shard["sha256"].encode())
    return digest.hexdigest()


def run_inject(cfg: InjectConfig) -> dict[str, Any]:
    """Entry point of `lab inject`: write one arm's corpus and its manifest to cfg.out."""
    started = time.perf_counter()
    validate(cfg)
    spec = get_spec(cfg.benchmark)
    bench = load_samples(cfg.benchmark, cfg.split, cfg.corpora_dir)
    samples: list[Sample] = bench.records
    if not samples:
        raise LabError(f"{cfg.benchmark} split '{cfg.split}': no samples")
    if cfg.samples is not None:
        if cfg.samples > len(samples):
            raise LabError(f"--samples {cfg.samples}: {cfg.benchmark} {cfg.split} holds only "
                           f"{len(samples)} samples")
        samples = samples[: cfg.samples]
    chosen = select_samples(samples, cfg) if cfg.setting != "control" else []
    if cfg.setting in NEEDS_OUTPUT:
        check_references(bench)
    base_parts = load_documents(cfg.base, cfg.base_splits, cfg.corpora_dir)
    base: list[Document] = [doc for part in base_parts for doc in part.records]
    base_total = len(base)

    if cfg.limit is not None:
        if cfg.limit > base_total:
            raise LabError(f"--limit {cfg.limit}: the base corpus holds only {base_total} documents")
        keep = sorted(random.Random(f"{cfg.seed}/limit").sample(range(base_total), cfg.limit))
        base = [base[i] for i in keep]
    after_limit = len(base)

    decontaminated: list[str] = []
    if cfg.decontaminate:
        index = OverlapIndex((d.id, d.text) for d in base)
        rows = audit_samples(samples, index, spec.input_language, spec.output_language)
        dirty = set().union(*(row["_matched"] for row in rows))
        decontaminated = sorted(dirty)
        base = [d for d in base if d.id not in dirty]

    chosen_set = set(chosen)
    injected = []
    for i in chosen:
        for side, text in injected_sides(cfg.setting, samples[i]):
            for copy in range(cfg.repeat):
                injected.append({
                    "id": f"inject:{samples[i].id}:{side}:{copy}", "text": text,
                    "sample": samples[i].id, "side": side, "copy": copy,
                })
    if len(injected) > len(base):
        raise LabError(
            f"--setting {cfg.setting} --repeat {cfg.repeat}: {len(injected)} documents to remove, "
            f"but the base corpus holds only {len(base)} (raise --limit or lower --repeat)"
        )
    order = list(range(len(base)))
    random.Random(f"{cfg.seed}/remove").shuffle(order)
    removed = set(order[: len(injected)])
    final: list[dict[str, Any]] = [
        {"id": d.id, "text": d.text} for i, d in enumerate(base) if i not in removed
    ] + injected
    random.Random(f"{cfg.seed}/order").shuffle(final)

    guards, pre_existing = check_guards(cfg, samples, chosen_set, base, removed, injected, final)
    injected_chars = sum(len(r["text"]) for r in injected)
    total_chars = sum(len(r["text"]) for r in final)
    manifest: dict[str, Any] = {
        "kind": "lab-corpus",
        "setting": cfg.setting,
        "benchmark": cfg.benchmark,
        "benchmark_split": bench.split,
        "seed": cfg.seed,
        "options": {
            "base": cfg.base, "base_splits": list(cfg.base_splits), "limit": cfg.limit,
            "repeat": cfg.repeat, "fraction": cfg.fraction, "samples": cfg.samples,
            "test_ids": str(cfg.test_ids) if cfg.test_ids else None,
            "decontaminate": cfg.decontaminate, "shard_size": cfg.shard_size,
        },
        "counts": {
            "base_documents": base_total,
            "after_limit": after_limit,
            "decontaminated_removed": len(decontaminated),
            "arm_documents": len(base),
            "injected_samples": len(chosen),
            "held_out_samples": len(samples) - len(chosen),
            "injected_documents": len(injected),
            "removed_documents": len(removed),
            "final_documents": len(final),
            "injected_document_fraction": round(len(injected) / len(final), 6) if final else 0.0,
            "injected_char_fraction": round(injected_chars / total_chars, 6) if total_chars else 0.0,
        },
        "injected_ids": [samples[i].id for i in chosen],
        "held_out_ids": [s.id for i, s in enumerate(samples) if i not in chosen_set],
        "removed_base_ids": sorted(base[i].id for i in removed),
        "decontaminated_ids": decontaminated,
        "pre_existing_verbatim": pre_existing,
        "guards": guards,
        "inputs": {
            "base": [part.provenance() for part in base_parts],
            "benchmark": bench.provenance(),
        },
        "environment": environment_record(),
    }
    with atomic_output_dir(Path(cfg.out), force=cfg.force) as tmp:
        shards = write_shards(tmp / CORPUS_SUBDIR, final, cfg.shard_size)
        manifest["shards"] = shards
        manifest["corpus_sha256"] = _digest_of_shards(shards)
        manifest["wall_seconds"] = round(time.perf_counter() - started, 2)
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def check_guards(cfg: InjectConfig, samples: list[Sample], chosen: set[int], base: list[Document],
                 removed: set[int], injected: list[dict], final: list[dict]
                 ) -> tuple[dict[str, Any], list[str]]:
    """Fail loudly if the written arm is not what its setting promises."""
    if len(final) != len(base):
        raise LabError(f"internal guard: arm has {len(final)} documents, expected {len(base)}")

    base_hash_list = [whitespace_hash(d.text) for d in base]
    base_hash = dict(zip((d.id for d in base), base_hash_list))
    base_hashes = set(base_hash_list)
    base_hashes.update(whitespace_hash(part) for d in base if SEP_MARKER in d.text
                       for part in segments(d.text))
    kept_counts = Counter(h for i, h in enumerate(base_hash_list) if i not in removed)
    final_counts = Counter(
        base_hash[r["id"]] if "sample" not in r else whitespace_hash(r["text"]) for r in final
    )
    expected = Counter(whitespace_hash(r["text"]) for r in injected)
    for key, times in expected.items():
        if final_counts[key] != times + kept_counts[key]:
            raise LabError(
                f"internal guard: an injected document occurs {final_counts[key]} times, "
                f"expected {times + kept_counts[key]}"
            )

    final_segments = set(final_counts)
    final_segments.update(whitespace_hash(part) for r in injected for part in segments(r["text"]))
    exposed_sides = EXPOSED_SIDES[cfg.setting]
    pre_existing = []
    for i, sample in enumerate(samples):
        for side, text in (("input", sample.input), ("output", sample.output)):
            if not text.strip():
                continue
            key = whitespace_hash(text)
            if key in base_hashes:
                pre_existing.append(f"{sample.id}/{side}")
                continue
            if not (i in chosen and side in exposed_sides) and key in final_segments:
                raise LabError(
                    f"guard: {side} of sample {sample.id} occurs verbatim in the {cfg.setting} "
                    "arm although it was not injected and was not pre-existing"
                )
    guards = {
        "equal_size": True,
        "injected_multiplicity": cfg.repeat,
        "held_out_absent_unless_pre_existing": True,
    }
    return guards, pre_existing

