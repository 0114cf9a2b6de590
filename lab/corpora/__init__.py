"""Dataset loaders: one canonical record stream per dataset, found locally or on the hub.

Entry points: `load_documents` (pre-training corpora), `load_samples` (benchmarks),
`dataset_table` (`lab corpora list`) and `dataset_stats` (`lab corpora stats`).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lab.codetokens import code_tokens
from lab.common import DataNotFound, LabError, cached_sha256, sha256_file
from lab.corpora import codetrans, concode, csn, csn_summaries
from lab.corpora.base import (
    DatasetSpec, Document, Sample, candidate_roots, lab_corpora_folders, load_hub_split, sample_id,
)
from lab.corpora.shards import MANIFEST, verify_corpus

__all__ = [
    "DATASETS", "Document", "Sample", "Loaded", "get_spec", "load_documents", "load_samples",
    "dataset_table", "dataset_stats", "dataset_manifest", "verify_dataset",
]

# The registry: one line per dataset (a benchmark's module also declares its task, lab.tasks).
DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    csn.SPEC,
    codetrans.SPEC,
    concode.SPEC,
    codetrans.PAPER_SPEC,
    concode.PAPER_SPEC,
    csn_summaries.SPEC,
    csn.PYTHON_SPEC,
    csn_summaries.PYTHON_SPEC,
    csn_summaries.PYTHON_GENERATION_SPEC,
)}
BENCHMARKS = tuple(name for name, spec in DATASETS.items() if spec.kind == "benchmark")


def get_spec(name: str) -> DatasetSpec:
    spec = DATASETS.get(name)
    if spec is None:
        raise LabError(f"unknown dataset '{name}' (choose from {', '.join(DATASETS)})")
    return spec


@dataclass
class Loaded:
    """Records of one split plus where they came from (for manifests)."""

    dataset: str
    split: str
    where: str
    files: list[Path] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)

    def provenance(self, with_hashes: bool = True) -> dict[str, Any]:
        spec = get_spec(self.dataset)
        known = known_checksums(self.dataset) if with_hashes else {}
        files = []
        for path in self.files:
            entry: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size}
            if with_hashes:
                entry["sha256"] = sha256_file(path)
                entry["known_version"] = entry["sha256"] in known
            files.append(entry)
        return {
            "dataset": self.dataset, "split": self.split, "where": self.where,
            "hub_id": spec.hub_id if self.where == "hub" else None,
            "records": len(self.records), "files": files,
        }


def _rows(spec: DatasetSpec, split: str, corpora_dir: Path | None,
          located: tuple[str, list[Path] | None] | None = None) -> tuple[str, list[Path], list]:
    """A split's rows, from where `spec.locate` finds it (or `located`, its answer already)."""
    where, files = located or spec.locate(split, corpora_dir)
    if files is None:
        # The user who forgot LAB_CORPORA learns it now, not after the hub's retries.
        print(f"lab: {spec.name} split '{split}' has no local copy (--corpora, LAB_CORPORA, "
              f"./corpora): loading {spec.hub_id} from the hub (HF_HUB_OFFLINE=1 skips it)",
              file=sys.stderr, flush=True)
        try:
            hub_rows = load_hub_split(spec.hub_id, spec.hub_config, spec.hub_splits[split])
        except DataNotFound as exc:
            raise DataNotFound(spec.missing_message(split, corpora_dir, f"the hub failed: {exc}")
                               ) from None
        keep = spec.hub_row_in_split
        return where, [], [spec.read_hub_row(row) for row in hub_rows
                           if keep is None or keep(row, split)]
    return where, files, list(spec.read_local(files, split))


def load_documents(name: str, splits: tuple[str, ...] | list[str], corpora_dir: Path | None = None
                   ) -> list[Loaded]:
    """Pre-training documents of the named splits, each with a stable `name:split:index` id."""
    spec = get_spec(name)
    if spec.kind != "corpus":
        raise LabError(f"{name} is a benchmark, not a pre-training corpus")
    splits = [spec.canonical_split(split) for split in splits]
    located = [spec.locate(split, corpora_dir) for split in splits]
    key = (name, tuple((split, where, tuple(_file_state(path) for path in files or ()))
                       for split, (where, files) in zip(splits, located)))
    if key not in _READ:
        read = []
        for split, found in zip(splits, located):
            where, files, texts = _rows(spec, split, corpora_dir, found)
            documents = [Document(sample_id(name, split, i), text) for i, text in enumerate(texts)]
            read.append((split, where, files, documents))
        _READ.clear()  # one corpus held: a study's arms read the same base one after another
        if all(files for _split, _where, files, _docs in read):  # the hub's rows: not kept
            _READ[key] = read
    else:
        read = _READ[key]
    return [Loaded(name, split, where, list(files), list(docs))
            for split, where, files, docs in read]


# The local splits read last, by their files' identity and state: each arm of a study reads the
# same base corpus (CSN Java's 120,328 documents took 9 s a read); Documents are frozen, and
# each caller gets lists of its own.
_READ: dict[tuple, list[tuple[str, str, list[Path], list[Document]]]] = {}


def _file_state(path: Path) -> tuple[str, int, int, int]:
    state = path.stat()
    return str(path.resolve()), state.st_ino, state.st_size, state.st_mtime_ns


def load_samples(name: str, split: str, corpora_dir: Path | None = None,
                 require_references: bool = False) -> Loaded:
    """Benchmark samples of one split. With `require_references`, a split whose outputs are
    empty (CodeXGLUE's current CONCODE test.json) is refused instead of scored against ""."""
    spec = get_spec(name)
    if spec.kind != "benchmark":
        raise LabError(f"{name} is a pre-training corpus, not a benchmark")
    split = spec.canonical_split(split)
    where, files, pairs = _rows(spec, split, corpora_dir)
    if spec.order_seed is not None:
        pairs = sorted(pairs, key=lambda pair: _order_key(spec.order_seed, *pair))
    samples = [Sample(sample_id(name, split, i), split, i, inp, out)
               for i, (inp, out) in enumerate(pairs)]
    loaded = Loaded(name, split, where, files, samples)
    if require_references:
        check_references(loaded)
    return loaded


def _order_key(seed: str, source: str, target: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{source}\0{target}".encode()).digest()


def check_references(loaded: Loaded) -> None:
    empty = [s.index for s in loaded.records if not s.output.strip()]
    if empty:
        source = loaded.files[-1] if loaded.files else loaded.where
        raise LabError(
            f"{source}: {len(empty)} of {len(loaded.records)} samples of {loaded.dataset} split "
            f"'{loaded.split}' have an empty reference (first: line {empty[0] + 1}); this split "
            "cannot be scored or injected on its output side (CodeXGLUE emptied CONCODE's test "
            "references; use the test.json of CodeXGLUE commit 097f8fd)"
        )


def dataset_table(corpora_dir: Path | None = None) -> list[dict[str, Any]]:
    """For each dataset and split: where it would be read from (a local folder, hub, missing)."""
    candidate_roots(corpora_dir)  # a missing --corpora/LAB_CORPORA folder is an error, not "missing"
    rows = []
    for name, spec in DATASETS.items():
        for split in spec.splits:
            try:
                where, _files = spec.locate(split, corpora_dir)
            except LabError:
                where = "missing"
            rows.append({"dataset": name, "kind": spec.kind, "split": split, "where": where})
    return rows


# corpora/ beside the package holds one manifest per dataset: source, expected counts and the
# checksums of the published files (absent when the lab is installed without its repository).
MANIFEST_DIR = Path(__file__).resolve().parents[2] / "corpora"


def dataset_manifest(name: str) -> dict[str, Any] | None:
    path = MANIFEST_DIR / f"{name}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def known_checksums(name: str) -> dict[str, str]:
    """sha256 -> file path of the published version the lab knows."""
    manifest = dataset_manifest(name) or {}
    return {f["sha256"]: f["path"] for f in manifest.get("files", [])}


def verify_dataset(name: str, corpora_dir: Path | None = None) -> list[dict[str, Any]]:
    """Entry point of `lab corpora verify`: a row per local file of a dataset, compared with the
    checksums in corpora/NAME.json. Refused (LabError): an empty file (0 bytes, or no content
    once decompressed), no file of the dataset found (nothing to verify), a file whose bytes
    differ from the published one. NAME may also be a lab corpus directory (lab inject): its
    shards are checked against its manifest, and it must hold documents."""
    rows = _checksum_rows(name, corpora_dir)
    if all(row["status"] == "missing" for row in rows):
        where = corpora_dir or os.environ.get("LAB_CORPORA") or "./corpora"
        raise LabError(f"{name}: no file of it found (under {where}): nothing to verify")
    changed = [row for row in rows if row["status"].startswith("differs")]
    if changed:
        raise LabError(f"{changed[0]['file']}: {changed[0]['status']} (sha256 "
                       f"{changed[0]['sha256'][:12]}...; {len(changed)} file(s) differ)")
    return rows


def _checksum_rows(name: str, corpora_dir: Path | None) -> list[dict[str, Any]]:
    if (Path(name) / MANIFEST).is_file():
        return _verify_arm(Path(name))
    spec = get_spec(name)
    candidate_roots(corpora_dir)  # a missing --corpora/LAB_CORPORA folder is an error, not "missing"
    known = known_checksums(name)
    rows = []
    for split in spec.splits:
        try:
            where, files = spec.locate(split, corpora_dir)
        except LabError:
            rows.append({"split": split, "file": None, "status": "missing"})
            continue
        for path in files or []:
            if _is_empty(Path(path)):
                raise LabError(f"{path}: empty file ({name} split '{split}' has no records)")
            digest = sha256_file(path)
            if digest in known:
                status = f"matches {known[digest]}"
            elif (published := _published_as(Path(path), known)) is not None:
                # A file the lab knows by name whose bytes differ: truncated or changed.
                status = f"differs from the published {published}"
            else:
                status = "unknown version"
            rows.append({"split": split, "file": str(path), "status": status, "sha256": digest})
        if files is None:
            rows.append({"split": split, "file": where, "status": "hub"})
    return rows


def _published_as(path: Path, known: dict[str, str]) -> str | None:
    """The published file (its path in corpora/NAME.json) that `path` is by its name, if any."""
    for published in known.values():
        if path.as_posix().endswith("/" + published) or path.name == published:
            return published
    return None


def corpora_inputs(corpora_dir: Path | None) -> list[Path]:
    """The dataset folders a command may read (each dataset's folder under --corpora,
    LAB_CORPORA and ./corpora): inputs that no output may be, hold or lie inside
    (lab.common.check_output). Outputs beside them, in the same root, are the user's to make."""
    roots = [Path(corpora_dir)] if corpora_dir is not None else []
    roots += lab_corpora_folders()
    roots.append(Path("corpora"))
    subdirs = dict.fromkeys(spec.subdir for spec in DATASETS.values())
    return [root / subdir for root in roots for subdir in subdirs]


def data_fingerprints(name: str, corpora_dir: Path | None = None) -> dict[str, str]:
    """What a dataset's content is here: `split/file name` -> sha256 of each local file (the
    file's name, not its folder, so equal data fingerprints alike on every machine), or
    `split` -> `hub:ID` for a split read from the hub. A missing split is left out (the
    stages that need it fail on their own)."""
    spec = get_spec(name)
    prints: dict[str, str] = {}
    for split in spec.splits:
        try:
            where, files = spec.locate(split, corpora_dir)
        except LabError:
            continue
        if files is None:
            prints[split] = f"hub:{where}"
        for path in files or []:
            prints[f"{split}/{Path(path).name}"] = cached_sha256(path)
    return prints


def _is_empty(path: Path) -> bool:
    """0 bytes, or only whitespace (decompressed, for .gz); reads up to the first content."""
    import gzip
    import zlib

    if path.stat().st_size == 0:
        return True
    try:
        handle = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
        with handle:
            while chunk := handle.read(1 << 16):
                if chunk.strip():
                    return False
    except (OSError, EOFError, zlib.error) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None
    return True


def _verify_arm(folder: Path) -> list[dict[str, Any]]:
    manifest = verify_corpus(folder)  # LabError on a mismatch or an empty corpus
    return [{"split": "-", "file": str(folder / s["file"]), "status": f"matches {MANIFEST}",
             "sha256": s["sha256"]} for s in manifest["shards"]]


QUANTILES = (0.5, 0.9, 0.99)


def _length_summary(lengths: list[int]) -> dict[str, float]:
    if not lengths:
        return {"mean": 0.0, **{f"p{int(q * 100)}": 0.0 for q in QUANTILES}, "max": 0}
    arr = np.asarray(lengths)
    summary = {"mean": round(float(arr.mean()), 1)}
    summary.update({f"p{int(q * 100)}": float(np.quantile(arr, q)) for q in QUANTILES})
    summary["max"] = int(arr.max())
    return summary


def dataset_stats(name: str, corpora_dir: Path | None = None) -> list[dict[str, Any]]:
    """Split counts and token-length quantiles (lab code tokens) of every available split."""
    spec = get_spec(name)
    expected = (dataset_manifest(name) or {}).get("expected_records", {})
    rows = []
    for split in spec.splits:
        try:
            if spec.kind == "corpus":
                loaded = load_documents(name, [split], corpora_dir)[0]
                sides = {"text": [len(code_tokens(d.text)) for d in loaded.records]}
            else:
                loaded = load_samples(name, split, corpora_dir)
                sides = {
                    "input": [len(code_tokens(s.input)) for s in loaded.records],
                    "output": [len(code_tokens(s.output)) for s in loaded.records],
                }
        except DataNotFound:
            rows.append({"split": split, "records": None, "expected": expected.get(split),
                         "where": "missing"})
            continue
        row: dict[str, Any] = {"split": split, "records": len(loaded.records),
                               "expected": expected.get(split), "where": loaded.where}
        for side, lengths in sides.items():
            row[side] = _length_summary(lengths)
        rows.append(row)
    return rows
