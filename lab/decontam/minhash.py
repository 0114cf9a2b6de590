"""MinHash near-duplicates (Broder 1997), with datasketch's MinHash and MinHashLSH.

A document is removed when the Jaccard similarity of its shingle set with a reference text's,
estimated by MinHash, is at least --jaccard. Shingles: `shingle` consecutive lab code tokens
(lab.codetokens.code_tokens: lexical tokens, comments dropped, so whitespace never matters);
a text with fewer tokens is one shingle. The reference texts are the sample sides. A document
is compared whole and, where it holds the lab's `<SEP>` marker, side by side (its segments, as
the lab's audit splits it: lab.contamination.segments); without the split a paired copy, which
holds both sides, would have a Jaccard of about a half with either. Candidates come from
MinHashLSH at the same threshold and are kept when the MinHash estimate of the Jaccard with a
candidate reaches it (LSH alone has false positives and negatives). A sample inside a much
longer document has a low Jaccard with it, which is what this method measures (containment is
another measure).
Deterministic: the permutations come from a fixed seed (datasketch's default, 1) and SHA-1.
"""
from __future__ import annotations

from typing import Iterator, Sequence

from lab.codetokens import code_tokens
from lab.common import LabError
from lab.contamination import segments
from lab.decontam.base import Options, Reference


def shingles(text: str, size: int) -> set[bytes]:
    tokens = code_tokens(text)
    if len(tokens) <= size:
        return {" ".join(tokens).encode("utf-8")}
    return {" ".join(tokens[i:i + size]).encode("utf-8") for i in range(len(tokens) - size + 1)}


def reference_texts(reference: Reference) -> list[str]:
    return list(dict.fromkeys(text for _id, text in reference.sides()))


def units(text: str) -> list[str]:
    """What of a document is compared: the whole, and its sides if it has several."""
    parts = segments(text)
    return [text] + (parts if len(parts) > 1 else [])


def flag(documents: Sequence[str], reference: Reference, options: Options) -> list[bool]:
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        raise LabError("--methods minhash: needs the datasketch package (a dependency of the "
                       "lab: pip install 'datasketch>=2.0')") from None

    def sketches(texts: Sequence[str]) -> Iterator[MinHash]:
        return MinHash.generator((shingles(t, options.shingle) for t in texts),
                                 num_perm=options.num_perm, seed=options.seed)

    lsh = MinHashLSH(threshold=options.jaccard, num_perm=options.num_perm)
    kept = {}
    for key, sketch in enumerate(sketches(reference_texts(reference))):
        lsh.insert(key, sketch)
        kept[key] = sketch
    owner = [i for i, text in enumerate(documents) for _unit in units(text)]
    flags = [False] * len(documents)
    for i, sketch in zip(owner, sketches([u for text in documents for u in units(text)])):
        if not flags[i]:
            flags[i] = any(sketch.jaccard(kept[key]) >= options.jaccard
                           for key in lsh.query(sketch))
    return flags
