"""lab.decontam.winnow's renamed matches, verified: a document that holds a sample side's
abstracted k-grams (names a renaming may change made one symbol) is read token by token at the
alignment its shared k-grams agree on, and scored by the longest run of the side it holds as a
consistent renaming: the abstracted symbols equal, each name of the side read as one name of the
document and no two as the same one. A renamed copy is one run, the side whole; ordinary code of
a like shape (loops, setters) agrees on stretches of a short side and breaks the run where it
differs, or maps two names onto one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# The alignments (offsets most of a pair's shared k-grams agree on) read, best first.
VERIFIED_OFFSETS = 2
# A renamed copy is the side whole, in one run (the renamer keeps every token's kind); a run
# short of this share of the side counts nothing: ordinary code of a like shape reaches half of
# a short side, and 0.9 of a side flagged 38 CSN methods holding no side against CodeTrans test
# where the whole side flags 3 (docs/decontam.md, `winnow`).
RENAMED_RUN = 1.0


@dataclass(frozen=True)
class AbstractSide:
    """A side as verification reads it: its tokens, abstracted symbols, and where each of its
    abstracted k-grams starts."""

    tokens: list[str]
    ids: np.ndarray
    at: dict[int, list[int]]

    @classmethod
    def of(cls, tokens: list[str], ids: np.ndarray, hashes: np.ndarray) -> "AbstractSide":
        at: dict[int, list[int]] = {}
        for position, h in enumerate(hashes.tolist()):
            at.setdefault(h, []).append(position)
        return cls(tokens, ids, at)


def verify_renamed(document: np.ndarray, side: np.ndarray, positions: np.ndarray,
                   row: np.ndarray, hashes: np.ndarray, flat: list[str], abstract_ids: np.ndarray,
                   starts: np.ndarray, table: Any, sides: dict[int, AbstractSide], name: int
                   ) -> np.ndarray:
    """`table` is winnow's abstracted fingerprint table (its CSR `start` and `owner`). Per
    (document, side) pair, the share of the side's tokens that the document holds, in
    order, at the offset most of their shared k-grams agree on, as a consistent renaming: the
    abstracted symbols equal, and each name of the side read as one name of the document and no
    two as the same one (first come, first kept; a token breaking the map does not count)."""
    scores = np.zeros(len(document))
    if not len(document):
        return scores
    position, hit_side = table.expand(positions, row)
    width = np.int64(int(side.max()) + 1)
    pair = (np.searchsorted(starts, position, side="right") - 1) * width + hit_side
    wanted = document * width + side  # distinct pairs, ascending (np.unique's order)
    at = np.searchsorted(wanted, pair).clip(max=len(wanted) - 1)
    kept = wanted[at] == pair
    hit_positions: dict[int, list[int]] = {}
    for n, found in zip(at[kept].tolist(), position[kept].tolist()):
        hit_positions.setdefault(n, []).append(found)
    for n, found in hit_positions.items():
        reference = sides[int(side[n])]
        offsets: dict[int, int] = {}
        for position in found:
            for at in reference.at.get(int(hashes[position]), ()):
                offsets[position - at] = offsets.get(position - at, 0) + 1
        begin = int(starts[document[n]])
        end = int(starts[document[n] + 1]) if document[n] + 1 < len(starts) else len(flat)
        best = 0
        for offset in sorted(offsets, key=lambda o: (-offsets[o], o))[:VERIFIED_OFFSETS]:
            best = max(best, renamed_agreement(reference, flat, abstract_ids, offset, begin, end,
                                               name))
        scores[n] = best / len(reference.tokens)
    return np.where(scores >= RENAMED_RUN, scores, 0.0)


def renamed_agreement(reference: "AbstractSide", flat: list[str], abstract_ids: np.ndarray,
                      offset: int, begin: int, end: int, name: int) -> int:
    """The longest run of the side's tokens that the document (flat[begin:end]) holds at
    `offset` as a consistent renaming (verify_renamed): a renamed copy is one run, the whole
    side; ordinary code of a like shape breaks it where it differs."""
    lo, hi = max(0, begin - offset), min(len(reference.tokens), end - offset)
    if lo >= hi:
        return 0
    same = (reference.ids[lo:hi] == abstract_ids[offset + lo:offset + hi]).tolist()
    forward: dict[str, str] = {}
    backward: dict[str, str] = {}
    longest = run = 0
    for j, agrees in enumerate(same, lo):
        if agrees and reference.ids[j] == name:
            old, new = reference.tokens[j], flat[offset + j]
            agrees = forward.setdefault(old, new) == new and backward.setdefault(new, old) == old
        run = run + 1 if agrees else 0
        longest = max(longest, run)
    return longest
