"""`lab decontam --write-clean`: decontaminate a corpus that has no ground truth.

The testbed mode (lab.decontam.run) judges methods on an arm whose documents say which sample
each copies; a user's corpus says nothing of the kind. This mode runs the chosen methods over
the corpus against a benchmark split and writes what they leave: the kept documents in the
input's own layout, and `flagged.csv`, one row per removed document, method and matching
sample.

Inputs (`--corpus DIR`), recognised by their layout:
- a lab corpus (its manifest.json, checked by the corpus reader): the output is a lab corpus,
  one shard per input shard with the kept lines, and a manifest listing every removed document
  and the methods that removed it;
- a folder in CodeSearchNet's jsonl.gz layout (`*.jsonl.gz` files anywhere below it, one JSON
  record with a `code` field per line, as CSN's `java/final/jsonl/SPLIT/java_SPLIT_N.jsonl.gz`):
  the output has the same files at the same relative paths, every kept line byte for byte.

Bounded memory: every input file is streamed in batches of BATCH documents; the reference
samples are the only index held whole (each method builds its own from them per batch, which
costs little next to the scan). Every method judges each document alone, so batching changes
no flag. Scale-out: one unit per input file on lab.executor's steps (datatrove's executor for
`--tasks` > 1 or `--executor slurm`); each unit writes its own output file and returns its
rows, merged in file order, so the output is byte-identical whatever `--tasks`.

flagged.csv's sample, score and span come from a method's `match` (exact: 1.0 and the first
occurrence; word n-grams: the side's n-grams found / its n-grams, from the first to the last);
a method without one (datatrove, minhash, audit) gives one row per flagged document with those
columns empty.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import io
import re
import resource
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import orjson

from lab.common import LabError, atomic_output_dir
from lab.corpora import corpora_inputs, get_spec, load_samples
from lab.corpora.shards import CORPUS_SUBDIR, MANIFEST, json_lines, shards_digest, verify_corpus
from lab.decontam import DECONTAMINATORS
from lab.decontam.base import Options, Reference
from lab.decontam.config import DecontamConfig
from lab.executor import run_step

KIND = "lab-decontam-clean"
BATCH = 4096          # documents judged at a time (memory: one batch's texts and lines)
MATCHED_CHARS = 160   # flagged.csv's `matched`: the span's text, whitespace collapsed, cut here
COLUMNS = ("file", "line", "document", "method", "sample", "score", "start", "end", "matched")
LAYOUTS = {"lab": ("text", "id"), "csn": ("code", "url")}  # the text field, the name field


@dataclasses.dataclass(frozen=True)
class Source:
    """The corpus to clean: its layout and its files (relative to the folder), in order."""
    folder: Path
    layout: str                      # "lab" or "csn"
    files: list[str]
    manifest: dict[str, Any] | None  # a lab corpus's (verified)


def find_source(folder: Path) -> Source:
    """The folder's layout and files, or one line saying it has neither layout."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LabError(f"--corpus {folder}: no such folder")
    if (folder / MANIFEST).is_file():
        manifest = verify_corpus(folder)  # a model's folder or a damaged corpus: one line
        return Source(folder, "lab", [s["file"] for s in manifest["shards"]], manifest)
    files = sorted((p.relative_to(folder) for p in folder.rglob("*.jsonl.gz") if p.is_file()),
                   key=_file_order)
    if not files:
        raise LabError(f"--corpus {folder}: neither a lab corpus (no {MANIFEST}) nor a folder "
                       "in CodeSearchNet's jsonl.gz layout (no *.jsonl.gz file below it, as "
                       "java/final/jsonl/train/java_train_0.jsonl.gz)")
    return Source(folder, "csn", [str(p) for p in files], None)


def _file_order(path: Path) -> tuple[str, int, str]:
    """CSN's shard order: by folder, then shard number (java_train_10 after java_train_2)."""
    number = re.search(r"_(\d+)\.jsonl\.gz$", path.name)
    return (str(path.parent), int(number.group(1)) if number else -1, path.name)


def parse_benchmark(text: str) -> tuple[str, str]:
    """NAME[:SPLIT] (split default: test), checked against the datasets' table."""
    name, _, split = text.partition(":")
    spec = get_spec(name)
    if spec.kind != "benchmark":
        raise LabError(f"--benchmark {name}: a pre-training corpus, not a benchmark")
    return name, spec.canonical_split(split or "test")


def load_reference(benchmark: str, split: str, corpora_dir: str | None) -> Reference:
    spec = get_spec(benchmark)
    samples = load_samples(benchmark, split, Path(corpora_dir) if corpora_dir else None).records
    return Reference(samples, spec.input_language, spec.output_language)


def run_clean(cfg: DecontamConfig) -> dict[str, Any]:
    """Entry point of `lab decontam --write-clean`: every check first, then the units, then
    the merged flagged.csv and summary, all in a temporary folder renamed when complete."""
    started = time.perf_counter()
    benchmark, split = parse_benchmark(str(cfg.benchmark))
    source = find_source(Path(cfg.corpus))
    reference = load_reference(benchmark, split, cfg.corpora_dir)  # unknown or missing: here
    out = Path(cfg.write_clean)
    inputs = [source.folder, *corpora_inputs(cfg.corpora_dir)]
    options = dataclasses.asdict(cfg.options())
    with atomic_output_dir(out, force=cfg.force, kind=KIND, inputs=inputs) as tmp:
        units = [{"path": str(source.folder / name), "file": name, "layout": source.layout,
                  "output": str(tmp / _output_name(source, name)),
                  "relative_output": _output_name(source, name), "benchmark": benchmark,
                  "split": split, "corpora_dir": str(cfg.corpora_dir or ""),
                  "methods": list(cfg.methods), "options": options}
                 for name in source.files]
        results = run_step(cfg, "clean", clean_file, units, tmp / ".steps")
        shutil.rmtree(tmp / ".steps")
        summary = _summary(cfg, source, benchmark, split, len(reference.samples), results)
        with open(tmp / "flagged.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(COLUMNS)
            for result in results:
                writer.writerows(result["rows"])
        if source.layout == "lab":
            (tmp / MANIFEST).write_bytes(_lab_manifest(source, summary, results))
        (tmp / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
        timing = {"seconds": round(time.perf_counter() - started, 2), **peak_memory()}
        (tmp / "timing.json").write_bytes(orjson.dumps(timing, option=orjson.OPT_INDENT_2))
    return {**summary, **timing}


def _output_name(source: Source, name: str) -> str:
    return name if source.layout == "csn" else f"{CORPUS_SUBDIR}/{Path(name).name}"


def peak_memory() -> dict[str, float]:
    """Peak resident set of this process and of its finished children (the tasks), MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"peak_rss_mib": round(own, 1), "peak_rss_children_mib": round(children, 1)}


def _summary(cfg: DecontamConfig, source: Source, benchmark: str, split: str, samples: int,
             results: list[dict[str, Any]]) -> dict[str, Any]:
    """What was read, kept and removed (depends on the inputs and options alone)."""
    read = sum(r["documents"] for r in results)
    kept = sum(r["kept"] for r in results)
    by_method = {m: sum(r["flagged"][m] for r in results) for m in cfg.methods}
    return {"kind": KIND, "corpus": str(source.folder), "layout": source.layout,
            "benchmark": benchmark, "split": split, "samples": samples,
            "methods": list(cfg.methods), "options": dataclasses.asdict(cfg.options()),
            "documents": read, "kept": kept, "removed": read - kept,
            "flagged_by_method": by_method,
            "files": [{"file": r["file"], "output": r["output"], "documents": r["documents"],
                       "kept": r["kept"], "sha256": r["sha256"]} for r in results]}


def _lab_manifest(source: Source, summary: dict[str, Any], results: list[dict[str, Any]]
                  ) -> bytes:
    """A cleaned lab corpus's manifest: its shards (those with a document left), what it was
    cleaned from, and every removed document with the methods that removed it."""
    shards = [{"file": r["output"], "documents": r["kept"], "sha256": r["sha256"]}
              for r in results if r["kept"]]
    source_manifest = source.manifest or {}
    return orjson.dumps({
        "kind": KIND, "cleaned_from": str(source.folder),
        "source_corpus_sha256": source_manifest.get("corpus_sha256"),
        **{key: summary[key] for key in ("benchmark", "split", "methods", "options",
                                          "documents", "kept", "removed")},
        "removed_documents": [entry for r in results for entry in r["removed"]],
        "shards": shards, "corpus_sha256": shards_digest(shards)},
        option=orjson.OPT_INDENT_2)


def read_lines(path: Path, text_field: str, name_field: str
               ) -> Iterator[tuple[int, bytes, str, str]]:
    """(line number, the line's bytes, its text, its name) of every line of a jsonl.gz file."""
    for lineno, line, record in json_lines(path):
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise LabError(f"{path}:{lineno}: record needs a text field '{text_field}'")
        yield lineno, line, record[text_field], str(record.get(name_field) or "")


def _batches(lines: Iterator[tuple[int, bytes, str, str]]
             ) -> Iterator[list[tuple[int, bytes, str, str]]]:
    batch = []
    for item in lines:
        batch.append(item)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def clean_file(unit: dict[str, Any]) -> dict[str, Any]:
    """One input file (a unit of the step): its kept lines written to the unit's output file,
    its flagged.csv rows and counts returned."""
    reference = load_reference(unit["benchmark"], unit["split"], unit["corpora_dir"] or None)
    options = Options(**unit["options"])
    methods = [DECONTAMINATORS[name] for name in unit["methods"]]
    text_field, name_field = LAYOUTS[unit["layout"]]
    output = Path(unit["output"])
    output.parent.mkdir(parents=True, exist_ok=True)
    rows: list[list[Any]] = []
    removed: list[dict[str, Any]] = []
    flagged = dict.fromkeys(unit["methods"], 0)
    documents = kept = 0
    with open(output, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                  mtime=0, compresslevel=6) as gz:
        for batch in _batches(read_lines(Path(unit["path"]), text_field, name_field)):
            texts = [text for _n, _line, text, _name in batch]
            flags_of = {m.name: m.flag(texts, reference, options) for m in methods}
            removers = [[m.name for m in methods if flags_of[m.name][i]]
                        for i in range(len(batch))]
            for method in methods:
                hit = [i for i, f in enumerate(flags_of[method.name]) if f]
                flagged[method.name] += len(hit)
                matched = (method.match([texts[i] for i in hit], reference, options)
                           if method.match is not None else [[] for _ in hit])
                for i, found in zip(hit, matched):
                    rows.extend(_rows(unit["file"], batch[i], method.name, found))
            buffer = io.BytesIO()
            for (lineno, line, _text, name), by in zip(batch, removers):
                if by:
                    removed.append({"file": unit["file"], "line": lineno, "document": name,
                                    "methods": by})
                else:
                    buffer.write(line if line.endswith(b"\n") else line + b"\n")
                    kept += 1
            gz.write(buffer.getvalue())
            documents += len(batch)
    rows.sort(key=lambda row: (row[1], unit["methods"].index(row[3])))
    sha256 = hashlib.sha256(output.read_bytes()).hexdigest()
    return {"file": unit["file"], "output": unit["relative_output"], "documents": documents,
            "kept": kept, "flagged": flagged, "rows": rows, "removed": removed,
            "sha256": sha256}


def _rows(file: str, item: tuple[int, bytes, str, str], method: str,
          found: list[tuple[str, float, tuple[int, int]]]) -> list[list[Any]]:
    """flagged.csv's rows of one flagged document and method: one per matching sample, or
    one with sample, score and span empty where the method gives none (a span None: a method
    that names the sample and its score but not where, winnow)."""
    lineno, _line, text, name = item
    if not found:
        return [[file, lineno, name, method, "", "", "", "", ""]]
    return [[file, lineno, name, method, sample, score, *(
        ("", "", "") if span is None else
        (span[0], span[1], " ".join(text[span[0]:span[1]].split())[:MATCHED_CHARS]))]
            for sample, score, span in found]
