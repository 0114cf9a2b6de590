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
