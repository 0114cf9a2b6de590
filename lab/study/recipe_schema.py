"""What a study recipe holds: the Recipe dataclass and its sections, assembled from the stages'
own declarations.

Each section is declared where its stage is: the corpus, injection, tokenizer, pre-training,
fine-tuning, evaluation, probe and detect sections are made by `section` from the fields of
that command's config dataclass (its types, defaults and help, declared once, in the stage's
module), with the study's own fields beside them (a grid over a config field); the continued
pre-training section is lab.train.continued's, the pre-training launch lab.train.launch's and
the statistics section lab.analysis.questions'. This module only picks and assembles them, with
the few defaults a study sets otherwise on purpose (STUDY_DEFAULTS) and the per-model overrides
(by_model). Reading a recipe file is lab.study.recipe's; refusing what cannot run is
lab.study.recipe_checks'.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from lab.analysis.questions import StatisticsSection
from lab.common import param
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination.inject import InjectConfig
from lab.detect.probe import ProbeConfig
from lab.detect.run import DetectConfig
from lab.models import device_param, dtype_param
from lab.study.evaluate import EvaluateStageConfig
from lab.tokenizer import TokenizerConfig
from lab.train.common import report_to_param
from lab.train.continued import ContinuedSection
from lab.train.finetune import FinetuneConfig
from lab.train.launch import PretrainResources
from lab.train.pretrain import PretrainConfig


def section(name: str, config: Any, fields: list[str], study_defaults: dict[str, Any] | None = None,
            own: list[tuple[str, Any, Any]] = ()) -> Any:
    """A recipe section made of `fields` of a stage's config dataclass: their types, defaults
    and meanings are the config's (declared once, in the stage's module), except the defaults
    a study deliberately sets otherwise (STUDY_DEFAULTS). `own`: fields only a study has (a
    grid over a config field), as (name, type, dataclasses.field), put before the config's.
    Tuples become lists, as YAML and recipe.json write them. The section's `stage_config` is
    `config`."""
    hints = typing.get_type_hints(config)
    specs = list(own)
    for field_name in fields:
        declared = config.__dataclass_fields__[field_name]
        kind = hints[field_name]
        default = (study_defaults or {}).get(field_name, declared.default)
        if typing.get_origin(kind) is tuple:
            kind = list[typing.get_args(kind)[0]]
            made = field(default_factory=lambda value=default: list(value),
                         metadata=declared.metadata)
        elif default is None and any(typing.get_origin(a) is tuple for a in typing.get_args(kind)):
            kind = list[typing.get_args(typing.get_args(kind)[0])[0]] | None
            made = field(default=None, metadata=declared.metadata)
        else:
            made = field(default=default, metadata=declared.metadata)
        specs.append((field_name, kind, made))
    made_section = dataclasses.make_dataclass(name, specs)
    made_section.__module__ = __name__
    made_section.stage_config = config
    return made_section


# Where a study departs from a command's default, on purpose; every other default of a section
# is the command's own (its config dataclass).
STUDY_DEFAULTS = {
    # Models trained from scratch on a CPU-sized corpus learn little in one epoch at 5e-4.
    "pretrain": {"epochs": 3.0, "lr": 1e-3},
    # The study's metrics (Tables II-VII); CodeBLEU and sentence BLEU cost more and are optional.
    "evaluation": {"metrics": ("bleu", "meteor", "em")},
    # A CPU study's corpus is small: the tokenizer's vocabulary too.
    "tokenizer": {"vocab_size": 8000},
    # Probing every sample of every model costs more than the rest of a CPU study.
    "probe": {"max_samples": 200},
    "detect": {"max_samples": 200},
}

CorpusSection = section("CorpusSection", InjectConfig, ["base", "base_splits", "limit"])
InjectionSection = section("InjectionSection", InjectConfig,
                           ["repeat", "fraction", "doses", "samples", "decontaminate",
                            "placebo_from", "placebo_match", "timing"], own=[
    ("contamination_form", list[str], field(default_factory=lambda: [soft.VERBATIM], metadata={
        "scalar": True, "help": "lab inject --contamination-form: "
                                + InjectConfig.__dataclass_fields__["contamination_form"]
                                .metadata["help"] + " A list sweeps it like seeds (one corpus and "
                                "model per form, arm and seed; the control's is verbatim)."})),
    ("decontaminate_with", list[str | None], field(default_factory=lambda: [None], metadata={
        "scalar": True, "scalar_none": True,
        "help": "lab inject --decontaminate-with: "
                + InjectConfig.__dataclass_fields__["decontaminate_with"].metadata["help"]
                + " Every arm's corpus, the control's too. A list sweeps it, null for none "
                  "([null, ngram13]: each form's lift before and after; report/decontam.md)."})),
])


TokenizerSection = section("TokenizerSection", TokenizerConfig, ["vocab_size"],
                           STUDY_DEFAULTS["tokenizer"])


# cross_document_attention is always in the stage key (not key-neutral): its default changed
# from cross-document to per-document attention, so stages made before it get new keys.
PretrainSection = section("PretrainSection", PretrainConfig,
                          ["epochs", "lr", "batch_size", "block_size", "warmup_steps",
                           "lr_scheduler", "bf16", "compile", "attention", "loop",
                           "cross_document_attention"],
                          STUDY_DEFAULTS["pretrain"], own=[
    ("weight_decay", list[float], field(default_factory=lambda: [0.01], metadata={
        "scalar": True, "expect": "float >= 0",
        "help": "AdamW weight decay; a list sweeps it like seeds (one model per value, arm and "
                "seed), as a forgetting axis (recipes/timing.yaml)."})),
])

# Fields added to a section after studies were made with it: left out of a stage's key while
# they hold these values, so an existing study folder keeps its stage keys and resumes.
KEY_NEUTRAL_DEFAULTS = {"pretrain": {"bf16": False, "compile": False, "attention": "mask",
                                     "loop": "trainer", "weight_decay": 0.01},
                        "finetune": {"bf16": False, "decoder_layers": 6, "decoder_init": "random",
                                     "group_by_length": False, "valid_size": None}}

FinetuneSection = section("FinetuneSection", FinetuneConfig,
                          ["lr", "batch_size", "select", "valid_size", "bf16", "decoder_layers",
                           "decoder_init", "group_by_length"],
                          own=[
    ("epochs", list[int], field(default_factory=lambda: [0], metadata={
        "expect": "int >= 0", "help": "Fine-tuning epochs of the grid; 0 = direct inference "
                                      "(GPT-2 only)."})),
    ("train_sizes", list[int | None], field(default_factory=lambda: [None], metadata={
        "expect": "int >= 1 or null", "help": "Training-set sizes of the grid (null: the whole "
                                              "train split)."})),
])


def partial_section(name: str, full: Any) -> Any:
    """`full` with every field optional and unset (null): the fields a model's override changes."""
    hints = typing.get_type_hints(full)

    def unset_means_the_section(meta: Any) -> dict[str, Any]:
        meta = dict(meta)
        if meta.get("expect"):
            meta["expect"] = f"{meta['expect']} (list), or null"
        meta["help"] = f"{meta.get('help', '')} (null: the section's)".strip()
        return meta

    specs = [(f.name, hints[f.name] | None,
              field(default=None, metadata=unset_means_the_section(f.metadata)))
             for f in dataclasses.fields(full)]
    made = dataclasses.make_dataclass(name, specs)
    made.__module__ = __name__
    return made


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


EvaluationSection = section("EvaluationSection", EvaluateStageConfig,
                            ["split", "decoding", "metrics", "max_new_tokens", "max_samples"],
                            STUDY_DEFAULTS["evaluation"])


ProbeSection = section("ProbeSection", ProbeConfig, ["min_k", "max_samples", "max_names"],
                       STUDY_DEFAULTS["probe"], own=[
    ("enabled", bool, field(default=True, metadata={
        "help": "Probe every pre-trained model (lab probe): was the injected data memorised?"})),
    ("shared_pool", bool, field(default=True, metadata={
        "help": "Every probe of a seed leaves the samples of the seed's placebo arms out of its "
                "never-seen reference samples, so the arm, its placebo and the control are "
                "judged against the same ones (lab.detect.probe.SHARED_POOL_RULE); false: each "
                "model leaves out its own only, as studies before issue 69 drew (their probe "
                "stages are found done)."})),
])


DetectSection = section("DetectSection", DetectConfig,
                        ["detectors", "k", "neighbours", "cdd_samples", "max_samples", "shift"],
                        STUDY_DEFAULTS["detect"], own=[
    ("enabled", bool, field(default=False, metadata={
        "help": "Run the contamination detectors (lab detect) on every pre-trained model: "
                "published detectors judged on the study's known members; a contaminated or "
                "placebo model gets its seed's control model as the reference."})),
    ("epochs", list[int], field(default_factory=list, metadata={
        "help": "Also score the fine-tuned GPT-2 of these fine-tuning epochs (each one of "
                "finetune.epochs; its first train size): does fine-tuning hide pre-training "
                "contamination?"})),
])


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
    """The recipe's sections made of a stage config's fields (`section` above)."""
    hints = typing.get_type_hints(Recipe)
    return [f.name for f in dataclasses.fields(Recipe)
            if hasattr(hints[f.name], "stage_config")]


# A section's fields that sweep a config field (each value makes its own stages), by section:
# the section's field -> the config's.
SWEEPS = {"finetune": {"epochs": "epochs", "train_sizes": "train_size"},
          "pretrain": {"weight_decay": "weight_decay"},
          "injection": {"contamination_form": "contamination_form",
                        "decontaminate_with": "decontaminate_with"}}
