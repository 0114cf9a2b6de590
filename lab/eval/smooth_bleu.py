"""`smooth_bleu`: CodeXGLUE code-to-text's smoothed sentence BLEU-4, the summarisation task's
BLEU (lab.eval.metrics registers it; tests/test_smooth_bleu.py says how it was checked against
that evaluator's own code)."""
from __future__ import annotations

import math
import re
import sys
import xml.sax.saxutils
from collections import Counter
from typing import Sequence

MAX_ORDER = 4  # BLEU-4

# CodeXGLUE code-to-text's evaluator (evaluator/evaluator.py, Moses' bleu.py as CodeXGLUE adapted
# it): each line lower-cased and split into words and single punctuation marks, then NIST's
# mteval normalisation (these patterns, in this order), one smoothed BLEU-4 per sample.
_SPLIT_PUNCTUATION = re.compile(r"[\w]+|[^\s\w]")
_NIST_JOIN = ((re.compile("<skipped>"), ""), (re.compile(r"-\n"), ""), (re.compile(r"\n"), " "))
_QUOTE = {"&quot;": '"'}
_NIST_TOKENS = tuple((re.compile(pattern), replace) for pattern, replace in (
    (r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 "),  # punctuation (not the apostrophe)
    (r"([^0-9])([\.,])", r"\1 \2 "),                     # period and comma, unless after a digit
    (r"([\.,])([^0-9])", r" \1 \2"),                     # ... or before one
    (r"([0-9])(-)", r"\1 \2 "),                          # a dash after a digit
))


def _nist_words(line: str) -> list[str]:
    """A line as the code-to-text evaluator reads it: stripped, lower-cased, words and marks
    apart, then mteval's normalisation."""
    text = " ".join(_SPLIT_PUNCTUATION.findall(line.strip().lower()))
    for pattern, replace in _NIST_JOIN:
        text = pattern.sub(replace, text)
    text = " " + xml.sax.saxutils.unescape(text, _QUOTE) + " "
    text = text.lower()
    for pattern, replace in _NIST_TOKENS:
        text = pattern.sub(replace, text)
    return text.split()


def _ngram_counts(words: list[str]) -> Counter:
    return Counter(tuple(words[i:i + n]) for n in range(1, MAX_ORDER + 1)
                   for i in range(len(words) - n + 1))


def smooth_bleu_sample(reference: str, prediction: str) -> float:
    """One sample's smoothed BLEU-4 (0-100) as CodeXGLUE code-to-text scores it (Lin & Och
    2004's add-one smoothing of the 2- to 4-gram precisions, the unigram one unsmoothed, and a
    brevity penalty of 1 - (r + 1) / (h + 1) in the log where negative). The smallest float is
    added inside each log as the evaluator adds it, so that scores equal to the last digit."""
    ref, hyp = _nist_words(reference), _nist_words(prediction)
    clipped = _ngram_counts(hyp) & _ngram_counts(ref)
    log_bleu = 0.0
    for n in range(1, MAX_ORDER + 1):
        correct = sum(c for gram, c in clipped.items() if len(gram) == n)
        guess = max(len(hyp) - n + 1, 0)
        smooth = 1 if n > 1 else 0
        log_bleu += (math.log(correct + smooth + sys.float_info.min)
                     - math.log(guess + smooth + sys.float_info.min))
    brevity = min(0.0, 1 - (len(ref) + 1) / (len(hyp) + 1))
    return 100.0 * math.exp(log_bleu / MAX_ORDER + brevity)


def smooth_bleu_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    """CodeXGLUE code-to-text's smoothed sentence BLEU-4 of each sample; its score is the mean."""
    return [smooth_bleu_sample(r, p) for r, p in zip(references, predictions)]
