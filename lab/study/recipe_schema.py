"""What a study recipe holds: the Recipe dataclass, assembled from the sections the stages
declare.

Each section is declared by the stage that uses it, beside its config dataclass, with
lab.recipe_sections.section: the corpus and injection sections beside InjectConfig
(lab.contamination.config), the tokenizer's in lab.tokenizer, pre-training's beside
PretrainConfig (lab.train.pretrain), fine-tuning's beside FinetuneConfig (lab.train.finetune),
evaluation's beside EvaluateStageConfig (lab.study.evaluate), the probe's beside ProbeConfig
(lab.detect.probe) and detect's beside DetectConfig (lab.detect.run). Each declares there, once,
the defaults a study sets otherwise on purpose, its key-neutral fields and its sweeps. The
continued pre-training section is lab.train.continued's, the pre-training launch
lab.train.launch's and the statistics section lab.analysis.questions'. This module only picks
and assembles them, adds the per-model overrides (by_model) and the resources, and reads the
sections' facts back by section name (STUDY_DEFAULTS, KEY_NEUTRAL_DEFAULTS, SWEEPS). Reading a
recipe file is lab.study.recipe's; refusing what cannot run is lab.study.recipe_checks'.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from lab.analysis.questions import StatisticsSection
from lab.common import param
from lab.contamination import settings as settings_table
from lab.contamination.config import CorpusSection, InjectionSection
from lab.detect.probe import ProbeSection
from lab.detect.run import DetectSection
from lab.models import device_param, dtype_param
from lab.recipe_sections import partial_section
from lab.study.evaluate import EvaluationSection
from lab.tokenizer import TokenizerSection
from lab.train.common import report_to_param
from lab.train.continued import ContinuedSection
from lab.train.finetune import FinetuneSection
from lab.train.launch import PretrainResources
from lab.train.pretrain import PretrainSection


# The two architectures learn at different rates (a tiny masked LM at a causal LM's rate stays
# at the unigram loss), so a recipe may set pre-training and fine-tuning per model; what it
# leaves null is the section's value. Only the overridden model's stage keys change; a model
# the recipe does not train ignores its overrides (a base file may set both).
PretrainOverride = partial_section("PretrainOverride", PretrainSection)
FinetuneOverride = partial_section("FinetuneOverride", FinetuneSection)
OVERRIDDEN_SECTIONS = ("pretrain", "finetune")


@dataclass
class ModelOverride:
    pretrain: PretrainOverride = field(default_factory=PretrainOverride)
    finetune: FinetuneOverride = field(default_factory=FinetuneOverride)


@dataclass
class ByModelSection:
    gpt2: ModelOverride = field(default_factory=ModelOverride)
    roberta: ModelOverride = field(default_factory=ModelOverride)


@dataclass
class ResourcesSection:
    # A float sum depends on how many threads share it, so the thread count is fixed for the
    # whole study, whatever the executor, worker count or load.
    threads: int | None = param(None, "torch threads of every stage (null: this machine's cores "
                                      "when the study starts, recorded in STUDY/study.json, "
                                      "where a resumed run finds them); split evenly among the "
                                      "ranks of a multi-process pre-training.")
    pretrain: PretrainResources = field(default_factory=PretrainResources)
    stages_per_gpu: int | None = param(
        None, "Stages that share one GPU at once when resources.device is a GPU (null: as many "
              "as its memory holds for the study's largest preset, at most 8 and half the "
              "cores); the threads then default to the cores shared among them. Ignored on a "
              "CPU.")
    # Where evaluation and probes run, and in which precision: part of their stage keys when
    # not the defaults (a GPU or bfloat16 computes other numbers).
    device: str = device_param()
    dtype: str = dtype_param()
    # Where each pre-training and fine-tuning logs (never its result: not in any stage key, so
    # a resumed study may log elsewhere than it began).
    report_to: str = report_to_param()


@dataclass
class Recipe:
    name: str = param("study", "Names runs/NAME when --out is not given.")
    benchmark: str = param("codetrans", "codetrans (Java->C#) or concode (NL->Java), or their "
                                        "-paper subsets.")
    arms: list[str] = field(default_factory=lambda: ["control", "paired"], metadata={
        "help": ", ".join(settings_table.names()) + " (a placebo needs its base arm listed too: "
                "[control, paired, paired-placebo])."})
    models: list[str] = field(default_factory=lambda: ["gpt2"], metadata={
        "help": "gpt2 (causal LM) and/or roberta (masked LM)."})
    preset: list[str] = field(default_factory=lambda: ["tiny"], metadata={
        "scalar": True, "help": "Model size: paper, small, tiny or micro; a list sweeps sizes "
                                "like seeds (one model per size, arm and seed)."})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={
        "help": "One corpus, model and fine-tuning per seed and arm."})
    corpus: CorpusSection = field(default_factory=CorpusSection)
    injection: InjectionSection = field(default_factory=InjectionSection)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    pretrain: PretrainSection = field(default_factory=PretrainSection)
    continued: ContinuedSection = field(default_factory=ContinuedSection)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    by_model: ByModelSection = field(default_factory=ByModelSection, metadata={
        "help": "Per-model pretrain/finetune fields that replace the sections' own"})
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    probe: ProbeSection = field(default_factory=ProbeSection)
    detect: DetectSection = field(default_factory=DetectSection)
    statistics: StatisticsSection = field(default_factory=StatisticsSection)
    resources: ResourcesSection = field(default_factory=ResourcesSection)


def for_model(recipe: Recipe, model: str) -> Recipe:
    """The recipe as one model runs it: its by_model fields replace the sections' values."""
    override = getattr(recipe.by_model, model)
    changed = {}
    for name in OVERRIDDEN_SECTIONS:
        values = {k: v for k, v in dataclasses.asdict(getattr(override, name)).items()
                  if v is not None}
        if values:
            changed[name] = dataclasses.replace(getattr(recipe, name), **values)
    return dataclasses.replace(recipe, models=[model], **changed)


def overridden(recipe: Recipe, model: str) -> list[str]:
    """`section.field` paths a model's override sets."""
    override = getattr(recipe.by_model, model)
    return [f"{name}.{k}" for name in OVERRIDDEN_SECTIONS
            for k, v in dataclasses.asdict(getattr(override, name)).items() if v is not None]


def stage_sections() -> list[str]:
    """The recipe's sections made of a stage config's fields (lab.recipe_sections.section)."""
    hints = typing.get_type_hints(Recipe)
    return [f.name for f in dataclasses.fields(Recipe)
            if hasattr(hints[f.name], "stage_config")]


def _by_section(fact: str) -> dict[str, dict[str, Any]]:
    """One fact each stage's section declares (`section`'s keyword of that name), by the
    recipe's section name: the sections that declare none are left out."""
    hints = typing.get_type_hints(Recipe)
    return {name: dict(getattr(hints[name], fact)) for name in stage_sections()
            if getattr(hints[name], fact)}


# Where a study departs from a command's default, on purpose (every other default of a section
# is the command's own); the fields left out of a stage's key while they hold their old values;
# and a section's fields that sweep a config field (each value makes its own stages: the
# section's field -> the config's). Each is declared beside its section, in the stage's module.
STUDY_DEFAULTS = _by_section("study_defaults")
KEY_NEUTRAL_DEFAULTS = _by_section("key_neutral")
SWEEPS = _by_section("sweeps")
