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
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from lab.codetokens import fingerprint_tokens, normalized_hash
from lab.common import (DataNotFound, LabError, atomic_output_dir, check_output, corpora_inputs,
                        environment_record, write_json_atomic, write_jsonl)
from lab.contamination import segments
from lab.contamination.corpus_files import read_corpus, read_manifest
from lab.corpora import DATASETS, Sample, get_spec, load_documents, load_samples

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
                 min_tokens: int = MIN_TOKENS):
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
            for part in segments(text):
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

    def _near(self, query: Counter) -> list[tuple[str, float, float]]:
        size = len(query)
        ordered = sorted(query, key=self._order_key)
        candidates: set[int] = set()
        for token_id in ordered[: _prefix_length(size, self.set_threshold)]:
            candidates.update(self.postings.get(token_id, ()))
        low, high = self.set_threshold * size - 1e-9, size / self.set_threshold + 1e-9
        query_total = sum(query.values())
        found: dict[str, tuple[float, float]] = {}
        for seg in candidates:
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
            doc_id = self.segment_doc[seg]
            best = found.get(doc_id)
            if best is None or set_jaccard > best[0]:
                found[doc_id] = (round(set_jaccard, 4), round(multiset_jaccard, 4))
        return sorted(((d, s, m) for d, (s, m) in found.items()), key=lambda x: (-x[1], x[0]))


def audit_samples(samples: list[Sample], index: OverlapIndex, input_language: str,
                  output_language: str) -> list[dict[str, Any]]:
    """One report row per sample: leaked?, and per side the matching documents."""
    rows = []
    for sample in samples:
        sides = {}
        for side, text, language in (("input", sample.input, input_language),
                                     ("output", sample.output, output_language)):
            if not text.strip():
                continue
            sides[side] = index.match(text, near=language in CODE_LANGUAGES)
        rows.append({
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
        })
    return rows


def _against_documents(against: str, corpora_dir: Path | None) -> tuple[str, Iterable[tuple[str, str]]]:
    """Resolve --against: a lab corpus directory, a corpus dataset[:split], or benchmark:split."""
    path = Path(against)
    if path.is_dir() or path.name == "manifest.json" or "/" in against:
        read_manifest(path)
        return f"corpus directory {path}", ((r["id"], r["text"]) for r in read_corpus(path))
    name, _, split = against.partition(":")
    spec = get_spec(name)
    if spec.kind == "corpus":
        splits = [split] if split else list(spec.splits)
        loaded = load_documents(name, splits, corpora_dir)
        return against, ((d.id, d.text) for part in loaded for d in part.records)
    if not split:
        raise LabError(f"--against {against}: a benchmark needs a split, e.g. {name}:train")
    samples = load_samples(name, split, corpora_dir).records
    docs = [(f"{s.id}/input", s.input) for s in samples]
    docs += [(f"{s.id}/output", s.output) for s in samples if s.output.strip()]
    return against, docs


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


def run_audit(benchmark: str, splits: list[str] | None = None, against: str = "csn-java",
              corpora_dir: Path | None = None, out: Path | None = None, force: bool = False,
              near: bool = True) -> dict[str, Any]:
    """Entry point of `lab audit`: overlap of the benchmark's splits with a corpus."""
    started = time.perf_counter()
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
    against_label, documents = _against_documents(against, corpora_dir)
    index = OverlapIndex(documents, near=near)
    rows = []
    for part in loaded:
        rows += audit_samples(part.records, index, spec.input_language, spec.output_language)
    matched_documents = sorted(set().union(*(r.pop("_matched") for r in rows))) if rows else []
    summary = {
        "kind": "lab-audit", "benchmark": benchmark, "against": against_label,
        "corpus_documents": index.documents,
        "splits_audited": [p.split for p in loaded], "splits_missing": skipped,
        "method": {
            "exact": "equal after whitespace and comment normalisation",
            "near": near, "set_jaccard": index.set_threshold,
            "multiset_jaccard": index.multiset_threshold, "min_tokens": index.min_tokens,
            "candidates": "SourcererCC prefix filter",
        },
        "matched_corpus_documents": len(matched_documents),
        "counts": summarize(rows, [p.split for p in loaded]),
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    if out is not None:
        with atomic_output_dir(Path(out), force=force, kind="lab-audit", inputs=inputs) as tmp:
            write_jsonl(tmp / "report.jsonl", rows)
            write_json_atomic(tmp / "summary.json", summary)
    summary["rows"] = rows
    summary["matched_documents"] = matched_documents
    return summary
