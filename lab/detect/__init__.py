"""Contamination detectors: one small module each, one function shape, one table.

Every detector is `score(ctx, samples) -> list[float]`: one score per sample, from the model in
`ctx` (lab.detect.context.DetectContext) and the samples in the form they were injected in;
higher means more member-like (a loss is negated). DETECTORS names them, with the families they
apply to and what else they need: "reference" (a never-exposed reference model), "output"
(generation), "corpus" (the model's pre-training corpus: DC-PDD) or "labels" (each scored
sample's membership label: the blind baseline, which never loads the model, trains on part of
the labelled samples and scores the rest). `lab detect` (and a study's detect stage) scores samples whose
membership the study fixed, so each detector is judged on ground truth: injected against
held-out halves, at every dose of a ladder, before and after fine-tuning.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from lab.common import LabError
from lab.detect import (blind, dc_pdd, extraction, loss, min_k, min_k_plus, neighbourhood,
                        peakedness, reference, zlib_ratio)


@dataclass(frozen=True)
class Detector:
    name: str
    score: Callable[..., list[float]]
    families: tuple[str, ...]  # the model families it applies to
    needs: str = ""  # beyond the model: "reference", "output", "corpus", "labels"
    summary: str = ""


BOTH, CAUSAL = ("gpt2", "roberta"), ("gpt2",)
DETECTORS: dict[str, Detector] = {d.name: d for d in (
    Detector("loss", loss.score, BOTH, summary="mean token log-probability (minus the loss)"),
    Detector("zlib", zlib_ratio.score, BOTH, summary="minus the loss over the zlib size"),
    Detector("min_k", min_k.score, BOTH, summary="mean of the k% lowest token log-probabilities"),
    Detector("min_k_plus_plus", min_k_plus.score, BOTH,
             summary="Min-K% of log-probabilities standardised by the model's distribution"),
    Detector("reference", reference.score, BOTH, needs="reference",
             summary="loss under a never-exposed reference model minus the model's loss"),
    Detector("neighbourhood", neighbourhood.score, BOTH,
             summary="mean loss of identifier-renamed twins minus the sample's loss"),
    Detector("extraction", extraction.score, CAUSAL, needs="output",
             summary="sentence BLEU of the greedy continuation of the input"),
    Detector("peakedness", peakedness.score, CAUSAL, needs="output",
             summary="share of sampled outputs near the greedy one (CDD)"),
    Detector("dc_pdd", dc_pdd.score, BOTH, needs="corpus",
             summary="token probabilities calibrated by the pre-training corpus's token "
                     "frequencies (DC-PDD)"),
    Detector("blind", blind.score, BOTH, needs="labels",
             summary="bag-of-words classifier of the text alone, cross-fitted (never sees "
                     "the model)"),
)}
# What `lab detect` and a study run unless told otherwise: the detectors before DC-PDD and the
# blind baseline, which are named to be run (their addition leaves existing studies' stages as
# they were).
DEFAULT_DETECTORS = ("loss", "zlib", "min_k", "min_k_plus_plus", "reference", "neighbourhood",
                     "extraction", "peakedness")


def check_detectors(names: Sequence[str]) -> list[Detector]:
    unknown = [n for n in names if n not in DETECTORS]
    if unknown:
        raise LabError(f"--detectors {unknown[0]}: unknown detector (choose from "
                       f"{', '.join(DETECTORS)})")
    return [DETECTORS[n] for n in names]


def applicable(detectors: Sequence[Detector], family: str, has_reference: bool,
               has_corpus: bool = True, has_labels: bool = True) -> list[Detector]:
    return [d for d in detectors if family in d.families
            and (d.needs != "reference" or has_reference)
            and (d.needs != "corpus" or has_corpus) and (d.needs != "labels" or has_labels)]


def score_all(ctx: Any, samples: Sequence[Any], detectors: Sequence[Detector],
              seconds: dict[str, float] | None = None,
              labels: Sequence[bool] | None = None) -> dict[str, list[float]]:
    """Every applicable detector's scores of the samples (the token statistics computed once,
    by the first detector that needs them); `seconds` receives each detector's time. A detector
    that needs labels applies only where `labels` (one per sample) are given."""
    import dataclasses
    import time

    scores = {}
    for detector in applicable(detectors, ctx.family, ctx.reference is not None,
                               getattr(ctx, "corpus", None) is not None, labels is not None):
        started = time.perf_counter()
        scored = (dataclasses.replace(ctx, labels=tuple(bool(x) for x in labels))
                  if detector.needs == "labels" and labels is not None else ctx)
        scores[detector.name] = detector.score(scored, samples)
        if seconds is not None:
            seconds[detector.name] = round(time.perf_counter() - started, 2)
    return scores
