"""Word n-gram overlap, lm-evaluation-harness's decontamination rules
(lm_eval/decontamination/janitor.py, after GPT-3's appendix C).

Normalisation (the Janitor's translation table): ASCII upper case to lower case, every
character of `string.punctuation` deleted; words are what remains split on whitespace; an
n-gram is n consecutive words. A sample side with fewer than n words has no n-gram and is
never matched, as in the Janitor (`--ngram-short skip`, the default). In code the rule bites:
deleting punctuation glues `foo(int a)` into the words `fooint a`, and most of CodeTrans's
one-line functions have fewer than 13 words. `--ngram-short whole` (a departure, the lab's own)
matches such a side when all its words occur consecutively in the document.

Rules (`--ngram-rule`):
- any (default): a document is removed when it shares at least one n-gram with a sample side
  (GPT-3's and lm-eval's criterion for calling a text contaminated).
- janitor: the Janitor's cleaning of a training document (`Janitor.clean`): every matching
  n-gram is cut out with `window_to_remove` = 200 characters either side; the pieces left
  shorter than `minimum_slice_length` = 200 characters are dropped; a document with more than
  `too_dirty_cutoff` = 10 matching n-grams is dropped whole. The lab removes a document when
  nothing of it is left (too dirty, or no piece long enough); one cut down to a piece that is
  kept counts as not removed.

Departure: the Janitor's Python path normalises each n-gram of the raw text after splitting
it on whitespace, so a word of punctuation alone leaves an empty word (a double space) in the
document's n-gram, unlike the contaminant's; here both sides are normalised word by word and
empty words are dropped before n-grams are formed, the document keeping each word's character
offsets for the janitor rule (on code, lm-eval's Python path matches almost nothing for this
reason). Not applied either: `Janitor.clean` returns nothing for any clean text under 200
characters (a length filter). What follows lm-eval exactly (the normalisation and n-grams of
its register side; its cut, `_split_chunks`) is checked against lm-eval 0.4.13's own code, and
each departure counted, in tests/test_decontam_sources.py (docs/decontam.md, "Faithful to which
source, and where not").
"""
from __future__ import annotations

import re
import string
from typing import Sequence

from lab.decontam.base import Options, Reference

TRANSLATION = str.maketrans(string.ascii_lowercase + string.ascii_uppercase,
                            string.ascii_lowercase * 2, string.punctuation)
WINDOW_TO_REMOVE = 200
MINIMUM_SLICE_LENGTH = 200
TOO_DIRTY_CUTOFF = 10
_WORD = re.compile(r"\S+")


def words(text: str) -> list[str]:
    return text.translate(TRANSLATION).split()


def word_spans(text: str) -> list[tuple[str, int, int]]:
    """(normalised word, first, last character index) of every word left non-empty."""
    found = []
    for match in _WORD.finditer(text):
        word = match.group(0).translate(TRANSLATION)
        if word:
            found.append((word, match.start(), match.end() - 1))
    return found


def reference_ngrams(reference: Reference, n: int, short: str = "skip"
                     ) -> dict[int, set[tuple[str, ...]]]:
    """The reference's word sequences to look for, by length: every n-gram of every side, and
    with short="whole" each side of fewer than n (but at least one) words whole."""
    grams: dict[int, set[tuple[str, ...]]] = {}
    for _id, text in reference.sides():
        for gram in one_side_ngrams(words(text), n, short):
            grams.setdefault(len(gram), set()).add(gram)
    return grams


def one_side_ngrams(side_words: list[str], n: int, short: str) -> set[tuple[str, ...]]:
    """One side's word sequences to look for (reference_ngrams's rule for one side)."""
    if len(side_words) >= n:
        return {tuple(side_words[i:i + n]) for i in range(len(side_words) - n + 1)}
    if side_words and short == "whole":
        return {tuple(side_words)}
    return set()


def matches(spans: list[tuple[str, int, int]], grams: dict[int, set[tuple[str, ...]]],
            vocabulary: set[str], first_only: bool) -> list[tuple[int, int]]:
    """(start, end) character spans of the document's word sequences found in `grams`, in
    document order. Only runs of consecutive words that all occur in the reference can hold
    one, so sequences are formed within those runs alone (most of a document is skipped)."""
    found = []
    shortest = min(grams, default=0)
    run_start = 0
    for i in range(len(spans) + 1):
        if i < len(spans) and spans[i][0] in vocabulary:
            continue
        if grams and i - run_start >= shortest:
            run = [w for w, _s, _e in spans[run_start:i]]
            for j in range(len(run)):
                for size, wanted in grams.items():
                    if j + size <= len(run) and tuple(run[j:j + size]) in wanted:
                        found.append((spans[run_start + j][1], spans[run_start + j + size - 1][2]))
                        if first_only:
                            return found
                        break
        run_start = i + 1
    return found


def janitor_removes(text: str, dirty: list[tuple[int, int]]) -> bool:
    """Whether lm-eval's Janitor._split_chunks leaves nothing of `text`."""
    if not dirty:
        return False
    chunks = 0
    splice = 0
    end = -1
    for i, (start, end) in enumerate(dirty):
        if i >= TOO_DIRTY_CUTOFF:
            return True
        start = max(0, start - WINDOW_TO_REMOVE)
        end = min(len(text), end + WINDOW_TO_REMOVE)
        if start - splice > MINIMUM_SLICE_LENGTH:
            chunks += 1
        splice = end
    if end < len(text) - MINIMUM_SLICE_LENGTH:
        chunks += 1
    return chunks == 0


def flag(documents: Sequence[str], reference: Reference, options: Options,
         n: int | None = None) -> list[bool]:
    n = n or options.ngram_n
    grams = reference_ngrams(reference, n, options.ngram_short)
    vocabulary = {w for wanted in grams.values() for gram in wanted for w in gram}
    janitor = options.ngram_rule == "janitor"
    flags = []
    for text in documents:
        dirty = matches(word_spans(text), grams, vocabulary, first_only=not janitor)
        flags.append(janitor_removes(text, dirty) if janitor else bool(dirty))
    return flags


def match_counts(documents: Sequence[str], reference: Reference, n: int, short: str = "skip"
                 ) -> list[int]:
    """Per document, how many of its word positions start an n-gram of the reference (the
    min-count of a threshold curve: a document is flagged at min-count m when it has m or
    more)."""
    grams = reference_ngrams(reference, n, short)
    vocabulary = {w for wanted in grams.values() for gram in wanted for w in gram}
    return [len(matches(word_spans(text), grams, vocabulary, first_only=False))
            for text in documents]


def match(documents: Sequence[str], reference: Reference, options: Options,
          n: int | None = None) -> list[list[tuple[str, float, tuple[int, int]]]]:
    """`flag`'s richer form, for `lab decontam --write-clean`'s flagged.csv: per document, the
    (sample id, score, (start, end)) of every sample one of whose sides shares a word sequence
    (`reference_ngrams`) with it. Score: the containment of the side in the document, the
    share of the side's n-grams found there (the best side's); span: from the first matching
    n-gram's first character to the last one's end, in the document's own characters. Called
    on the documents `flag` removed, whatever the rule (the janitor rule's removal is `flag`'s
    to decide; the matches are the same n-grams)."""
    n = n or options.ngram_n
    owners: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    side_grams: list[int] = []
    for side, (sample_id, text) in enumerate(reference.sides()):
        grams = one_side_ngrams(words(text), n, options.ngram_short)
        side_grams.append(len(grams))
        for gram in grams:
            owners.setdefault(gram, []).append((sample_id, side))
    sizes = sorted({len(gram) for gram in owners})
    found_all = []
    for text in documents:
        spans = word_spans(text)
        hits: dict[tuple[str, int], set[tuple[str, ...]]] = {}
        reach: dict[tuple[str, int], list[int]] = {}
        for i in range(len(spans)):
            for size in sizes:
                gram = tuple(w for w, _s, _e in spans[i:i + size])
                if len(gram) < size or gram not in owners:
                    continue
                for owner in owners[gram]:
                    hits.setdefault(owner, set()).add(gram)
                    first, last = reach.setdefault(owner, [spans[i][1], spans[i + size - 1][2]])
                    reach[owner] = [min(first, spans[i][1]), max(last, spans[i + size - 1][2])]
        best: dict[str, tuple[float, tuple[int, int]]] = {}
        for (sample_id, side), grams in hits.items():
            score = round(len(grams) / side_grams[side], 4)
            first, last = reach[(sample_id, side)]
            if sample_id not in best or score > best[sample_id][0]:
                best[sample_id] = (score, (first, last + 1))
        found_all.append([(sample_id, score, span) for sample_id, (score, span) in best.items()])
    return found_all
