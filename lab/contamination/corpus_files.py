"""On-disk format of an arm's corpus: sharded gzip JSON lines plus manifest.json.

Each line is {"id", "text"} for a base document, plus {"sample", "side", "copy"} for an
injected one. Gzip headers carry no timestamp or name, so equal content gives equal bytes.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator

import orjson

from lab.common import LabError

CORPUS_SUBDIR = "corpus"
MANIFEST = "manifest.json"


def _write_shard(path: Path, payload: bytes) -> str:
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            gz.write(payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_shards(folder: Path, records: Iterable[dict[str, Any]], shard_size: int
                 ) -> list[dict[str, Any]]:
    """Write records in shards of `shard_size`; shards compress in parallel (zlib releases
    the GIL), and each shard's bytes depend only on its records."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"\n" for record in records]
    starts = list(range(0, len(lines), shard_size)) or [0]
    names = [f"part-{i:05d}.jsonl.gz" for i in range(len(starts))]
    payloads = [b"".join(lines[start:start + shard_size]) for start in starts]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = list(pool.map(_write_shard, [folder / n for n in names], payloads))
    return [
        {"file": f"{CORPUS_SUBDIR}/{name}", "documents": len(lines[start:start + shard_size]),
         "sha256": digest}
        for name, start, digest in zip(names, starts, digests)
    ]


def read_manifest(folder: Path) -> dict[str, Any]:
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise LabError(f"{folder}: no such corpus directory")
    if not path.is_file():
        raise LabError(f"{folder}: not a lab corpus directory (no {MANIFEST}; make one with lab inject)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LabError(f"{path}: corrupt JSON ({exc})") from None
    if not isinstance(manifest, dict) or "shards" not in manifest:
        raise LabError(f"{path}: field 'shards' missing")
    shards = manifest["shards"]
    if not isinstance(shards, list) or not all(
            isinstance(s, dict) and isinstance(s.get("file"), str) for s in shards):
        raise LabError(f"{path}: field 'shards' must be a list of {{\"file\": ...}} objects")
    return manifest


def read_corpus(folder: Path) -> Iterator[dict[str, Any]]:
    """Every document of a lab corpus directory, in stored order."""
    folder = Path(folder)
    for shard in read_manifest(folder)["shards"]:
        path = folder / shard["file"]
        if not path.is_file():
            raise LabError(f"{path}: shard listed in {MANIFEST} is missing")
        lineno = 0
        try:
            with gzip.open(path, "rb") as handle:
                for lineno, line in enumerate(handle, start=1):
                    try:
                        record = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise LabError(f"{path}:{lineno}: corrupt JSON line ({exc})") from None
                    if not isinstance(record, dict) or "text" not in record or "id" not in record:
                        raise LabError(f"{path}:{lineno}: record needs fields 'id' and 'text'")
                    yield record
        except (OSError, EOFError, zlib.error) as exc:  # truncated or not gzip
            raise LabError(f"{path}: unreadable after line {lineno} ({exc})") from None
