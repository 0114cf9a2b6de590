"""Scores of generated code against references: BLEU, sentence BLEU, METEOR, EM, CodeBLEU.

`bleu` is CodeXGLUE's evaluator definition (the one the study's tables use): corpus BLEU-4 over
whitespace tokens with add-one smoothing of every n-gram precision and the usual brevity
penalty. `bleu_sentence` is the replication package's variant, the mean of per-sample BLEU.
"""
from __future__ import annotations

import math
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.common import LabError

MAX_ORDER = 4
METRICS = ("bleu", "bleu_sentence", "meteor", "em", "codebleu")
CODEBLEU_LANGUAGES = {"java": "java", "cs": "c_sharp"}


def _ngram_counts(tokens: Sequence[str]) -> Counter:
    counts: Counter = Counter()
    for n in range(1, MAX_ORDER + 1):
        for start in range(len(tokens) - n + 1):
            counts[tuple(tokens[start:start + n])] += 1
    return counts


def _bleu_from_stats(matches: list[int], possible: list[int], hyp_len: int, ref_len: int) -> float:
    precisions = [(matches[i] + 1.0) / (possible[i] + 1.0) for i in range(MAX_ORDER)]
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / MAX_ORDER)
    if ref_len == 0:
        return 0.0
    ratio = hyp_len / ref_len
    brevity = 1.0 if ratio > 1.0 else (math.exp(1 - 1 / ratio) if ratio > 0 else 0.0)
    return 100.0 * geo_mean * brevity


def _sentence_stats(reference: str, prediction: str) -> tuple[list[int], list[int], int, int]:
    ref, hyp = reference.split(), prediction.split()
    overlap = _ngram_counts(hyp) & _ngram_counts(ref)
    matches = [0] * MAX_ORDER
    for gram, count in overlap.items():
        matches[len(gram) - 1] += count
    possible = [max(0, len(hyp) - n + 1) for n in range(1, MAX_ORDER + 1)]
    return matches, possible, len(hyp), len(ref)


def bleu(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Corpus BLEU-4 as CodeXGLUE's evaluator computes it (0-100)."""
    matches, possible, hyp_len, ref_len = [0] * MAX_ORDER, [0] * MAX_ORDER, 0, 0
    for reference, prediction in zip(references, predictions):
        m, p, h, r = _sentence_stats(reference.strip(), prediction.strip())
        matches = [a + b for a, b in zip(matches, m)]
        possible = [a + b for a, b in zip(possible, p)]
        hyp_len, ref_len = hyp_len + h, ref_len + r
    return _bleu_from_stats(matches, possible, hyp_len, ref_len)


def bleu_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    return [_bleu_from_stats(*_sentence_stats(r.strip(), p.strip()))
            for r, p in zip(references, predictions)]


def exact_match_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    return [100.0 * (r.split() == p.split()) for r, p in zip(references, predictions)]


def ensure_wordnet() -> None:
    """Point NLTK at the WordNet that setup installed (offline); fail with the fix if absent."""
    import nltk

    for candidate in (os.environ.get("NLTK_DATA"), str(Path(sys.prefix) / "nltk_data")):
        if candidate and candidate not in nltk.data.path:
            nltk.data.path.append(candidate)
    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        raise LabError(
            "METEOR needs NLTK's WordNet: run scripts/setup.sh (installs it offline into "
            ".venv/nltk_data) or python -m nltk.downloader wordnet when online"
        ) from None


def meteor_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    """NLTK's METEOR on whitespace tokens (0-100)."""
    ensure_wordnet()
    from nltk.translate.meteor_score import meteor_score

    return [100.0 * meteor_score([r.split()], p.split()) for r, p in zip(references, predictions)]


def codebleu_score(references: Sequence[str], predictions: Sequence[str], language: str
                   ) -> dict[str, float]:
    if language not in CODEBLEU_LANGUAGES:
        raise LabError(f"codebleu: no grammar for language '{language}' (java or cs)")
    try:
        from codebleu import calc_codebleu
    except ImportError:
        raise LabError("codebleu: the 'codebleu' package is not installed (scripts/setup.sh)") from None
    scores = calc_codebleu(list(references), list(predictions), lang=CODEBLEU_LANGUAGES[language])
    return {key: 100.0 * value for key, value in scores.items()}


def score(references: Sequence[str], predictions: Sequence[str], metrics: Sequence[str] = METRICS,
          language: str | None = None) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(corpus-level scores, per-sample scores) for the requested metrics."""
    if len(references) != len(predictions):
        raise LabError(f"{len(predictions)} predictions but {len(references)} references")
    if not references:
        raise LabError("no references to score against")
    empty = [i for i, r in enumerate(references) if not r.strip()]
    if empty:
        raise LabError(f"reference {empty[0] + 1} is empty ({len(empty)} empty in all): "
                       "refusing to score against empty references")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise LabError(f"unknown metric '{unknown[0]}' (choose from {', '.join(METRICS)})")
    per_sample: dict[str, list[float]] = {}
    corpus: dict[str, float] = {}
    per_sample_fns: dict[str, Callable[[Sequence[str], Sequence[str]], list[float]]] = {
        "bleu_sentence": bleu_per_sample, "em": exact_match_per_sample, "meteor": meteor_per_sample,
    }
    for metric in metrics:
        if metric == "bleu":
            corpus["bleu"] = bleu(references, predictions)
            per_sample["bleu"] = bleu_per_sample(references, predictions)
        elif metric == "codebleu":
            if language is None:
                continue
            corpus.update({("codebleu" if k == "codebleu" else f"codebleu_{k}"): v
                           for k, v in codebleu_score(references, predictions, language).items()})
        else:
            values = per_sample_fns[metric](references, predictions)
            per_sample[metric] = values
            corpus[metric] = sum(values) / len(values)
    return corpus, per_sample


def describe() -> dict[str, Any]:
    return {
        "bleu": "CodeXGLUE evaluator: corpus BLEU-4, whitespace tokens, add-one smoothing",
        "bleu_sentence": "mean sentence-level BLEU-4 (same smoothing), the replication package's variant",
        "meteor": "NLTK meteor_score on whitespace tokens, WordNet 3.0",
        "em": "exact match after whitespace normalisation",
        "codebleu": "codebleu package (tree-sitter grammars), Java or C#",
    }
