"""Study recipes: typed, sectioned configuration validated on load.

A recipe YAML maps onto the dataclasses below; every field has a type and a default. Unknown
keys, wrong types and impossible values are refused with the key's path, for example
`finetune.epochs[2]: expected int >= 0, got 'ten'`. `--set section.key=value` overrides a field
(the value is parsed as YAML, then checked like the file).

Hardening: a key given twice in one mapping (at any level) is refused with its line; YAML
aliases (`*name`) are refused altogether (recipes have no need of them, and a few hundred bytes
of nested aliases expand to gigabytes); strings are at most MAX_STRING characters and errors
show at most an EXCERPT-character excerpt of a value; numbers are finite; seeds lie in
0..2^32-1; `name` is a plain folder name (it becomes runs/NAME).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.common import SEED_MAX, LabError, default_of, option_name, param
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination.inject import InjectConfig, placebo_splits
from lab.detect.run import DetectConfig
from lab.detect.probe import ProbeConfig
from lab.study.evaluate import EvaluateStageConfig
from lab.stats import (ALPHA, CONVENTIONS, DEFAULT_CONVENTION, DEFAULT_DOSE_TREND, DOSE_TREND_SIDES,
                       PLANNING_SD, SAMPLE_SCORE, SCORES, SMALLEST_EFFECT)
from lab.analysis.questions import QUESTIONS
from lab.stats import (PLANNING_CORRELATION, PLANNING_SHAPE, PLANNING_SHAPES,
                       SENSITIVITY_CORRELATIONS)
from lab.train.common import REPORT_TARGETS, report_to_param
from lab.train.finetune import FinetuneConfig
from lab.tokenizer import TokenizerConfig
from lab.train.pretrain import PretrainConfig
from lab.models import DTYPES, device_param, dtype_param


MAX_STRING = 200  # longest string value of a recipe
EXCERPT = 80      # longest excerpt of a value in an error message


def _show(value: Any) -> str:
    """repr of a value for an error message, cut to EXCERPT characters."""
    text = repr(value)
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"... ({len(text)} characters)"


class _RecipeLoader(yaml.SafeLoader):
    """safe_load without aliases and without duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise LabError(f"line {event.start_mark.line + 1}: YAML alias *{str(event.anchor)[:EXCERPT]} "
                           "refused (recipes may not use aliases)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: refused by the constructor below
                continue
            if duplicate:
                raise LabError(f"line {key_node.start_mark.line + 1}: duplicate key "
                               f"{_show(key)}")
        return super().construct_mapping(node, deep=deep)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader subclass


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
class StatisticsSection:
    convention: str = param(DEFAULT_CONVENTION, "Mann-Whitney U convention: "
                            + ", ".join(CONVENTIONS) + " (lab.stats); its alternative (two-sided "
                            "or greater) is also the primary tests'.")
    alpha: float = param(ALPHA, "Significance level of the tests and power notes.")
    primary: list[str] | None = param(None, "The study's primary questions, the Holm family of "
                                      "the report's first table: " + ", ".join(QUESTIONS)
                                      + " (lab.study.contrasts); null: every one its arms allow.")
    primary_metric: str | None = param(None, "The metric of the primary contrasts (one of "
                                       "evaluation.metrics; null: the first of them).")
    descriptive: bool = param(False, "A descriptive study: its seeds need not reach alpha (no "
                              "power check before compute) and no primary p is starred.")
    score: str = param(SAMPLE_SCORE, "Which score of the primary metric the primary family "
                       "tests: " + " or ".join(f"{k} ({v})" for k, v in SCORES.items())
                       + "; the other is shown beside it as secondary, and where the two "
                       "disagree in sign or significance the report says so.")
    smallest_effect: float = param(SMALLEST_EFFECT, "The smallest effect of interest, in the "
                                   "primary metric's points (a mean per-seed effect): the "
                                   "effect at which the dry run states the family's power.")
    planning_sd: float = param(PLANNING_SD, "The planned spread (standard deviation) of the "
                               "per-seed effects, in the metric's points: with smallest_effect, "
                               "what the power simulation draws.")
    planning_shape: str = param(PLANNING_SHAPE, "The planned shape of the per-seed effects, "
                                "at smallest_effect's mean and planning_sd's spread. "
                                + "; ".join(f"{k}: {v}" for k, v in PLANNING_SHAPES.items())
                                + ". The dry run prints the power at each shape beside it.")
    planning_correlation: float = param(PLANNING_CORRELATION, "The planned correlation, 0 to 1, "
                                        "between two primary tests' effects of one seed (they "
                                        "share its models): 0, independent; the dry run prints "
                                        "the power at " + ", ".join(
                                            f"{c:g}" for c in SENSITIVITY_CORRELATIONS)
                                        + " beside it.")
    planned_seeds: int | None = param(None, "How many seeds the analysis was planned with (null: "
                                      "as many as `seeds` lists). A study merged from more "
                                      "seeds is reported as exploratory, not confirmatory.")
    dose_trend: str = param(DEFAULT_DOSE_TREND, "The sidedness of a dose ladder's trend test "
                            "(lab.analysis.dose): " + ", ".join(f"{k} ({v})" for k, v in
                                                              DOSE_TREND_SIDES.items())
                            + "; a ladder that rises then falls is reported non-monotone "
                              "whatever its trend p.")


CONTINUED_ORDERS = ("clean-after", "clean-first")


@dataclass
class ContinuedSection:
    """Continued pre-training (lab pretrain --init-from) in two stages, each keyed and resumable
    like any pre-training; the models it makes are models of their own in every table
    (gpt2/clean-after:2), beside the arms' from-scratch models."""
    order: str | None = param(
        None, "null: none. clean-after: every pre-trained model goes on training on its seed's "
              "control corpus (clean) for each clean_epochs value: what is left of the "
              "contamination after clean training (the exposures' steps run on). clean-first: "
              "every arm's pre-training starts from a model first trained clean for "
              "clean_epochs (one per seed and value): a checkpoint contaminated mid-way.")
    clean_epochs: list[float] = field(default_factory=lambda: [1.0], metadata={
        "expect": "float > 0", "help": "Epochs of the clean stage; a list sweeps them (one "
                                       "continued model per value, arm and seed)."})


LAUNCHERS = ("torchrun", "deepspeed")


@dataclass
class PretrainResources:
    """How each pre-training runs. What can change its result is part of the stage key: the
    number of ranks (pretrain.batch_size is per rank, so the global batch grows with it) and
    the DeepSpeed config (its contents); the launcher cannot, and is not."""
    processes: int = param(1, "Ranks per node: 1 runs the pre-training in the stage's own process, "
                              "more start it under the launcher, one rank per GPU (gloo ranks "
                              "on a CPU).")
    nodes: int = param(1, "Nodes per pre-training (a SLURM job's nodes; locally 1).")
    launcher: str = param("torchrun", "What starts the ranks: " + " or ".join(LAUNCHERS) + ".")
    deepspeed: str | None = param(None, "DeepSpeed config: zero1, zero2, zero3 "
                                        "(recipes/deepspeed/) or a JSON file; null: plain DDP.")
    save_steps: int = param(default_of(PretrainConfig, "save_steps"),
                            "Checkpoint every N steps, to resume an interrupted pre-training from "
                            "(not part of the key: the weights do not depend on it).")


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


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", str(kind).replace("typing.", ""))


def _convert(value: Any, kind: Any, path: str, expect: str | None = None) -> Any:
    """Check `value` against the annotation `kind`, recursing into lists and sections; `expect`
    names what a scalar must be where the type alone says too little ("int >= 0")."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        return _convert(value, inner[0], path, expect)
    if origin is list:
        if not isinstance(value, list):
            raise LabError(f"{path}: expected a list, got {_show(value)}")
        (item,) = typing.get_args(kind)
        return [_convert(v, item, f"{path}[{i}]", expect) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise LabError(f"{path}: expected a mapping, got {_show(value)}")
        return _build(kind, value, path)
    if kind is bool:
        if not isinstance(value, bool):
            raise LabError(f"{path}: expected true or false, got {_show(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LabError(f"{path}: expected {expect or 'int'}, got {_show(value)}")
        if abs(value) > 2**63 - 1:
            raise LabError(f"{path}: {_show(value)} is out of range")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LabError(f"{path}: expected float, got {_show(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise LabError(f"{path}: expected a finite number, got {_show(value)}")
        return number
    if kind is str:
        if not isinstance(value, str):
            raise LabError(f"{path}: expected str, got {_show(value)}")
        if len(value) > MAX_STRING:
            raise LabError(f"{path}: longer than {MAX_STRING} characters ({_show(value)})")
        return value
    raise LabError(f"{path}: unsupported type {_type_name(kind)}")


def _build(cls: Any, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = set(fields)
    for key in data:
        if key not in names:
            where = f"{prefix}.{str(key)[:EXCERPT]}" if prefix else str(key)[:EXCERPT]
            raise LabError(f"{where}: unknown key (known: {', '.join(sorted(names))})")
    values = {key: _convert([value] if fields[key].metadata.get("scalar")
                            and (value is not None or fields[key].metadata.get("scalar_none"))
                            and not isinstance(value, list) else value,
                            hints[key],
                            f"{prefix}.{key}" if prefix else key, fields[key].metadata.get("expect"))
              for key, value in data.items()}
    return cls(**values)


def _check(recipe: Recipe) -> None:
    """Values that have the right type but cannot be run, as each model runs them (its
    by_model fields in place; an error in one of those names it by_model.MODEL.FIELD)."""
    from lab.models import MODELS

    if not recipe.models:
        raise LabError("models: needs at least one model")
    if len(set(recipe.models)) != len(recipe.models):
        raise LabError("models: values repeat")
    for i, model in enumerate(recipe.models):
        if model not in MODELS:
            raise LabError(f"models[{i}]: unknown model '{model}' (choose from {', '.join(MODELS)})")
    for model in recipe.models:
        paths = overridden(recipe, model)
        try:
            _check_view(for_model(recipe, model))
        except LabError as exc:
            if any(str(exc).startswith((f"{p}:", f"{p}[")) for p in paths):
                raise LabError(f"by_model.{model}.{exc}") from None
            raise


def _check_view(recipe: Recipe) -> None:
    """A recipe as one model runs it: the study's own fields, each stage's fields, then what
    only stages together can refuse."""
    _check_study(recipe)
    for name in stage_sections():
        _check_as_config(name, getattr(recipe, name))
    _check_across_stages(recipe)


def _fail(path: str, message: str) -> None:
    raise LabError(f"{path}: {message}")


def _check_study(recipe: Recipe) -> None:
    """The study's own fields: its name, benchmark, arms, seeds, sizes, statistics and
    resources."""
    from lab.corpora import get_spec
    from lab.models import PRESETS

    name = recipe.name
    if (not name or name in (".", "..") or ".." in name or "/" in name or "\\" in name
            or Path(name).is_absolute() or name.startswith(("~", "-", "."))
            or not all(c.isalnum() or c in "._-+=@," for c in name)):
        _fail("name", f"{_show(name)}: must be a plain folder name (letters, digits and ._-+=@, "
              "not starting with . - or ~, no path separator, no '..'): the study folder is "
              "runs/NAME")
    for path, values in (("arms", recipe.arms), ("models", recipe.models)):
        if len(set(values)) != len(values):
            _fail(path, "values repeat")
    for i, seed in enumerate(recipe.seeds):
        if not 0 <= seed <= SEED_MAX:
            _fail(f"seeds[{i}]", f"expected int in 0..{SEED_MAX}, got {seed}")
    spec = get_spec(recipe.benchmark)
    if spec.kind != "benchmark":
        _fail("benchmark", f"'{recipe.benchmark}' is not a benchmark")
    if not recipe.seeds:
        _fail("seeds", "needs at least one seed")
    if len(set(recipe.seeds)) != len(recipe.seeds):
        _fail("seeds", "seeds repeat")
    if not recipe.arms:
        _fail("arms", "needs at least one arm")
    for i, arm in enumerate(recipe.arms):
        setting = settings_table.find(arm)
        if setting is None:
            _fail(f"arms[{i}]", f"unknown arm '{arm}' (choose from {', '.join(settings_table.names())})")
        if setting.needs_output and not spec.output_language:
            _fail(f"arms[{i}]", f"{recipe.benchmark} has no output side for '{arm}'")
        if setting.placebo and setting.base not in recipe.arms:
            # Its models are probed on the base arm's injected samples, and compared with it.
            _fail(f"arms[{i}]", f"'{arm}' is the placebo of '{setting.base}': list "
                  f"'{setting.base}' in arms too")
    if not recipe.preset:
        _fail("preset", "needs at least one preset")
    if len(set(recipe.preset)) != len(recipe.preset):
        _fail("preset", "values repeat")
    for i, preset in enumerate(recipe.preset):
        if preset not in PRESETS:
            _fail(f"preset[{i}]" if len(recipe.preset) > 1 else "preset",
                  f"unknown preset '{preset}' (choose from {', '.join(PRESETS)})")
    continued = recipe.continued
    if continued.order is not None and continued.order not in CONTINUED_ORDERS:
        _fail("continued.order", f"choose from {', '.join(CONTINUED_ORDERS)} (or null)")
    if continued.order is not None:
        if not continued.clean_epochs or len(set(continued.clean_epochs)) != len(continued.clean_epochs):
            _fail("continued.clean_epochs", "give distinct values")
        if any(e <= 0 for e in continued.clean_epochs):
            _fail("continued.clean_epochs", f"values must be > 0, got {continued.clean_epochs}")
    decays = recipe.pretrain.weight_decay
    if not decays:
        _fail("pretrain.weight_decay", "needs at least one value")
    if len(set(decays)) != len(decays):
        _fail("pretrain.weight_decay", "values repeat")
    if any(d < 0 for d in decays):
        _fail("pretrain.weight_decay", f"values must be >= 0, got {decays}")
    if not 0 < recipe.statistics.alpha < 1:
        _fail("statistics.alpha", f"expected a number in (0, 1), got {recipe.statistics.alpha}")
    if recipe.statistics.convention not in CONVENTIONS:
        _fail("statistics.convention", f"choose from {', '.join(CONVENTIONS)}")
    if recipe.statistics.score not in SCORES:
        _fail("statistics.score", f"choose from {', '.join(SCORES)}")
    if recipe.statistics.dose_trend not in DOSE_TREND_SIDES:
        _fail("statistics.dose_trend", f"choose from {', '.join(DOSE_TREND_SIDES)}")
    if not recipe.statistics.smallest_effect > 0:
        _fail("statistics.smallest_effect", f"expected a number > 0, got "
              f"{recipe.statistics.smallest_effect}")
    if not recipe.statistics.planning_sd > 0:
        _fail("statistics.planning_sd", f"expected a number > 0, got {recipe.statistics.planning_sd}")
    if recipe.statistics.planning_shape not in PLANNING_SHAPES:
        _fail("statistics.planning_shape", f"choose from {', '.join(PLANNING_SHAPES)}")
    if not 0 <= recipe.statistics.planning_correlation <= 1:
        _fail("statistics.planning_correlation", f"expected a number from 0 to 1, got "
              f"{recipe.statistics.planning_correlation}")
    planned = recipe.statistics.planned_seeds
    if planned is not None and planned < 1:
        _fail("statistics.planned_seeds", f"expected int >= 1 or null, got {planned}")
    _check_resources(recipe.resources)
    if recipe.detect.enabled and not any(settings_table.get(arm).injects_test
                                         for arm in recipe.arms):
        _fail("detect.enabled", "no arm injects test samples (arms: "
              f"{', '.join(recipe.arms)}), so no model has members for the detectors to find")
    stray = [e for e in recipe.detect.epochs if e not in recipe.finetune.epochs]
    if stray:
        _fail("detect.epochs", f"{stray[0]} is not one of finetune.epochs "
                               f"({', '.join(map(str, recipe.finetune.epochs))})")
    launch = recipe.resources.pretrain
    if recipe.pretrain.loop == "plain" and (launch.processes * launch.nodes > 1
                                            or launch.deepspeed is not None):
        _fail("pretrain.loop", "plain runs one process without DeepSpeed; resources.pretrain "
                               "asks for " + ("DeepSpeed" if launch.deepspeed else "several ranks")
              + " (use trainer or null)")


def _check_resources(resources: ResourcesSection) -> None:
    if resources.threads is not None and resources.threads < 1:
        _fail("resources.threads", f"expected int >= 1 or null, got {resources.threads}")
    if resources.stages_per_gpu is not None and not 1 <= resources.stages_per_gpu <= 64:
        _fail("resources.stages_per_gpu", f"expected int 1..64 or null, got "
                                          f"{resources.stages_per_gpu}")
    launch = resources.pretrain
    for path, value in (("resources.pretrain.processes", launch.processes),
                        ("resources.pretrain.nodes", launch.nodes)):
        if not 1 <= value <= 4096:
            _fail(path, f"expected int in 1..4096, got {value}")
    device = resources.device
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        _fail("resources.device", f"{_show(device)}: choose cpu, cuda or cuda:N")
    if resources.dtype not in DTYPES:
        _fail("resources.dtype", f"{_show(resources.dtype)}: choose from {', '.join(DTYPES)}")
    if launch.save_steps < 1:
        _fail("resources.pretrain.save_steps", f"expected int >= 1, got {launch.save_steps}")
    if launch.launcher not in LAUNCHERS:
        _fail("resources.pretrain.launcher", f"{_show(launch.launcher)}: choose from "
              f"{', '.join(LAUNCHERS)}")
    if launch.deepspeed is not None:
        try:
            deepspeed_config(launch.deepspeed)
        except LabError as exc:
            _fail("resources.pretrain.deepspeed", str(exc))
    targets = [t.strip() for t in resources.report_to.split(",") if t.strip()]
    unknown = [t for t in targets if t not in (*REPORT_TARGETS, "none")] or (
        ["none"] if "none" in targets and len(targets) > 1 else [])
    if not targets or unknown:  # whether its package is installed: preflight, where it runs
        _fail("resources.report_to", f"{_show(resources.report_to)}: choose "
              f"{', '.join(REPORT_TARGETS)}, a comma-separated list of them, or none")


def stage_sections() -> list[str]:
    """The recipe's sections made of a stage config's fields (lab.study.recipe.section)."""
    hints = typing.get_type_hints(Recipe)
    return [f.name for f in dataclasses.fields(Recipe)
            if hasattr(hints[f.name], "stage_config")]


# A section's fields that sweep a config field (each value makes its own stages), by section:
# the section's field -> the config's.
SWEEPS = {"finetune": {"epochs": "epochs", "train_sizes": "train_size"},
          "pretrain": {"weight_decay": "weight_decay"},
          "injection": {"contamination_form": "contamination_form",
                        "decontaminate_with": "decontaminate_with"}}


def _check_contamination_form(recipe: Recipe) -> None:
    """injection.contamination_form against the benchmark and every arm that injects (the
    grid gives the control verbatim): the refusal lab inject would make, before any stage."""
    forms = recipe.injection.contamination_form
    for name, values in (("contamination_form", forms),
                         ("decontaminate_with", recipe.injection.decontaminate_with)):
        if not values:
            _fail(f"injection.{name}", "needs at least one value")
        if len(set(values)) != len(values):
            _fail(f"injection.{name}", "values repeat")
    for j, written in enumerate(forms):
        form = soft.parse_form(written)
        where = f"injection.contamination_form[{j}]" if len(forms) > 1 else \
            "injection.contamination_form"
        for i, arm in enumerate(recipe.arms):
            setting = settings_table.get(arm)
            if not setting.injects:
                continue
            try:
                soft.check_form(form, recipe.benchmark, setting, recipe.corpus.base)
            except LabError as exc:
                reason = str(exc).split(": ", 1)[-1]
                _fail(where, f"arms[{i}] {arm}: {reason}")


def _check_as_config(name: str, section: Any) -> None:
    """A section's fields as its stage's config checks them when it is made (its __post_init__,
    which `lab COMMAND` runs too): the recipe states no rule of its own about one stage. The
    error names the recipe's field (`tokenizer.vocab_size: must be >= 262, got 100`, where
    `lab tokenizer train` says `--vocab-size 100: must be >= 262`); a swept field's element
    by its index (`finetune.epochs[1]`)."""
    config = type(section).stage_config
    sweeps = SWEEPS.get(name, {})
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)
              if f.name in config.__dataclass_fields__ and f.name not in sweeps}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    # The fields without a default are the paths a stage is given when it runs.
    given = {f.name: Path() for f in dataclasses.fields(config)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    swept = {field_name: getattr(section, field_name) for field_name in sweeps}
    # Every element of every swept field is checked once, beside the section's other fields.
    rounds = max((len(elements) for elements in swept.values()), default=1) or 1
    for i in range(rounds):
        chosen = {sweeps[f]: (elements[min(i, len(elements) - 1)], f, min(i, len(elements) - 1))
                  for f, elements in swept.items() if elements}
        try:
            config(**{**given, **values,
                      **{target: value for target, (value, _, _) in chosen.items()}})
        except LabError as exc:
            message = str(exc)
            for target, option in ((f, option_name(config.__dataclass_fields__[f]))
                                   for f in [*values, *chosen]):
                if not message.startswith((option + " ", option + ":")):
                    continue
                reason = message.split(": ", 1)[-1]
                if target in chosen:
                    value, field_name, index = chosen[target]
                    # one value of a field that takes one (weight_decay: 0.1): named as written
                    alone = len(swept[field_name]) == 1 and \
                        section.__dataclass_fields__[field_name].metadata.get("scalar")
                    _fail(f"{name}.{field_name}" if alone else f"{name}.{field_name}[{index}]",
                          f"{reason}, got {_show(value)}")
                if message.startswith(option + ":"):
                    _fail(f"{name}.{target}", reason)
                value = values[target]
                if isinstance(value, tuple):  # a list of the recipe: name the element refused
                    shown = message[len(option) + 1:].split(": ", 1)[0]
                    for index, element in enumerate(value):
                        if str(element) == shown:
                            _fail(f"{name}.{target}[{index}]", f"{reason}, got {_show(element)}")
                    value = list(value)
                _fail(f"{name}.{target}", f"{reason}, got {_show(value)}")
            _fail(name, message)


def _check_across_stages(recipe: Recipe) -> None:
    """What no single stage's config can refuse: fields of several stages (and arms) together,
    and against the datasets' recorded sizes."""
    from lab.corpora import dataset_manifest, get_spec
    from lab.models import check_block_size

    spec = get_spec(recipe.benchmark)
    if recipe.evaluation.split not in spec.splits:
        _fail("evaluation.split", f"unknown split '{recipe.evaluation.split}' of "
              f"{recipe.benchmark} (choose from {', '.join(spec.splits)})")
    if "roberta" in recipe.models:
        for i, epochs in enumerate(recipe.finetune.epochs):
            if epochs == 0:
                _fail(f"finetune.epochs[{i}]", "0 (direct inference) is defined for GPT-2 only")
    injection, doses = recipe.injection, recipe.injection.doses
    placebo_from = injection.placebo_from
    if placebo_from is not None:
        if not any(settings_table.get(arm).placebo for arm in recipe.arms):
            _fail("injection.placebo_from", "no arm is a placebo (list one in arms, or leave it out)")
        try:
            placebo_splits(recipe.benchmark, "test", tuple(placebo_from))
        except LabError as exc:
            _fail("injection.placebo_from", str(exc).removeprefix("--placebo-from").lstrip(": "))
    _check_contamination_form(recipe)
    test_samples = ((dataset_manifest(recipe.benchmark) or {}).get("expected_records") or {}) \
        .get("test")
    if injection.samples and test_samples and injection.samples > test_samples:
        _fail("injection.samples", f"{injection.samples}: {recipe.benchmark}'s test split "
              f"holds {test_samples} samples")
    _check_placebo_pool(recipe, injection.samples or test_samples)
    _check_corpus_limit(recipe)
    for model, preset in itertools.product(recipe.models, recipe.preset):
        try:
            check_block_size(model, preset, recipe.pretrain.block_size)
        except LabError as exc:
            _fail("pretrain.block_size", str(exc).split(": ", 1)[-1])
    _check_generated_length(recipe)
    # A split-half arm is evaluated on the samples it split, each injected or held out.
    splits = injection.fraction is not None or bool(doses)
    if splits and any(arm != "control" for arm in recipe.arms):
        if recipe.evaluation.split != "test":
            _fail("evaluation.split", f"'{recipe.evaluation.split}': a split-half arm "
                  "(injection.fraction or doses) splits the test samples; evaluate the test split")
        evaluated, split = recipe.evaluation.max_samples, injection.samples
        if split is not None and (evaluated is None or evaluated > split):
            _fail("evaluation.max_samples", f"{'null' if evaluated is None else evaluated}: a "
                  f"split-half arm splits the first "
                  f"{split} test samples (injection.samples); evaluate at most those")


def _check_placebo_pool(recipe: Recipe, injected: int | None) -> None:
    """A placebo stands for every test sample its arm injects: a ladder's injecting levels
    (equal groups), else the fraction. Its pool (placebo_plan): the eligible samples the dataset
    manifest records per split (lab.contamination.placebo.placebo_pool, against the whole test
    split), else the split's records; lab inject counts exactly, and names missing splits."""
    placebo_arm = next((i for i, arm in enumerate(recipe.arms)
                        if settings_table.get(arm).placebo), None)
    if placebo_arm is None or not injected:
        return
    plan = placebo_plan(recipe, injected)
    if plan.needed > plan.available:
        field_name = ("injection.placebo_from" if recipe.injection.placebo_from is not None
                      else f"arms[{placebo_arm}]")
        _fail(field_name, f"'{recipe.arms[placebo_arm]}' needs {plan.needed} placebo "
              f"samples, but {recipe.benchmark} {' + '.join(plan.splits)} holds "
              f"{'' if plan.exact else 'at most '}{plan.available} disjoint from its test split: "
              "lower injection.samples or injection.fraction, or use a benchmark with a larger "
              "pool (corpora/*.json: placebo_eligible)")


@dataclass(frozen=True)
class PlaceboPlan:
    """Where a study's placebos draw from and what its fine-tuning leaves out (the grid's).

    splits: the pool's splits (given to every placebo arm's `placebo_from`); fine_tuned: the
    splits any model of the study fine-tunes on (the task's train split; its validation split
    too where a model selects its checkpoint on it, or trains on it for want of a train split);
    exclude: every fine-tuning of a seed leaves out the pairs that seed's placebos injected
    (FinetuneConfig.exclude_injected), for every arm alike; how: a line saying why."""
    splits: tuple[str, ...]
    fine_tuned: tuple[str, ...]
    exclude: bool
    needed: int
    available: int
    exact: bool
    how: str


def placebo_needed(recipe: Recipe, injected: int) -> int:
    """Placebo samples a placebo arm injects: as many as its base arm's test samples."""
    doses = recipe.injection.doses
    if doses:
        return round(injected * sum(1 for dose in doses if dose) / len(doses))
    return max(1, round(injected * (recipe.injection.fraction or 1)))


def fine_tuned_splits(recipe: Recipe) -> tuple[str, ...]:
    """The benchmark splits (canonical names of the recipe's benchmark) whose pairs any model of
    the study fine-tunes on or selects its checkpoint with (lab.tasks.fine_tuning_split)."""
    from lab.corpora import get_spec
    from lab.tasks import get_task, task_for_benchmark

    task = get_task(task_for_benchmark(recipe.benchmark))
    used = [task.train_split]
    if task.benchmark == "concode":
        try:
            get_spec(task.benchmark).locate(task.train_split, None)
        except LabError:  # offline CONCODE fine-tunes on dev (lab.tasks.fine_tuning_split)
            used.append(task.valid_split)
    if any(for_model(recipe, model).finetune.select == "best" for model in recipe.models):
        used.append(task.valid_split)
    spec, named = get_spec(recipe.benchmark), []
    for split in used:
        try:
            named.append(spec.canonical_split(split))
        except LabError:  # a subset without that split (codetrans-paper: no train)
            pass
    return tuple(dict.fromkeys(named))


def placebo_plan(recipe: Recipe, injected: int | None = None) -> PlaceboPlan:
    """The study's placebo pool. An explicit injection.placebo_from is used as given (its
    overlap with fine-tuning is recorded, never removed). By default the pool is the splits no
    model fine-tunes on where their eligible samples (corpora/*.json: placebo_eligible) cover
    the placebo's count; else every non-test split, and each fine-tuning of a seed leaves out
    the pairs its placebos injected. Either way no model pre-trains on its fine-tuning pairs."""
    from lab.corpora import dataset_manifest

    if injected is None:
        test = ((dataset_manifest(recipe.benchmark) or {}).get("expected_records") or {}).get("test")
        injected = recipe.injection.samples or test or 0
    needed = placebo_needed(recipe, injected) if injected else 0
    facts = dataset_manifest(recipe.benchmark) or {}
    eligible, records = facts.get("placebo_eligible") or {}, facts.get("expected_records") or {}

    def holds(splits: tuple[str, ...]) -> tuple[int, bool]:
        counts = [eligible.get(split, records.get(split)) for split in splits]
        return (sum(c or 0 for c in counts), bool(splits) and set(splits) <= set(eligible))

    fine_tuned = fine_tuned_splits(recipe)
    chosen = recipe.injection.placebo_from
    if chosen is not None:
        splits = placebo_splits(recipe.benchmark, "test", tuple(chosen))
        return PlaceboPlan(splits, fine_tuned, False, needed, *holds(splits),
                           "injection.placebo_from, as given")
    every = placebo_splits(recipe.benchmark, "test")
    free = tuple(s for s in every if s not in fine_tuned)
    available, exact = holds(free)
    known = all(eligible.get(s, records.get(s)) is not None for s in free)
    if free and known and available >= needed:
        return PlaceboPlan(free, fine_tuned, False, needed, available, exact,
                           f"{' + '.join(free)}: no model fine-tunes on it, and it holds "
                           f"{available} eligible samples for {needed}")
    return PlaceboPlan(every, fine_tuned, True, needed, *holds(every),
                       f"{' + '.join(free) or 'no split'} apart from fine-tuning holds "
                       f"{available if free else 0} eligible samples for {needed}: the pool is "
                       f"{' + '.join(every)}, and every fine-tuning of a seed leaves out the "
                       "pairs its placebos injected")


def injected_documents(recipe: Recipe, samples: int) -> tuple[int, str, str, int]:
    """(documents, how they are counted, the widest arm, its documents per sample): the most
    documents an arm of the recipe injects when `samples` test samples take part."""
    share, doses = recipe.injection.fraction or 1.0, recipe.injection.doses
    widest = max(recipe.arms, key=lambda arm: settings_table.get(arm).documents_per_sample)
    per_sample = settings_table.get(widest).documents_per_sample
    if doses:  # about samples / levels per level (duplicates kept together may shift a few)
        documents = math.floor(samples / len(doses) * sum(doses)) * per_sample
        how = "injection.samples / levels x the sum of injection.doses"
    else:
        documents = math.ceil(samples * share) * recipe.injection.repeat * per_sample
        how = "injection.samples x fraction x repeat"
    return documents, how, widest, per_sample


def _check_corpus_limit(recipe: Recipe) -> None:
    """Every injected document replaces a base document: an arm cannot inject more documents
    than it holds (unpaired injects two per sample)."""
    limit, samples = recipe.corpus.limit, recipe.injection.samples
    if limit is None or samples is None:
        return
    documents, how, widest, per_sample = injected_documents(recipe, samples)
    if documents >= limit:
        _fail("corpus.limit", f"{limit} documents cannot take {documents} injected ones ({how} "
              f"x {per_sample} documents per sample of '{widest}'); raise the limit")


def _check_generated_length(recipe: Recipe) -> None:
    """Fine-tuning and evaluation never reach past the positions pre-training trained (the
    block size): the study fine-tunes targets of evaluation.max_new_tokens tokens beside a
    source of FinetuneConfig's default length, fitted (lab.train.finetune.fitted_lengths).
    null: the fine-tuning fits its default target and evaluation generates that many."""
    from lab.train.finetune import FinetuneConfig, fitted_lengths, longest_kept_target

    target, block = recipe.evaluation.max_new_tokens, recipe.pretrain.block_size
    source = FinetuneConfig.__dataclass_fields__["max_source_length"].default
    for model in recipe.models if target is not None else []:
        kept = longest_kept_target(model, block, source)
        if target <= kept:
            continue
        if model == "gpt2":
            _fail("evaluation.max_new_tokens", f"{target}: gpt2 fine-tunes `<s> source <SEP> "
                  f"target </s>` within pretrain.block_size {block} (positions past it were "
                  f"never pre-trained): source + target + 3 <= {block}, the source keeping at "
                  f"least {fitted_lengths(model, block, source, 10 ** 9)[0]} tokens (a quarter "
                  f"of {block - 3}); the target fits in at most {kept}")
        _fail("evaluation.max_new_tokens", f"{target}: larger than pretrain.block_size {block}, "
              f"the positions {model} was pre-trained on (at most {kept} here)")


DEEPSPEED_CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "deepspeed"


def deepspeed_config(name: str) -> Path:
    """The DeepSpeed JSON file a recipe names: zero1/zero2/zero3 (recipes/deepspeed/) or a path."""
    path = DEEPSPEED_CONFIGS / f"{name}.json" if "/" not in name and not name.endswith(".json") \
        else Path(name)
    if not path.is_file():
        raise LabError(f"{name}: no such DeepSpeed config (zero1, zero2, zero3 or a JSON file)")
    return path


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """`a.b=value` into the raw mapping (value parsed as YAML)."""
    if "=" not in assignment:
        raise LabError(f"--set {_show(assignment)[1:-1]}: expected key=value")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise LabError(f"--set {key[:EXCERPT]}: {part[:EXCERPT]} is not a section")
    try:
        node[parts[-1]] = _yaml_load(raw)
    except yaml.YAMLError as exc:
        raise LabError(f"--set {key[:EXCERPT]}: value is not valid YAML "
                       f"({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    except LabError as exc:
        raise LabError(f"--set {key[:EXCERPT]}: {exc}") from None


def _read_file(path: Path) -> dict[str, Any]:
    """One recipe file's mapping; errors name the file (and the line)."""
    if not path.is_file():
        raise LabError(f"{path}: no such recipe file")
    try:
        text = path.read_text(encoding="utf-8")
        if "\0" in text:  # YAML's own message for it spans lines and names no file
            raise LabError(f"not a text file (a NUL byte at character {text.index(chr(0))})")
        data = _yaml_load(text)
    except UnicodeDecodeError as exc:
        raise LabError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except LabError as exc:
        raise LabError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        raise LabError(f"{path}{where}: malformed YAML ({problem})") from None
    if data is None or data == {}:
        # Every field has a default: a file that sets nothing would run a whole default study.
        raise LabError(f"{path}: an empty recipe (it must set at least its name:)")
    if not isinstance(data, dict):
        raise LabError(f"{path}: a recipe is a mapping of sections")
    return data


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: sections merge key by key, any other value replaces."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


def _resolve(path: Path, including: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A recipe file with its `include:` (a file or a list of files, relative to the including
    file) merged beneath it, in order; an include cycle is refused."""
    if path.resolve() in including:
        chain = " -> ".join(p.name for p in (*including, path.resolve()))
        raise LabError(f"{path}: include: cycle ({chain})")
    data = _read_file(path)
    include = data.pop("include", None)
    names = [include] if isinstance(include, str) else include
    if include is not None and (not isinstance(names, list) or not names
                                or not all(isinstance(n, str) and n for n in names)):
        raise LabError(f"{path}: include: expected a file name or a list of them, got "
                       f"{_show(include)}")
    merged: dict[str, Any] = {}
    for name in names or []:
        merged = _merged(merged, _resolve(path.parent / name, (*including, path.resolve())))
    return _merged(merged, data)


def load_recipe(path: Path, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe (its includes beneath it, then the overrides on top) and validate it;
    errors name the file and the key's path."""
    path = Path(path)
    data = _resolve(path)
    for assignment in overrides or []:
        apply_override(data, assignment)
    try:
        recipe = _build(Recipe, data)
        _check(recipe)
    except LabError as exc:
        raise LabError(f"{path}: {exc}") from None
    return recipe


def recipe_from_dict(data: Any) -> Recipe:
    """A recipe from its recorded dict (STUDY/recipe.json), checked like a file; fields the
    record lacks take their defaults."""
    if not isinstance(data, dict):
        raise LabError("a recipe is a mapping of sections")
    recipe = _build(Recipe, data)
    _check(recipe)
    return recipe


def recipe_dict(recipe: Recipe) -> dict[str, Any]:
    """The recipe as recipe.json records it: a list field that also takes one value (preset)
    is written as that value when it holds one, as studies recorded it before it was a list."""
    data = dataclasses.asdict(recipe)
    for f in dataclasses.fields(recipe):
        if f.metadata.get("scalar") and len(data[f.name]) == 1:
            data[f.name] = data[f.name][0]
        if dataclasses.is_dataclass(getattr(recipe, f.name)):  # a section's (weight_decay)
            for inner in dataclasses.fields(getattr(recipe, f.name)):
                value = data[f.name].get(inner.name)
                if inner.metadata.get("scalar") and isinstance(value, list) and len(value) == 1:
                    data[f.name][inner.name] = value[0]
    return data


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Paths of the fields whose values differ between two recipe dicts."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new))
                for d in _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)]
    return [] if old == new else [path]


def study_differences(old: Recipe, new: Recipe) -> list[str]:
    """Fields in which two recipes make other studies: all but `resources` (where a stage runs;
    a launch that changes results changes the stage keys), `statistics` (how the finished
    results are read: a study may be re-read under other declarations) and `detect` (detect
    stages read the study's models and change nothing else: `--set detect.enabled=true` on a
    finished study scores every model it trained). recipe.json records the latest."""
    return [d for d in _differences(_device_settings_resolved(old), _device_settings_resolved(new))
            if not d.startswith(("resources.", "statistics.", "detect."))]


def _device_settings_resolved(recipe: Recipe) -> dict[str, Any]:
    """recipe_dict, with the pre-training settings a CPU study leaves unset (bf16, compile,
    attention: lab.train.speed) as the values they take there, which are those studies made
    before they could be unset recorded: such a study and today's recipe are the same study."""
    record = recipe_dict(recipe)
    if recipe.resources.device.startswith("cuda"):
        return record
    sections = [record["pretrain"]] + [model.get("pretrain", {})
                                       for model in record.get("by_model", {}).values()
                                       if isinstance(model, dict)]
    for section in sections:
        for name, neutral in KEY_NEUTRAL_DEFAULTS["pretrain"].items():
            if name in section and section[name] is None:
                section[name] = neutral
    return record


# --- the reference recipe: every field, generated from the declarations above -----------------

REFERENCE_HEADER = """\
# Reference recipe: every field, its type, default and meaning, generated from the recipe schema
# (lab/study/recipe.py; regenerate: python -m lab.study.recipe > recipes/reference.yaml).
# `lab study RECIPE.yaml` reads a file like this one; omitted fields take the defaults shown;
# unknown keys are refused. `include: base.yaml` (or a list of files, relative to the recipe)
# merges those files beneath the recipe, section by section; `--set` applies on top:
#   lab study R.yaml --set pretrain.lr=0.002 --set seeds=[0,1]
"""
COMMENT_COLUMN = 29
WIDTH = 100


def _flow(value: Any) -> str:
    """A value as YAML flow text (`[a, b]`, `null`, `0.001`)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]


def _type_text(kind: Any) -> str:
    """A field's type as the reference shows it: `list[str]`, `int | null`."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if typing.get_origin(kind) is list:
        return f"list[{_type_text(args[0])}]"
    return _type_name(kind)


def reference_yaml() -> str:
    """recipes/reference.yaml: each field's default, then `# type: meaning` (tests keep the
    file equal to this)."""
    import textwrap

    lines = REFERENCE_HEADER.splitlines()

    def emit(cls: Any, indent: int) -> None:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            kind, meaning = hints[item.name], item.metadata.get("help", "")
            pad = " " * indent
            if dataclasses.is_dataclass(kind):
                lines.append(f"{pad}{item.name}:")
                emit(kind, indent + 2)
                continue
            default = (item.default_factory() if item.default is dataclasses.MISSING
                       else item.default)
            if isinstance(default, tuple):
                default = list(default)
            text = f"{pad}{item.name}: {_flow(default)}"
            expect = item.metadata.get("expect")
            comment = f"{expect or _type_text(kind)}: {meaning}".rstrip(": ")
            start = max(COMMENT_COLUMN, len(text) + 2)
            if WIDTH - start < 40:  # a long default: its comment goes on the lines below it
                lines.append(text)
                start = COMMENT_COLUMN
                wrapped = textwrap.wrap(comment, WIDTH - start - 2, break_on_hyphens=False)
                lines.extend(f"{'':<{start}}# {line}" for line in wrapped)
                continue
            wrapped = textwrap.wrap(comment, WIDTH - start - 2, break_on_hyphens=False) or [""]
            lines.append(f"{text:<{start}}# {wrapped[0]}")
            lines.extend(f"{'':<{start}}#   {more}" for more in wrapped[1:])

    emit(Recipe, 0)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference_yaml())
