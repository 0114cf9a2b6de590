"""Winnowed code-token fingerprints scored by containment (Schleimer, Wilkerson & Aiken 2003,
"Winnowing: local algorithms for document fingerprinting", the algorithm of MOSS and Dolos).

Why: a benchmark function leaks inside a real source file (a method among others), re-laid out,
often with its names changed, or in part. Whole-document similarity (MinHash) sinks under the
host's size, exact substrings break on a renamed variable, word n-grams on a line wrap. Tokens
ignore layout and comments; abstracting the names a renaming may change ignores the renaming;
scoring the share of the *sample's* fingerprints found in the document (containment) does not
care how much else the document holds.

Tokens: the lab's code tokenizer (lab.codetokens.code_tokens: lexical tokens, comments dropped,
whitespace never a token), the same for Java, C# and the NL side (words and punctuation). The
paired setting's `<SEP>` is a boundary: no k-gram spans it.

Names (`--winnow-names`):
- keep: every token as written.
- abstract (default): scored twice, as written and with the *renamable* names made one symbol;
  the document's score is the higher. Abstracted, a document that holds every fingerprint of a
  side is read token by token (lab.decontam.renaming): it scores 1 where it holds the side
  whole as a consistent renaming, else nothing in this path. Renamable, what a consistent renaming of a function
  changes (lab perturb's renamer, the `renamed` form, among others): an identifier that is not a
  keyword, not a member reached through `.`, `::` or `@` (unless on `this`/`base`), and either
  starts in lower case (locals, parameters, fields, Java methods) or is called (`Name(` but not
  `new Name(`: C# methods). A JDK/.NET name is renamable too: the renamer keeps a local called
  `size` but may rename `len` to `size`. Types, members, keywords and literals are kept: they
  anchor an abstracted function to its own text. A code side of at least ABSTRACT_MIN_TOKENS
  tokens is matched abstracted wherever it occurs. A shorter one (from MIN_SHORT_TOKENS) is
  matched abstracted only where it is all a document holds, or all of one side of a `<SEP>`:
  inside a larger method its shape (`int NAME() {return NAME;}`) is one thousands of methods
  share, while a document that is nothing but the shape is the sample renamed (the whole
  CSN-format corpus has no document under 12 tokens). Natural-language sides are never
  abstracted.

Direction 1, a sample inside a document: the hash of every k consecutive symbols
(`--winnow-k`); in every window of w consecutive k-gram hashes (`--winnow-w`) the minimum is
selected (the rightmost on a tie): the side's fingerprints. Any run of at least w + k - 1
tokens shared with a side shares one of them. Score: the containment of a side in a document,
|F(side) & K(document)| / |F(side)|, where K is every k-gram hash of the document. A side of
fewer than k tokens (but at least MIN_SHORT_TOKENS) is one fingerprint, itself whole: matched
(score 1) where the document holds it as written.

Direction 2, a fragment of a sample standing alone (the `partial` form: too few of the side's
fingerprints to reach a share): the document's k-grams as written, its first and last token
left out (a cut by characters may split them), and the share of them that one sample's k-grams
hold; k is 3 for a document of 3 to 7 tokens so left, 4 for a longer one (FRAGMENT_GRAMS).
A real source file is a whole method or more: its k-grams lie inside one benchmark sample only
when it is (a piece of) that sample.

Departures from MOSS and Dolos, which winnow both texts and report the shared fingerprints of a
pair: the document is not winnowed, every k-gram of it is looked up (the result equals
winnowing it with w = 1; selecting its k-grams would save nothing, since only the reference is
stored, and would lose the side's fingerprints whose windows run into the host around an
embedded copy); and the second direction and the short sides are the lab's own.

Hashes: a 64-bit polynomial of the symbols (integer ids of the reference's tokens; a token the
reference never has is a symbol no reference k-gram holds) over any window length, from one
prefix sum per batch (the base is odd, so it is invertible modulo 2^64), then mixed
(splitmix64). Memory: the index holds the reference's hashes; documents are tokenised and hashed
in batches of about BATCH_TOKENS tokens, so memory does not grow with the corpus. Deterministic:
no seed, no Python `hash`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat
from typing import Callable, Iterator, Sequence

import numpy as np

from lab.codetokens import KEYWORDS, code_tokens
from lab.contamination import SEP_MARKER
from lab.decontam.base import Options, Reference
from lab.decontam.renaming import AbstractSide, renamed_agreement, verify_renamed

NAMES = ("keep", "abstract")
# Reserved symbols: a token the reference never has (no reference k-gram holds it), a
# renamable name once abstracted, and the boundary between two documents of a batch or the two
# sides of a `<SEP>` document (no k-gram spans it).
UNKNOWN, NAME, BOUNDARY = 0, 1, 2
FIRST_SYMBOL = 3
SEPARATOR = "\x00"  # the boundary's token
BATCH_TOKENS = 1 << 20
# A side shorter than k is matched whole from this many tokens (below, `int f() {}` is anyone's).
MIN_SHORT_TOKENS = 6
# Abstracted matching inside a document from this many tokens of a code side: shorter ones
# abstracted are shapes thousands of methods share (`int NAME() {return NAME;}`), matched
# abstracted only as a whole document (benchmarks/decontam_winnow.md).
ABSTRACT_MIN_TOKENS = 12
# Decontaminator.revision: "" before short code sides were matched renamed as whole documents.
REVISION = "short-renamed-whole"
# The second direction: (k, fewest tokens, most tokens + 1) of the documents scored by their
# k-grams, counting a document's tokens with its first and last left out. A document of 3 to 7
# tokens (half of a one-line function) is read by its 3-grams; a longer one by its 4-grams,
# which are rarer in code: looking every 3-gram of the corpus up would cost a tenth more time.
FRAGMENT_GRAMS = ((3, 3, 8), (4, 8, None))
# Renamed matching: a renamed copy holds every abstracted fingerprint of the side, so only the
# pairs that hold them all are verified and scored token by token (lab.decontam.renaming).
VERIFY_FROM = 1.0
# The fragment direction scores a document sample by sample only where this share of its
# k-grams or more is in some sample (below it, it scores 0 in that direction).
FRAGMENT_FROM = 0.5
_MEMBER_OPERATORS = (".", "::", "@")
_MEMBER_OWNERS = ("this", "base")
_IDENTIFIER = re.compile(r"(?:[^\W\d][\w$]*|\$[\w$]*)\Z")
# Table.hits's bit table: about 64 bits a key (a hash missing the table passes it once in 64),
# at most 2^FILTER_BITS (16 MiB).
FILTER_BITS = 24
_MULTIPLIER = 0x100000001B3                 # the polynomial's base (FNV-1's 64-bit prime): odd
_INVERSE = pow(_MULTIPLIER, -1, 1 << 64)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # splitmix64


def is_name(token: str) -> bool:
    """An identifier of the lab's lexer that is not a keyword."""
    return token not in KEYWORDS and _IDENTIFIER.match(token) is not None


class Symbols:
    """token -> integer symbol, built from the reference's tokens (and the words abstraction
    reads: keywords, member operators, `(`, `new`); a token it never saw is UNKNOWN,
    without being stored: a lookup of the corpus's tokens never grows the table. Per symbol:
    whether it is a name that abstraction may make NAME, and whether it starts in lower case."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def add(self, token: str) -> None:
        self.ids.setdefault(token, FIRST_SYMBOL + len(self.ids))

    def freeze(self) -> None:
        size = FIRST_SYMBOL + len(self.ids)
        self.renamable_name, self.lower = np.zeros(size, bool), np.zeros(size, bool)
        for token, symbol in self.ids.items():
            self.renamable_name[symbol] = is_name(token)
            self.lower[symbol] = token[:1].islower() or token[:1] in "_$"
        get = self.ids.get
        self.dot = [get(t, -1) for t in _MEMBER_OPERATORS]
        self.owners = [get(t, -1) for t in _MEMBER_OWNERS]
        self.paren, self.new = get("("), get("new")
        self.ids[SEPARATOR] = BOUNDARY

    def concrete(self, tokens: list[str]) -> np.ndarray:
        return np.fromiter(map(self.ids.get, tokens, repeat(UNKNOWN)), np.int64, len(tokens))

    def abstract(self, tokens: list[str], ids: np.ndarray) -> np.ndarray:
        """`ids` (concrete) with the renamable names made NAME (module docstring). A token the
        reference never has is judged by its first character, as a known one is."""
        if not len(ids):
            return ids
        first = np.array(tokens, dtype="U1").view(np.uint32)
        known = ids != UNKNOWN
        wordlike = ((first >= 97) & (first <= 122)) | (first == 95) | (first == 36)
        unknown_name = ~known & (wordlike | ((first >= 65) & (first <= 90)) | (first > 127))
        name = np.where(known, self.renamable_name[ids], unknown_name)
        lower = np.where(known, self.lower[ids], wordlike)
        before, before2, after = (np.full(len(ids), -2, np.int64) for _ in range(3))
        before[1:], before2[2:], after[:-1] = ids[:-1], ids[:-2], ids[1:]
        member = np.isin(before, self.dot) & ~np.isin(before2, self.owners)
        called = (after == self.paren) & (before != self.new)
        return np.where(name & ~member & (lower | called), NAME, ids)


_POWERS: list[np.ndarray] = []


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^j and B^-j modulo 2^64 for j < n at least (kept, and grown, between calls)."""
    if not _POWERS or len(_POWERS[0]) < n:
        size = max(n, 2 * len(_POWERS[0]) if _POWERS else 1 << 16)
        pair = []
        for base in (_MULTIPLIER, _INVERSE):
            values = np.ones(size, np.uint64)
            np.cumprod(np.full(size - 1, base, np.uint64), out=values[1:])
            pair.append(values)
        _POWERS[:] = pair
    return _POWERS[0], _POWERS[1]


def _mixed(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place: the polynomial's low bits spread over all 64."""
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


class Windows:
    """A symbol sequence's windows of any length: their hashes, from one prefix sum (module
    docstring), and how many UNKNOWN or BOUNDARY symbols each holds, from another."""

    def __init__(self, ids: np.ndarray) -> None:
        self.size = len(ids)
        powers, inverse = _powers(len(ids))
        self.powers = powers
        self.weighted = np.zeros(len(ids) + 1, np.uint64)
        np.cumsum((ids.astype(np.uint64) + np.uint64(1)) * inverse[:len(ids)],
                  out=self.weighted[1:])
        boundary = ids == BOUNDARY
        self.boundaries = np.concatenate(([0], np.cumsum(boundary)))
        self.unusable = np.concatenate(([0], np.cumsum(boundary | (ids == UNKNOWN))))

    def hashes(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The 64-bit hash of every `length` consecutive symbols (position-independent: the
        window hashes alike wherever it stands), and whether it holds neither UNKNOWN nor
        BOUNDARY."""
        n = self.size - length + 1
        if n <= 0 or length <= 0:
            return np.zeros(0, np.uint64), np.zeros(0, bool)
        h = (self.weighted[length:] - self.weighted[:n]) * self.powers[length - 1:self.size]
        return _mixed(h), self.unusable[length:] == self.unusable[:n]

    def hashes_at(self, length: int, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`hashes(length)` at the window starts `at` only."""
        h = (self.weighted[at + length] - self.weighted[at]) * self.powers[at + length - 1]
        return _mixed(h), self.unusable[at + length] == self.unusable[at]

    def across_boundary(self, length: int) -> np.ndarray:
        """Per window of `length` symbols, whether it spans a BOUNDARY."""
        n = self.size - length + 1
        return self.boundaries[length:length + n] != self.boundaries[:n]


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


@dataclass(frozen=True)
class Table:
    """Sorted distinct hashes and, per hash (CSR), the owners holding it."""

    keys: np.ndarray
    start: np.ndarray
    owner: np.ndarray
    seen: np.ndarray  # per value of a hash's low bits: whether a key has it

    @classmethod
    def of(cls, owners: dict[int, set[int]]) -> "Table":
        pairs = [(h, o) for h, held in owners.items() for o in held]
        return cls.of_pairs(np.array([h for h, _o in pairs], np.uint64),
                            np.array([o for _h, o in pairs], np.int64))

    @classmethod
    def of_pairs(cls, hashes: np.ndarray, owners: np.ndarray) -> "Table":
        """From (hash, owner) pairs, repeats allowed."""
        order = np.lexsort((owners, hashes))
        hashes, owners = hashes[order], owners[order]
        distinct = np.ones(len(hashes), bool)
        distinct[1:] = (hashes[1:] != hashes[:-1]) | (owners[1:] != owners[:-1])
        hashes, owners = hashes[distinct], owners[distinct]
        keys, counts = np.unique(hashes, return_counts=True)
        bits = min(FILTER_BITS, max(12, int(len(keys)).bit_length() + 6))
        seen = np.zeros(1 << bits, bool)
        seen[keys & np.uint64((1 << bits) - 1)] = True
        return cls(keys, np.concatenate(([0], np.cumsum(counts))).astype(np.int64), owners,
                   seen)

    def hits(self, hashes: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions of `hashes` this table holds, their rows). The bit table answers most
        of them (a hash whose low bits no key has is not held); the rest are searched."""
        if not len(self.keys) or not len(hashes):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        mask = np.uint64(len(self.seen) - 1)
        candidates = np.flatnonzero(valid & self.seen[hashes & mask])
        at = np.searchsorted(self.keys, hashes[candidates]).clip(max=len(self.keys) - 1)
        held = self.keys[at] == hashes[candidates]
        return candidates[held], at[held]

    def expand(self, source: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, owner) for every owner of every row."""
        held = self.start[row + 1] - self.start[row]
        offsets = np.repeat(self.start[row] - np.cumsum(held) + held, held)
        return np.repeat(source, held), self.owner[np.arange(int(held.sum())) + offsets]


@dataclass(frozen=True)
class WinnowIndex:
    """The reference, hashed: per side its sample; the tables of the two directions."""

    k: int
    abstract: bool
    symbols: Symbols
    sample_of: list[str]        # per side: its sample id
    concrete: Table             # fingerprints as written -> sides
    concrete_size: np.ndarray   # per side: its number of fingerprints as written
    renamed: Table              # fingerprints abstracted -> sides (abstract, long code sides)
    renamed_size: np.ndarray
    renamed_sides: dict[int, AbstractSide]  # per side in `renamed` or `renamed_whole`
    short: dict[int, Table]     # length -> whole-side hashes of the short sides -> sides
    renamed_whole: dict[int, Table]  # length -> abstracted hashes of the short code sides
    fragments: dict[int, Table]  # k -> every k-gram as written (FRAGMENT_GRAMS) -> samples
    sample_ids: list[str]       # per sample number: its id
    side_sample: np.ndarray     # per side: its sample number
    unmatched: int              # sides too short for any fingerprint


def check_options(options: Options) -> None:
    if options.winnow_names not in NAMES:
        raise ValueError(f"winnow_names {options.winnow_names!r}: choose from {NAMES}")


def side_tokens(reference: Reference) -> list[tuple[str, bool, list[str]]]:
    """(sample id, is code, tokens) of every non-empty side."""
    sides = []
    for sample in reference.samples:
        for text, language in ((sample.input, reference.input_language),
                               (sample.output, reference.output_language)):
            if text.strip():
                sides.append((sample.id, language != "nl", code_tokens(text)))
    return sides


def build_index(reference: Reference, options: Options) -> WinnowIndex:
    """Hash every side of the reference for both directions (module docstring)."""
    check_options(options)
    k, w, abstract = options.winnow_k, options.winnow_w, options.winnow_names == "abstract"
    sides = side_tokens(reference)
    symbols = Symbols()
    for token in (*sorted(KEYWORDS), *_MEMBER_OPERATORS, "(", "new"):
        symbols.add(token)
    for _sample, _code, tokens in sides:
        for token in tokens:
            symbols.add(token)
    symbols.freeze()
    # Every side at once, as a batch of documents is (one prefix sum per window length), then
    # each side's own slice of the hashes.
    flat: list[str] = []
    starts = []
    for _sample, _code, tokens in sides:
        starts.append(len(flat))
        flat.extend(tokens)
        flat.append(SEPARATOR)
    ids = symbols.concrete(flat)
    windows = Windows(ids)
    sample_of = [sample_id for sample_id, _code, _tokens in sides]
    sample_number: dict[str, int] = {}
    numbers = np.array([sample_number.setdefault(s, len(sample_number)) for s in sample_of]
                       + [0], np.int64)
    side_at = np.searchsorted(np.array(starts, np.int64), np.arange(len(ids)), side="right") - 1
    fragments = {}
    for size, *_bounds in FRAGMENT_GRAMS:
        hashes, valid = windows.hashes(size)
        fragments[size] = Table.of_pairs(hashes[valid], numbers[side_at[:len(hashes)][valid]])
    concrete_hashes = windows.hashes(k)[0]
    abstract_ids = symbols.abstract(flat, ids) if abstract else ids
    abstract_windows = Windows(abstract_ids) if abstract else windows
    renamed_hashes = abstract_windows.hashes(k)[0] if abstract else concrete_hashes
    concrete: dict[int, set[int]] = {}
    renamed: dict[int, set[int]] = {}
    short: dict[int, dict[int, set[int]]] = {}
    renamed_whole: dict[int, dict[int, set[int]]] = {}
    concrete_size, renamed_size = [], []
    renamed_sides: dict[int, AbstractSide] = {}
    unmatched = 0
    for side, (start, (_sample, code, tokens)) in enumerate(zip(starts, sides)):
        windows_in = slice(start, start + max(0, len(tokens) - k + 1))
        fingerprints = {h for h, _at in winnow(concrete_hashes[windows_in], w)}
        concrete_size.append(len(fingerprints) or (1 if len(tokens) >= MIN_SHORT_TOKENS else 0))
        for h in fingerprints:
            concrete.setdefault(h, set()).add(side)
        if not fingerprints and len(tokens) >= MIN_SHORT_TOKENS:
            whole = int(windows.hashes_at(len(tokens), np.array([start]))[0][0])
            short.setdefault(len(tokens), {}).setdefault(whole, set()).add(side)
        unmatched += concrete_size[-1] == 0
        abstracted = set()
        if abstract and code and len(tokens) >= ABSTRACT_MIN_TOKENS:
            abstracted = {h for h, _at in winnow(renamed_hashes[windows_in], w)}
        elif abstract and code and len(tokens) >= MIN_SHORT_TOKENS:
            whole = int(abstract_windows.hashes_at(len(tokens), np.array([start]))[0][0])
            renamed_whole.setdefault(len(tokens), {}).setdefault(whole, set()).add(side)
            renamed_sides[side] = AbstractSide.of(tokens, abstract_ids[start:start + len(tokens)],
                                                  np.zeros(0, np.uint64))
        renamed_size.append(len(abstracted))
        for h in abstracted:
            renamed.setdefault(h, set()).add(side)
        if abstracted:
            renamed_sides[side] = AbstractSide.of(
                tokens, abstract_ids[start:start + len(tokens)], renamed_hashes[windows_in])
    return WinnowIndex(k, abstract, symbols, sample_of, Table.of(concrete),
                       np.array(concrete_size, np.float64), Table.of(renamed),
                       np.array(renamed_size, np.float64), renamed_sides,
                       {n: Table.of(t) for n, t in sorted(short.items())},
                       {n: Table.of(t) for n, t in sorted(renamed_whole.items())}, fragments,
                       list(sample_number), numbers[:len(sample_of)], unmatched)


def batches(documents: Sequence[str]) -> Iterator[tuple[int, list[list[str]]]]:
    """(index of the first document, the documents' tokens), about BATCH_TOKENS a batch."""
    start, batch, size = 0, [], 0
    for i, text in enumerate(documents):
        tokens = code_tokens(text.replace(SEP_MARKER, f" {SEPARATOR} ")
                             if SEP_MARKER in text else text)
        batch.append(tokens)
        size += len(tokens) + 1
        if size >= BATCH_TOKENS:
            yield start, batch
            start, batch, size = i + 1, [], 0
    if batch:
        yield start, batch


class Best:
    """A batch's documents' best scores yet, and the sample number of each."""

    def __init__(self, documents: int) -> None:
        self.score = np.zeros(documents)
        self.sample = np.full(documents, -1, np.int64)

    def keep(self, document: np.ndarray, sample: np.ndarray, score: np.ndarray) -> None:
        """Each document's highest score (the lowest sample on a tie), where it beats the
        document's best yet."""
        if not len(document):
            return
        order = np.lexsort((-sample, score, document))
        last = order[np.flatnonzero(np.append(document[order][1:] != document[order][:-1],
                                              True))]
        document, sample, score = document[last], sample[last], score[last]
        better = score > self.score[document]
        self.score[document[better]] = score[better]
        self.sample[document[better]] = sample[better]


def contained(document: np.ndarray, table: Table, row: np.ndarray, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document, side, share of the side's fingerprints the document holds), each distinct
    fingerprint of a document counted once."""
    width = np.int64(len(table.keys))
    pairs = np.unique(document * width + row)
    document, side = table.expand(*np.divmod(pairs, width))
    keys, found = np.unique(document * np.int64(len(sizes)) + side, return_counts=True)
    document, side = np.divmod(keys, np.int64(len(sizes)))
    return document, side, found / sizes[side]


def best_containment(documents: Sequence[str], reference: Reference, options: Options
                     ) -> list[tuple[float, str]]:
    """Per document, its highest score against a sample (either direction, names as written
    or abstracted), and that sample's id ((0.0, "") when nothing matches)."""
    index = build_index(reference, options)
    side_sample = index.side_sample
    out: list[tuple[float, str]] = []
    for first, batch in batches(documents):
        best = Best(len(batch))
        flat: list[str] = []
        starts = []
        for tokens in batch:
            starts.append(len(flat))
            flat.extend(tokens)
            flat.append(SEPARATOR)
        starts_array = np.array(starts, dtype=np.int64)
        ids = index.symbols.concrete(flat)

        def owner_document(positions: np.ndarray) -> np.ndarray:
            return np.searchsorted(starts_array, positions, side="right") - 1

        windows = Windows(ids)
        hashes, valid = windows.hashes(index.k)
        positions, row = index.concrete.hits(hashes, valid)
        document, side, share = contained(owner_document(positions), index.concrete, row,
                                          index.concrete_size)
        best.keep(document, side_sample[side], share)
        for length, table in index.short.items():
            positions, row = table.hits(*windows.hashes(length))
            document, side = table.expand(owner_document(positions), row)
            best.keep(document, side_sample[side], np.ones(len(side)))
        if index.abstract:
            abstract_ids = index.symbols.abstract(flat, ids)
            abstract_windows = Windows(abstract_ids)
            whole_renamed_scores(flat, ids, abstract_ids, abstract_windows, owner_document,
                                 index, best)
        if index.abstract and len(index.renamed.keys):
            hashes, valid = abstract_windows.hashes(index.k)
            positions, row = index.renamed.hits(hashes, valid)
            document, side, share = contained(owner_document(positions), index.renamed, row,
                                              index.renamed_size)
            keep = share >= VERIFY_FROM
            document, side = document[keep], side[keep]
            verified = verify_renamed(document, side, positions, row, hashes, flat, abstract_ids,
                                      starts_array, index.renamed, index.renamed_sides, NAME)
            best.keep(document, side_sample[side], verified)
        for size, fewest, most in FRAGMENT_GRAMS:
            fragment_scores(starts_array, windows, index, size, fewest, most, best)
        out.extend((score, index.sample_ids[sample]) if sample >= 0 else (0.0, "")
                   for score, sample in zip(best.score.tolist(), best.sample.tolist()))
    return out


def whole_renamed_scores(flat: list[str], ids: np.ndarray, abstract_ids: np.ndarray,
                         windows: Windows, owner_document: Callable[[np.ndarray], np.ndarray],
                         index: WinnowIndex, best: Best) -> None:
    """Into `best`: 1 for a document whose whole code tokens, or one `<SEP>` side of it, are a
    short code side as a consistent renaming. A short side's shape abstracted occurs inside
    larger methods by chance (module docstring), not as all a document holds."""
    ends = np.flatnonzero(ids == BOUNDARY)  # each part ends at a SEPARATOR
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    for length, table in index.renamed_whole.items():
        at = starts[lengths == length]
        if not len(at):
            continue
        held, row = table.hits(*windows.hashes_at(length, at))
        part, side = table.expand(at[held], row)
        whole = [renamed_agreement(index.renamed_sides[s], flat, abstract_ids, p, p, p + length,
                                   NAME) == length for p, s in zip(part.tolist(), side.tolist())]
        keep = np.array(whole, bool)
        best.keep(owner_document(part[keep]), index.side_sample[side[keep]],
                  np.ones(int(keep.sum())))


def fragment_scores(starts: np.ndarray, windows: Windows, index: WinnowIndex, size: int,
                    fewest: int, most: int | None, best: Best) -> None:
    """Into `best`: per document of `fewest` to `most` - 1 tokens (its first and last left out),
    the share of its `size`-grams that one sample's hold, where it is its best yet."""
    ends = np.append(starts[1:] - 1, windows.size - 1)  # each document's SEPARATOR
    inner_start, inner_end = starts + 1, ends - 1    # [start, end) of the tokens left in
    length = inner_end - inner_start
    scored = (length >= fewest) & (length < most if most is not None else True)
    if not scored.any():
        return
    windows_count = windows.size - size + 1
    inside = np.zeros(windows_count + 1, np.int64)   # +1 where a document's inner k-grams start
    np.add.at(inside, inner_start[scored], 1)
    np.add.at(inside, (inner_end[scored] - size + 1).clip(min=0), -1)
    at = np.flatnonzero(np.cumsum(inside)[:windows_count] > 0)  # only those are hashed
    table = index.fragments[size]
    held, row = table.hits(*windows.hashes_at(size, at))
    positions = at[held]
    if not len(positions):
        return
    # The share's denominator: every k-gram of the document's tokens left in (one with a token
    # the reference never has is one no sample holds), but none across a `<SEP>`.
    counted = np.concatenate(([0], np.cumsum(~windows.across_boundary(size))))
    total = counted[(inner_end - size + 1).clip(min=0)] - counted[inner_start]
    document = np.searchsorted(starts, positions, side="right") - 1
    # A document's share for one sample is at most its share for all of them: only documents
    # of which FRAGMENT_FROM or more is in some sample are scored sample by sample.
    some = np.bincount(document, minlength=len(starts)) >= FRAGMENT_FROM * np.maximum(total, 1)
    kept = some[document]
    document, sample = table.expand(document[kept], row[kept])
    width = np.int64(len(index.sample_ids))
    keys, found = np.unique(document * width + sample, return_counts=True)
    document, sample = np.divmod(keys, width)
    total = total[document]
    best.keep(document, sample, found / np.maximum(total, 1))


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
