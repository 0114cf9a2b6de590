"""What every detector reads: the model, its tokenizer, the samples' injected form, and the token
statistics many detectors share, computed once per text.

For each scored text, `<s> text </s>` (cut to max_tokens) gives, per predicted token t:
- `logprob`: log p(x_t | context), the model's probability of the true token;
- `mean`: E_{z~p}[log p(z | context)] over the vocabulary at that position;
- `std`: the standard deviation of log p(z | context) under the same distribution;
- `greedy`: whether the true token is the model's most likely one there.
A causal model (GPT-2) predicts tokens 1..n-1 from their prefixes. A masked model (RoBERTa)
scores each inner token masked, in PLL_PASSES strided passes (a pseudo-likelihood; lab probe's too),
seeing both sides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from lab import progress
from lab.corpora import Sample

PLL_PASSES = 7  # RoBERTa: token i is masked in pass i % 7


STATS = ("logprob", "mean", "std", "greedy")  # TokenStats' fields, in order


@dataclass(frozen=True)
class TokenStats:
    logprob: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    greedy: tuple[bool, ...]


@dataclass
class DetectContext:
    """A model to score samples with, and how."""
    model: Any
    tokenizer: Any
    family: str  # gpt2 | roberta
    form: str  # how the samples were injected (lab.contamination.settings FORMS)
    max_tokens: int = 512
    batch_size: int = 16
    k: float = 0.2  # Min-K% and Min-K%++
    reference: "DetectContext | None" = None  # a model that never saw the samples
    languages: tuple[str, str] = ("java", "cs")  # the benchmark's input and output languages
    neighbours: int = 4  # renamed twins per sample (neighbourhood)
    cdd_samples: int = 10  # sampled outputs per input (peakedness)
    cdd_alpha: float = 0.05
    seed: int = 0
    # What detectors that never load the model read (lab.detect.blind): each scored sample's
    # membership label (True: the group read as members), aligned with the samples scored, and
    # the seed of their cross-fitting folds (a study's seed, so each seed folds afresh).
    labels: tuple[bool, ...] | None = None
    fold_seed: int = 0
    # The model's pre-training corpus record (path, sha256; tokenizer_sha256 added): DC-PDD's
    # reference corpus (lab.detect.dc_pdd). None for an outside model.
    corpus: dict[str, Any] | None = None
    _stats: dict[str, TokenStats] = field(default_factory=dict, repr=False)

    def documents(self, sample: Sample) -> list[str]:
        """The texts the sample was injected as (the settings table's, as the injector)."""
        from lab.contamination import settings as settings_table

        return [text for _side, text in settings_table.form_documents(self.form, sample)]

    def sample_stats(self, samples: Sequence[Sample]) -> list[TokenStats]:
        """Per sample: the statistics of its documents' tokens, in order."""
        per_doc = self.text_stats([t for s in samples for t in self.documents(s)])
        out, at = [], 0
        for sample in samples:
            parts = per_doc[at:at + len(self.documents(sample))]
            at += len(parts)
            out.append(TokenStats(*(tuple(v for p in parts for v in getattr(p, name))
                                    for name in STATS)))
        return out

    def scored_ids(self, samples: Sequence[Sample]) -> list[tuple[int, ...]]:
        """Per sample: the ids of the tokens sample_stats gives statistics of, in its order (a
        causal model predicts tokens 1..n-1 of `<s> text </s>`, a masked one the inner ones)."""
        out = []
        for sample in samples:
            ids: list[int] = []
            for text in self.documents(sample):
                doc = self.encode(text)
                ids += doc[1:] if self.family == "gpt2" else doc[1:-1]
            out.append(tuple(ids))
        return out

    def text_stats(self, texts: Sequence[str]) -> list[TokenStats]:
        missing = sorted({t for t in texts if t not in self._stats})
        if missing:
            import torch

            encoded = [self.encode(t) for t in missing]
            with torch.no_grad():
                scored = (_causal_stats(self.model, encoded, self.batch_size)
                          if self.family == "gpt2"
                          else _masked_stats(self.model, self.tokenizer, encoded, self.batch_size))
            self._stats.update(zip(missing, scored))
        return [self._stats[t] for t in texts]

    def encode(self, text: str) -> list[int]:
        """`<s> text </s>` cut to max_tokens; an outside tokenizer without those tokens gets
        the text alone."""
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        room = self.max_tokens - (bos is not None) - (eos is not None)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:room]
        return [*([bos] if bos is not None else []), *ids, *([eos] if eos is not None else [])]


def _distribution_stats(logprobs: Any, targets: Any) -> tuple[Any, Any, Any, Any]:
    """(log p of the targets, mean and std of log p under p, target == argmax) at each
    position."""
    import torch

    probs = logprobs.exp()
    mean = (probs * logprobs).sum(-1)
    var = (probs * logprobs.square()).sum(-1) - mean.square()
    return (logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), mean,
            torch.clamp(var, min=0.0).sqrt(), logprobs.argmax(-1) == targets)


def _padded(docs: list[list[int]], pad: int) -> tuple[Any, Any]:
    import torch

    width = max(len(d) for d in docs)
    ids = torch.full((len(docs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for row, doc in enumerate(docs):
        ids[row, :len(doc)] = torch.tensor(doc)
        mask[row, :len(doc)] = 1
    return ids, mask


def _causal_stats(model: Any, docs: list[list[int]], batch_size: int) -> list[TokenStats]:
    import torch

    out = []
    for start in progress.steps(range(0, len(docs), batch_size), "scoring"):
        batch = docs[start:start + batch_size]
        ids, mask = _padded(batch, 0)
        device = next(model.parameters()).device
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logprobs = torch.log_softmax(logits.float()[:, :-1], dim=-1)
        found = _distribution_stats(logprobs, ids[:, 1:].to(device))
        for row, doc in enumerate(batch):
            n = len(doc) - 1
            out.append(TokenStats(*(tuple(values[row, :n].tolist()) for values in found)))
    return out


def _masked_stats(model: Any, tokenizer: Any, docs: list[list[int]], batch_size: int
                  ) -> list[TokenStats]:
    import torch

    jobs = [(d, doc, [p for p in range(1, len(doc) - 1) if p % PLL_PASSES == r])
            for d, doc in enumerate(docs) for r in range(PLL_PASSES)]
    jobs = [job for job in jobs if job[2]]
    found: list[dict[int, tuple[float, float, float, bool]]] = [{} for _ in docs]
    device = next(model.parameters()).device
    for start in progress.steps(range(0, len(jobs), batch_size), "scoring (masked passes)"):
        batch = jobs[start:start + batch_size]
        ids, mask = _padded([doc for _d, doc, _p in batch], tokenizer.pad_token_id)
        for row, (_d, _doc, positions) in enumerate(batch):
            ids[row, positions] = tokenizer.mask_token_id
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        for row, (d, doc, positions) in enumerate(batch):
            truth = torch.tensor([doc[p] for p in positions], device=device)
            lp, mean, std, greedy = _distribution_stats(logprobs[row, positions], truth)
            for i, p in enumerate(positions):
                found[d][p] = (float(lp[i]), float(mean[i]), float(std[i]), bool(greedy[i]))
    out = []
    for values in found:
        ordered = [values[p] for p in sorted(values)]
        out.append(TokenStats(*(tuple(v[i] for v in ordered) for i in range(len(STATS)))))
    return out


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
