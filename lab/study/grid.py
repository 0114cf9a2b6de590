"""A recipe's stages: the grid of arms, seeds, models, sizes and fine-tunings, and their keys.

Every stage writes one directory under STUDY/stages/, named by its kind and a hash of what
names it (its config's key fields, lab.study.stages) and of its inputs' keys, so a finished
stage is never run twice and a pre-trained model is shared by every fine-tuning that uses it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.common import LabError, default_of, sha256_file
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.contamination.inject import placebo_splits
# The names' variant labels (key=value parts: model_name writes them, swept_labels reads them
# back) are declared with the questions, which pair a decontaminated model with its oracle by them.
from lab.analysis.questions import SWEPT_NAME_LABELS, swept_labels  # noqa: F401 (re-exported)
from lab.study.recipe import Recipe, for_model, placebo_plan
from lab.study.stages import KINDS, UNBOUND, key_fields, keyed_inputs, unbound
from lab.tasks import task_for_benchmark
from lab.train.launch import deepspeed_config
from lab.detect.run import DetectConfig
from lab.detect.probe import ProbeConfig
from lab.study.evaluate import EvaluateStageConfig
from lab.train.finetune import FinetuneConfig
from lab.train.pretrain import resolve_for_device


@dataclass
class Stage:
    kind: str
    config: Any  # the kind's config (lab.study.stages.KINDS), its paths unbound
    inputs: list["Stage"] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=dict)
    # How a pre-training runs (recipe resources.pretrain): only what can change its result
    # enters the key (launch_key), so a stage run by other means is still found done.
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def keyed(self) -> dict[str, Any]:
        """What of its config names the stage (lab.study.stages.key_fields)."""
        return key_fields(self.kind, self.config)

    @property
    def key(self) -> str:
        inputs = keyed_inputs(self.kind, self.config, self.inputs)
        payload = {"kind": self.kind, "config": self.keyed, "inputs": [s.key for s in inputs]}
        keyed = launch_key(self.launch)
        if keyed:
            payload["launch"] = keyed
        payload = json.dumps(payload, sort_keys=True)
        return f"{self.kind}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"

    def out(self, study: Path) -> Path:
        return study / "stages" / self.key

    def done(self, study: Path) -> bool:
        # The file its kind writes last, inside its atomically renamed directory.
        return (self.out(study) / KINDS[self.kind].done).is_file()


def launch_key(launch: dict[str, Any]) -> dict[str, Any]:
    """What of a pre-training's launch can change its weights: the world size (the batch is per
    rank) and the DeepSpeed config's contents. Nothing for one plain process (older keys)."""
    keyed: dict[str, Any] = {}
    world = world_size(launch)
    if world != 1:
        keyed["world_size"] = world
    if launch.get("deepspeed"):
        keyed["deepspeed_sha256"] = _deepspeed_sha256(launch["deepspeed"])
    return keyed


def world_size(launch: dict[str, Any]) -> int:
    return launch.get("processes", 1) * launch.get("nodes", 1)


@functools.lru_cache(maxsize=None)
def _deepspeed_sha256(name: str) -> str:
    # A stage's key is computed on every look (its inputs' keys too): hash each config once.
    return sha256_file(deepspeed_config(name))


def expand(recipe: Recipe, seeds: list[int] | None = None) -> list[Stage]:
    """All stages of a recipe in an order that respects their inputs; with `seeds`, the shard
    of those seeds: their stages and what those read (the study's one tokenizer and its control
    corpus), with the keys the whole study gives them, so shards run apart (another session,
    machine or cluster) make one study again (`lab merge`)."""
    stages = _grid(recipe)
    if seeds is None:
        return stages
    unknown = sorted(set(seeds) - set(recipe.seeds))
    if unknown:
        raise LabError(f"--seeds {','.join(map(str, unknown))}: not among the recipe's seeds "
                       f"{recipe.seeds}")
    needed: set[str] = set()

    def need(stage: Stage) -> None:
        if stage.key not in needed:
            needed.add(stage.key)
            for source in stage.inputs:
                need(source)

    for stage in stages:
        if stage.labels.get("seed") in seeds:
            need(stage)
    return [stage for stage in stages if stage.key in needed]


def variants(recipe: Recipe) -> list[dict[str, Any]]:
    """The corpus variants a recipe sweeps (injection.contamination_form x
    injection.decontaminate_with), each as the labels that name its models: `form` where forms
    are swept, `decontam` (the method, or "none") where decontamination is. One empty variant
    where neither is."""
    forms, methods = recipe.injection.contamination_form, recipe.injection.decontaminate_with
    return [{**({"form": form} if len(forms) > 1 else {}),
             **({"decontam": method or "none"} if len(methods) > 1 else {}),
             "_form": form, "_method": method}
            for form, method in itertools.product(forms, methods)]


def _labels(variant: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in variant.items() if not k.startswith("_")}


def _inject(recipe: Recipe, arm: str, seed: int, variant: dict[str, Any]) -> Stage:
    """One arm's corpus. What the arm's setting does not use is left unset (fraction and doses
    of an arm that injects nothing, the placebo fields of one that is not a placebo). A
    placebo's pool is the study's (recipe.placebo_plan): by default the splits no model
    fine-tunes on where they hold enough samples; else every non-test split (placebo_from
    unset: the corpus, and its key, of studies made before that default). A decontaminated arm
    that injects test samples draws its removed copies' placebo stand-ins the same way
    (lab.contamination.decontaminated), so it gets the placebo fields too."""
    setting = settings_table.get(arm)
    injection = recipe.injection
    draws_placebo = setting.placebo or (setting.injects_test
                                        and variant["_method"] is not None)
    placebo_from = None
    if draws_placebo and injection.placebo_from is not None:
        placebo_from = tuple(injection.placebo_from)  # as written (its key), ...
        if placebo_from == placebo_splits(recipe.benchmark, "test"):
            placebo_from = None  # ... unless it is lab inject's own pool: the same corpus
    elif draws_placebo and not placebo_plan(recipe).exclude:
        placebo_from = placebo_plan(recipe).splits
    return Stage("inject", unbound(
        "inject", benchmark=recipe.benchmark, setting=arm, seed=seed, base=recipe.corpus.base,
        base_splits=tuple(recipe.corpus.base_splits), limit=recipe.corpus.limit,
        repeat=injection.repeat, fraction=injection.fraction if setting.injects else None,
        doses=tuple(injection.doses) if injection.doses and setting.injects else None,
        samples=injection.samples, decontaminate=injection.decontaminate,
        placebo_from=placebo_from,
        placebo_match=injection.placebo_match if draws_placebo else "random",
        timing=tuple(injection.timing) if setting.injects else timing_table.DEFAULT,
        contamination_form=variant["_form"] if setting.injects else soft.VERBATIM,
        decontaminate_with=variant["_method"],  # every arm, the control's too
    ), labels={"arm": arm, "seed": seed, **_labels(variant)})


def _grid(recipe: Recipe) -> list[Stage]:
    stages: list[Stage] = []
    swept_variants = variants(recipe)
    arm_stages: list[dict[tuple[str, int], Stage]] = []  # one per variant
    for variant in swept_variants:
        arm_stages.append({})
        for arm in recipe.arms:
            for seed in recipe.seeds:
                arm_stages[-1][(arm, seed)] = _inject(recipe, arm, seed, variant)
                stages.append(arm_stages[-1][(arm, seed)])
    # One tokenizer per study, trained on a control corpus (never on injected test data): the
    # first variant's.
    control = arm_stages[0].get(("control", recipe.seeds[0]))
    if control is None:
        first = arm_stages[0][(recipe.arms[0], recipe.seeds[0])]
        control = Stage("inject", dataclasses.replace(first.config, setting="control",
                                                      fraction=None, doses=None,
                                                      contamination_form=soft.VERBATIM),
                        labels={**first.labels, "arm": "control"})
        stages.insert(0, control)
    tokenizer = Stage("tokenizer", unbound("tokenizer", vocab_size=recipe.tokenizer.vocab_size),
                      [control])
    stages.append(tokenizer)
    swept = len(recipe.preset) > 1  # a preset label only where sizes are swept
    whole = recipe
    for model, preset in itertools.product(whole.models, whole.preset):
        recipe = for_model(whole, model)
        decays = recipe.pretrain.weight_decay
        for decay in decays:
            launch = dataclasses.asdict(recipe.resources.pretrain)
            def pretrain(corpus: Stage, labels: dict[str, Any], init: Stage | None = None,
                         epochs: float | None = None) -> Stage:
                section = {**dataclasses.asdict(recipe.pretrain), "weight_decay": decay,
                           **({"epochs": epochs} if epochs is not None else {})}
                return Stage("pretrain", resolve_for_device(unbound(
                    "pretrain", model=model, preset=preset, seed=labels["seed"], **section,
                    deepspeed=deepspeed_config(launch["deepspeed"]) if launch["deepspeed"] else None,
                    save_steps=launch["save_steps"], report_to=whole.resources.report_to,
                    **({"init_from": UNBOUND} if init is not None else {}),
                ), recipe.resources.device, launch["processes"] * launch["nodes"]),
                    [corpus, tokenizer] + ([init] if init is not None else []),
                    labels={"model": model, **({"preset": preset} if swept else {}),
                            **({"weight_decay": decay} if len(decays) > 1 else {}), **labels},
                    launch=launch)

            for variant, arm_stage in zip(swept_variants, arm_stages):
                named = _labels(variant)
                # (arm, seed, E): detect's models
                scored: dict[tuple[str, int, int | None], Stage] = {}
                clean_phases: dict[tuple[int, float], Stage] = {}  # continued.order clean-first

                def placebos(seed: int, arm_stage=arm_stage) -> list[Stage]:
                    """The seed's placebo corpora: every fine-tuning of the seed counts their
                    pairs, and no probe or detect stage of the seed draws their samples as
                    never-seen ones."""
                    return [arm_stage[(arm, seed)] for arm in recipe.arms
                            if settings_table.get(arm).placebo]

                for arm in recipe.arms:
                    for seed in recipe.seeds:
                        pre = pretrain(arm_stage[(arm, seed)], {"arm": arm, "seed": seed, **named})
                        stages.append(pre)
                        scored[(arm, seed, None)] = pre
                        stages += _probes(recipe, pre, arm, seed, arm_stage,
                                          placebos(seed) if recipe.probe.shared_pool else [])
                        stages += _downstream(recipe, pre, scored, placebos(seed))
                        order = recipe.continued.order
                        for clean in recipe.continued.clean_epochs if order else []:
                            if ("control", seed) not in arm_stage:
                                arm_stage[("control", seed)] = _inject(recipe, "control", seed,
                                                                       variant)
                                stages.append(arm_stage[("control", seed)])
                            control_corpus = arm_stage[("control", seed)]
                            labels = {"arm": arm, "seed": seed, **named,
                                      "continued": f"{order}:{clean:g}"}
                            if order == "clean-after":  # the arm's model, then clean epochs
                                continued = pretrain(control_corpus, labels, init=pre,
                                                     epochs=clean)
                            else:  # clean epochs first (one model per seed), then the arm's corpus
                                if (seed, clean) not in clean_phases:
                                    clean_phases[(seed, clean)] = pretrain(
                                        control_corpus, {"arm": "control", "seed": seed, **named,
                                                         "continued": f"clean-phase:{clean:g}"},
                                        epochs=clean)
                                    stages.append(clean_phases[(seed, clean)])
                                continued = pretrain(arm_stage[(arm, seed)], labels,
                                                     init=clean_phases[(seed, clean)])
                            stages.append(continued)
                            stages += _downstream(recipe, continued, None, placebos(seed))
                stages += _detects(recipe, scored, placebos)
    return stages


def _downstream(recipe: Recipe, pre: Stage,
                scored: dict[tuple[str, int, int | None], Stage] | None,
                placebos: list[Stage]) -> list[Stage]:
    """Fine-tuning and evaluation of one pre-trained model over the grid's epochs and sizes;
    the first size's fine-tuned models are the ones detect scores (`scored`). Each fine-tuning
    reads its seed's placebo corpora (`placebos`), to count the pairs they injected, and leaves
    those pairs out where the study's placebo pool includes a split it fine-tunes on
    (recipe.placebo_plan)."""
    out = []
    for epochs in recipe.finetune.epochs:
        for size in recipe.finetune.train_sizes:
            fine = _finetune(recipe, pre, epochs, size, placebos)
            evaluation = Stage("evaluate", unbound(
                "evaluate", task=task_for_benchmark(recipe.benchmark),
                benchmark=recipe.benchmark,
                **{**dataclasses.asdict(recipe.evaluation),
                   "metrics": tuple(recipe.evaluation.metrics)},
                device=recipe.resources.device, dtype=recipe.resources.dtype,
                batch_size=batch_size_on(recipe.resources.device, EvaluateStageConfig),
            ), [fine], labels=fine.labels, launch={"device": recipe.resources.device})
            out += [fine, evaluation]
            if scored is not None and size == recipe.finetune.train_sizes[0]:
                scored[(pre.labels["arm"], pre.labels["seed"], epochs)] = fine
    return out


def _detects(recipe: Recipe, scored: dict[tuple[str, int, int | None], Stage],
             placebos: Callable[[int], list[Stage]]) -> list[Stage]:
    """Detect stages of one model family: every pre-trained model, and the fine-tuned GPT-2 at
    detect.epochs. A contaminated arm's model is scored on its own samples, a placebo's and the
    control's on the samples of each arm they stand beside (as the probe does); the reference
    model is the control's of the same seed and stage (pre-trained or fine-tuned at that E).
    placebos(seed): the seed's placebo corpora, whose samples no stage of the seed draws as
    never-seen ones (lab.detect.probe.SHARED_POOL_RULE: one pool per seed)."""
    if not recipe.detect.enabled:
        return []
    config = unbound("detect", detectors=tuple(recipe.detect.detectors), k=recipe.detect.k,
                     neighbours=recipe.detect.neighbours, cdd_samples=recipe.detect.cdd_samples,
                     max_samples=recipe.detect.max_samples, shift=recipe.detect.shift,
                     device=recipe.resources.device,
                     dtype=recipe.resources.dtype,
                     batch_size=batch_size_on(recipe.resources.device, DetectConfig))
    launch = {"device": recipe.resources.device}
    out = []
    for (arm, seed, epochs), model in scored.items():
        if epochs is not None and (epochs not in recipe.detect.epochs
                                   or model.labels["model"] != "gpt2"):
            continue  # a fine-tuned RoBERTa is an encoder-decoder: nothing to score
        setting = settings_table.get(arm)
        groups = ([arm] if setting.injects_test else [setting.base] if setting.placebo
                  else [a for a in recipe.arms if settings_table.get(a).injects_test])
        reference = scored.get(("control", seed, epochs)) if arm != "control" else None
        shared = placebos(seed)
        for group in groups:
            inputs = [model, scored[(group, seed, None)]] + ([reference] if reference else [])
            out.append(Stage("detect", dataclasses.replace(
                config, seed_corpora=(UNBOUND,) * len(shared)), inputs + shared, launch=launch,
                             labels={**model.labels, "groups": group}))
    return out


# Samples per generation or probe batch on a GPU: a small model's batch of 16 is launch-bound
# there (each decoding step a few short kernels), and more rows cost almost nothing. Not in the
# stage key: a batch's rows are computed apart (padding masked).
GPU_BATCH_SIZE = 64


def batch_size_on(device: str, config: Any) -> int:
    return GPU_BATCH_SIZE if device.startswith("cuda") else default_of(config, "batch_size")


def _finetune(recipe: Recipe, pre: Stage, epochs: int, size: int | None,
              placebos: list[Stage]) -> Stage:
    section = {k: v for k, v in dataclasses.asdict(recipe.finetune).items()
               if k not in ("epochs", "train_sizes")}  # the grid's lists
    exclude = bool(placebos) and placebo_plan(recipe).exclude
    return Stage("finetune", unbound(
        "finetune", task=task_for_benchmark(recipe.benchmark), epochs=epochs, train_size=size,
        seed=pre.config.seed, **section,
        # what evaluation generates: fine-tuned to that length (null: the fine-tuning default,
        # which evaluation then generates)
        max_target_length=(recipe.evaluation.max_new_tokens
                           or default_of(FinetuneConfig, "max_target_length")),
        injected_corpora=(UNBOUND,) * len(placebos), exclude_injected=exclude,
        report_to=recipe.resources.report_to,
    ), [pre, *placebos], labels={**pre.labels, "epochs": epochs, "train_size": size},
        launch={"device": recipe.resources.device})


def _probes(recipe: Recipe, pre: Stage, arm: str, seed: int,
            arm_stage: dict[tuple[str, int], Stage], placebos: list[Stage]) -> list[Stage]:
    """Probe stages of one pre-trained model: a contaminated arm on its own injected and
    held-out samples; the control on each contaminated arm's samples (which it never saw); a
    placebo, like the control, on its base arm's samples (same seed), which it never saw either:
    its documents had the same form and count, so its probe is the format-only baseline. Every
    one reads the seed's placebo corpora (`placebos`; none where probe.shared_pool is false): no
    arm's reference samples are theirs, so the arms of a seed share them
    (lab.detect.probe.SHARED_POOL_RULE)."""
    if not recipe.probe.enabled:
        return []
    launch = {"device": recipe.resources.device}
    config = unbound("probe", min_k=recipe.probe.min_k, max_samples=recipe.probe.max_samples,
                     max_names=recipe.probe.max_names, device=recipe.resources.device,
                     dtype=recipe.resources.dtype,
                     batch_size=batch_size_on(recipe.resources.device, ProbeConfig),
                     seed_corpora=(UNBOUND,) * len(placebos))
    setting = settings_table.get(arm)
    if setting.injects_test:
        return [Stage("probe", config, [pre, *placebos], labels={**pre.labels, "groups": arm},
                      launch=launch)]
    if setting.placebo:
        return [Stage("probe", config, [pre, arm_stage[(setting.base, seed)], *placebos],
                      launch=launch, labels={**pre.labels, "groups": setting.base})]
    return [Stage("probe", config, [pre, arm_stage[(other, seed)], *placebos], launch=launch,
                  labels={**pre.labels, "groups": other})
            for other in recipe.arms if settings_table.get(other).injects_test]


def preset_of(stage: Stage) -> str | None:
    """The model size of a stage's pre-trained model (None before pre-training)."""
    if stage.kind == "pretrain":
        return stage.config.preset
    return next((p for p in map(preset_of, stage.inputs) if p), None)


def model_name(labels: dict[str, Any]) -> str:
    """A model as the study's tables name it: its family, its size where sizes are swept
    (gpt2/micro), its weight decay, contamination form and decontamination method where those
    are swept (gpt2/wd=0.1, gpt2/form=renamed/decontam=ngram13), so that each is a model of its
    own."""
    name = f"{labels['model']}/{labels['preset']}" if "preset" in labels else labels["model"]
    if "weight_decay" in labels:
        name += f"/wd={labels['weight_decay']:g}"
    for swept in SWEPT_NAME_LABELS:  # grid.variants; read back by swept_labels
        if swept in labels:
            name += f"/{swept}={labels[swept]}"
    return f"{name}/{labels['continued']}" if "continued" in labels else name


def evaluated_models(stages: list[Stage]) -> list[str]:
    """The models a study's tables name (model_name), in the grid's order: each swept size,
    weight decay, form, decontaminator and continued model is one (what the primary family
    counts, lab.analysis.questions.power_plan)."""
    return list(dict.fromkeys(model_name(s.labels) for s in stages if s.kind == "evaluate"))


def describe(stage: Stage) -> str:
    labels = " ".join(f"{k}={v}" for k, v in stage.labels.items())
    return f"{stage.kind} {labels}".strip()
