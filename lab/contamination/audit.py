"""Audit: which benchmark samples already occur in a corpus, exactly or as near-duplicates.

Exact: equal after whitespace and comment normalisation (`lab.codetokens.normalize`).
Near: the method of the CSN overlap study (Allamanis' SourcererCC-based detector): the
identifiers and literals that are not keywords, at least `min_tokens` of them; a pair is a
near-duplicate when set Jaccard >= 0.8 and multiset Jaccard >= 0.7. Candidates come from
SourcererCC's prefix filter, which is exact for the set threshold, so no pair is missed and
no all-pairs comparison is made.
"""
from __future__ import annotations

import math
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from lab.codetokens import fingerprint_tokens, normalized_hash
from lab.common import (DataNotFound, LabError, atomic_output_dir, check_output, corpora_inputs,
                        corpora_param, environment_record, param, write_json_atomic, write_jsonl)
from lab.contamination import segments
from lab.contamination.streaming import (benchmark_unit, corpus_dir_units, count_unit,
                                         dataset_units, iter_unit, with_offsets)
from lab.executor import ExecutorConfig, check_executor, iter_step, run_step
from lab.corpora import DATASETS, Sample, get_spec, load_samples

SET_THRESHOLD = 0.8
MULTISET_THRESHOLD = 0.7
MIN_TOKENS = 5
MAX_LISTED = 10
CODE_LANGUAGES = ("java", "cs")


@dataclass
class SideMatch:
    exact: list[str] = field(default_factory=list)
    near: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def leaked(self) -> bool:
        return bool(self.exact or self.near)

    def matched_ids(self) -> set[str]:
        return set(self.exact) | {doc_id for doc_id, _s, _m in self.near}


def _prefix_length(size: int, threshold: float) -> int:
    # Jaccard >= t implies an overlap of at least ceil(t * size) tokens; the epsilon keeps
    # 0.8 * 5 from rounding up to 5 in floating point.
    return size - math.ceil(threshold * size - 1e-9) + 1


class OverlapIndex:
    """Exact and near-duplicate look-up over corpus documents (each `<SEP>` side separately)."""

    def __init__(self, documents: Iterable[tuple[str, str]], near: bool = True,
                 set_threshold: float = SET_THRESHOLD, multiset_threshold: float = MULTISET_THRESHOLD,
                 min_tokens: int = MIN_TOKENS, whole: bool = False):
        """`whole`: index each text as it is (a benchmark side), not split at `<SEP>`."""
        self.set_threshold = set_threshold
        self.multiset_threshold = multiset_threshold
        self.min_tokens = min_tokens
        self.near = near
        self.exact: dict[bytes, list[str]] = defaultdict(list)
        self.vocab: dict[str, int] = {}
        self.segment_doc: list[str] = []
        self.segment_counts: list[Counter] = []
        self.documents = 0
        for doc_id, text in documents:
            self.documents += 1
            for part in ([text] if whole else segments(text)):
                self.exact[normalized_hash(part)].append(doc_id)
                if near:
                    self._add_fingerprint(doc_id, part)
        if near:
            self._build_prefix_index()

    def _ids(self, tokens: list[str], grow: bool) -> Counter:
        vocab = self.vocab
        if grow:
            return Counter(vocab.setdefault(tok, len(vocab)) for tok in tokens)
        # Tokens unseen in the corpus get negative ids: rarest of all in the global order.
        unseen: dict[str, int] = {}
        return Counter(
            vocab[tok] if tok in vocab else unseen.setdefault(tok, -1 - len(unseen)) for tok in tokens
        )

    def _add_fingerprint(self, doc_id: str, text: str) -> None:
        tokens = fingerprint_tokens(text)
        if len(tokens) < self.min_tokens:
            return
        self.segment_doc.append(doc_id)
        self.segment_counts.append(self._ids(tokens, grow=True))

    def _order_key(self, token_id: int) -> tuple[int, int]:
        freq = self.doc_freq[token_id] if 0 <= token_id < len(self.doc_freq) else 0
        return (freq, token_id)

    def _build_prefix_index(self) -> None:
        self.doc_freq = [0] * len(self.vocab)
        for counts in self.segment_counts:
            for token_id in counts:
                self.doc_freq[token_id] += 1
        self.postings: dict[int, list[int]] = defaultdict(list)
        for seg, counts in enumerate(self.segment_counts):
            ordered = sorted(counts, key=self._order_key)
            for token_id in ordered[: _prefix_length(len(ordered), self.set_threshold)]:
                self.postings[token_id].append(seg)

    def match(self, text: str, near: bool) -> SideMatch:
        result = SideMatch(exact=list(dict.fromkeys(self.exact.get(normalized_hash(text), ()))))
        if near and self.near:
            tokens = fingerprint_tokens(text)
            if len(tokens) >= self.min_tokens:
                result.near = self._near(self._ids(tokens, grow=False))
        return result

    def near_pairs(self, text: str) -> Iterator[tuple[str, float, float]]:
        """(indexed id, set Jaccard, multiset Jaccard) of every indexed segment that is a
        near-duplicate of `text`, unrounded, in index order."""
        tokens = fingerprint_tokens(text)
        if self.near and len(tokens) >= self.min_tokens:
            yield from self._near_pairs(self._ids(tokens, grow=False))

    def _near_pairs(self, query: Counter) -> Iterator[tuple[str, float, float]]:
        size = len(query)
        ordered = sorted(query, key=self._order_key)
        candidates: set[int] = set()
        for token_id in ordered[: _prefix_length(size, self.set_threshold)]:
            candidates.update(self.postings.get(token_id, ()))
        low, high = self.set_threshold * size - 1e-9, size / self.set_threshold + 1e-9
        query_total = sum(query.values())
        for seg in sorted(candidates):
            counts = self.segment_counts[seg]
            if not low <= len(counts) <= high:
                continue
            shared = query.keys() & counts.keys()
            set_jaccard = len(shared) / (size + len(counts) - len(shared))
            if set_jaccard < self.set_threshold - 1e-12:
                continue
            overlap = sum(min(query[t], counts[t]) for t in shared)
            multiset_jaccard = overlap / (query_total + sum(counts.values()) - overlap)
            if multiset_jaccard < self.multiset_threshold - 1e-12:
                continue
            yield self.segment_doc[seg], set_jaccard, multiset_jaccard

    def _near(self, query: Counter) -> list[tuple[str, float, float]]:
        found: dict[str, tuple[float, float]] = {}
        for doc_id, set_jaccard, multiset_jaccard in self._near_pairs(query):
            keep_best(found, doc_id, set_jaccard, multiset_jaccard)
        return ranked(found)


def keep_best(found: dict[str, tuple[float, float]], doc_id: str, set_jaccard: float,
              multiset_jaccard: float) -> None:
    """A document's near-duplicate scores: those of its most similar segment (the first of
    equals), rounded."""
    best = found.get(doc_id)
    if best is None or set_jaccard > best[0]:
        found[doc_id] = (round(set_jaccard, 4), round(multiset_jaccard, 4))


def ranked(found: dict[str, tuple[float, float]]) -> list[tuple[str, float, float]]:
    return sorted(((d, s, m) for d, (s, m) in found.items()), key=lambda x: (-x[1], x[0]))


def audit_samples(samples: list[Sample], index: OverlapIndex, input_language: str,
                  output_language: str) -> list[dict[str, Any]]:
    """One report row per sample: leaked?, and per side the matching documents of `index`."""
    return [sample_row(sample, {side: index.match(text, near=language in CODE_LANGUAGES)
                                for side, text, language in _sides(sample, input_language,
                                                                   output_language)})
            for sample in samples]


def _sides(sample: Sample, input_language: str, output_language: str
           ) -> list[tuple[str, str, str]]:
    return [(side, text, language) for side, text, language in
            (("input", sample.input, input_language), ("output", sample.output, output_language))
            if text.strip()]


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


class SampleSideIndex:
    """The small side of an audit at scale: every side of the audited samples, indexed whole,
    and looked up with each corpus document's segments as they stream by. Both criteria are
    symmetric (equal normalised hashes; Jaccard thresholds with the prefix filter exact in
    either direction), so scanning the corpus against the samples finds the pairs that looking
    each sample up in an index of the corpus finds, without holding the corpus."""

    def __init__(self, samples: list[Sample], input_language: str, output_language: str,
                 near: bool = True):
        code, other = [], []
        for sample in samples:
            for side, text, language in _sides(sample, input_language, output_language):
                (code if near and language in CODE_LANGUAGES else other).append(
                    (f"{sample.id}/{side}", text))
        self.code = OverlapIndex(code, near=True, whole=True)
        self.other = OverlapIndex(other, near=False, whole=True)

    def scan(self, text: str) -> tuple[list[str], list[tuple[str, float, float]]]:
        """(sides equal to a segment of the document, in segment order; (side, set Jaccard,
        multiset Jaccard) of the sides a segment near-duplicates, unrounded, in segment
        order). A side key is "SAMPLE_ID/input" or "SAMPLE_ID/output"."""
        exact: list[str] = []
        near: list[tuple[str, float, float]] = []
        for part in segments(text):
            key = normalized_hash(part)
            exact += self.code.exact.get(key, ())
            exact += self.other.exact.get(key, ())
            near += self.code.near_pairs(part)
        return exact, near


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
                                    _sides(sample, input_language, output_language)})
                for sample in samples]


_INDEXES: dict[str, SampleSideIndex] = {}  # one per audited sample set, per worker process


def _side_index(spec: dict[str, Any]) -> SampleSideIndex:
    key = repr(sorted(spec.items()))
    if key not in _INDEXES:
        benchmark = get_spec(spec["benchmark"])
        corpora = Path(spec["corpora"]) if spec.get("corpora") else None
        samples = [s for split in spec["splits"]
                   for s in load_samples(spec["benchmark"], split, corpora).records]
        if spec.get("samples") is not None:
            samples = samples[: spec["samples"]]
        _INDEXES[key] = SampleSideIndex(samples, benchmark.input_language,
                                        benchmark.output_language, near=spec["near"])
    return _INDEXES[key]


def index_spec(benchmark: str, splits: list[str], corpora_dir: Path | None, near: bool,
               samples: int | None = None) -> dict[str, Any]:
    """What a worker needs to rebuild the sample-side index: the samples are read again there
    (they are small) rather than shipped with every unit."""
    return {"benchmark": benchmark, "splits": list(splits), "near": near, "samples": samples,
            "corpora": str(corpora_dir) if corpora_dir else None}


def scan_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """One step of a streaming audit: the matches of one unit's documents, as
    [position in the unit, document id, exact side keys, near (side key, s, m) triples]."""
    index = _side_index(unit["index"])
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
    if path.is_dir() or path.name == "manifest.json" or "/" in against:
        folder = path.parent if path.name == "manifest.json" else path
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
        with atomic_output_dir(Path(out), force=force, kind="lab-audit", inputs=inputs) as tmp:
            write_jsonl(tmp / "report.jsonl", rows)
            write_json_atomic(tmp / "summary.json", summary)
    summary["rows"] = rows
    summary["matched_documents"] = matched_documents
    return summary
