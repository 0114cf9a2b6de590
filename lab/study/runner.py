"""`lab study`: expand a recipe into stages, run what is not finished, collect one results table.

Every stage writes one directory under STUDY/stages/, named by the kind of stage and a hash of
its config and of its inputs' names, so a finished stage is never run twice and a pre-trained
model is shared by every fine-tuning run that uses it. Each stage's entry function writes its
output atomically (an interrupted pre-training keeps OUT.partial with checkpoints and is resumed),
so after a kill the runner simply starts again.
"""
from __future__ import annotations

import contextlib
import csv
import fcntl
import functools
import hashlib
import itertools
import json
import os
import re
import signal
import shutil
import sys
import time
import traceback
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.common import (LabError, command_line, default_of, environment_record, sha256_file,
                        write_json_atomic)
from lab.contamination import settings as settings_table
from lab.study.recipe import (KEY_NEUTRAL_DEFAULTS, Recipe, deepspeed_config, for_model,
                              recipe_dict, recipe_from_dict)
from lab.tokenizer import TokenizerConfig
from lab.tasks import get_task, task_for_benchmark
from lab.train.finetune import FinetuneConfig
from lab.train.pretrain import PretrainConfig

RESULTS = "results.csv"
SAMPLES = "samples.csv"
DOSE_GROUP = "dose="  # results.csv group of a dose ladder's level: dose=0, dose=4, ...
PROBES = "probes.csv"  # per pre-trained model and probed sample: the memorisation probes
PROBE_COLUMNS = ("tokens", "loss", "min_k", "infill", "extraction_em", "extraction_bleu")


@dataclass
class Stage:
    kind: str
    config: dict[str, Any]
    inputs: list["Stage"] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=dict)
    # How a pre-training runs (recipe resources.pretrain): only what can change its result
    # enters the key (launch_key), so a stage run by other means is still found done.
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        payload = {"kind": self.kind, "config": self.config, "inputs": [s.key for s in self.inputs]}
        keyed = launch_key(self.launch)
        if keyed:
            payload["launch"] = keyed
        payload = json.dumps(payload, sort_keys=True)
        return f"{self.kind}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"

    def out(self, study: Path) -> Path:
        return study / "stages" / self.key

    def done(self, study: Path) -> bool:
        # The file each kind writes last, inside its atomically renamed directory.
        return any((self.out(study) / name).is_file()
                   for name in ("manifest.json", "metrics.json", "summary.json"))


def launch_key(launch: dict[str, Any]) -> dict[str, Any]:
    """What of a pre-training's launch can change its weights: the world size (the batch is per
    rank) and the DeepSpeed config's contents. Nothing for one plain process (older keys)."""
    keyed: dict[str, Any] = {}
    world = launch.get("processes", 1) * launch.get("nodes", 1)
    if world != 1:
        keyed["world_size"] = world
    if launch.get("deepspeed"):
        keyed["deepspeed_sha256"] = _deepspeed_sha256(launch["deepspeed"])
    return keyed


@functools.lru_cache(maxsize=None)
def _deepspeed_sha256(name: str) -> str:
    # A stage's key is computed on every look (its inputs' keys too): hash each config once.
    return sha256_file(deepspeed_config(name))


def _placement(recipe: Recipe) -> dict[str, Any]:
    """Device and precision of evaluation and probes where they are not the defaults (CPU,
    float32): they change the numbers, so they enter the key, and older keys stay as they were."""
    defaults = type(recipe.resources)()
    return {name: getattr(recipe.resources, name) for name in ("device", "dtype")
            if getattr(recipe.resources, name) != getattr(defaults, name)}


def _keyed(recipe: Recipe, section: str) -> dict[str, Any]:
    """A recipe section as it enters stage keys: fields added since studies were first made
    are left out while they keep their default (those studies keep their keys)."""
    neutral = KEY_NEUTRAL_DEFAULTS.get(section, {})
    return {k: v for k, v in recipe_dict(recipe)[section].items()
            if not (k in neutral and v == neutral[k])}


def _added_fields(recipe: Recipe, section: str) -> dict[str, Any]:
    """The fields added to a section since studies were first made, where they differ from
    their key-neutral default (a stage config built field by field takes these as a whole)."""
    return {k: v for k, v in _keyed(recipe, section).items() if k in KEY_NEUTRAL_DEFAULTS[section]}


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


def _grid(recipe: Recipe) -> list[Stage]:
    stages: list[Stage] = []
    arm_stage: dict[tuple[str, int], Stage] = {}
    for arm in recipe.arms:
        for seed in recipe.seeds:
            stage = Stage("inject", {
                "benchmark": recipe.benchmark, "setting": arm, "seed": seed,
                "base": recipe.corpus.base, "base_splits": recipe.corpus.base_splits,
                "limit": recipe.corpus.limit, "repeat": recipe.injection.repeat,
                "fraction": recipe.injection.fraction if settings_table.get(arm).injects else None,
                **({"doses": recipe.injection.doses}
                   if recipe.injection.doses and settings_table.get(arm).injects else {}),
                **({"samples": recipe.injection.samples} if recipe.injection.samples else {}),
                "decontaminate": recipe.injection.decontaminate,
                **({"placebo_from": recipe.injection.placebo_from}
                   if recipe.injection.placebo_from and settings_table.get(arm).placebo else {}),
                **({"placebo_match": "length"}
                   if recipe.injection.placebo_match == "length" and settings_table.get(arm).placebo
                   else {}),
            }, labels={"arm": arm, "seed": seed})
            arm_stage[(arm, seed)] = stage
            stages.append(stage)
    # One tokenizer per study, trained on a control corpus (never on injected test data).
    control = arm_stage.get(("control", recipe.seeds[0])) or Stage("inject", {
        **{k: v for k, v in arm_stage[(recipe.arms[0], recipe.seeds[0])].config.items()
           if k != "doses"}, "setting": "control", "fraction": None,
    }, labels={"arm": "control", "seed": recipe.seeds[0]})
    if control not in stages:
        stages.insert(0, control)
    tokenizer = Stage("tokenizer", {"vocab_size": recipe.tokenizer.vocab_size,
                                    "benchmarks": list(default_of(TokenizerConfig, "benchmarks"))},
                      [control])
    stages.append(tokenizer)
    swept = len(recipe.preset) > 1  # a preset label only where sizes are swept
    whole = recipe
    for model, preset in itertools.product(whole.models, whole.preset):
        recipe = for_model(whole, model)
        for arm in recipe.arms:
            for seed in recipe.seeds:
                pre = Stage("pretrain", {"model": model, "preset": preset, "seed": seed,
                                         **_keyed(recipe, "pretrain")},
                            [arm_stage[(arm, seed)], tokenizer],
                            labels={"model": model, **({"preset": preset} if swept else {}),
                                    "arm": arm, "seed": seed},
                            launch=dataclasses.asdict(recipe.resources.pretrain))
                stages.append(pre)
                stages += _probes(recipe, pre, arm, seed, arm_stage)
                for epochs in recipe.finetune.epochs:
                    for size in recipe.finetune.train_sizes:
                        fine = Stage("finetune", {
                            "task": task_for_benchmark(recipe.benchmark), "epochs": epochs, "train_size": size,
                            "seed": seed, "lr": recipe.finetune.lr,
                            "batch_size": recipe.finetune.batch_size,
                            "select": recipe.finetune.select,
                            # what evaluation generates: fine-tuned to that length (null: the
                            # fine-tuning default, which evaluation then generates)
                            "max_target_length": (recipe.evaluation.max_new_tokens
                                                  or default_of(FinetuneConfig, "max_target_length")),
                            **_added_fields(recipe, "finetune"),
                        }, [pre], labels={**pre.labels, "epochs": epochs, "train_size": size},
                            launch={"device": recipe.resources.device})
                        evaluation = Stage("evaluate", {
                            "task": task_for_benchmark(recipe.benchmark), **recipe_dict(recipe)["evaluation"],
                            **_placement(recipe),
                        }, [fine], labels=fine.labels, launch={"device": recipe.resources.device})
                        stages += [fine, evaluation]
    return stages


def _probes(recipe: Recipe, pre: Stage, arm: str, seed: int,
            arm_stage: dict[tuple[str, int], Stage]) -> list[Stage]:
    """Probe stages of one pre-trained model: a contaminated arm on its own injected and
    held-out samples; the control on each contaminated arm's samples (which it never saw); a
    placebo, like the control, on its base arm's samples (same seed), which it never saw either:
    its documents had the same form and count, so its probe is the format-only baseline."""
    if not recipe.probe.enabled:
        return []
    launch = {"device": recipe.resources.device}
    config = {"min_k": recipe.probe.min_k, "max_samples": recipe.probe.max_samples,
              "max_names": recipe.probe.max_names, **_placement(recipe)}
    setting = settings_table.get(arm)
    if setting.injects_test:
        return [Stage("probe", config, [pre], labels={**pre.labels, "groups": arm}, launch=launch)]
    if setting.placebo:
        return [Stage("probe", config, [pre, arm_stage[(setting.base, seed)]], launch=launch,
                      labels={**pre.labels, "groups": setting.base})]
    return [Stage("probe", config, [pre, arm_stage[(other, seed)]], launch=launch,
                  labels={**pre.labels, "groups": other})
            for other in recipe.arms if settings_table.get(other).injects_test]


def preset_of(stage: Stage) -> str | None:
    """The model size of a stage's pre-trained model (None before pre-training)."""
    if stage.kind == "pretrain":
        return stage.config["preset"]
    return next((p for p in map(preset_of, stage.inputs) if p), None)


def benchmark_of(stage: Stage) -> str | None:
    """The benchmark a stage's models were injected with: its inject stage's (the recipe's)."""
    if stage.kind == "inject":
        return stage.config["benchmark"]
    return next((b for b in map(benchmark_of, stage.inputs) if b), None)


@contextlib.contextmanager
def _stage_lock(stage: Stage, study: Path) -> Iterator[None]:
    """Hold STUDY/stages/KEY.lock while a stage runs: a second runner on the same study (a
    resumed run beside the workers of a killed one, two SLURM jobs) waits instead of colliding.
    The kernel releases the lock when its holder dies."""
    lock = stage.out(study).with_name(stage.key + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_leftovers(stage: Stage, study: Path) -> None:
    """Temporary siblings of a stage's output that a killed run left (atomic outputs are built
    in OUT.tmp-* and swapped through OUT.old-*). Called under the stage's lock: whoever wrote
    them no longer holds it, so nobody is writing them now. OUT.partial (a pre-training to
    resume) is kept."""
    out = stage.out(study)
    for pattern in (".tmp-*", ".old-*"):
        for leftover in out.parent.glob(out.name + pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def stage_log(stage: Stage, study: Path) -> Path:
    return stage.out(study).with_name(stage.key + ".log")


def stage_timing(stage: Stage, study: Path) -> Path:
    """STUDY/stages/KEY.timing.json: the stage's wall time as it ran, whoever ran it."""
    return stage.out(study).with_name(stage.key + ".timing.json")


def recorded_seconds(stage: Stage, study: Path) -> float | None:
    try:
        return float(json.loads(stage_timing(stage, study).read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def _timed(stage: Stage, study: Path, threads: int) -> Iterator[None]:
    """Times the stage's own work (not a queue or a lock before it) the same way for every
    executor, and records it beside the stage's output once the stage is finished."""
    started = time.perf_counter()
    yield
    write_json_atomic(stage_timing(stage, study), {
        "seconds": round(time.perf_counter() - started, 3), "threads": threads,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


_CONSOLE_FDS: list[tuple[int, int]] = []  # the console's stdout/stderr while a stage's log has 1/2


def console_stderr() -> int:
    """A descriptor of the console's stderr, also while a stage running in this process sends
    descriptors 1 and 2 to its log (a signal handler's last line belongs on the console)."""
    return _CONSOLE_FDS[0][1] if _CONSOLE_FDS else 2


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[None]:
    """Send this process's output to a stage's log: file descriptors 1 and 2 (library and
    C-level output, and the ranks a stage launches) and Python's sys.stdout / sys.stderr, which
    need not be those descriptors (a test's captured streams). The runner's progress display
    writes to a terminal handle of its own, so it stays on the console."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        _CONSOLE_FDS.append(saved_fds)
        try:
            yield
        except BaseException:
            traceback.print_exc()
            raise
        finally:
            _CONSOLE_FDS.pop()
            log.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])


def run_stage(stage: Stage, study: Path, corpora_dir: Path | None, threads: int) -> None:
    """Run one stage unless it is finished, on `threads` torch threads (the study's, fixed: a
    float sum depends on how many threads share it), its output in STUDY/stages/KEY.log and
    its wall time in KEY.timing.json, whatever the executor."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _stage_lock(stage, study):
            _remove_leftovers(stage, study)
            if stage.done(study):  # another runner may have finished it while we waited
                return
            with _output_to(stage_log(stage, study)), _timed(stage, study, threads):
                _run_stage_unlocked(stage, study, corpora_dir, threads)
    finally:
        # A stage run in the lab's own process leaves it as it found it (the next caller, a
        # test or a notebook, keeps its own thread count).
        torch.set_num_threads(before)


def _run_stage_unlocked(stage: Stage, study: Path, corpora_dir: Path | None,
                        threads: int | None = None) -> None:
    out = stage.out(study)
    cfg = stage.config
    if stage.kind == "inject":
        from lab.contamination.inject import InjectConfig, run_inject

        tuples = {name: tuple(cfg[name]) for name in ("base_splits", "placebo_from") if name in cfg}
        # A placebo stage keyed without placebo_match draws at random, as before length matching.
        drawn = {"placebo_match": "random"} if settings_table.get(cfg["setting"]).placebo else {}
        run_inject(InjectConfig(**{**drawn, **cfg, **tuples}, out=out, corpora_dir=corpora_dir))
    elif stage.kind == "tokenizer":
        from lab.tokenizer import train_tokenizer

        manifest = train_tokenizer(stage.inputs[0].out(study), out / "tokenizer", **cfg,
                                   corpora_dir=corpora_dir, force=True)
        write_json_atomic(out / "manifest.json", manifest)
    elif stage.kind == "pretrain":
        launch = stage.launch or {}
        if launch_key(launch) or launch.get("deepspeed"):
            launch_ranks(pretrain_config(stage, study), launch, threads or available_cores())
        else:
            _pretrain_here(stage, study)
    elif stage.kind == "probe":
        from lab.eval.probe import run_probe

        groups = stage.inputs[1].out(study) if len(stage.inputs) > 1 else None
        run_probe(stage.inputs[0].out(study), out, **cfg, groups=groups, corpora_dir=corpora_dir,
                  force=True)
    elif stage.kind == "finetune":
        from lab.train.finetune import run_finetune

        run_finetune(FinetuneConfig(**cfg, pretrained=stage.inputs[0].out(study), out=out,
                                    force=True, corpora_dir=corpora_dir))
    elif stage.kind == "evaluate":
        from lab.eval.generate import run_evaluate

        # The recipe's benchmark (a -paper subset is evaluated on itself, not on its base).
        benchmark = benchmark_of(stage) or get_task(cfg["task"]).benchmark
        ids = None
        if cfg.get("max_samples"):
            ids = out.with_name(out.name + ".ids")
            from lab.corpora import load_samples

            records = load_samples(benchmark, cfg["split"], corpora_dir).records
            ids.write_text("\n".join(s.id for s in records[: cfg["max_samples"]]) + "\n")
        options = {k: v for k, v in cfg.items() if k != "max_samples"}  # max_samples: the ids
        run_evaluate(**{**options, "metrics": tuple(cfg["metrics"])},
                     model=stage.inputs[0].out(study), ids=ids, out=out, force=True,
                     corpora_dir=corpora_dir, benchmark=benchmark)


def pretrain_config(stage: Stage, study: Path, resume: bool | None = None) -> PretrainConfig:
    """The PretrainConfig of a pre-training stage: its keyed config, its inputs and its launch;
    it resumes OUT.partial when there is one (or as `resume` says)."""
    out, launch = stage.out(study), stage.launch or {}
    if resume is None:
        resume = out.with_name(out.name + ".partial").exists()
    return PretrainConfig(
        **stage.config, corpus=stage.inputs[0].out(study),
        tokenizer=stage.inputs[1].out(study) / "tokenizer", out=out, resume=resume,
        cache_dir=study / "cache",
        deepspeed=deepspeed_config(launch["deepspeed"]) if launch.get("deepspeed") else None,
        save_steps=launch.get("save_steps", default_of(PretrainConfig, "save_steps")))


def _pretrain_here(stage: Stage, study: Path, resume: bool | None = None) -> None:
    from lab.train.pretrain import run_pretrain

    run_pretrain(pretrain_config(stage, study, resume))


def rank_command(cfg: Any, launch: dict[str, Any]) -> list[str]:
    """The command that starts `lab pretrain` with `cfg` on every rank of one node."""
    processes = str(launch.get("processes", 1))
    if launch.get("launcher", "torchrun") == "deepspeed":
        # lab reads its rank from the environment and takes no --local_rank argument.
        start = ["deepspeed", "--num_nodes", "1", "--num_gpus", processes, "--no_local_rank",
                 "--module"]
    else:
        start = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                 "--nproc_per_node", processes, "-m"]
    return [*start, "lab.cli", "pretrain", *command_line(cfg)]


def launch_ranks(cfg: Any, launch: dict[str, Any], threads: int) -> None:
    """Run one pre-training as `processes` ranks under its launcher, in this process's output,
    and wait. The launcher dies with this process, and each rank with the launcher
    (LAB_DIE_WITH_PARENT), so a killed study leaves no rank behind; an interrupted run keeps
    OUT.partial and its checkpoints, from which the next run resumes."""
    import subprocess

    if launch.get("nodes", 1) != 1:
        raise LabError(f"resources.pretrain.nodes {launch['nodes']}: more than one node needs "
                       "--executor slurm")
    processes = launch.get("processes", 1)
    env = {**os.environ, "LAB_DIE_WITH_PARENT": "1",
           "OMP_NUM_THREADS": str(max(1, threads // processes))}
    sys.stdout.flush()
    sys.stderr.flush()
    launcher = subprocess.Popen(rank_command(cfg, launch), env=env, preexec_fn=die_with_parent)
    try:
        code = launcher.wait()
    except BaseException:
        launcher.terminate()  # the launcher stops its ranks
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
        raise
    if code != 0:
        raise LabError(f"pre-training on {processes} ranks failed (exit {code}); its log says why")


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies (Linux), so no stage outlives its runner."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def collect(recipe: Recipe, stages: list[Stage], study: Path) -> tuple[Path, Path]:
    """results.csv (one row per evaluation and group), samples.csv (one row per sample) and
    probes.csv, from the finished stages."""
    run_rows, sample_rows, probe_rows = collected_rows(recipe, stages, study)
    write_table(study / PROBES, probe_rows)
    return write_table(study / RESULTS, run_rows), write_table(study / SAMPLES, sample_rows)


def collected_rows(recipe: Recipe, stages: list[Stage], study: Path
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of results.csv, samples.csv and probes.csv from the finished stages (a killed
    or running study's included), written nowhere."""
    _check_seeds(stages, study)
    run_rows, sample_rows = [], []
    for stage in stages:
        if stage.kind != "evaluate" or not stage.done(study):
            continue
        metrics = json.loads((stage.out(study) / "metrics.json").read_text())
        pretrain = json.loads((stage.inputs[0].inputs[0].out(study) / "manifest.json").read_text())
        base = {"study": recipe.name, "benchmark": recipe.benchmark, "task": metrics["task"],
                "model": model_name(stage.labels),
                **{k: stage.labels.get(k) for k in ("arm", "seed", "epochs", "train_size")},
                "stage": stage.key,
                # How much of pre-training was test data, and how far its loss came down: a
                # lift (or its absence) means little without either.
                "injected_token_fraction": pretrain["packing"]["injected_token_fraction"],
                "pretrain_loss": pretrain["loss"]["final"]}
        groups = {"all": {"samples": metrics["samples"], **metrics["metrics"]}, **metrics["by_group"]}
        for group, values in groups.items():
            run_rows.append({**base, "group": group, **values,
                             **baseline_columns(metrics.get("baselines") or {}, group)})
        # A dose ladder's levels: rows of their own (group dose=K), with the level's share of
        # the trained tokens.
        shares = pretrain["corpus"].get("injected_token_fraction_by_dose") or {}
        for dose, values in (metrics.get("by_dose") or {}).items():
            run_rows.append({**base, "injected_token_fraction": shares.get(dose, 0.0),
                             "group": f"{DOSE_GROUP}{dose}", **values})
        with open(stage.out(study) / "predictions.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                sample_rows.append({**base, "id": row["id"], "group": row["group"],
                                    **({"dose": row["dose"]} if "dose" in row else {}),
                                    **{f"score_{k}": v for k, v in row["scores"].items()}})
    probe_rows = []
    for stage in stages:
        if stage.kind != "probe" or not stage.done(study):
            continue
        summary = json.loads((stage.out(study) / "summary.json").read_text())
        base = {"study": recipe.name, "benchmark": recipe.benchmark,
                "model": model_name(stage.labels),
                **{k: stage.labels.get(k) for k in ("arm", "seed", "groups")},
                "form": summary["form"], "stage": stage.key}
        with open(stage.out(study) / "probes.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                probe_rows.append({**base, "id": row["id"], "group": row["group"],
                                   **({"dose": row["dose"]} if "dose" in row else {}),
                                   **{k: row.get(k) for k in PROBE_COLUMNS}})
    return run_rows, sample_rows, probe_rows


BASELINE_PREFIX = "baseline_"  # results.csv: baseline_<name>_<metric>, on the row's samples


def baseline_columns(baselines: dict[str, Any], group: str) -> dict[str, float]:
    """A results row's baseline scores: each trivial baseline's, on the same group of samples."""
    columns = {}
    for name, scores in baselines.items():
        if not isinstance(scores, dict) or "metrics" not in scores:
            continue  # the retrieval pool's note
        values = scores["metrics"] if group == "all" else scores["by_group"].get(group, {})
        columns.update({f"{BASELINE_PREFIX}{name}_{metric}": value
                        for metric, value in values.items() if metric != "samples"})
    return columns


def model_name(labels: dict[str, Any]) -> str:
    """A model as the study's tables name it: its family, and its size where sizes are swept
    (gpt2/micro), so that every size is a model of its own."""
    return f"{labels['model']}/{labels['preset']}" if "preset" in labels else labels["model"]


def _check_seeds(stages: list[Stage], study: Path) -> None:
    """Refuse results whose repetitions collapsed: the pre-trained models of one arm and model
    must differ by seed in their initial weights and their data order."""
    from lab.train.pretrain import check_seed_diversity

    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for stage in stages:
        if stage.kind == "pretrain" and stage.done(study):
            manifest = json.loads((stage.out(study) / "manifest.json").read_text())
            groups.setdefault((stage.labels["model"], stage.config["preset"], stage.labels["arm"]),
                              []).append(manifest)
    several = len({preset for _model, preset, _arm in groups}) > 1
    for (model, preset, arm), manifests in sorted(groups.items()):
        try:
            check_seed_diversity(manifests)
        except LabError as exc:
            named = f"{model} {preset}" if several else model
            raise LabError(f"{study}: {named} {arm}: {exc}") from None


def table_cell(value: Any) -> Any:
    """A value as the study's tables hold it: floats to 6 places."""
    return round(value, 6) if isinstance(value, float) else value


def write_table(path: Path, rows: list[dict[str, Any]]) -> Path:
    """The CSV table (what lab stats and lab report read) and the same rows as Parquet beside it
    (NAME.parquet, typed columns for pandas and polars)."""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    rounded = [{c: table_cell(row.get(c)) for c in columns} for row in rows]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rounded)
    _write_parquet(path.with_suffix(".parquet"), rounded, columns)
    tmp.replace(path)
    return path


def _write_parquet(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in columns})
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


EXECUTORS = ("local", "slurm", "submitit-local")


def describe(stage: Stage) -> str:
    labels = " ".join(f"{k}={v}" for k, v in stage.labels.items())
    return f"{stage.kind} {labels}".strip()


def _worker_init() -> None:
    # Die with the runner: a killed `lab study` must not leave workers finishing stages
    # behind the back of the run that resumes it.
    die_with_parent()
    # Ctrl-C reaches the whole process group: the runner answers it with one line and its exit
    # takes the workers down (above); a worker's own KeyboardInterrupt traceback would only add
    # noise to the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Finished:
    """Handle of a stage that already ran in this process (one local worker: no pool); its
    error, if any, is raised where a worker's would be."""

    def __init__(self, error: Exception | None = None):
        self.error = error

    def done(self) -> bool:
        return True

    def result(self) -> None:
        if self.error is not None:
            raise self.error


def _submitter(executor: str, workers: int, threads: int, study: Path, corpora_dir: Path | None,
               slurm: dict[str, Any] | None):
    """(submit(stage) -> handle with done()/result(), shutdown())."""
    if executor == "local" and workers == 1:
        def run_here(stage: Stage) -> _Finished:
            try:
                run_stage(stage, study, corpora_dir, threads)
            except Exception as exc:  # noqa: BLE001 - reported by _schedule like a worker's
                return _Finished(exc)
            return _Finished()
        return run_here, lambda: None
    if executor == "local":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init)
        return (lambda stage: pool.submit(run_stage, stage, study, corpora_dir, threads),
                lambda: pool.shutdown(wait=True, cancel_futures=True))
    try:
        import submitit
    except ImportError:
        raise LabError(f"--executor {executor}: needs submitit (pip install 'lab[slurm]')") from None
    folder = study / "submitit"
    if executor == "slurm":
        pool = submitit.AutoExecutor(folder=folder, cluster="slurm")
    else:
        pool = submitit.LocalExecutor(folder=folder)

    def submit(stage: Stage) -> _SubmititHandle:
        # One executor, its parameters set for each job: a multi-rank pre-training is one job of
        # `processes` tasks per node (one rank each), every other stage a one-task job.
        pool.update_parameters(**job_parameters(stage, executor, threads, slurm or {}))
        if stage.kind == "pretrain" and _world(stage.launch) > 1:
            # Every rank must agree on resuming: decided once, here, not by each task.
            partial = stage.out(study).with_name(stage.key + ".partial")
            job = pool.submit(run_rank, stage, study, threads, partial.exists())
        else:
            job = pool.submit(run_stage, stage, study, corpora_dir, threads)
        return _SubmititHandle(job, stage)

    return submit, lambda: None


def _world(launch: dict[str, Any]) -> int:
    return launch.get("processes", 1) * launch.get("nodes", 1)


def job_parameters(stage: Stage, executor: str, threads: int, slurm: dict[str, Any]
                   ) -> dict[str, Any]:
    """submitit parameters of one stage's job. `slurm` (--slurm key=value) applies to every job;
    a multi-rank pre-training asks for its nodes, one task per rank and, on SLURM, one GPU per
    rank; everything else is one task (on the GPUs --slurm gives, if any)."""
    base: dict[str, Any] = {"timeout_min": 24 * 60}
    if executor == "slurm":
        base.update(name=f"lab-{stage.kind}", cpus_per_task=threads)
    world = _world(stage.launch)
    if stage.kind == "pretrain" and world > 1:
        processes = stage.launch.get("processes", 1)
        ranks = {"nodes": stage.launch.get("nodes", 1), "tasks_per_node": processes}
        if executor == "slurm":
            ranks.update(gpus_per_node=processes, cpus_per_task=max(1, threads // processes))
        return {**base, **slurm, **ranks}
    one = {"tasks_per_node": 1}
    if executor == "slurm":
        one["nodes"] = 1
        if str(stage.launch.get("device", "cpu")).startswith("cuda"):
            one["gpus_per_node"] = 1  # fine-tuning, evaluation and probes: one GPU each
    return {**base, **slurm, **one}


def run_rank(stage: Stage, study: Path, threads: int, resume: bool) -> None:
    """One task of a multi-rank pre-training job: the scheduler started one per rank; submitit
    tells each its rank and the rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, ...), and each runs
    `lab pretrain` itself, no launcher in between. Rank 0 holds the stage's lock and clears
    what a killed run left; the others meet it at the rendezvous."""
    import submitit
    import torch

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    torch.set_num_threads(max(1, threads // _world(stage.launch)))
    if int(os.environ["RANK"]) != 0:
        _pretrain_here(stage, study, resume)
        return
    with _stage_lock(stage, study):
        _remove_leftovers(stage, study)
        with _output_to(stage_log(stage, study)), _timed(stage, study, threads):
            _pretrain_here(stage, study, resume)



class _SubmititHandle:
    def __init__(self, job: Any, stage: Stage):
        self.job, self.stage = job, stage

    def done(self) -> bool:
        return self.job.done()

    def result(self) -> None:
        try:
            self.job.results()  # every task of the job (one, or one per rank)
        except LabError:
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise LabError(f"stage {self.stage.key} failed on {type(self.job).__name__} "
                           f"{self.job.job_id}: {first} (logs: {self.job.paths.stderr})") from None


def _schedule(stages: list[Stage], study: Path, submit: Callable[[Stage], Any], workers: int,
              on_event: Callable[..., None]) -> list[dict[str, Any]]:
    """Run every unfinished stage once its inputs are finished, at most `workers` at a time,
    seed by seed: a study stopped part-way (hours of CPU, a session's end) then holds every arm
    of the seeds it finished, i.e. complete comparisons, not every seed of its first arms. The
    order changes no result: each stage's inputs and seed are fixed by its key."""
    seed_rank: dict[Any, int] = {}
    for stage in stages:
        seed_rank.setdefault(stage.labels.get("seed"), len(seed_rank))
    position = {id(stage): index for index, stage in enumerate(stages)}
    waiting = sorted((s for s in stages if not s.done(study)),
                     key=lambda s: (seed_rank[s.labels.get("seed")], position[id(s)]))
    running: dict[str, tuple[Stage, Any, float]] = {}
    timings = []
    warned: set[str] = set()
    while waiting or running:
        ready = [s for s in waiting if all(i.done(study) for i in s.inputs)]
        launch = ready[: max(0, workers - len(running))]
        for stage in launch:
            waiting.remove(stage)
            on_event("start", stage)
            started = time.perf_counter()  # before submit: in-process, submit runs the stage
            running[stage.key] = (stage, submit(stage), started)
        finished = [key for key, (_s, handle, _t) in running.items() if handle.done()]
        for key in finished:
            stage, handle, started = running.pop(key)
            try:
                handle.result()  # re-raises the stage's error: the study stops there
            except LabError:
                raise
            except Exception as exc:  # a crash inside a worker: its traceback is in the log
                log = stage_log(stage, study)
                where = f" (traceback in {log})" if log.is_file() else ""
                raise LabError(f"stage {key} ({describe(stage)}) failed: "
                               f"{type(exc).__name__}: {exc}{where}") from exc
            recorded = recorded_seconds(stage, study)  # the stage's own time, as it ran
            seconds = round(time.perf_counter() - started if recorded is None else recorded, 3)
            timings.append({"stage": key, "kind": stage.kind, "seconds": seconds})
            on_event("end", stage, seconds)
            for warning in log_warnings(stage_log(stage, study)):
                if warning not in warned:  # each distinct warning once per run, not per stage
                    warned.add(warning)
                    on_event("warning", stage, warning)
        if not finished and running:
            time.sleep(0.2)
        elif not finished and not running and waiting:
            missing = waiting[0]
            raise LabError(f"stage {missing.key} waits for inputs that did not finish")
    return timings


# A warning line in a stage log: Python's warnings ("...Warning: ..."), the `logging` records of
# DeepSpeed and others ("[WARNING]", "WARNING:"), and transformers' logger, whose default format
# prefixes "[transformers]" and shows warnings and errors only, and the lab's own ("lab: warning:").
WARNING_LINE = re.compile(r"Warning: |\[WARNING\]|\bWARNING\b|^\[transformers\] |^lab: warning: ")
_LOG_TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]?\s*")


def log_warnings(log: Path) -> list[str]:
    """The distinct warning lines of a stage log, in order, without their timestamps."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = [_LOG_TIMESTAMP.sub("", line).strip() for line in lines if WARNING_LINE.search(line)]
    return list(dict.fromkeys(found))


def _recipe_differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Paths of the fields whose values differ between two recipe dicts."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new))
                for d in _recipe_differences(old.get(key), new.get(key),
                                             f"{path}.{key}" if path else key)]
    return [] if old == new else [path]


def study_differences(old: Recipe, new: Recipe) -> list[str]:
    """Fields in which two recipes make other studies: all but `resources` (where a stage runs;
    a launch that changes results changes the stage keys) and `statistics` (how the finished
    results are read: a study may be re-read under other declarations, and recipe.json records
    the latest)."""
    return [d for d in _recipe_differences(recipe_dict(old), recipe_dict(new))
            if not d.startswith(("resources.", "statistics."))]


def check_executor(executor: str, workers: int | None) -> None:
    if executor not in EXECUTORS:
        raise LabError(f"--executor {executor}: choose from {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise LabError(f"--workers {workers}: must be >= 1")


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or SLURM)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


SUMMARY = "study.json"


def read_summary(study: Path) -> dict[str, Any]:
    """STUDY/study.json as a dict: empty for a new study, refused when unreadable."""
    path = study / SUMMARY
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None
    if not isinstance(summary, dict):
        raise LabError(f"{path}: unreadable (not a JSON object)")
    return summary


def study_threads(recipe: Recipe, study: Path, summary: dict[str, Any] | None = None) -> int:
    """The torch threads of every stage of this study: the recipe's, else those recorded when
    the study began (a resumed or re-run study computes what the first run computed), else
    this machine's cores. A recipe that asks for another count than the recorded one is
    refused: its stages would not reproduce the finished ones. `summary`: study.json, if the
    caller has read it."""
    recorded = (read_summary(study) if summary is None else summary).get("threads")
    requested = recipe.resources.threads
    if recorded is not None and requested is not None and recorded != requested:
        raise LabError(f"{study / SUMMARY}: the study's stages run on {recorded} threads; "
                       f"resources.threads {requested} would compute other numbers "
                       f"(use --threads {recorded} or a new --out)")
    return requested or recorded or available_cores()


def default_workers(executor: str, threads: int) -> int:
    """Stages at a time when --workers is not given: as many as the cores hold at the study's
    thread count locally (one at the default: more would only share the same cores)."""
    return 64 if executor == "slurm" else max(1, available_cores() // threads)


def study_data(recipe: Recipe, corpora_dir: Path | None) -> dict[str, dict[str, str]]:
    """Fingerprints of the datasets a study reads (its base corpus, its benchmark and, for a
    -paper subset, the benchmark it was drawn from): stage keys come from the recipe alone, so
    this is what tells a resumed study that `--corpora` now holds other data."""
    from lab.corpora import data_fingerprints

    names = dict.fromkeys([recipe.corpus.base, recipe.benchmark,
                           recipe.benchmark.removesuffix("-paper")])
    return {name: data_fingerprints(name, corpora_dir) for name in names}


def data_change(recorded: dict[str, Any] | None, now: dict[str, dict[str, str]]) -> str | None:
    """The first dataset file that differs from the one the study began with, else None (a
    study begun before fingerprints were recorded takes today's)."""
    for name, files in (recorded or {}).items():
        for file in sorted(set(files) | set(now.get(name, {}))):
            if files.get(file) != now.get(name, {}).get(file):
                return f"{name} {file}"
    return None


def run_study(recipe: Recipe, study: Path, corpora_dir: Path | None = None, dry_run: bool = False,
              executor: str = "local", workers: int | None = None,
              slurm: dict[str, Any] | None = None,
              on_event: Callable[..., None] | None = None, ready_checked: bool = False,
              seeds: list[int] | None = None, allow_underpowered: bool = False) -> dict[str, Any]:
    """Entry point of `lab study`: run the stages that are not finished, then collect results.
    `ready_checked`: the caller has run preflight.check_ready for this recipe and folder;
    `seeds`: run only the shard of those seeds (`expand`); `allow_underpowered`: run a study
    whose primary tests can never reach alpha (lab.study.questions.power_problem)."""
    study = Path(study)
    stages = expand(recipe, seeds)
    check_executor(executor, workers)
    from lab.study.preflight import check_ready, pending_stages, preflight, slow_settings

    data = study_data(recipe, corpora_dir)
    changed_data = data_change(read_summary(study).get("data"), data)
    changed_data = changed_data and (
        f"{study / SUMMARY}: the data changed since this study began ({changed_data} differs); "
        "its stages were built on the old data: use a new --out")
    if dry_run:
        from lab.study.cost import estimate
        from lab.study.questions import power_plan, power_problem

        # A plan for another machine (a cluster) is worth printing where the study cannot run.
        pending = pending_stages(recipe, study, seeds)
        underpowered = power_problem(recipe)
        return {"stages": len(stages), "done": len(stages) - len(pending),
                "estimate": estimate(recipe, stages, study), "power": power_plan(recipe),
                "problems": [*preflight(recipe, study, corpora_dir, executor, pending=pending),
                             *([changed_data] if changed_data else []),
                             *([underpowered] if underpowered and not allow_underpowered else [])],
                "warnings": slow_settings(pending, executor)}
    if changed_data:
        raise LabError(changed_data)
    if not ready_checked:
        check_ready(recipe, study, corpora_dir, executor, seeds=seeds,  # every missing piece at once
                    allow_underpowered=allow_underpowered)
    if study.exists() and not study.is_dir():
        raise LabError(f"{study}: exists and is not a study directory")
    study.mkdir(parents=True, exist_ok=True)
    recorded = study / "recipe.json"
    if recorded.is_file():
        try:
            previous = recipe_from_dict(json.loads(recorded.read_text()))
        except (OSError, ValueError) as exc:
            raise LabError(f"{recorded}: unreadable ({exc})") from None
        except LabError as exc:
            raise LabError(f"{recorded}: a recipe this lab cannot read ({exc})") from None
        # Fields added to the schema since the study began take their defaults, so an older
        # study resumes; any real difference is refused and named.
        # The thread count is checked against what the study recorded (study_threads).
        # Resources may differ (a study begun on a laptop goes on on a cluster): the thread
        # count is checked below, and a launch that changes results changes the stage keys.
        changed = study_differences(previous, recipe)
        if changed:
            raise LabError(f"{recorded}: the study directory holds another recipe (differs in "
                           f"{', '.join(changed[:3])}; use a new --out)")
    previous_summary = read_summary(study)
    threads = study_threads(recipe, study, previous_summary)
    workers = workers or default_workers(executor, threads)
    write_json_atomic(recorded, recipe_dict(recipe))
    # Recorded before any stage runs: a kill at any point leaves the count for the resume.
    summary: dict[str, Any] = {"study": recipe.name, "stages": len(stages), "threads": threads,
                               "executor": executor, "workers": workers, "data": data,
                               **({"shard_seeds": sorted(seeds)} if seeds is not None else {})}
    write_json_atomic(study / SUMMARY, {**previous_summary, **summary})
    submit, shutdown = _submitter(executor, workers, threads, study, corpora_dir, slurm)
    started = time.perf_counter()
    try:
        timings = _schedule(stages, study, submit, workers, on_event or (lambda *a, **k: None))
    finally:
        shutdown()
    # Every finished stage's own wall time, those of earlier (killed, resumed) runs included.
    recorded = {s.key: recorded_seconds(s, study) for s in stages}
    stage_seconds = {key: seconds for key, seconds in recorded.items() if seconds is not None}
    results, samples = collect(recipe, stages, study)
    summary.update(ran=timings, stage_seconds=stage_seconds,
                   seconds={"this_run": round(time.perf_counter() - started, 3),
                            "stages_this_run": round(sum(t["seconds"] for t in timings), 3),
                            "all_stages": round(sum(stage_seconds.values()), 3),
                            "stages_timed": len(stage_seconds)},
                   results=str(results), samples=str(samples),
                   probes=str(study / PROBES), environment=environment_record())
    write_json_atomic(study / SUMMARY, summary)
    return summary
