"""The overlap indexes every contamination check looks texts up in: `lab audit`, inject's
guards and --decontaminate, the placebo pool and the streaming steps.

Exact: equal after whitespace and comment normalisation (`lab.codetokens.normalize`).
Near: the method of the CSN overlap study (Allamanis' SourcererCC-based detector): the
identifiers and literals that are not keywords, at least `min_tokens` of them; a pair is a
near-duplicate when set Jaccard >= 0.8 and multiset Jaccard >= 0.7. Candidates come from
SourcererCC's prefix filter, which is exact for the set threshold, so no pair is missed and
no all-pairs comparison is made.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from lab.codetokens import fingerprint_tokens, normalized_hash
from lab.contamination import segments
from lab.corpora import Sample, get_spec, load_samples

SET_THRESHOLD = 0.8
MULTISET_THRESHOLD = 0.7
MIN_TOKENS = 5
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


def sample_sides(sample: Sample, input_language: str, output_language: str
                 ) -> list[tuple[str, str, str]]:
    """(side, text, language) of a sample's non-empty sides."""
    return [(side, text, language) for side, text, language in
            (("input", sample.input, input_language), ("output", sample.output, output_language))
            if text.strip()]


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
            for side, text, language in sample_sides(sample, input_language, output_language):
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


_INDEXES: dict[str, SampleSideIndex] = {}  # one per audited sample set, per worker process


def side_index(spec: dict[str, Any]) -> SampleSideIndex:
    """The sample-side index of `spec` (index_spec), built once per process."""
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
