"""`lab decontam`'s first step of three (plan, scan, record): the arm, resolved once.

`read_arm` reads what the run depends on (the arm's documents and the benchmark samples its
manifest names); `plan_decontam` then resolves, from the config, the manifest and these alone,
everything the scan and the record read: the reference samples, each document's ground truth
(the reference sample it is an injected copy of, if any), the dose levels, the methods and
their options, and the columns that describe the arm in every row.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common import MANIFEST, LabError
from lab.contamination.soft import recorded_form
from lab.corpora import get_spec, load_samples
from lab.corpora.shards import read_corpus
from lab.decontam import DECONTAMINATORS, Decontaminator
from lab.decontam.base import Options, Reference
from lab.decontam.config import DecontamConfig


@dataclass(frozen=True)
class ArmData:
    """An arm's corpus and its benchmark samples, read once."""

    benchmark: str
    split: str
    reference: Reference            # the benchmark split's samples (the arm's --samples subset)
    texts: list[str]                # the arm's documents, in stored order
    sample_fields: list[str]        # each document's `sample` field ("" when it has none)


@dataclass(frozen=True)
class DecontamPlan:
    """What `lab decontam` runs over an arm and judges against, decided once."""

    corpus: Path
    manifest: dict[str, Any]
    benchmark: str
    split: str
    reference: Reference
    texts: list[str]
    samples_of: list[str]           # per document, the reference sample it copies, else ""
    levels: list[tuple[int, list[str]]]  # (dose, sample ids), ascending
    methods: dict[str, Decontaminator]   # --methods, in the order given
    options: Options
    described: dict[str, Any]       # benchmark, split, setting, form: every row's first columns


def read_arm(cfg: DecontamConfig, manifest: dict[str, Any]) -> ArmData:
    """The arm's documents and the benchmark samples its manifest (already verified) names."""
    corpus = Path(cfg.corpus)
    benchmark, split, reference = reference_of(manifest, corpus / MANIFEST,
                                               cfg.corpora_dir)
    texts, sample_fields = [], []
    for record in read_corpus(corpus):
        texts.append(str(record["text"]))
        sample_fields.append(str(record.get("sample") or ""))
    return ArmData(benchmark, split, reference, texts, sample_fields)


def plan_decontam(cfg: DecontamConfig, manifest: dict[str, Any], arm: ArmData) -> DecontamPlan:
    """The run's plan: a function of the config, the arm's manifest and its data alone."""
    reference_ids = {s.id for s in arm.reference.samples}
    samples_of = [sample if sample in reference_ids else "" for sample in arm.sample_fields]
    described = {"benchmark": arm.benchmark, "split": arm.split,
                 "setting": manifest.get("setting", ""),
                 "form": recorded_form(manifest)}
    return DecontamPlan(Path(cfg.corpus), manifest, arm.benchmark, arm.split, arm.reference,
                        arm.texts, samples_of, dose_levels(manifest),
                        {name: DECONTAMINATORS[name] for name in cfg.methods}, cfg.options(),
                        described)


def dose_levels(manifest: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """(dose, sample ids) of the arm's levels, ascending: its dose ladder, else its injected
    samples at options.repeat and its held-out ones at 0."""
    levels = manifest.get("dose_levels")
    if levels:
        return sorted(((int(level.get("dose") or 0), list(level.get("ids") or []))
                       for level in levels), key=lambda level: level[0])
    repeat = (manifest.get("options") or {}).get("repeat") or 1
    found = [(0, list(manifest.get("held_out_ids") or []))]
    if manifest.get("injected_ids"):
        found.append((int(repeat), list(manifest["injected_ids"])))
    return [level for level in found if level[1]] or [(0, [])]


def reference_of(manifest: dict[str, Any], path: Path, corpora_dir: Path | None
                 ) -> tuple[str, str, Reference]:
    benchmark = manifest.get("benchmark")
    split = manifest.get("benchmark_split", manifest.get("split"))
    if not isinstance(benchmark, str) or not benchmark:
        raise LabError(f"{path}: field 'benchmark' missing")
    if not isinstance(split, str) or not split:
        raise LabError(f"{path}: field 'benchmark_split' missing")
    spec = get_spec(benchmark)
    samples = load_samples(benchmark, split, corpora_dir).records
    first = (manifest.get("options") or {}).get("samples")
    if isinstance(first, int):  # the arm's benchmark subset (lab inject --samples)
        samples = samples[:first]
    return benchmark, split, Reference(samples, spec.input_language, spec.output_language)
