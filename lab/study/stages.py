"""The kinds of stage a study runs: one table, KINDS, kind -> StageKind.

A stage kind is a typed config (its command's dataclass), an entry function `run(cfg)` and
what the runner needs to place it in a study folder: which config fields name the stage (its
key), which take the folders of its input stages, and the file it writes last. The grid
(lab.study.grid) makes each stage's config from the recipe, with its paths UNBOUND; `bind`
gives them the study folder's when the stage runs (lab.study.execution). Adding a kind: its
module (config and run), one line here, and its stages in the grid (docs/stages.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.common import EVALUATION, MANIFEST, default_of, write_json_atomic
from lab.contamination.inject import InjectConfig, run_inject
from lab.detect.run import DetectConfig, run_detect
from lab.detect.probe import ProbeConfig, run_probe
from lab.modelcard import write_model_card
from lab.study.evaluate import EvaluateStageConfig, run_evaluate_stage
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.decontam import DECONTAMINATORS
from lab.study.recipe import KEY_NEUTRAL_DEFAULTS, ResourcesSection
from lab.tokenizer import TokenizerConfig, run_tokenizer
from lab.train.finetune import FinetuneConfig, run_finetune
from lab.train.pretrain import PretrainConfig, run_pretrain

# The paths of a stage's config until it runs: its output and its inputs' folders are the
# study folder's (`bind`). A directory cannot be made under /dev/null, so a config run unbound
# fails at once instead of writing somewhere.
UNBOUND = Path("/dev/null/unbound")


@dataclass(frozen=True)
class StageKind:
    config: type                       # Stage.config's class: the command's config dataclass
    run: Callable[[Any], Any]          # run(cfg), cfg bound to the study folder
    key: tuple[str, ...]               # the config fields that name a stage (its key), ...
    neutral: Mapping[str, Any] = field(default_factory=dict)  # ... less those at these values
    inputs: tuple[str, ...] = ()       # config fields given the input stages' outputs, in order
    # A config field given, as a tuple, the outputs of the last input stages (as many as the
    # grid's config holds; those before are `inputs`', the trailing ones of which a stage may
    # lack); they name the stage (enter its key) only where extra_keyed(config) says they change
    # its result (a fine-tuning counts its seed's placebo pairs, and leaves them out only when
    # told to; a probe or detect stage draws from a pool without their samples).
    extra: str = ""
    extra_keyed: Callable[[Any], bool] | None = None
    # Key entries marking a behaviour changed after studies were made, for the configs it changes
    # (theirs re-run; every other stage keeps its key): config -> {name: value}.
    revision: Callable[[Any], dict[str, Any]] | None = None
    output: str = ""                   # what later stages read: the stage folder, or this in it
    done: str = MANIFEST               # the file written last in the stage folder
    # after(stage folder): what a finished stage's folder gets from its records (a model's
    # card), in the process that ran it and again at the end of every study run, for a stage
    # whose run was killed between its last file and this; running it twice gives the same.
    after: Callable[[Path], None] | None = None


def run_tokenizer_stage(cfg: TokenizerConfig) -> dict[str, Any]:
    """A study's tokenizer in STAGE/tokenizer (what pre-training reads), and its manifest as
    STAGE/manifest.json, the stage's last file."""
    manifest = run_tokenizer(cfg)
    write_json_atomic(Path(cfg.out).parent / MANIFEST, manifest)
    return manifest


# Where evaluation and probes run and in which precision: in the key when not the defaults (a
# GPU or bfloat16 computes other numbers), so stages made before these fields keep theirs.
PLACEMENT = {name: default_of(ResourcesSection, name) for name in ("device", "dtype")}

# A decontaminated arm's removed test-sample copies are replaced by placebo copies
# (lab.contamination.decontaminated), no longer by base documents: in its key, so decontaminated
# arms made before re-run.
DECONTAMINATE_REPLACE = "placebo-copy"

def _decontamination_revision(method: str | None) -> dict[str, str]:
    """A decontaminated arm's key entries: how a removed copy is replaced, and the method's
    revision where it has one (lab.decontam.Decontaminator.revision)."""
    if method is None:
        return {}
    revision = DECONTAMINATORS[method].revision if method in DECONTAMINATORS else ""
    return {"decontaminate_replace": DECONTAMINATE_REPLACE,
            **({"method_revision": revision} if revision else {})}


KINDS: dict[str, StageKind] = {
    # Fields added to an arm after studies were made leave its key while unset. placebo_match
    # names a placebo's draw; a setting without a placebo never reads it (the grid gives it
    # "random", the draw placebos had before length matching, which keeps their keys).
    "inject": StageKind(
        InjectConfig, run_inject,
        key=("benchmark", "setting", "seed", "base", "base_splits", "limit", "repeat", "fraction",
             "doses", "samples", "decontaminate", "placebo_from", "placebo_match", "timing",
             "contamination_form", "decontaminate_with"),
        neutral={"doses": None, "samples": None, "placebo_from": None, "placebo_match": "random",
                 "contamination_form": soft.VERBATIM, "decontaminate_with": None,
                 "timing": list(timing_table.DEFAULT)},
        revision=lambda cfg: _decontamination_revision(cfg.decontaminate_with)),
    "tokenizer": StageKind(TokenizerConfig, run_tokenizer_stage, key=("vocab_size", "benchmarks"),
                           inputs=("corpus",), output="tokenizer"),
    "pretrain": StageKind(
        PretrainConfig, run_pretrain,
        key=("model", "preset", "seed", "epochs", "lr", "batch_size", "block_size",
             "warmup_steps", "lr_scheduler", "bf16", "compile", "attention", "loop",
             "cross_document_attention", "weight_decay"),
        neutral=KEY_NEUTRAL_DEFAULTS["pretrain"], inputs=("corpus", "tokenizer", "init_from"),
        after=write_model_card),
    # seed_corpora: the seed's placebo corpora, whose samples no arm's never-seen samples hold
    # (lab.detect.probe.SHARED_POOL_RULE); in the key where there are any, so a study without
    # placebos keeps its keys
    "probe": StageKind(ProbeConfig, run_probe,
                       key=("min_k", "max_samples", "max_names", "device", "dtype"),
                       neutral=PLACEMENT, inputs=("model", "groups"), done="summary.json",
                       extra="seed_corpora", extra_keyed=lambda cfg: bool(cfg.seed_corpora)),
    # inputs: the scored model, the model or corpus whose samples are the members, the
    # reference model (the seed's control; none for the control itself)
    # shift: on by default since the shift check came; a stage scored before it reads as on
    # and lacks the check's rows (collect leaves them out). draw: always in the key, so that a
    # stage scored with the earlier draw (one fixed validation set, one-sided shift test) is
    # scored again rather than read as this one's.
    "detect": StageKind(DetectConfig, run_detect,
                        key=("detectors", "k", "neighbours", "cdd_samples", "max_samples",
                             "shift", "draw", "device", "dtype"),
                        neutral={**PLACEMENT, "shift": True},
                        inputs=("model", "groups", "reference"),
                        done="summary.json", extra="seed_corpora",
                        extra_keyed=lambda cfg: bool(cfg.seed_corpora)),
    "finetune": StageKind(
        FinetuneConfig, run_finetune,
        key=("task", "epochs", "train_size", "seed", "lr", "batch_size", "select",
             "max_target_length", "bf16", "decoder_layers", "decoder_init", "group_by_length",
             "exclude_injected", "valid_size"),
        neutral={**KEY_NEUTRAL_DEFAULTS["finetune"], "exclude_injected": False},
        inputs=("pretrained",), extra="injected_corpora",
        extra_keyed=lambda cfg: cfg.exclude_injected, after=write_model_card),
    "evaluate": StageKind(
        EvaluateStageConfig, run_evaluate_stage,
        key=("task", "split", "decoding", "metrics", "max_new_tokens", "max_samples", "device",
             "dtype"),
        neutral=PLACEMENT, inputs=("model",), done=EVALUATION),
}


def unbound(kind: str, **values: Any) -> Any:
    """The config of a `kind` stage as the grid makes it: `values`, UNBOUND in the paths it
    requires and does not get (its output, its inputs' folders)."""
    config = KINDS[kind].config
    required = {f.name: UNBOUND for f in dataclasses.fields(config)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return config(**{**required, **values})


def key_fields(kind: str, cfg: Any) -> dict[str, Any]:
    """What of a config names its stage: the kind's key fields, less those at their neutral
    values (fields added since studies were first made, so those studies keep their keys),
    and its kind's revision entries; tuples as the key's JSON holds them, lists."""
    spec = KINDS[kind]
    values = {name: list(value) if isinstance(value, tuple) else value
              for name in spec.key for value in [getattr(cfg, name)]}
    return {**{name: value for name, value in values.items()
               if not (name in spec.neutral and value == spec.neutral[name])},
            **(spec.revision(cfg) if spec.revision else {})}


def keyed_inputs(kind: str, cfg: Any, inputs: list[Any]) -> list[Any]:
    """The input stages that name a stage: all of them, less a kind's `extra` inputs where they
    do not change its result (StageKind.extra_keyed)."""
    spec = KINDS[kind]
    if spec.extra and not (spec.extra_keyed and spec.extra_keyed(cfg)):
        return inputs[:len(inputs) - _extra_count(spec, cfg)]
    return inputs


def _extra_count(spec: StageKind, cfg: Any) -> int:
    """How many of a stage's input stages are its kind's `extra` ones (the last)."""
    return len(getattr(cfg, spec.extra)) if spec.extra else 0


def output_of(stage: Any, study: Path) -> Path:
    """The folder later stages read of a finished stage."""
    output = KINDS[stage.kind].output
    return stage.out(study) / output if output else stage.out(study)


def bind(stage: Any, study: Path, corpora_dir: Path | None = None) -> Any:
    """A stage's config with the study folder's paths: its output, its inputs' outputs, the
    datasets folder and the study's token cache. Its output folder is whatever a killed run
    left, which a stage that resumes (pre-training: OUT.partial and its checkpoints) resumes and
    any other replaces (force)."""
    spec = KINDS[stage.kind]
    names = {f.name for f in dataclasses.fields(stage.config)}
    out = output_of(stage, study)
    first_extra = len(stage.inputs) - _extra_count(spec, stage.config)
    values: dict[str, Any] = {"out": out, **{name: output_of(source, study) for name, source
                                             in zip(spec.inputs, stage.inputs[:first_extra])}}
    if spec.extra:
        values[spec.extra] = tuple(output_of(source, study)
                                   for source in stage.inputs[first_extra:])
    if "corpora_dir" in names:
        values["corpora_dir"] = corpora_dir
    if "cache_dir" in names:
        values["cache_dir"] = study / "cache"
    if "resume" in names:
        values["resume"] = out.with_name(out.name + ".partial").exists()
    elif "force" in names:
        values["force"] = True
    return dataclasses.replace(stage.config, **values)
