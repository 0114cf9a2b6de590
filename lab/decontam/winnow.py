"""Winnowed code-token fingerprints scored by containment (Schleimer, Wilkerson & Aiken 2003,
"Winnowing: local algorithms for document fingerprinting", the algorithm of MOSS and Dolos).

Why: a benchmark function leaks inside a real source file (a method among others), re-laid out
and often with its names changed. Whole-document similarity (MinHash) sinks under the host's
size, exact substrings break on a renamed variable, word n-grams on a line wrap. Fingerprints of
the code tokens ignore layout and comments; with `--winnow-names abstract` they ignore the
names a renaming changes; scoring the share of the *sample's* fingerprints found in the
document (containment) does not care how much else the document holds.

Tokens: the lab's code tokenizer (lab.codetokens.code_tokens: lexical tokens, comments
dropped, whitespace never a token), the same for Java and C#. Names (`--winnow-names`):
- keep: every token as written.
- abstract: every identifier becomes one symbol, except a member reached through `.` on
  anything but `this`/`base` (`items.startsWith`: `startsWith` stays). Those are other types'
  names, which a consistent renaming of the function cannot change without breaking the call
  (lab perturb's renamer keeps them too), and they are what keeps an abstracted short function
  from matching every function of its shape. Keywords (with true, false, null) and literals are
  kept: renaming does not touch them and, once the names are gone, they carry what is left of
  the text's identity.

Fingerprints (the paper's algorithm): the hash of every k consecutive symbols (`--winnow-k`);
in every window of w consecutive k-gram hashes (`--winnow-w`) the minimum is selected (the
rightmost one on a tie), with its position; a side keeps the distinct selected hashes (its
fingerprints). Any run of at least w + k - 1 tokens shared with a side is guaranteed to share
one of its fingerprints. A side of fewer than k tokens has no k-gram and is never matched
(counted in `index_stats`).

Score: the containment of a sample side in a document, |F(side) & K(document)| / |F(side)|,
where F is the side's fingerprints and K every k-gram hash of the document; and, the other
way, for a document of at least MIN_FRAGMENT_KGRAMS k-grams, the share of them found among one
sample's k-grams (a fragment of a sample standing alone, the `partial` form, holds too few of
the side's fingerprints). A document is flagged when its higher score reaches `--containment`. Departure from MOSS and Dolos,
which winnow both texts and report the shared fingerprints of each pair: the document is not
winnowed, every k-gram of it is looked up. Winnowing exists to shrink what is stored; here only
the reference is stored (the index), and a document is streamed once and dropped, so selecting
its k-grams would save nothing and would lose the side's fingerprints whose windows run into
the host around an embedded copy. The result equals winnowing the document with w = 1.

Natural-language sides (CONCODE's input, a side whose language is `nl`) are not fingerprinted:
the code tokenizer makes nothing of prose that layout and renaming leave alone, and an
abstracted sentence is a row of one symbol. A leak of the NL side alone is the word n-gram
methods' to find; CONCODE's code side (its output) is fingerprinted.

Memory: the index holds the reference's fingerprints; documents are tokenised and hashed in
batches of about BATCH_TOKENS tokens (numpy, 64-bit polynomial hashes over integer symbols, a
token the reference never has being a symbol no k-gram of the reference holds), so memory does
not grow with the corpus. Deterministic: no seed, no Python `hash`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from lab.codetokens import KEYWORDS, code_tokens
from lab.decontam.base import Options, Reference

NAMES = ("keep", "abstract")
# Reserved symbols: a token the reference never has (no reference k-gram holds it), an
# abstracted name, a name the reference never has (abstract: a name, unless a kept member).
UNKNOWN, NAME, UNSEEN_NAME = 0, 1, 2
FIRST_SYMBOL = 3
SEPARATOR = "\x00"  # put between the documents of a batch: UNKNOWN, so no k-gram spans two
BATCH_TOKENS = 1 << 20
# The fewest k-grams a document needs to be scored as a fragment of a sample (below it, a few
# lines of boilerplate would be "all inside" some sample): with k = 10, 20 tokens or more.
MIN_FRAGMENT_KGRAMS = 11
_MEMBER_OWNERS = ("this", "base")
_IDENTIFIER = re.compile(r"(?:[^\W\d][\w$]*|\$[\w$]*)\Z")
_MULTIPLIER = np.uint64(0x100000001B3)   # the polynomial's base (FNV-1's 64-bit prime)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64


def is_name(token: str) -> bool:
    """An identifier of the lab's lexer that is not a keyword."""
    return token not in KEYWORDS and _IDENTIFIER.match(token) is not None


class Symbols(dict):
    """token -> integer symbol, built from the reference's tokens; a token it never saw maps to
    UNKNOWN (or UNSEEN_NAME when names are abstracted), without being stored: a lookup of the
    corpus's tokens never grows the table."""

    def __init__(self, abstract: bool) -> None:
        super().__init__()
        self.abstract = abstract
        self.names: list[int] = []  # the symbols of names (abstract: what may become NAME)

    def add(self, token: str) -> None:
        if token not in self:
            self[token] = FIRST_SYMBOL + len(self)
            if is_name(token):
                self.names.append(self[token])

    def __missing__(self, token: str) -> int:
        return UNSEEN_NAME if self.abstract and is_name(token) else UNKNOWN


@dataclass(frozen=True)
class WinnowIndex:
    """The reference's fingerprints: the distinct hashes (sorted) and which sides hold each."""

    k: int
    w: int
    symbols: Symbols
    is_name: np.ndarray          # per symbol: a name to abstract (abstract mode)
    hashes: np.ndarray           # sorted distinct fingerprint hashes, uint64
    side_start: np.ndarray       # CSR: hashes[i] is held by sides side_of[start[i]:start[i+1]]
    side_of: np.ndarray
    sizes: np.ndarray            # per side: its number of fingerprints
    sample_of: list[str]         # per side: its sample id
    kgrams: np.ndarray           # sorted distinct hashes of every k-gram of the code sides
    sample_start: np.ndarray     # CSR: kgrams[i] is held by samples of sample_at[start[i]:...]
    sample_at: np.ndarray
    sample_ids: list[str]        # per sample number: its id
    skipped_short: int           # code sides of fewer than k tokens (never matched)
    skipped_nl: int              # natural-language sides (not fingerprinted)


def symbol_array(tokens: list[str], symbols: Symbols, is_name_table: np.ndarray | None
                 ) -> np.ndarray:
    """The tokens as symbols; with abstraction, names made NAME (a kept member stays itself,
    or UNKNOWN when the reference never has it)."""
    ids = np.fromiter(map(symbols.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    if is_name_table is None or not len(ids):
        return ids
    name = is_name_table[ids]
    dot, owner = symbols["."], [symbols[t] for t in _MEMBER_OWNERS]
    after_dot = np.zeros(len(ids), bool)
    after_dot[1:] = ids[:-1] == dot
    owned = np.zeros(len(ids), bool)
    owned[2:] = np.isin(ids[:-2], owner)
    member = name & after_dot & ~owned
    out = np.where(name & ~member, NAME, ids)
    out[member & (ids == UNSEEN_NAME)] = UNKNOWN
    return out


def kgram_hashes(ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit hash of every k consecutive symbols, and whether it holds no UNKNOWN."""
    n = len(ids) - k + 1
    if n <= 0:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    u = ids.astype(np.uint64) + np.uint64(1)
    h = np.zeros(n, np.uint64)
    for j in range(k):
        np.multiply(h, _MULTIPLIER, out=h)
        np.add(h, u[j:j + n], out=h)
    h ^= h >> np.uint64(30)
    np.multiply(h, _MIX1, out=h)
    h ^= h >> np.uint64(27)
    np.multiply(h, _MIX2, out=h)
    h ^= h >> np.uint64(31)
    unknown = np.concatenate(([0], np.cumsum(ids == UNKNOWN)))
    return h, (unknown[k:] - unknown[:n]) == 0


def winnow(hashes: np.ndarray, w: int) -> list[tuple[int, int]]:
    """(hash, position) selected: the minimum of every window of w hashes, the rightmost on a
    tie, each position once (a sequence shorter than a window is one window)."""
    if not len(hashes):
        return []
    if len(hashes) <= w:
        windows = hashes[None, :]
    else:
        windows = np.lib.stride_tricks.sliding_window_view(hashes, w)
    width = windows.shape[1]
    rightmost = width - 1 - np.argmin(windows[:, ::-1], axis=1)
    positions = np.unique(rightmost + np.arange(len(windows)))
    return [(int(hashes[p]), int(p)) for p in positions]


def check_options(options: Options) -> None:
    if options.winnow_names not in NAMES:
        raise ValueError(f"winnow_names {options.winnow_names!r}: choose from {NAMES}")


def build_index(reference: Reference, options: Options) -> WinnowIndex:
    """Fingerprint every code side of the reference (NL sides and sides of fewer than k tokens
    skipped, and counted)."""
    check_options(options)
    k, w = options.winnow_k, options.winnow_w
    abstract = options.winnow_names == "abstract"
    symbols = Symbols(abstract)
    for token in (*sorted(KEYWORDS), "."):
        symbols.add(token)
    sides, skipped_nl = [], 0
    for sample in reference.samples:
        for text, language in ((sample.input, reference.input_language),
                               (sample.output, reference.output_language)):
            if not text.strip():
                continue
            if language == "nl":
                skipped_nl += 1
                continue
            tokens = code_tokens(text)
            for token in tokens:
                symbols.add(token)
            sides.append((sample.id, tokens))
    is_name_table = None
    if abstract:
        is_name_table = np.zeros(FIRST_SYMBOL + len(symbols), bool)
        is_name_table[symbols.names + [UNSEEN_NAME]] = True
    owners: dict[int, list[int]] = {}
    sizes, sample_of, skipped_short = [], [], 0
    kgram_owners: dict[int, set[int]] = {}
    sample_number: dict[str, int] = {}
    for sample_id, tokens in sides:
        hashes, _valid = kgram_hashes(symbol_array(tokens, symbols, is_name_table), k)
        number = sample_number.setdefault(sample_id, len(sample_number))
        for h in set(hashes.tolist()):
            kgram_owners.setdefault(h, set()).add(number)
        fingerprints = {h for h, _position in winnow(hashes, w)}
        if not fingerprints:
            skipped_short += 1
            continue
        side = len(sizes)
        sizes.append(len(fingerprints))
        sample_of.append(sample_id)
        for h in fingerprints:
            owners.setdefault(h, []).append(side)
    keys = sorted(owners)
    counts = [len(owners[h]) for h in keys]
    all_keys = sorted(kgram_owners)
    all_counts = [len(kgram_owners[h]) for h in all_keys]
    return WinnowIndex(
        k, w, symbols, is_name_table if is_name_table is not None else np.zeros(0, bool),
        np.array(keys, dtype=np.uint64),
        np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        np.array([s for h in keys for s in owners[h]], dtype=np.int64),
        np.array(sizes, dtype=np.float64), sample_of,
        np.array(all_keys, dtype=np.uint64),
        np.concatenate(([0], np.cumsum(all_counts))).astype(np.int64),
        np.array([s for h in all_keys for s in sorted(kgram_owners[h])], dtype=np.int64),
        list(sample_number), skipped_short, skipped_nl)


def batches(documents: Sequence[str]) -> Iterator[tuple[int, list[list[str]]]]:
    """(index of the first document, the documents' code tokens), about BATCH_TOKENS a batch."""
    start, batch, size = 0, [], 0
    for i, text in enumerate(documents):
        tokens = code_tokens(text)
        batch.append(tokens)
        size += len(tokens) + 1
        if size >= BATCH_TOKENS:
            yield start, batch
            start, batch, size = i + 1, [], 0
    if batch:
        yield start, batch


def expand(keys: np.ndarray, hit: np.ndarray, start: np.ndarray, owner: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """(key, owner) for every owner of every hit: hit[i] indexes a CSR row (start, owner)."""
    held = start[hit + 1] - start[hit]
    offsets = np.repeat(start[hit] - np.cumsum(held) + held, held)
    return np.repeat(keys, held), owner[np.arange(int(held.sum())) + offsets]


def best_per_document(document: np.ndarray, owner: np.ndarray, score: np.ndarray
                      ) -> Iterator[tuple[int, int, float]]:
    """(document, owner, score) of each document's highest score (the lowest owner on a tie)."""
    order = np.lexsort((-owner, score, document))
    last = np.flatnonzero(np.append(document[order][1:] != document[order][:-1], True))
    for j in order[last]:
        yield int(document[j]), int(owner[j]), float(score[j])


def best_containment(documents: Sequence[str], reference: Reference, options: Options
                     ) -> list[tuple[float, str]]:
    """Per document, its highest score against a sample, and that sample's id ((0.0, "") when
    nothing matches). The score is the higher of two containments: a code side's fingerprints
    found in the document (a sample inside a file), and the document's k-grams found in one
    sample's k-grams, for a document of at least MIN_FRAGMENT_KGRAMS of them (a fragment of a
    sample standing alone: the partial form, which holds too few of the side's fingerprints)."""
    index = build_index(reference, options)
    names = index.is_name if options.winnow_names == "abstract" else None
    best: list[tuple[float, str]] = [(0.0, "")] * len(documents)
    if not len(index.hashes):
        return best
    for first, batch in batches(documents):
        flat: list[str] = []
        starts = []
        for tokens in batch:
            starts.append(len(flat))
            flat.extend(tokens)
            flat.append(SEPARATOR)
        hashes, valid = kgram_hashes(symbol_array(flat, index.symbols, names), index.k)
        fragment_scores(first, starts, hashes, valid, index, best)
        at = np.searchsorted(index.hashes, hashes).clip(max=len(index.hashes) - 1)
        hit = valid & (index.hashes[at] == hashes)
        positions = np.flatnonzero(hit)
        if not len(positions):
            continue
        document = np.searchsorted(np.array(starts), positions, side="right") - 1
        pairs = np.unique(document * len(index.hashes) + at[positions])  # (document, hash)
        document, fingerprint = np.divmod(pairs, len(index.hashes))
        document, side = expand(document, fingerprint, index.side_start, index.side_of)
        keys, found = np.unique(document * len(index.sizes) + side, return_counts=True)
        document, side = np.divmod(keys, len(index.sizes))
        for d, s, score in best_per_document(document, side, found / index.sizes[side]):
            if score > best[first + d][0]:
                best[first + d] = (score, index.sample_of[s])
    return best


def fragment_scores(first: int, starts: list[int], hashes: np.ndarray, valid: np.ndarray,
                    index: WinnowIndex, best: list[tuple[float, str]]) -> None:
    """Into `best`: per document of the batch with at least MIN_FRAGMENT_KGRAMS valid k-grams,
    the share of them that one sample's k-grams hold, where it is the document's best yet."""
    if not len(index.kgrams) or not len(hashes):
        return
    at = np.searchsorted(index.kgrams, hashes).clip(max=len(index.kgrams) - 1)
    hit = valid & (index.kgrams[at] == hashes)
    positions = np.flatnonzero(hit)
    if not len(positions):
        return
    bounds = np.array(starts + [len(hashes) + index.k], dtype=np.int64).clip(max=len(hashes))
    counted = np.concatenate(([0], np.cumsum(valid)))
    kgrams_in = counted[bounds[1:]] - counted[bounds[:-1]]  # valid k-grams per document
    document = np.searchsorted(np.array(starts), positions, side="right") - 1
    document, sample = expand(document, at[positions], index.sample_start, index.sample_at)
    keys, found = np.unique(document * len(index.sample_ids) + sample, return_counts=True)
    document, sample = np.divmod(keys, len(index.sample_ids))
    total = kgrams_in[document]
    share = np.where(total >= MIN_FRAGMENT_KGRAMS, found / np.maximum(total, 1), 0.0)
    for d, s, score in best_per_document(document, sample, share):
        if score > best[first + d][0]:
            best[first + d] = (score, index.sample_ids[s])


def flag(documents: Sequence[str], reference: Reference, options: Options) -> list[bool]:
    return [score >= options.containment
            for score, _sample in best_containment(documents, reference, options)]


def match(documents: Sequence[str], reference: Reference, options: Options
          ) -> list[list[tuple[str, float, None]]]:
    """`flag`'s richer form for `lab decontam --write-clean`'s flagged.csv: per document its
    best-scoring sample and that score where `flag` removes it (no span: the fingerprints say
    which sample, not where its copy begins and ends)."""
    return [[(sample, round(score, 6), None)] if score >= options.containment else []
            for score, sample in best_containment(documents, reference, options)]
