"""Exact substring decontamination, BigCode style (the StarCoder data's decontamination,
bigcode-dataset/decontamination): a document is removed when a benchmark sample's text occurs
in it verbatim. Both texts are whitespace-normalised first (runs of whitespace become one
space, ends stripped), so re-indentation and line breaks do not hide a copy.

Every sample side is looked for. Checking each side against each document would take
sides x documents substring searches; instead each side is indexed under one of its interior
words (not the first or last, which may be cut inside a longer word of the document): a side
that occurs in a normalised document has every interior word as a whole word of the document,
so only documents holding that word are searched. Sides of fewer than three words are searched
in every document. The result equals the all-pairs search.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

from lab.decontam.base import Options, Reference


def normalize(text: str) -> str:
    return " ".join(text.split())


def flag(documents: Sequence[str], reference: Reference, options: Options) -> list[bool]:
    by_word: dict[str, list[str]] = defaultdict(list)
    short: list[str] = []
    for side in dict.fromkeys(normalize(text) for _id, text in reference.sides()):
        words = side.split(" ")
        if len(words) < 3:
            short.append(side)
        else:  # the longest interior word: the rarest, as a rule
            by_word[max(words[1:-1], key=lambda w: (len(w), w))].append(side)
    flags = []
    for text in documents:
        doc = normalize(text)
        found = any(side in doc for side in short)
        if not found and by_word:
            for word in set(doc.split(" ")) & by_word.keys():
                if any(side in doc for side in by_word[word]):
                    found = True
                    break
        flags.append(found)
    return flags


def original_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The character span of `text` that the span [start, end) of normalize(text) comes from
    (normalisation keeps every non-space character and joins words with one space)."""
    position = 0
    first = last = None
    for word in re.finditer(r"\S+", text):
        word_end = position + len(word.group(0))
        if first is None and start < word_end:
            first = word.start() + max(0, start - position)
        if end <= word_end:
            last = word.start() + (end - position)
            break
        position = word_end + 1
    return (first or 0, last if last is not None else len(text))


def match(documents: Sequence[str], reference: Reference, options: Options
          ) -> list[list[tuple[str, float, tuple[int, int]]]]:
    """`flag`'s richer form, for `lab decontam --write-clean`'s flagged.csv: per document, the
    (sample id, score, (start, end)) of every sample with a side found in it, score 1.0 (a
    verbatim copy), the span that of the side's first occurrence, in the document's own
    characters. A document `flag` removes has at least one; one it keeps has none."""
    samples_of: dict[str, list[str]] = defaultdict(list)
    for sample_id, text in reference.sides():
        side = normalize(text)
        if sample_id not in samples_of[side]:
            samples_of[side].append(sample_id)
    found_all = []
    for text in documents:
        doc = normalize(text)
        spans: dict[str, tuple[int, int]] = {}
        for side, ids in samples_of.items():
            at = doc.find(side)
            if at < 0:
                continue
            for sample_id in ids:
                if sample_id not in spans:
                    spans[sample_id] = original_span(text, at, at + len(side))
        found_all.append([(sample_id, 1.0, span) for sample_id, span in spans.items()])
    return found_all
