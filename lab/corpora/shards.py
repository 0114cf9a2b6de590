"""On-disk format of a lab corpus directory (an arm's corpus, made by lab inject): sharded gzip
JSON lines plus manifest.json. It lives with the loaders, below everything that writes or reads
such a corpus (injection, tokenizer, training, probes, `lab corpora verify`).

Each line is {"id", "text", "sample", "side", "copy"}: which test sample, side (input, output,
pair) and copy an injected document is; a base document has sample "", side "base", copy 0.
Every line has every field with one type (no nulls, whose type a reader cannot infer from a
shard without injected documents), so shards load together with one schema in
`datasets.load_dataset("json", data_files=...)` or pandas. Gzip headers carry no timestamp or name, so equal
content gives equal bytes.
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

from lab.common import LabError, read_text_file, sha256_file

CORPUS_SUBDIR = "corpus"
MANIFEST = "manifest.json"
BASE_FIELDS = {"sample": "", "side": "base", "copy": 0}  # a base document's injection fields


def corpus_line(record: dict[str, Any]) -> bytes:
    """One document as its corpus line: every field, keys sorted (equal records, equal bytes)."""
    return orjson.dumps({**BASE_FIELDS, **record}, option=orjson.OPT_SORT_KEYS) + b"\n"


def shard_name(number: int) -> str:
    return f"part-{number:05d}.jsonl.gz"


def write_shard(path: Path, payload: bytes) -> str:
    """Write one shard's lines gzipped (no timestamp, no name); return the file's sha256."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            gz.write(payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_shards(folder: Path, records: Iterable[dict[str, Any]], shard_size: int
                 ) -> list[dict[str, Any]]:
    """Write records in shards of `shard_size`; shards compress in parallel (zlib releases
    the GIL), and each shard's bytes depend only on its records."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [corpus_line(record) for record in records]
    starts = list(range(0, len(lines), shard_size)) or [0]
    names = [shard_name(i) for i in range(len(starts))]
    payloads = [b"".join(lines[start:start + shard_size]) for start in starts]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = list(pool.map(write_shard, [folder / n for n in names], payloads))
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
        manifest = json.loads(read_text_file(path))
    except json.JSONDecodeError as exc:
        raise LabError(f"{path}: corrupt JSON ({exc})") from None
    if not isinstance(manifest, dict) or "shards" not in manifest:
        raise LabError(f"{path}: field 'shards' missing")
    shards = manifest["shards"]
    if not isinstance(shards, list) or not all(
            isinstance(s, dict) and isinstance(s.get("file"), str) for s in shards):
        raise LabError(f"{path}: field 'shards' must be a list of {{\"file\": ...}} objects")
    root = folder.resolve()
    for shard in shards:
        name = shard["file"]
        inside = (root / name).resolve()
        if (not name or os.path.isabs(name) or ".." in Path(name).parts
                or not inside.is_relative_to(root)):
            raise LabError(f"{path}: shard path '{name}' leaves the corpus folder")
    return manifest


def shards_digest(shards: list[dict[str, Any]]) -> str:
    """The corpus_sha256 of a manifest: sha256 over its shards' sha256 strings, in order."""
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(str(shard.get("sha256")).encode())
    return digest.hexdigest()


_VERIFIED: dict[tuple, bool] = {}  # corpora verified by this process (and their files' stats)


def verify_corpus(folder: Path) -> dict[str, Any]:
    """The manifest of a lab corpus directory, after checking that the corpus is what it says:
    every shard's bytes hash to the sha256 listed for it, corpus_sha256 is the digest of those
    hashes, and the corpus holds documents (no empty shard). Hashing reads every shard once per
    process (a CSN-size arm: seconds); anything else trusting corpus_sha256 (the token cache is
    keyed by it) would otherwise train on another arm's tokens."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    path = folder / MANIFEST
    shards = manifest["shards"]
    if "corpus_sha256" not in manifest:
        raise LabError(f"{path}: field 'corpus_sha256' missing")
    if not shards or sum(int(s.get("documents") or 0) for s in shards) == 0:
        raise LabError(f"{folder}: empty corpus (0 documents)")
    stats = []
    for shard in shards:
        shard_path = folder / shard["file"]
        if not shard_path.is_file():
            raise LabError(f"{shard_path}: shard listed in {MANIFEST} is missing")
        st = shard_path.stat()
        if st.st_size == 0 or not shard.get("documents"):
            raise LabError(f"{shard_path}: empty shard (0 documents)")
        stats.append((shard["file"], st.st_size, st.st_mtime_ns, st.st_ino))
    key = (str(folder.resolve()), path.read_bytes(), tuple(stats))
    if key in _VERIFIED:
        return manifest
    for shard in shards:
        shard_path = folder / shard["file"]
        if sha256_file(shard_path) != shard.get("sha256"):
            raise LabError(f"{shard_path}: sha256 differs from the one listed in {path} "
                           "(shard changed or manifest of another corpus)")
    if shards_digest(shards) != manifest["corpus_sha256"]:
        raise LabError(f"{path}: corpus_sha256 does not match the shards it lists (manifest of "
                       "another corpus?)")
    _VERIFIED[key] = True
    return manifest


def read_corpus(folder: Path) -> Iterator[dict[str, Any]]:
    """Every document of a lab corpus directory, in stored order."""
    folder = Path(folder)
    for shard in read_manifest(folder)["shards"]:
        yield from read_shard(folder / shard["file"], shard.get("documents"))


def read_shard(path: Path, listed: int | None = None) -> Iterator[dict[str, Any]]:
    """Every document of one corpus shard; `listed` is the count its manifest gives."""
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
    if isinstance(listed, int) and listed != lineno:
        raise LabError(f"{path}: {lineno} documents, {MANIFEST} lists {listed}")
