"""The lab's own audit as a decontaminator (lab.contamination.audit and overlap): a document is
removed when one of its segments (its `<SEP>` sides) equals a sample side after whitespace and
comment normalisation, or is a near-duplicate of a code side (the CSN overlap study's
SourcererCC criterion: set Jaccard >= 0.8 and multiset Jaccard >= 0.7 of identifiers and
literals, at least 5 of them). It is the scan `lab audit` runs over a corpus
(SampleSideIndex.scan), so its flags are the audit's matched documents.
"""
from __future__ import annotations

from typing import Sequence

from lab.contamination.overlap import SampleSideIndex
from lab.decontam.base import Options, Reference


def flag(documents: Sequence[str], reference: Reference, options: Options) -> list[bool]:
    index = SampleSideIndex(list(reference.samples), reference.input_language,
                            reference.output_language, near=True)
    flags = []
    for text in documents:
        exact, near = index.scan(text)
        flags.append(bool(exact or near))
    return flags
