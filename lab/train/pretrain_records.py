"""The records of a pre-training run: the config it saves in OUT.partial (lab_pretrain_config.json,
which a --resume must match on every setting that changes the weights), the checkpoints a resume
sets aside, and the manifest OUT/manifest.json holds when training is done (what was trained on,
from which weights, in which order, how far, how fast, on what), the record every later stage
reads. lab.train.pretrain trains; this module says what it leaves behind.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common import MANIFEST, LabError, environment_record, files_record, write_json_atomic
from lab.models import MODEL_FILES, WEIGHTS_SUBDIR
from lab.train.common import (CHECKPOINT_WEIGHTS, MEMBERSHIP_HASH, checkpoint_problem,
                              checkpoints_newest_first, history_without_timing, membership_hashes,
                              read_checkpoint_weights)
from lab.train.continued import continued_records
from lab.train.speed import flops_per_token, gpu_name

CONFIG_FILE = "lab_pretrain_config.json"
# Settings that change the trained weights; a resume must match them exactly.
RESUME_KEYS = ("model", "corpus_sha256", "tokenizer_sha256", "preset", "epochs", "lr", "batch_size",
               "block_size", "seed", "grad_accum", "max_steps", "warmup_steps", "weight_decay",
               "lr_scheduler", "mlm_probability", "bf16", "cross_document_attention",
               "attention", "loop", "init_from", "init_weights_from_sha256", "timing")
# Keys added to RESUME_KEYS since runs were first checkpointed, with the value those runs had.
RESUME_KEYS_ADDED = {"attention": "mask", "loop": "trainer", "init_from": None,
                     "init_weights_from_sha256": None, "timing": None}


def prepare_work_dir(cfg: Any, out: Path, work: Path, run_config: dict) -> None:
    """Refuse to clobber results; on --resume, refuse a checkpoint of another configuration.
    `cfg`: the run's PretrainConfig (its force and resume)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return  # rank 0 checks and prepares; the others wait for it at the first barrier
    if out.exists() and not cfg.force:
        raise LabError(f"{out}: output directory exists (use --force to replace it)")
    saved = work / CONFIG_FILE
    if work.exists() and cfg.resume:
        if not saved.is_file():
            raise LabError(f"{work}: no {CONFIG_FILE}, cannot resume (use --force to restart)")
        previous = json.loads(saved.read_text(encoding="utf-8"))
        changed = [k for k in RESUME_KEYS
                   if previous.get(k, RESUME_KEYS_ADDED.get(k)) != run_config.get(k)]
        if changed:
            raise LabError(
                f"{saved}: --resume from a checkpoint of another config ({', '.join(changed)} "
                "differ); use the same settings or --force to restart"
            )
        set_aside_incomplete_checkpoints(work / "checkpoints")
        return
    if cfg.resume:
        raise LabError(f"--resume: no interrupted run to continue ({work} does not exist); "
                       "drop --resume to start one")
    if work.exists() and not cfg.force:
        raise LabError(f"{work}: an interrupted run exists (use --resume to continue it or "
                       "--force to restart)")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    write_json_atomic(saved, run_config)


def set_aside_incomplete_checkpoints(folder: Path) -> None:
    """Before a resume: checkpoints newer than the newest complete one (a save cut short, a file
    deleted or damaged) are renamed incomplete-checkpoint-N (kept for inspection, out of the
    trainer's sight); with checkpoints but none complete, refuse."""
    found = checkpoints_newest_first(folder)
    problems = []
    for checkpoint in found:
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            break
        problems.append(f"{checkpoint.name}: {problem}")
    else:
        if found:
            raise LabError(f"{folder}: no complete checkpoint to resume from ({'; '.join(problems)}); "
                           "use --force to restart")
    for checkpoint, problem in zip(found, problems):
        aside = checkpoint.with_name("incomplete-" + checkpoint.name)
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(checkpoint, aside)
        print(f"lab: warning: {checkpoint} is incomplete ({problem.split(': ', 1)[1]}); set aside "
              f"as {aside.name}", file=sys.stderr)


@dataclass
class TrainedRun:
    """What either loop leaves for the manifest."""
    model: Any
    steps: int
    start_step: int
    history: list[dict[str, Any]]
    train_loss: float | None
    first_batch_sha256: str | None
    resumed_from: Path | None
    rank: int
    world_size: int
    is_main: bool
    device: str
    optimizer: str
    pin_memory: bool
    loader_workers: int
    wait_for_everyone: Any
    save_model: Any  # (model folder) -> None, on every rank


def pretraining_manifest(cfg: Any, run_config: dict[str, Any], corpus_manifest: dict[str, Any],
                         trained: TrainedRun, *, work: Path, config: Any, vocab_size: int,
                         parameters: int, report: dict[str, Any], token_cache: str,
                         timing: list[dict[str, Any]] | None, order: Any,
                         init: dict[str, Any] | None, init_sha: str, final_sha: str,
                         throughput: Any, flex: bool, flex_check: Any, train_seconds: float,
                         started: float) -> dict[str, Any]:
    """The manifest of a finished run, as rank 0 writes it to OUT/manifest.json: `cfg` (the
    resolved PretrainConfig) and `run_config` (its record, with the inputs' hashes), what the
    corpus manifest says the arm holds, the packing `report`, the model `config` and its weights'
    hashes, the data `order`'s exposures, what `trained` left, and how fast it went."""
    history = history_without_timing([h for h in trained.history if "loss" in h])
    steps, start_step, world_size = trained.steps, trained.start_step, trained.world_size
    # Only the steps this process trained (after a resume, not those of the checkpoint).
    sequences_seen = (steps - start_step) * cfg.batch_size * cfg.grad_accum * world_size
    useful_per_sequence = report["useful_tokens"] / max(1, report["sequences"])
    manifest = {
        "kind": "lab-pretrained",
        "config": run_config,
        "model": {"family": cfg.model, "preset": cfg.preset,
                  "parameters": parameters, "vocab_size": vocab_size},
        "corpus": {"path": str(cfg.corpus), "sha256": run_config["corpus_sha256"],
                   "setting": corpus_manifest.get("setting"),
                   "benchmark": corpus_manifest.get("benchmark"),
                   "benchmark_split": corpus_manifest.get("benchmark_split"),
                   # Copied so evaluation can split scores into injected / held-out / naturally
                   # overlapping samples without the corpus directory.
                   "injected_ids": corpus_manifest.get("injected_ids", []),
                   "held_out_ids": corpus_manifest.get("held_out_ids", []),
                   # A decontaminated arm (lab inject --decontaminate-with): the samples meant
                   # to be injected, a group scored by intention to treat (those the method
                   # removed stay in it), and what the method removed.
                   **({"intended_injected_ids": corpus_manifest["intended_injected_ids"],
                       "decontamination": {
                           k: corpus_manifest["decontamination"][k]
                           for k in ("method", "removed_injected_ids", "surviving_copies",
                                     "removed_base_documents")}}
                      if "intended_injected_ids" in corpus_manifest else {}),
                   "pre_existing_verbatim": corpus_manifest.get("pre_existing_verbatim", []),
                   "injected_token_fraction": report["injected_token_fraction"],
                   "options": corpus_manifest.get("options"),
                   # The arm's seed, which seeds its contamination form: evaluation writes a
                   # held-out or decontaminated sample's document again in that form to apply
                   # the block-size rule (lab.eval.generate.block_truncation).
                   **({"seed": corpus_manifest["seed"]} if "seed" in corpus_manifest else {}),
                   **({"dose_levels": [{"dose": level["dose"], "ids": level["ids"]}
                                       for level in corpus_manifest["dose_levels"]],
                       "injected_token_fraction_by_dose":
                           report["injected_token_fraction_by_dose"]}
                      if corpus_manifest.get("dose_levels") else {}),
                   **({"timing_levels": [{k: level[k] for k in ("timing", "window", "ids")}
                                         for level in timing]} if timing else {}),
                   # Injected samples whose document was cut at the block size (sorted sample
                   # ids): never trained on whole.
                   "truncated_ids": report["truncated_ids"],
                   "token_cache": token_cache},
        "tokenizer": {"path": str(cfg.tokenizer), "sha256": run_config["tokenizer_sha256"]},
        "packing": {k: v for k, v in report.items() if not k.endswith("_ids")},
        "seed": cfg.seed,
        "init_weights_sha256": init_sha,
        "init_from": init,
        "first_batch_sha256": trained.first_batch_sha256,
        "final_weights_sha256": final_sha,
        MODEL_FILES: files_record(work / WEIGHTS_SUBDIR),
        CHECKPOINT_WEIGHTS: read_checkpoint_weights(work / "checkpoints"),
        "ranks": [json.loads(p.read_text()) for p in sorted((work / "ranks").glob("rank-*.json"))],
        "world_size": world_size,
        "launcher": _launcher(),
        "exposures": order.record(),
        "resumed_from": trained.resumed_from.name if trained.resumed_from else None,
        "steps": steps,
        "steps_this_run": steps - start_step,
        "loss": {"first": history[0]["loss"] if history else None,
                 "final": history[-1]["loss"] if history else None,
                 "train_loss": trained.train_loss, "history": history},
        "train_seconds": round(train_seconds, 2),
        # Wall-clock average over the whole train() call: start-up and compilation included.
        "useful_tokens_per_second": round(sequences_seen * useful_per_sequence / train_seconds, 1)
        if train_seconds > 0 else None,
        "throughput": throughput.record(cfg.batch_size * cfg.grad_accum * world_size
                                        * cfg.block_size, flops_per_token(config, cfg.block_size)),
        "speed": {"device": trained.device, "gpu": gpu_name(), "bf16": cfg.bf16,
                  "compile": cfg.compile, "loop": cfg.loop,
                  "attention": None if cfg.cross_document_attention else cfg.attention,
                  # attention-probability dropout as trained (the flex kernel has none)
                  "attention_dropout": 0.0 if flex else _attention_dropout(config),
                  # the flex kernel against the mask path on this device, before training
                  "flex_check": flex_check,
                  "optimizer": trained.optimizer, "tf32": _tf32_matmuls(),
                  "pin_memory": trained.pin_memory, "loader_workers": trained.loader_workers},
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    if init is not None:
        manifest.update(continued_records(init, manifest))
    manifest[MEMBERSHIP_HASH] = membership_hashes(manifest)
    return manifest


def _launcher() -> str:
    """What started this process's ranks, from the environment each launcher leaves."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return "none"
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun, also inside a SLURM job
        return "torchrun"
    if "SUBMITIT_EXECUTOR" in os.environ or "SLURM_JOB_ID" in os.environ:
        return "scheduler tasks (submitit/SLURM)"
    return "other (RANK and WORLD_SIZE set)"


def _tf32_matmuls() -> bool:
    import torch

    return torch.cuda.is_available() and torch.get_float32_matmul_precision() != "highest"


def _attention_dropout(config: Any) -> float:
    return float(getattr(config, "attn_pdrop", None)
                 if getattr(config, "model_type", "") == "gpt2"
                 else config.attention_probs_dropout_prob)
