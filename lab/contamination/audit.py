"""Audit: which benchmark samples already occur in a corpus, exactly or as near-duplicates (the
criteria and the indexes are lab.contamination.overlap's). The corpus streams by, unit by unit;
only the samples are held whole.
"""
from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from lab.common import (MANIFEST, DataNotFound, LabError, check_output, corpora_param,
                        environment_record, param, write_rows_and_summary)
from lab.contamination.overlap import (
    CODE_LANGUAGES, MIN_TOKENS, MULTISET_THRESHOLD, SET_THRESHOLD, OverlapIndex, SideMatch,
    index_spec, keep_best, ranked, sample_sides, side_index,
)
from lab.contamination.streaming import (benchmark_unit, corpus_dir_units, count_unit,
                                         dataset_units, iter_unit, with_offsets)
from lab.corpora import DATASETS, Sample, corpora_inputs, get_spec, load_samples
from lab.executor import ExecutorConfig, check_executor, iter_step, run_step

MAX_LISTED = 10


def audit_samples(samples: list[Sample], index: OverlapIndex, input_language: str,
                  output_language: str) -> list[dict[str, Any]]:
    """One report row per sample: leaked?, and per side the matching documents of `index`."""
    return [sample_row(sample, {side: index.match(text, near=language in CODE_LANGUAGES)
                                for side, text, language in sample_sides(sample, input_language,
                                                                         output_language)})
            for sample in samples]


def sample_row(sample: Sample, sides: dict[str, SideMatch]) -> dict[str, Any]:
    return {
        "id": sample.id,
        "split": sample.split,
        "leaked": any(m.leaked for m in sides.values()),
        "exact": any(m.exact for m in sides.values()),
        "sides": {
            side: {
                "leaked": m.leaked,
                "exact": m.exact[:MAX_LISTED], "exact_count": len(m.exact),
                "near": [list(n) for n in m.near[:MAX_LISTED]], "near_count": len(m.near),
            }
            for side, m in sides.items()
        },
        "_matched": set().union(*(m.matched_ids() for m in sides.values())) if sides else set(),
    }


class AuditMatches:
    """Per sample side, the corpus documents that match it, collected in corpus order."""

    def __init__(self) -> None:
        self.exact: dict[str, list[str]] = defaultdict(list)
        self.near: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
        self.documents = 0  # corpus documents scanned

    def add(self, doc_id: str, exact: list[str], near: list[tuple[str, float, float]]) -> None:
        for side_key in exact:
            self.exact[side_key].append(doc_id)
        for side_key, set_jaccard, multiset_jaccard in near:
            keep_best(self.near[side_key], doc_id, set_jaccard, multiset_jaccard)

    def side(self, side_key: str) -> SideMatch:
        return SideMatch(exact=list(dict.fromkeys(self.exact.get(side_key, ()))),
                         near=ranked(self.near.get(side_key, {})))

    def rows(self, samples: list[Sample], input_language: str, output_language: str
             ) -> list[dict[str, Any]]:
        return [sample_row(sample, {side: self.side(f"{sample.id}/{side}") for side, _t, _l in
                                    sample_sides(sample, input_language, output_language)})
                for sample in samples]


def scan_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """One step of a streaming audit: the matches of one unit's documents, as
    [position in the unit, document id, exact side keys, near (side key, s, m) triples]."""
    index = side_index(unit["index"])
    matches, documents = [], 0
    for position, (doc_id, text) in enumerate(iter_unit(unit)):
        documents += 1
        exact, near = index.scan(text)
        if exact or near:
            matches.append([position, doc_id, exact, [list(n) for n in near]])
    return {"documents": documents, "matches": matches}


def merge_scans(results: Iterable[dict[str, Any]]) -> AuditMatches:
    """The matches of every unit, in corpus order (units in order, documents within)."""
    merged = AuditMatches()
    for result in results:
        merged.documents += result["documents"]
        for _position, doc_id, exact, near in result["matches"]:
            merged.add(doc_id, exact, [tuple(n) for n in near])
    return merged


def _against_units(against: str, corpora_dir: Path | None, cfg: ExecutorConfig,
                   workdir: Path) -> tuple[str, list[dict[str, Any]]]:
    """Resolve --against into units: a lab corpus directory (its shards), a corpus
    dataset[:split] (its files), or benchmark:split (one unit)."""
    path = Path(against)
    if path.is_dir() or path.name == MANIFEST or "/" in against:
        folder = path.parent if path.name == MANIFEST else path
        return f"corpus directory {path}", corpus_dir_units(folder)
    name, _, split = against.partition(":")
    spec = get_spec(name)
    if spec.kind == "corpus":
        units = dataset_units(name, [split] if split else list(spec.splits), corpora_dir)
        counts = run_step(cfg, "count", count_unit, units, workdir)
        return against, with_offsets(units, counts)
    if not split:
        raise LabError(f"--against {against}: a benchmark needs a split, e.g. {name}:train")
    load_samples(name, split, corpora_dir)  # a missing split fails here, in one line
    return against, [benchmark_unit(name, split, corpora_dir)]


def summarize(rows: list[dict[str, Any]], splits: list[str]) -> dict[str, Any]:
    def block(selected: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(selected)
        leaked = sum(r["leaked"] for r in selected)
        def side_count(side: str, key: str) -> int:
            return sum(bool(r["sides"].get(side, {}).get(key)) for r in selected)

        return {
            "samples": n, "leaked": leaked, "leaked_pct": round(100 * leaked / n, 2) if n else 0.0,
            "exact": sum(r["exact"] for r in selected),
            "near_only": sum(r["leaked"] and not r["exact"] for r in selected),
            "input_leaked": side_count("input", "leaked"),
            "input_exact": side_count("input", "exact"),
            "output_leaked": side_count("output", "leaked"),
            "output_exact": side_count("output", "exact"),
        }

    summary = {split: block([r for r in rows if r["split"] == split]) for split in splits}
    summary["all"] = block(rows)
    return summary


@dataclass
class AuditConfig(ExecutorConfig):
    """The options of `lab audit`, declared once (the executor's in lab.executor)."""
    benchmark: str = param(help="codetrans or concode (or their -paper subsets).")
    split: tuple[str, ...] | None = param(None, "Split(s) to audit (default: all).")
    against: str = param("csn-java", "csn-java[:split], BENCHMARK:SPLIT, or a lab corpus "
                                     "directory.")
    out: Path | None = param(None, "Write report.jsonl and summary.json here.")
    force: bool = param(False, "Replace an existing output directory.")
    near: bool = param(True, "Also look for near-duplicates (not only exact).")
    corpora_dir: Path | None = corpora_param()


def run_audit(benchmark: str, splits: list[str] | None = None, against: str = "csn-java",
              corpora_dir: Path | None = None, out: Path | None = None, force: bool = False,
              near: bool = True, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Entry point of `lab audit`: overlap of the benchmark's splits with a corpus. The corpus
    streams by, unit by unit (on `executor`'s tasks); only the samples are held whole."""
    started = time.perf_counter()
    executor = executor or ExecutorConfig()
    check_executor(executor)
    spec = get_spec(benchmark)
    if spec.kind != "benchmark":
        raise LabError(f"--benchmark {benchmark}: not a benchmark (choose from "
                       f"{', '.join(n for n, s in DATASETS.items() if s.kind == 'benchmark')})")
    # --against may name a corpus folder (or its manifest.json): an input like the datasets
    # (a dataset name is no path, and is skipped).
    inputs = [Path(against), *corpora_inputs(corpora_dir)]
    if out is not None:
        check_output(Path(out), force, "lab-audit", inputs)
    requested = splits or list(spec.splits)
    loaded, skipped = [], []
    for split in requested:
        try:
            loaded.append(load_samples(benchmark, split, corpora_dir))
        except DataNotFound:
            # Auditing "all splits" tolerates one missing offline (CONCODE's train); a split the
            # user named explicitly must exist.
            if splits:
                raise
            skipped.append(split)
    with tempfile.TemporaryDirectory(prefix="lab-audit-",
                                     dir=Path(out).parent if out is not None else None) as work:
        against_label, units = _against_units(against, corpora_dir, executor, Path(work))
        indexed = index_spec(benchmark, [p.split for p in loaded], corpora_dir, near)
        matches = merge_scans(iter_step(executor, "scan", scan_unit,
                                        [{**unit, "index": indexed} for unit in units],
                                        Path(work)))
    rows = []
    for part in loaded:
        rows += matches.rows(part.records, spec.input_language, spec.output_language)
    matched_documents = sorted(set().union(*(r.pop("_matched") for r in rows))) if rows else []
    summary = {
        "kind": "lab-audit", "benchmark": benchmark, "against": against_label,
        "corpus_documents": matches.documents,
        "splits_audited": [p.split for p in loaded], "splits_missing": skipped,
        "method": {
            "exact": "equal after whitespace and comment normalisation",
            "near": near, "set_jaccard": SET_THRESHOLD,
            "multiset_jaccard": MULTISET_THRESHOLD, "min_tokens": MIN_TOKENS,
            "candidates": "SourcererCC prefix filter",
        },
        "matched_corpus_documents": len(matched_documents),
        "counts": summarize(rows, [p.split for p in loaded]),
        "wall_seconds": round(time.perf_counter() - started, 2),
        "executor": {"executor": executor.executor, "tasks": executor.tasks},
        "environment": environment_record(),
    }
    if out is not None:
        write_rows_and_summary(out, "report.jsonl", rows, summary, force=force,
                               kind="lab-audit", inputs=inputs)
    summary["rows"] = rows
    summary["matched_documents"] = matched_documents
    return summary
