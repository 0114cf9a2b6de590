"""Pre-training from scratch: RoBERTa (masked LM) or GPT-2 (causal LM) on one arm's corpus.

The HF Trainer runs the loop, so the same code path serves one CPU process, DDP under torchrun
and DeepSpeed ZeRO on GPU nodes; one process on a CUDA GPU runs the plain loop instead
(lab.train.loop: the Trainer's semantics without its per-step work). Work happens in `OUT.partial/` (checkpoints survive a kill and
`--resume` continues from the newest complete one); `OUT` appears only when training finished.
What the run records there (its saved config, a resume's checks, the manifest) is
lab.train.pretrain_records.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.common import (LabError, check_numbers, check_output, config_record, dumps_json, param,
                        share_tree, write_error, write_json_atomic)
from lab.corpora.shards import verify_corpus
from lab.recipe_sections import section
from lab.train.common import (
    checkpoint_problem, checkpoints_newest_first, latest_checkpoint,
    make_guarded_trainer_class, quiet_training, TENSORBOARD_DIR,
    non_finite_error, report_targets, report_to_param, state_sha256,
    trained_weights_sha256, training_arguments, warn_of_stale_build_locks,
    weights_are_finite,
)
from lab.train.attention import (
    DOCUMENT_IDS, check_attention, resolve_attention, restore_attention, use_flex_attention,
    with_document_mask,
)
from lab.train.flex_check import require_flex_kernel
from lab.train.loop import LOOPS
from lab.train.continued import check_init_from, joined_membership, load_init_weights
# The run's records (its saved config, a resume's checks, its manifest); CONFIG_FILE is named
# here too, where callers read it.
from lab.train.pretrain_records import (CONFIG_FILE, MANIFEST, TrainedRun,  # noqa: F401
                                        prepare_work_dir, pretraining_manifest)
from lab.train.schedule import TimedSampler, document_levels, plan_data_order
from lab.train.speed import (
    device_default, make_steady_throughput_callback, training_device,
)
from lab.models import (
    WEIGHTS_SUBDIR, build_config, build_model, check_block_size, count_parameters,
    cpu_bfloat16_attention, position_offset,
)

@dataclass
class PretrainConfig:
    """One pre-training run. Every option of `lab pretrain` and every field of a recipe's
    `pretrain` section is declared here, once."""
    model: str = param(help="roberta (masked LM) or gpt2 (causal LM).")
    corpus: Path = param(help="Corpus directory made by lab inject.")
    tokenizer: Path = param(help="Tokenizer directory made by lab tokenizer train.")
    out: Path = param(help="Output directory (OUT.partial while training).")
    preset: str = param("tiny", "paper, small, tiny or micro.")
    epochs: float = param(1.0, "Training epochs.")
    lr: float = param(5e-4, "Peak learning rate.")
    batch_size: int = param(16, "Sequences per device and step.")
    block_size: int = param(256, "Tokens per packed sequence.")
    seed: int = param(0, "Seeds initial weights, data order and masking.")
    grad_accum: int = param(1, "Gradient accumulation steps.")
    max_steps: int = param(-1, "Stop after this many steps (overrides epochs).")
    warmup_steps: int = param(0, "Linear warm-up steps.")
    weight_decay: float = param(0.01, "AdamW weight decay.")
    lr_scheduler: str = param("linear", "linear, constant, cosine, ...")
    mlm_probability: float = param(0.15, "RoBERTa: share of tokens masked.")
    save_steps: int = param(500, "Checkpoint every N steps.")
    log_steps: int = param(10, "Log the loss every N steps.")
    report_to: str = report_to_param()
    deepspeed: Path | None = param(None, "DeepSpeed JSON config (recipes/deepspeed/).")
    bf16: bool | None = param(None, "bfloat16 autocast (changes the numbers); unset: on when "
                                    "training on a CUDA GPU, off on a CPU (lab.train.speed).")
    compile: bool | None = param(None, "torch.compile the model (same maths, other kernels); "
                                       "unset: on when training a small or paper model on a CUDA "
                                       "GPU without DeepSpeed, else off.")
    attention: str | None = param(
        None, "How packed documents are kept apart: mask (4D boolean masks, SDPA, attention "
              "dropout as configured) or flex (a FlexAttention document kernel, no attention "
              "dropout); unset: flex for a small or paper model on a CUDA GPU, else mask "
              "(lab.train.attention).")
    loop: str | None = param(
        None, "What runs the training steps: trainer (the HF Trainer: one process, DDP or "
              "DeepSpeed) or plain (lab.train.loop: one process, the Trainer's data order, "
              "optimizer, schedule, logs and checkpoints without its per-step work); unset: "
              "plain for one process on a CUDA GPU without DeepSpeed that reports to "
              "tensorboard or nowhere, else trainer.")
    cross_document_attention: bool = param(
        False, "Let packed documents attend to the documents before them, positions running "
               "on (HF group_texts-style context); by default each document sees only itself.",
        flag=True)
    init_from: Path | None = param(
        None, "Start from these weights instead of random ones (continued pre-training): lab "
              "pretrain's OUT, its lab export or one of its checkpoints (what they saw comes "
              "with them), or a local Hugging Face folder (config.json, safetensors; membership "
              "unknown) of the same family, preset shape and tokenizer; optimizer and schedule "
              "start fresh.")
    resume: bool = param(False, "Continue OUT.partial from its newest checkpoint.")
    force: bool = param(False, "Restart and replace existing outputs.")
    dry_run: bool = param(False, "Print parameter counts and tokens per step only.")
    cache_dir: Path | None = param(None, "Token cache (default $LAB_CACHE/tokens).")
    tokenize_tasks: int = param(1, "Parallel tasks tokenising the corpus shards into the cache "
                                   "(datatrove's local executor; the tokens do not depend on it).")

    def __post_init__(self) -> None:
        # The rules of single options, checked where the config is made: by `lab pretrain` and
        # by a recipe's `pretrain` section alike (lab.study.recipe_checks names the recipe's field).
        # What needs files or other stages (block size against the preset, the output folder,
        # the DeepSpeed file) is checked when the run starts.
        check_numbers(epochs=self.epochs, lr=self.lr, seed=self.seed,
                      warmup_steps=self.warmup_steps, weight_decay=self.weight_decay,
                      lr_scheduler=self.lr_scheduler)
        for name, value in (("--batch-size", self.batch_size), ("--grad-accum", self.grad_accum),
                            ("--save-steps", self.save_steps), ("--log-steps", self.log_steps),
                            ("--tokenize-tasks", self.tokenize_tasks)):
            if value < 1:
                raise LabError(f"{name} {value}: must be >= 1")
        if self.max_steps == 0 or self.max_steps < -1:
            raise LabError(f"--max-steps {self.max_steps}: must be >= 1 (or -1: no limit)")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise LabError(f"--epochs {self.epochs}: must be > 0 (or give --max-steps)")
        if not 0 < self.mlm_probability < 1:
            raise LabError(f"--mlm-probability {self.mlm_probability}: must be in (0, 1)")
        if self.attention is not None:
            check_attention(self.attention)
        if self.loop is not None and self.loop not in LOOPS:
            raise LabError(f"--loop {self.loop}: choose from {', '.join(LOOPS)}")


# A study's `pretrain` section: these fields of PretrainConfig, and the weight decay a study may
# sweep as a forgetting axis. Models trained from scratch on a CPU-sized corpus learn little in
# one epoch at 5e-4 (the study's defaults). Key-neutral: fields added after studies were made
# with the section, left out of a stage's key while they hold these values, so an existing study
# folder keeps its stage keys and resumes. cross_document_attention is always in the stage key
# (not key-neutral): its default changed from cross-document to per-document attention, so
# stages made before it get new keys.
PretrainSection = section("PretrainSection", PretrainConfig,
                          ["epochs", "lr", "batch_size", "block_size", "warmup_steps",
                           "lr_scheduler", "bf16", "compile", "attention", "loop",
                           "cross_document_attention"], own=[
    ("weight_decay", list[float], field(default_factory=lambda: [0.01], metadata={
        "scalar": True, "expect": "float >= 0",
        "help": "AdamW weight decay; a list sweeps it like seeds (one model per value, arm and "
                "seed), as a forgetting axis (recipes/timing.yaml)."})),
], study_defaults={"epochs": 3.0, "lr": 1e-3},
   key_neutral={"bf16": False, "compile": False, "attention": "mask", "loop": "trainer",
                "weight_decay": 0.01},
   sweeps={"weight_decay": "weight_decay"})


def resolve_for_device(cfg: PretrainConfig, device: str,
                       processes: int | None = None) -> PretrainConfig:
    """`cfg` with its device-dependent settings (bf16, compile, attention, loop) decided for a
    run on `device` in `processes` ranks (None: WORLD_SIZE) where they are unset;
    lab.train.speed.DEVICE_DEFAULTS."""
    compile_default = None if cfg.deepspeed is None else False  # DeepSpeed wraps the model itself
    if processes is None:
        processes = int(os.environ.get("WORLD_SIZE", "1"))
    loop = cfg.loop
    if loop is None:
        trainer_only = (processes > 1 or cfg.deepspeed is not None
                        or _named_reporters(cfg.report_to) - PLAIN_LOOP_REPORTS)
        loop = "trainer" if trainer_only else device_default("loop", None, device)
    return dataclasses.replace(
        cfg, bf16=device_default("bf16", cfg.bf16, device),
        compile=device_default("compile", cfg.compile if cfg.compile is not None
                               else compile_default, device, cfg.preset),
        attention=resolve_attention(cfg.attention, device, cfg.preset), loop=loop)


PLAIN_LOOP_REPORTS = {"tensorboard"}  # the reporters lab.train.loop writes to


def _named_reporters(report_to: str) -> set[str]:
    return {t.strip() for t in str(report_to).split(",") if t.strip()} - {"none"}


def _validate(cfg: PretrainConfig) -> None:
    """What the config's own fields cannot tell (its __post_init__ checked those)."""
    check_block_size(cfg.model, cfg.preset, cfg.block_size)
    targets = report_targets(cfg.report_to)
    if cfg.loop == "plain":
        world = int(os.environ.get("WORLD_SIZE", "1"))
        reason = ("runs one process" if world > 1 else "has no DeepSpeed" if cfg.deepspeed
                  else None)
        unsupported = sorted(set(targets) - PLAIN_LOOP_REPORTS)
        if reason is None and unsupported:
            reason = f"reports to tensorboard only, not {unsupported[0]}"
        if reason:
            raise LabError(f"--loop plain: the plain loop {reason} (use --loop trainer)")
    if not cfg.dry_run and int(os.environ.get("RANK", "0")) == 0:
        check_output(Path(cfg.out), cfg.force, "lab-pretrained",
                     [cfg.corpus, cfg.tokenizer, cfg.deepspeed, cfg.cache_dir, cfg.init_from])
    if cfg.deepspeed is not None:
        path = Path(cfg.deepspeed)
        if not path.is_file():
            raise LabError(f"--deepspeed {path}: no such file")
        try:
            parsed = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LabError(f"--deepspeed {path}: not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise LabError(f"--deepspeed {path}: must hold a JSON object")
        if not cfg.dry_run and int(os.environ.get("RANK", "0")) == 0:
            warn_of_stale_build_locks()


def _training_arguments(cfg: PretrainConfig, checkpoints: Path):
    return training_arguments(
        checkpoints, report_to=report_targets(cfg.report_to),
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum, num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps, learning_rate=cfg.lr, lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay, logging_steps=cfg.log_steps,
        save_strategy="steps", save_steps=cfg.save_steps, seed=cfg.seed, data_seed=cfg.seed,
        bf16=cfg.bf16, torch_compile=cfg.compile,
        deepspeed=str(cfg.deepspeed) if cfg.deepspeed else None, **cuda_speed_settings(),
    )


LOADER_WORKERS = 2  # on CUDA (cuda_speed_settings)


def cuda_speed_settings() -> dict[str, Any]:
    """What a pre-training on a CUDA GPU always gets (no option: none changes what is computed
    beyond rounding): fused AdamW, TF32 matmuls for what runs in float32 (Ampere and later),
    pinned host memory and loader processes for batches."""
    import torch

    if not torch.cuda.is_available():
        return {}
    tf32 = torch.cuda.get_device_capability()[0] >= 8
    if tf32:  # also where a transformers version has no `tf32` training argument
        torch.set_float32_matmul_precision("high")
    # Two loader processes collate the next batches while the GPU trains (a batch depends only
    # on its sequences, the seed and the epoch, which the workers, started each epoch, copy).
    # Kept across epochs they would save each epoch's restart, but the seed a new epoch's
    # workers draw from the global RNG would then not be drawn, and dropout on a CPU would
    # differ from a run without them.
    return {"optim": "adamw_torch_fused", "dataloader_pin_memory": True, "tf32": tf32,
            "dataloader_num_workers": LOADER_WORKERS, "dataloader_prefetch_factor": 4}


def _make_trainer_class():
    from transformers import TrainerCallback

    class EpochTracker(TrainerCallback):
        """Tells the collator, and a timed run's sampler, which epoch it is batching (also right
        after a resume; before the epoch's loader starts, with several ranks too)."""

        def __init__(self, collator: Any, sampler: Any):
            self.collator, self.sampler = collator, sampler

        def on_epoch_begin(self, args, state, control, **kwargs):
            epoch = int(math.floor((state.epoch or 0.0) + 1e-9))
            self.collator.epoch = epoch
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)

    class LabTrainer(make_guarded_trainer_class()):
        """Records a hash of the first batch each process trains on (its data order); a timed
        run's epochs (lab.train.schedule) replace the seeded shuffle."""

        first_batch_sha256: str | None = None

        def __init__(self, *args, orders: list[list[int]] | None = None, **kwargs):
            self.timed_sampler = TimedSampler(orders) if orders is not None else None
            super().__init__(*args, **kwargs)
            self.add_callback(EpochTracker(self.data_collator, self.timed_sampler))
            # RoBERTa's masked-LM loss is a mean that ignores `num_items_in_batch`, but its
            # forward takes **kwargs, so the Trainer would take it for a sum over the tokens of
            # all processes: it multiplies it by the process count and skips the division by
            # --grad-accum (loss and gradients N times too large).
            if getattr(self.model.config, "model_type", "") == "roberta":
                self.model_accepts_loss_kwargs = False

        def _get_train_sampler(self, *args, **kwargs):
            if self.timed_sampler is not None:
                return self.timed_sampler
            return super()._get_train_sampler(*args, **kwargs)

        def compute_loss(self, model, inputs, *args, **kwargs):
            if DOCUMENT_IDS in inputs:  # the flex path: its BlockMask is made on the device
                causal = getattr(self.model.config, "model_type", "") == "gpt2"
                inputs = with_document_mask(inputs, causal)
            return super().compute_loss(model, inputs, *args, **kwargs)

        def training_step(self, model, inputs, *args, **kwargs):
            if self.first_batch_sha256 is None:
                ids = inputs["input_ids"].detach().cpu().numpy().tobytes()
                self.first_batch_sha256 = hashlib.sha256(ids).hexdigest()
            return super().training_step(model, inputs, *args, **kwargs)

    return LabTrainer


def dry_run(cfg: PretrainConfig, tokenizer: Any, corpus_manifest: dict[str, Any]) -> dict[str, Any]:
    import torch

    config = build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size)
    with torch.device("meta"):
        model = build_model(cfg.model, config)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return {
        "model": cfg.model, "preset": cfg.preset, "parameters": count_parameters(model),
        "vocab_size": len(tokenizer), "block_size": cfg.block_size,
        "tokens_per_step": cfg.batch_size * cfg.grad_accum * world * cfg.block_size,
        "corpus_documents": corpus_manifest.get("counts", {}).get("final_documents"),
    }


def run_pretrain(cfg: PretrainConfig) -> dict[str, Any]:
    """Entry point of `lab pretrain`."""
    started = time.perf_counter()
    device = training_device()
    cfg = resolve_for_device(cfg, device)
    _validate(cfg)
    from lab.tokenizer import load_tokenizer, tokenizer_hash

    tokenizer = load_tokenizer(cfg.tokenizer)
    init = check_init_from(cfg, tokenizer)
    # Checked against its shards (the token cache and the manifest trust corpus_sha256), and
    # refused when empty: by the dry run too, which refuses what the run would.
    corpus_manifest = verify_corpus(cfg.corpus)
    if init is not None:  # refused before anything is written
        joined_membership(init, corpus_manifest)
    if cfg.dry_run:
        return dry_run(cfg, tokenizer, corpus_manifest)

    out = Path(cfg.out)
    work = out.with_name(out.name + ".partial")
    run_config = config_record(cfg)
    run_config["corpus_sha256"] = corpus_manifest["corpus_sha256"]
    run_config["tokenizer_sha256"] = tokenizer_hash(cfg.tokenizer)
    if corpus_manifest.get("timing_levels"):  # the same corpus_sha256 under every timing
        run_config["timing"] = [lv["timing"] for lv in corpus_manifest["timing_levels"]]
    if init is not None:  # a resume must start from the same weights (RESUME_KEYS)
        run_config["init_from"] = init["path"]
        run_config["init_weights_from_sha256"] = init["weights_sha256"]
    prepare_work_dir(cfg, out, work, run_config)
    try:
        with quiet_training(cfg.deepspeed):
            result = _train(cfg, tokenizer, corpus_manifest, run_config, out, work, started,
                            init)
        _leave_process_group()
        return result
    except BaseException as exc:
        failure = write_error(exc, work)  # first: it may ask the disk how full it is
        # Nothing to resume from: leave no half-made directory behind.
        if int(os.environ.get("RANK", "0")) == 0 and latest_checkpoint(work / "checkpoints") is None:
            shutil.rmtree(work, ignore_errors=True)
        elif failure is not None and int(os.environ.get("RANK", "0")) == 0:
            # A full disk: the checkpoint it cut short goes (the Trainer writes in place); a
            # resume continues from the newest whole one.
            for checkpoint in checkpoints_newest_first(work / "checkpoints"):
                if checkpoint_problem(checkpoint) is not None:
                    shutil.rmtree(checkpoint, ignore_errors=True)
            kept = latest_checkpoint(work / "checkpoints")
            if kept is not None:  # said, not left behind silently
                failure = LabError(f"{failure}; its {kept.name} is kept: the same command with "
                                   "--resume continues from it once there is room")
        raise failure or exc


def injected_doses(corpus_manifest: dict[str, Any]) -> dict[str, int] | None:
    """Injected sample id -> its dose, for a dose-ladder corpus (a placebo's own samples stand
    at the dose of the test samples they match); None otherwise."""
    levels = corpus_manifest.get("dose_levels")
    if not levels:
        return None
    return {sample: level["dose"] for level in levels if level["dose"]
            for sample in level.get("placebo_ids", level["ids"])}


def _train(cfg: PretrainConfig, tokenizer: Any, corpus_manifest: dict[str, Any],
           run_config: dict[str, Any], out: Path, work: Path, started: float,
           init: dict[str, Any] | None = None) -> dict[str, Any]:
    from transformers import set_seed

    from lab.train.packing import (
        PackedCollator, PackedDataset, embedded_block_ends, pack_documents, packing_report,
        tokenize_corpus,
    )

    args = _training_arguments(cfg, work / "checkpoints") if cfg.loop == "trainer" else None
    config = build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size)
    flex = cfg.attention == "flex" and not cfg.cross_document_attention
    # Before any work: the flex kernel must give the mask path's logits and gradients on this
    # device (lab.train.flex_check), or the run is refused.
    flex_check = (require_flex_kernel(
        config, tokenizer, cfg.block_size,
        str(args.device) if args is not None else training_device(), bool(cfg.bf16))
        if flex else None)
    # local=False: global rank 0 fills the token cache before any other rank (on any node) reads
    # it, so nodes sharing a cache on a common filesystem never build it concurrently.
    with (args.main_process_first(local=False, desc="tokenise corpus") if args
          else contextlib.nullcontext()):
        tokenized = tokenize_corpus(cfg.corpus, tokenizer, run_config["tokenizer_sha256"],
                                    cfg.cache_dir, tasks=cfg.tokenize_tasks)
    # No sequence holds two documents of one injected sample (copies, or an unpaired sample's
    # two sides): the model could copy one from the other instead of memorising it.
    timing = corpus_manifest.get("timing_levels")
    packing = pack_documents(tokenized.lengths(), cfg.block_size, samples=tokenized.injected,
                             cross_document=cfg.cross_document_attention,
                             levels=document_levels(tokenized.injected, timing))
    dataset = PackedDataset(tokenized, packing, tokenizer.bos_token_id, tokenizer.eos_token_id,
                            tokenizer.pad_token_id)
    if len(dataset) == 0:
        raise LabError(f"{cfg.corpus}: the corpus has no tokens to train on")
    # Computed by every rank alike (the same seed and stream); the manifest's exposures too.
    order = plan_data_order(packing.sequences, tokenized.injected, cfg.seed, cfg.batch_size,
                            cfg.grad_accum, int(os.environ.get("WORLD_SIZE", "1")), cfg.epochs,
                            cfg.max_steps, timing)

    set_seed(cfg.seed)
    model = build_model(cfg.model, config)
    if cfg.bf16 and not flex and training_device() == "cpu":
        cpu_bfloat16_attention(model)
    if init is not None:  # the weights training starts from; a resume then loads its checkpoint's
        load_init_weights(model, init)
    init_sha = state_sha256(model)
    parameters = count_parameters(model)  # before ZeRO-3 partitions the weights
    attention_dropout = use_flex_attention(model) if flex else None
    collator = PackedCollator(tokenizer, mlm=cfg.model == "roberta",
                              mlm_probability=cfg.mlm_probability, seed=cfg.seed,
                              cross_document=cfg.cross_document_attention,
                              position_offset=position_offset(config),
                              attention="flex" if flex else "mask",
                              # one batch shape for a compiled model (padding rows add nothing)
                              rows=cfg.batch_size if flex and cfg.compile else None)
    throughput = make_steady_throughput_callback()
    checkpoint = latest_checkpoint(work / "checkpoints") if cfg.resume else None
    train_started = time.perf_counter()
    if args is None:
        trained = _train_plain(cfg, model, dataset, collator, work, checkpoint, throughput,
                               order.orders)
    else:
        trained = _train_with_trainer(cfg, args, model, dataset, collator, work, checkpoint,
                                      throughput, order.orders)
    train_seconds = time.perf_counter() - train_started
    if not weights_are_finite(trained.model):
        raise non_finite_error("weights", trained.steps, "nan/inf")

    rank = trained.rank
    final_sha = trained_weights_sha256(trained.model)
    rank_record = {"rank": rank, "first_batch_sha256": trained.first_batch_sha256,
                   "final_weights_sha256": final_sha}
    (work / "ranks").mkdir(exist_ok=True)
    write_json_atomic(work / "ranks" / f"rank-{rank}.json", rank_record)
    trained.wait_for_everyone()
    if flex:  # saved for any loader: the implementation and dropout the config names
        restore_attention(trained.model, attention_dropout)
    # Every rank saves (ZeRO-3 gathers the weights collectively); only rank 0 writes.
    trained.save_model(work / WEIGHTS_SUBDIR)
    if not trained.is_main:
        return rank_record

    from lab.tokenizer import fit_to_model

    fit_to_model(tokenizer, model.config, cfg.block_size).save_pretrained(
        str(work / WEIGHTS_SUBDIR))
    report = packing_report(tokenized, packing, injected_doses(corpus_manifest),
                            embedded_block_ends(cfg.corpus, corpus_manifest, tokenized, tokenizer))
    (work / "packing.json").write_text(dumps_json(report), encoding="utf-8")
    manifest = pretraining_manifest(
        cfg, run_config, corpus_manifest, trained, work=work, config=config,
        vocab_size=len(tokenizer), parameters=parameters, report=report,
        token_cache=tokenized.key, timing=timing, order=order, init=init, init_sha=init_sha,
        final_sha=final_sha, throughput=throughput, flex=flex, flex_check=flex_check,
        train_seconds=train_seconds, started=started)
    write_json_atomic(work / MANIFEST, manifest)
    share_tree(work)
    if out.exists():
        shutil.rmtree(out)
    os.replace(work, out)
    return manifest


def _train_with_trainer(cfg: PretrainConfig, args: Any, model: Any, dataset: Any, collator: Any,
                        work: Path, checkpoint: Path | None, throughput: Any,
                        orders: list[list[int]] | None) -> TrainedRun:
    trainer = _make_trainer_class()(model=model, args=args, train_dataset=dataset,
                                    data_collator=collator, tensorboard_dir=work / TENSORBOARD_DIR,
                                    tokens_per_sample=cfg.block_size, callbacks=[throughput],
                                    orders=orders)
    start_step = (json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
                  if checkpoint else 0)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return TrainedRun(
        model=trainer.model, steps=trainer.state.global_step, start_step=start_step,
        history=trainer.state.log_history, train_loss=trainer.mean_training_loss(),
        first_batch_sha256=trainer.first_batch_sha256, resumed_from=checkpoint,
        rank=args.process_index, world_size=args.world_size, is_main=args.should_save,
        device=str(args.device),
        optimizer=args.optim if isinstance(args.optim, str) else args.optim.value,
        pin_memory=bool(args.dataloader_pin_memory and str(args.device) != "cpu"),
        loader_workers=args.dataloader_num_workers,
        wait_for_everyone=trainer.accelerator.wait_for_everyone,
        save_model=lambda folder: trainer.save_model(str(folder)))


def _train_plain(cfg: PretrainConfig, model: Any, dataset: Any, collator: Any, work: Path,
                 checkpoint: Path | None, throughput: Any,
                 orders: list[list[int]] | None) -> TrainedRun:
    from lab.train.loop import LoopSettings, train_plain

    device = training_device()
    speed = cuda_speed_settings()
    fused = speed.get("optim") == "adamw_torch_fused"
    settings = LoopSettings(
        batch_size=cfg.batch_size, grad_accum=cfg.grad_accum, epochs=cfg.epochs,
        max_steps=cfg.max_steps, lr=cfg.lr, weight_decay=cfg.weight_decay,
        lr_scheduler=cfg.lr_scheduler, warmup_steps=cfg.warmup_steps, seed=cfg.seed,
        save_steps=cfg.save_steps, log_steps=cfg.log_steps, bf16=bool(cfg.bf16),
        compile=bool(cfg.compile), causal=cfg.model == "gpt2", block_size=cfg.block_size,
        fused_adamw=fused, loader_workers=speed.get("dataloader_num_workers", 0),
        pin_memory=bool(speed.get("dataloader_pin_memory")),
        tensorboard_dir=(work / TENSORBOARD_DIR if "tensorboard" in report_targets(cfg.report_to)
                         else None))
    result = train_plain(model, dataset, collator, settings, device, work / "checkpoints",
                         checkpoint, throughput, orders)
    return TrainedRun(
        model=model, steps=result.steps, start_step=result.start_step, history=result.history,
        train_loss=result.train_loss, first_batch_sha256=result.first_batch_sha256,
        resumed_from=result.resumed_from, rank=0, world_size=1, is_main=True, device=device,
        optimizer="adamw_torch_fused" if fused else "adamw_torch",
        pin_memory=settings.pin_memory and device != "cpu",
        loader_workers=settings.loader_workers, wait_for_everyone=lambda: None,
        save_model=lambda folder: model.save_pretrained(str(folder)))


def _leave_process_group() -> None:
    # Left to interpreter shutdown, the process group's communication threads are sometimes
    # torn down while still joinable and a rank aborts ("terminate called without an active
    # exception") after its work is done, failing the whole launch.
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def check_seed_diversity(manifests: list[dict[str, Any]]) -> None:
    """Refuse repetitions whose seeds collapsed: runs with different seeds must differ in both
    initial weights and data order (a seed silently ignored, as under some DeepSpeed setups,
    turns five repetitions into one)."""
    for name in ("init_weights_sha256", "first_batch_sha256"):
        seen: dict[str, int] = {}
        for manifest in manifests:
            value, seed = manifest.get(name), manifest.get("seed")
            if value is None:
                raise LabError(f"pre-training manifest of seed {seed}: field '{name}' missing")
            if value in seen and seen[value] != seed:
                raise LabError(
                    f"seeds {seen[value]} and {seed} collapsed: identical {name.replace('_sha256', '')} "
                    "(the seed did not reach the model or the data order)"
                )
            seen[value] = seed
