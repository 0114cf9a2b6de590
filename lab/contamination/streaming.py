"""Corpora beyond one machine's memory: the shards of a corpus as units of work.

A unit is one input file (a CSN shard, a lab corpus shard, a split's single file) or, for a
benchmark split audited as a corpus, the split itself. Units are JSON-able dicts, so that any
executor (lab.executor) can hand them to another process or node; `iter_unit` reads one unit's
documents with their stable ids, and nothing here holds more than one document at a time.

Stable ids of a dataset's documents (`name:split:index`) need each file's first index, which
depends on the line counts of the files before it: `count_units` finds them in a first pass.
"""
from __future__ import annotations

import hashlib
import heapq
import math
import shutil
from pathlib import Path
from typing import Any, Iterator

import orjson

from lab.common import LabError
from lab.contamination import soft
from lab.contamination.arm import ArmTally, Built, too_few_documents
from lab.contamination.overlap import index_spec, side_index
from lab.corpora import Loaded, get_spec, load_samples
from lab.corpora.base import sample_id
from lab.corpora.shards import (CORPUS_SUBDIR, corpus_line, read_shard,
                                shard_name, verify_corpus, write_shard)
from lab.executor import iter_step, run_step

HASH_BYTES = 8


def seeded_key(seed: int, stream: str, doc_id: str) -> int:
    """A document's place in a seeded uniform order, from its id alone (no position, no
    corpus-wide state): the first 8 bytes of blake2b over "seed/stream/id"."""
    digest = hashlib.blake2b(f"{seed}/{stream}/{doc_id}".encode(), digest_size=HASH_BYTES)
    return int.from_bytes(digest.digest(), "big")


def dataset_units(name: str, splits: list[str] | tuple[str, ...],
                  corpora_dir: Path | None) -> list[dict[str, Any]]:
    """One unit per local file of the named splits, in corpus order (split, then file)."""
    spec = get_spec(name)
    units = []
    for split in splits:
        split = spec.canonical_split(split)
        where, files = spec.locate(split, corpora_dir)
        if files is None:
            raise LabError(f"{name} split '{split}': the streaming path reads local files, and "
                           f"this split is only on the hub ({spec.hub_id}); download it as "
                           f"{spec.layout_help} and pass --corpora DIR")
        units += [{"kind": "dataset", "name": name, "split": split, "path": str(path),
                   "where": where} for path in files]
    return units


def corpus_dir_units(folder: Path) -> list[dict[str, Any]]:
    """One unit per shard of a lab corpus directory, in stored order, once the corpus is
    verified (verify_corpus, the one reader of a corpus: its shards and what its manifest
    claims)."""
    manifest = verify_corpus(folder)
    return [{"kind": "lab-corpus", "path": str(Path(folder) / shard["file"]),
             "documents": shard.get("documents")} for shard in manifest["shards"]]


def benchmark_unit(name: str, split: str, corpora_dir: Path | None) -> dict[str, Any]:
    return {"kind": "benchmark", "name": name, "split": split,
            "corpora": str(corpora_dir) if corpora_dir else None}


def count_unit(unit: dict[str, Any]) -> dict[str, Any]:
    return {"documents": sum(1 for _ in _texts(unit))}


def with_offsets(units: list[dict[str, Any]], counts: list[dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """Units with the index of their first document within their split (`start`), their
    document count and their position in the corpus (`unit`)."""
    placed, next_index = [], {}
    for number, (unit, count) in enumerate(zip(units, counts)):
        key = (unit.get("name"), unit.get("split"))
        start = next_index.get(key, 0)
        next_index[key] = start + count["documents"]
        placed.append({**unit, "start": start, "documents": count["documents"], "unit": number})
    return placed


def _texts(unit: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
    kind = unit["kind"]
    if kind == "dataset":
        spec = get_spec(unit["name"])
        for text in spec.read_local([Path(unit["path"])], unit["split"]):
            yield None, text
    elif kind == "lab-corpus":
        for record in read_shard(Path(unit["path"]), unit.get("documents")):
            yield record["id"], record["text"]
    elif kind == "benchmark":
        corpora = Path(unit["corpora"]) if unit.get("corpora") else None
        for sample in load_samples(unit["name"], unit["split"], corpora).records:
            yield f"{sample.id}/input", sample.input
            if sample.output.strip():
                yield f"{sample.id}/output", sample.output
    else:
        raise LabError(f"unknown unit kind {kind}")


def iter_unit(unit: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(id, text) of every document of one unit, in stored order."""
    start = unit.get("start", 0)
    for offset, (doc_id, text) in enumerate(_texts(unit)):
        yield (doc_id if doc_id is not None
               else sample_id(unit["name"], unit["split"], start + offset)), text


# --- format 2: an arm built in steps over units, in memory bounded by one unit or bucket ---

HISTOGRAM_BITS = 12  # --limit's threshold is found in one of 4096 key ranges


def _plan_file(path: str) -> dict[str, Any]:
    if path not in _PLANS:
        _PLANS.clear()
        _PLANS[path] = orjson.loads(Path(path).read_bytes())
    return _PLANS[path]


_PLANS: dict[str, dict[str, Any]] = {}  # the arm plan, read once per worker process


def _limit_key(seed: int, doc_id: str) -> tuple[int, str]:
    return seeded_key(seed, "limit", doc_id), doc_id


def _within_limit(plan: dict[str, Any], doc_id: str) -> bool:
    threshold = plan.get("limit_threshold")
    return threshold is None or _limit_key(plan["seed"], doc_id) <= tuple(threshold)


def scan_base_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """First look at one unit: the documents to drop as near-duplicates of the test set
    (--decontaminate), the histogram of 'limit' keys (--limit), and, without --limit, the
    unit's k clean documents with the smallest 'remove' keys."""
    seed, k, limit = unit["seed"], unit["k"], unit["limit"]
    index = side_index(unit["index"]) if unit.get("index") else None
    dirty: list[str] = []
    histogram = [0] * (1 << HISTOGRAM_BITS) if limit else []

    def candidates() -> Iterator[tuple[int, str]]:
        for doc_id, text in iter_unit(unit):
            if limit:
                histogram[seeded_key(seed, "limit", doc_id) >> (8 * HASH_BYTES - HISTOGRAM_BITS)] += 1
            if index is not None and any(index.scan(text)):
                dirty.append(doc_id)
                continue
            yield seeded_key(seed, "remove", doc_id), doc_id

    stream = candidates()
    smallest = heapq.nsmallest(k, stream) if k and not limit else []
    for _ in stream:  # the rest of the unit, when no removal is chosen here
        pass
    return {"dirty": dirty, "histogram": histogram, "smallest": [list(x) for x in smallest]}


def limit_boundary_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """The 'limit' keys of one unit that fall in the key range holding the threshold."""
    keys = []
    shift = 8 * HASH_BYTES - HISTOGRAM_BITS
    for doc_id, _text in iter_unit(unit):
        key = seeded_key(unit["seed"], "limit", doc_id)
        if key >> shift == unit["bucket"]:
            keys.append([key, doc_id])
    return {"keys": keys}


def removal_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """With --limit: the unit's k clean documents within the limit with the smallest
    'remove' keys."""
    plan = _plan_file(unit["plan"])
    dirty = set(plan["dirty"])
    seed = plan["seed"]
    smallest = heapq.nsmallest(unit["k"], (
        (seeded_key(seed, "remove", doc_id), doc_id) for doc_id, _text in iter_unit(unit)
        if doc_id not in dirty and _within_limit(plan, doc_id)))
    return {"smallest": [list(x) for x in smallest]}


def _bucket_of(key: int, buckets: int) -> int:
    return (key * buckets) >> (8 * HASH_BYTES)


def _bucket_part(work: Path, bucket: int, unit: int) -> Path:
    return work / "buckets" / f"{bucket:05d}" / f"unit-{unit:05d}.lines"


def scatter_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """Write one unit's kept documents, each prefixed by its 'order' key, to the hash bucket
    that key falls in; tally what the guards need."""
    plan = _plan_file(unit["plan"])
    dirty, removed = set(plan["dirty"]), set(plan["removed"])
    seed, buckets, work = plan["seed"], plan["buckets"], Path(plan["work"])
    tally = ArmTally({bytes.fromhex(k) for k in plan["test_keys"]},
                     {bytes.fromhex(k) for k in plan["injected_keys"]})
    handles: dict[int, Any] = {}
    written = 0
    try:
        for doc_id, text in iter_unit(unit):
            if doc_id in dirty or not _within_limit(plan, doc_id):
                continue
            tally.add_base(text, kept=doc_id not in removed)
            if doc_id in removed:
                continue
            _write_keyed(handles, work, unit["unit"], seeded_key(seed, "order", doc_id),
                         {"id": doc_id, "text": text, **plan.get("base_fields", {})},
                         buckets)
            written += 1
    finally:
        for handle in handles.values():
            handle.close()
    return {"written": written, "tally": tally.to_json()}


def _write_keyed(handles: dict[int, Any], work: Path, unit: int, key: int,
                 record: dict[str, Any], buckets: int) -> None:
    bucket = _bucket_of(key, buckets)
    if bucket not in handles:
        path = _bucket_part(work, bucket, unit)
        path.parent.mkdir(parents=True, exist_ok=True)
        handles[bucket] = open(path, "wb")
    handles[bucket].write(f"{key:016x}\t".encode() + corpus_line(record))


def gather_bucket(unit: dict[str, Any]) -> dict[str, Any]:
    """One output shard: a bucket's documents in 'order'-key order (the whole line breaks a
    tie), gzipped; and the guards' tally of what was written."""
    plan = _plan_file(unit["plan"])
    folder = Path(plan["work"]) / "buckets" / f"{unit['bucket']:05d}"
    lines: list[bytes] = []
    for part in sorted(folder.glob("unit-*.lines")) if folder.is_dir() else []:
        lines += part.read_bytes().splitlines(keepends=True)
    lines.sort()
    tally = ArmTally({bytes.fromhex(k) for k in plan["test_keys"]},
                     {bytes.fromhex(k) for k in plan["injected_keys"]})
    chars = 0
    payload = []
    for line in lines:
        body = line.split(b"\t", 1)[1]
        record = orjson.loads(body)
        tally.add_final(record["text"], injected=record["side"] != "base")
        chars += len(record["text"])
        payload.append(body)
    result: dict[str, Any] = {"documents": len(payload), "chars": chars,
                              "tally": tally.to_json()}
    if payload:
        name = shard_name(unit["bucket"])
        result["file"] = f"{CORPUS_SUBDIR}/{name}"
        result["sha256"] = write_shard(Path(plan["out"]) / name, b"".join(payload))
    shutil.rmtree(folder, ignore_errors=True)
    return result


def _smallest(best: list[tuple[int, str]], part: list[list[Any]], k: int
              ) -> list[tuple[int, str]]:
    """The k smallest (key, id) pairs of the best so far and one unit's."""
    return heapq.nsmallest(k, [*best, *(tuple(x) for x in part)])


def build_streaming(cfg: Any, plan: Any, tmp: Path) -> Any:
    """Format 2 of lab inject: the arm built in steps over the base corpus's files (count,
    scan, [limit boundary, removal,] scatter into hash buckets, gather each bucket into a
    shard), each step run on cfg's executor. Held whole: the samples, the injected documents,
    the ids to drop and to remove (the removal plan), and one bucket per task."""
    work = tmp / ".work"
    work.mkdir()
    units = dataset_units(cfg.base, cfg.base_splits, cfg.corpora_dir)
    units = with_offsets(units, run_step(cfg, "count", count_unit, units, work))
    base_total = sum(u["documents"] for u in units)
    if cfg.limit is not None and cfg.limit > base_total:
        raise LabError(f"--limit {cfg.limit}: the base corpus holds only {base_total} documents")
    k = len(plan.injected)
    index = (index_spec(cfg.benchmark, [plan.bench.split], cfg.corpora_dir, True, cfg.samples)
             if cfg.decontaminate else None)
    scans = iter_step(cfg, "scan", scan_base_unit, [
        {**u, "seed": cfg.seed, "k": k, "limit": cfg.limit, "index": index} for u in units], work)
    dirty, histogram, smallest = [], [0] * (1 << HISTOGRAM_BITS), []
    for scan in scans:  # folded unit by unit: memory does not grow with the number of units
        dirty += scan["dirty"]
        if cfg.limit is not None:
            histogram = [a + b for a, b in zip(histogram, scan["histogram"])]
        smallest = _smallest(smallest, scan["smallest"], k)
    dirty.sort()
    extra = soft.base_fields(cfg.contamination_form)  # a non-verbatim form's {"form": ""}
    arm_plan: dict[str, Any] = {"seed": cfg.seed, "dirty": dirty, "limit_threshold": None,
                                "work": str(work), "out": str(tmp / CORPUS_SUBDIR),
                                **({"base_fields": extra} if extra else {})}
    plan_path = work / "plan.json"
    if cfg.limit is not None:
        arm_plan["limit_threshold"] = list(_limit_threshold(cfg, units, histogram, work))
        dirty = [d for d in dirty if _within_limit(arm_plan, d)]
        arm_plan["dirty"] = dirty
        limit_plan = work / "plan-limit.json"  # a plan file is never rewritten: workers cache it
        limit_plan.write_bytes(orjson.dumps(arm_plan))
        smallest = []
        for removal in iter_step(cfg, "remove", removal_unit,
                                 [{**u, "plan": str(limit_plan), "k": k} for u in units], work):
            smallest = _smallest(smallest, removal["smallest"], k)
    after_limit = cfg.limit if cfg.limit is not None else base_total
    arm_documents = after_limit - len(dirty)
    if k > arm_documents:
        raise too_few_documents(cfg, k, arm_documents)
    removed = sorted(doc_id for _key, doc_id in smallest)
    # embedded: each injected document written inside one of the removed base documents
    injected, embedding = soft.placed_documents(
        plan.form, plan.injected, lambda: _removed_texts(cfg, units, removed, work), cfg.seed)
    tally = ArmTally.for_plan(plan.samples, injected)
    arm_plan.update({
        "removed": removed, "buckets": max(1, math.ceil(arm_documents / cfg.shard_size)),
        "test_keys": sorted(key.hex() for key in tally.test_keys),
        "injected_keys": sorted(key.hex() for key in tally.injected_keys)})
    plan_path.write_bytes(orjson.dumps(arm_plan))
    (tmp / CORPUS_SUBDIR).mkdir()
    for scattered in iter_step(cfg, "scatter", scatter_unit,
                               [{**u, "plan": str(plan_path)} for u in units], work):
        tally.merge(scattered["tally"])
    handles: dict[int, Any] = {}
    try:
        for record in injected:
            _write_keyed(handles, work, len(units), seeded_key(cfg.seed, "order", record["id"]),
                         record, arm_plan["buckets"])
    finally:
        for handle in handles.values():
            handle.close()
    gathered = run_step(cfg, "gather", gather_bucket, [
        {"bucket": b, "plan": str(plan_path)} for b in range(arm_plan["buckets"])], work)
    for part in gathered:
        tally.merge(part["tally"])
    shards = [{"file": g["file"], "documents": g["documents"], "sha256": g["sha256"]}
              for g in gathered if g["documents"]]
    shutil.rmtree(work)
    provenance = []
    for split in dict.fromkeys(u["split"] for u in units):
        mine = [u for u in units if u["split"] == split]
        loaded = Loaded(cfg.base, split, mine[0]["where"], [Path(u["path"]) for u in mine])
        provenance.append({**loaded.provenance(), "records": sum(u["documents"] for u in mine)})
    return Built(provenance, base_total, after_limit, dirty, arm_documents, removed, shards,
                 sum(g["documents"] for g in gathered), sum(g["chars"] for g in gathered), tally,
                 injected=injected if embedding is not None else None, embedding=embedding)


def removed_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """The (id, text) of one unit's documents the arm removes (an embedded arm's hosts)."""
    removed = set(_plan_file(unit["plan"])["removed"])
    return {"documents": [[doc_id, text] for doc_id, text in iter_unit(unit)
                          if doc_id in removed]}


def _removed_texts(cfg: Any, units: list[dict[str, Any]], removed: list[str], work: Path
                   ) -> list[tuple[str, str]]:
    """The removed documents' texts, one more pass over the units (held: one per injected
    document, as the injected documents are)."""
    path = work / "plan-removed.json"  # a plan file is never rewritten: workers cache it
    path.write_bytes(orjson.dumps({"removed": removed}))
    found = [tuple(pair) for part in iter_step(cfg, "hosts", removed_unit,
                                               [{**u, "plan": str(path)} for u in units], work)
             for pair in part["documents"]]
    return sorted(found)


def _limit_threshold(cfg: Any, units: list[dict[str, Any]], totals: list[int],
                     work: Path) -> tuple[int, str]:
    """The (key, id) of the cfg.limit-th smallest 'limit' key: the key range holding it from
    the merged histograms, then that range's keys, sorted."""
    below = 0
    for bucket, count in enumerate(totals):
        if below + count >= cfg.limit:
            break
        below += count
    keys = run_step(cfg, "limit", limit_boundary_unit,
                    [{**u, "seed": cfg.seed, "bucket": bucket} for u in units], work)
    boundary = sorted(tuple(x) for part in keys for x in part["keys"])
    return boundary[cfg.limit - below - 1]
