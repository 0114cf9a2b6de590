"""DC-PDD: token probabilities calibrated by how frequent each token is in a reference corpus.

For the scored tokens x_1..x_n of a sample (those sample_stats gives, in order), with p(x_i)
the model's probability of the true token and f(x_i) the token's frequency in the reference
corpus, what is implemented is the paper's score:

    alpha_i = min(-p(x_i) * log f(x_i), a)        (a = A = 0.01, the paper's default)
    score   = mean of alpha_i over the first occurrence of each distinct token id

with f Laplace-smoothed, f(t) = (count(t) + 1) / (N + |V|) (N tokens counted, |V| the
tokenizer's vocabulary). Higher means more member-like: a member's tokens get a high probability
even where they are rare in the corpus. The paper calls alpha_i the cross-entropy of the token
probability against the token frequency ("divergence-based": the term of KL(p || f) that holds
f); the KL form p log(p / f) adds p log p, which the paper does not use, so neither does this.

The reference corpus is the scored model's own pre-training corpus (its manifest's corpus.path,
checked against its recorded sha256), counted with the model's tokenizer as `lab detect`
encodes a text (`<s> text </s>`, uncut); the counts are cached under $LAB_CACHE/dc_pdd by the
corpus's and the tokenizer's sha256. Departures from the paper: the paper counts a large public
corpus (C4) as a stand-in for unknown pre-training data; here the pre-training corpus is known,
so it is used itself (it holds the injected copies of the members, a few of its documents); a
masked model's p is its pseudo-likelihood (lab.detect.context); and the paper's code negates
the mean to rank non-members first, this keeps the lab's sign.

Zhang et al., "Pretraining Data Detection for Large Language Models: A Divergence-based
Calibration Method", EMNLP 2024."""
from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Sequence

from lab.common import MANIFEST, LabError
from lab.detect.context import DetectContext

A = 0.01  # the upper bound of a token's term (the paper's hyperparameter a; its default)
CHUNK = 1000  # documents tokenized per call

_COUNTS: dict[tuple[str, str], Any] = {}  # this process's frequency tables


def token_score(ids: Sequence[int], logprobs: Sequence[float], frequency: Any,
                a: float = A) -> float:
    """The sample's DC-PDD score from its scored token ids, their log-probabilities and the
    smoothed frequency table (indexed by token id)."""
    seen: set[int] = set()
    terms = []
    for token, logprob in zip(ids, logprobs):
        if token in seen:
            continue
        seen.add(token)
        terms.append(min(-math.exp(logprob) * math.log(float(frequency[token])), a))
    return sum(terms) / len(terms) if terms else math.nan


def smoothed(counts: Any) -> Any:
    """Laplace smoothing: (count + 1) / (N + |V|)."""
    import numpy as np

    counts = np.asarray(counts, dtype=np.float64)
    return (counts + 1.0) / (counts.sum() + len(counts))


def count_tokens(texts: Any, tokenizer: Any, vocabulary: int) -> Any:
    """How often each token id occurs in the texts, each encoded `<s> text </s>`, uncut."""
    import numpy as np

    counts = np.zeros(vocabulary, dtype=np.int64)
    specials = [t for t in (tokenizer.bos_token_id, tokenizer.eos_token_id) if t is not None]
    chunk: list[str] = []

    def add(batch: list[str]) -> None:
        encoded = tokenizer(batch, add_special_tokens=False)["input_ids"]
        ids = [i for doc in encoded for i in doc] + specials * len(batch)
        if ids:
            found = np.bincount(np.asarray(ids, dtype=np.int64), minlength=vocabulary)
            if len(found) > vocabulary:
                raise LabError(f"dc_pdd: token id {len(found) - 1} is past the tokenizer's "
                               f"vocabulary ({vocabulary})")
            counts[:] += found

    for text in texts:
        chunk.append(text)
        if len(chunk) == CHUNK:
            add(chunk)
            chunk = []
    if chunk:
        add(chunk)
    return counts


def vocabulary_size(tokenizer: Any) -> int:
    try:
        return len(tokenizer)
    except TypeError:
        raise LabError("dc_pdd: the tokenizer states no vocabulary size") from None


def corpus_counts(ctx: DetectContext) -> Any:
    """The token counts of the model's pre-training corpus (ctx.corpus), cached."""
    import numpy as np

    from lab.common import lab_cache_dir
    from lab.corpora.shards import read_corpus, verify_corpus

    record = ctx.corpus or {}
    path = record.get("path")
    if not isinstance(path, str) or not (Path(path) / MANIFEST).is_file():
        raise LabError(f"dc_pdd: the model's pre-training corpus {path or '(none recorded)'} is "
                       "not there (its token frequencies are DC-PDD's reference)")
    sha = verify_corpus(Path(path))["corpus_sha256"]
    if record.get("sha256") and record["sha256"] != sha:
        raise LabError(f"dc_pdd: {path} holds another corpus now (its sha256 differs from the "
                       "model's record), so it is not the model's pre-training corpus")
    tokenizer_sha = record.get("tokenizer_sha256")
    key = (sha, str(tokenizer_sha or id(ctx.tokenizer)))
    if key in _COUNTS:
        return _COUNTS[key]
    vocabulary = vocabulary_size(ctx.tokenizer)
    cached = None
    if tokenizer_sha:
        name = hashlib.sha256(f"{sha}:{tokenizer_sha}".encode()).hexdigest()[:32]
        cached = lab_cache_dir() / "dc_pdd" / f"{name}.npy"
        if cached.is_file():
            counts = np.load(cached)
            if len(counts) == vocabulary:
                _COUNTS[key] = counts
                return counts
    counts = count_tokens((record["text"] for record in read_corpus(Path(path))), ctx.tokenizer,
                          vocabulary)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial.npy")
        np.save(partial, counts)
        partial.replace(cached)
    _COUNTS[key] = counts
    return counts


def score(ctx: DetectContext, samples: Sequence[Any]) -> list[float]:
    frequency = smoothed(corpus_counts(ctx))
    return [token_score(ids, stats.logprob, frequency)
            for ids, stats in zip(ctx.scored_ids(samples), ctx.sample_stats(samples))]
