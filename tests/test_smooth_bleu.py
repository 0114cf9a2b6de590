"""`smooth_bleu`: CodeXGLUE code-to-text's smoothed sentence BLEU-4 (its evaluator/evaluator.py,
Moses' bleu.py as CodeXGLUE adapted it), the metric of the summarisation task.

Checked on 2026-12-03 against that evaluator's own code (CodeXGLUE at its GitHub HEAD, run from a
scratch copy outside the project): the same score on its own fixture (9.554726113590661, the
evaluator's predictions.txt and reference.txt) and bit-identical per-sample scores on 6,000
pairs of csn-summaries summaries, shuffled and cut summaries and strings of punctuation, digits,
entities and new lines. Here the evaluator's three phases (cook the reference, cook the
prediction, score) are restated independently, and scores computed by hand pin the definition."""
from __future__ import annotations

import math
import random
import re
import sys

import pytest

from lab.eval.metrics import score
from lab.eval.smooth_bleu import smooth_bleu_per_sample, smooth_bleu_sample


def evaluator_words(line: str) -> list[str]:
    """The evaluator's reading of a line, restated: lower-cased, `\\w+` runs and single other
    characters apart, NIST mteval's joins, `&quot;` unescaped (with &amp; &lt; &gt;), padded,
    lower-cased again, mteval's four tokenising substitutions, split on whitespace."""
    text = " ".join(re.findall(r"\w+|[^\s\w]", line.strip().lower()))
    text = text.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    for entity, char in (("&quot;", '"'), ("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&")):
        text = text.replace(entity, char)
    text = (" " + text + " ").lower()
    text = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", text)
    text = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", text)
    text = re.sub(r"([\.,])([^0-9])", r" \1 \2", text)
    text = re.sub(r"([0-9])(-)", r"\1 \2 ", text)
    return text.split()


def evaluator_score(reference: str, prediction: str) -> float:
    ref, hyp = evaluator_words(reference), evaluator_words(prediction)
    grams = lambda words, n: [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    logs = 0.0
    for n in (1, 2, 3, 4):
        ref_counts: dict = {}
        for gram in grams(ref, n):
            ref_counts[gram] = ref_counts.get(gram, 0) + 1
        hyp_counts: dict = {}
        for gram in grams(hyp, n):
            hyp_counts[gram] = hyp_counts.get(gram, 0) + 1
        correct = sum(min(c, ref_counts.get(g, 0)) for g, c in hyp_counts.items())
        add = 0 if n == 1 else 1
        tiny = sys.float_info.min
        logs += math.log(correct + add + tiny) - math.log(len(grams(hyp, n)) + add + tiny)
    penalty = min(0, 1 - (len(ref) + 1) / (len(hyp) + 1))
    return math.exp(logs / 4 + penalty) * 100


def test_scores_computed_by_hand():
    assert smooth_bleu_sample("Returns the name .", "returns the NAME.") == 100.0
    # 1-grams 3/4, 2-grams (2+1)/(3+1), 3-grams (1+1)/(2+1), 4-grams (0+1)/(1+1), no penalty
    assert smooth_bleu_sample("a b c d", "a b c e") == pytest.approx(
        100 * (0.75 * 0.75 * (2 / 3) * 0.5) ** 0.25, rel=1e-12)
    # the evaluator's quirk, kept: an empty prediction scores exp(-len(reference)), not 0
    assert smooth_bleu_sample("one two", "") == pytest.approx(100 * math.exp(-2), rel=1e-12)
    # words and marks apart before NIST's rules: "don't" is three words, "2.5" stays one
    assert smooth_bleu_sample("don't stop at 2.5", "don ' t stop at 2.5") == 100.0


def test_equals_the_evaluator_restated_on_random_pairs():
    rng = random.Random(7)
    words = ["Returns", "the", "value", "of", "a", ".", ",", "-", "1", "2.5", "x-1", "don't",
             "(", ")", "{@link", "}", "&quot;", "<b>", "\n", "é", "_id", "3-", "a.b", "1,000"]
    pairs = [(" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))),
              " ".join(rng.choice(words) for _ in range(rng.randint(0, 14))))
             for _ in range(2000)]
    mine = smooth_bleu_per_sample([r for r, _ in pairs], [p for _, p in pairs])
    assert mine == pytest.approx([evaluator_score(r, p) for r, p in pairs], rel=1e-12, abs=1e-12)
    assert len({round(v, 6) for v in mine}) > 100


def test_the_summarisation_task_scores_smooth_bleu_and_token_em():
    corpus, per_sample = score(["Returns the name .", "Closes it ."],
                               ["Returns the name .", "closes it"],
                               ["smooth_bleu", "em"], task="summarisation")
    assert per_sample["em"] == [100.0, 0.0]
    assert corpus["smooth_bleu"] == pytest.approx(
        (100.0 + smooth_bleu_sample("Closes it .", "closes it")) / 2)
