"""The plain pre-training loop: one process, no HF Trainer (`lab pretrain --loop plain`).

Why it exists: on a GPU the Trainer's per-step work (callbacks, accounting, a data loader started
again every epoch) held a compiled paper-shape GPT-2 at 0.73x of a plain compiled loop, while the
lab's own model, mask and collation ran at 0.94-0.96x of it without the Trainer
(results/gpu-h200). So a single-process pre-training on a CUDA GPU runs here by default; several
processes (DDP), DeepSpeed and the wandb/mlflow reporters stay with the Trainer, and a CPU keeps
the Trainer unless told (its numbers are unchanged).

What fixes the numbers is the Trainer's, so the two loops train the same thing:
- the data order: every epoch a permutation of the sequences from a generator seeded with
  seed + epoch (accelerate's seedable sampler, which the Trainer uses; the first batches are equal,
  tests/test_loop.py), or a timed run's epochs (lab.train.schedule), and the collator's masks
  from (seed, epoch, sequence);
- AdamW (betas 0.9 and 0.999, eps 1e-8) with weight decay on matrices and embeddings and not on
  biases or LayerNorm weights, the Trainer's schedulers (transformers.get_scheduler), gradients
  clipped at norm 1; GPT-2's loss summed over the step's predicted tokens and divided by their
  number, RoBERTa's the mean of each batch divided by the batches of the step;
- a step takes --grad-accum batches of the epoch's order (the last step of an epoch the rest),
  and training stops after --max-steps or ceil(epochs x steps per epoch) steps;
- the loss log: the mean over the steps since the previous log, at step 1 and every --log-steps;
- checkpoints every --save-steps and at the end, `checkpoint-N` with the weights, optimizer,
  scheduler and RNG states, the loss window (LOGGING_RECORD) and CHECKPOINT_RECORD last; the newest
  two are kept. A resumed run goes on with the batch, masks and RNG the uninterrupted run had.
Dropout draws from the device's global RNG, which differs in order from the Trainer's (its loader
draws a seed each epoch), so weights agree with a Trainer run in distribution, not in bits.

On a GPU nothing waits for it within a step: the loss, gradient norm and non-finite check stay on
the device, and a log is read one step later, after the next step is queued.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lab import progress
from lab.train.attention import DOCUMENT_IDS, with_document_mask
from lab.train.schedule import Stream, total_steps as schedule_total_steps, uniform_order
from lab.train.common import (
    LOGGING_RECORD, NonFiniteWatch, checkpoints_newest_first, non_finite_error, read_logging_window,
    record_checkpoint, show_training_log, weights_are_finite,
)

LOOPS = ("trainer", "plain")
# The Trainer's defaults, which the plain loop keeps (TrainingArguments).
ADAM_BETAS, ADAM_EPS, MAX_GRAD_NORM, SAVE_TOTAL_LIMIT = (0.9, 0.999), 1e-8, 1.0, 2
WEIGHTS_FILE, OPTIMIZER_FILE, SCHEDULER_FILE = "model.safetensors", "optimizer.pt", "scheduler.pt"
RNG_FILE, STATE_FILE = "rng_state.pt", "trainer_state.json"  # trainer_state: the step, as the Trainer's


@dataclass
class LoopSettings:
    """What the loop needs of a pre-training's config (lab.train.pretrain.PretrainConfig)."""
    batch_size: int
    grad_accum: int
    epochs: float
    max_steps: int
    lr: float
    weight_decay: float
    lr_scheduler: str
    warmup_steps: int
    seed: int
    save_steps: int
    log_steps: int
    bf16: bool
    compile: bool
    causal: bool
    block_size: int
    fused_adamw: bool = False
    loader_workers: int = 0
    pin_memory: bool = False
    tensorboard_dir: Path | None = None


@dataclass
class LoopResult:
    steps: int
    history: list[dict[str, Any]]
    train_loss: float | None
    first_batch_sha256: str | None
    resumed_from: Path | None
    start_step: int


def steps_per_epoch(sequences: int, batch_size: int, grad_accum: int) -> int:
    return Stream(sequences, batch_size, grad_accum, 1, 1).steps_per_epoch


def total_steps(settings: LoopSettings, sequences: int) -> int:
    return schedule_total_steps(sequences, settings.batch_size, settings.grad_accum, 1,
                                settings.epochs, settings.max_steps)


def micro_batches(sequences: int, settings: LoopSettings, first_step: int,
                  last_step: int) -> list[tuple[int, int]]:
    """(epoch, batch of that epoch) of every micro-batch from step first_step to last_step."""
    batches = math.ceil(sequences / settings.batch_size)
    per_epoch = steps_per_epoch(sequences, settings.batch_size, settings.grad_accum)
    out = []
    for step in range(first_step, last_step):
        epoch, update = divmod(step, per_epoch)
        start = update * settings.grad_accum
        out += [(epoch, b) for b in range(start, min(start + settings.grad_accum, batches))]
    return out


class BatchesOfTheRun:
    """Micro-batch k of the run, collated: a map-style dataset a DataLoader can hand to its
    worker processes once for the whole run (each batch depends only on its epoch, its sequences
    and the seed, so no state travels between workers)."""

    def __init__(self, dataset: Any, collator: Any, plan: list[tuple[int, int]],
                 batch_size: int, seed: int, orders: list[list[int]] | None = None):
        self.dataset, self.collator, self.plan = dataset, collator, plan
        self.batch_size, self.seed = batch_size, seed
        self.orders = orders  # a timed run's epochs (lab.train.schedule); None: uniform
        self._order: tuple[int, list[int]] = (-1, [])

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, k: int) -> tuple[int, dict[str, Any]]:
        epoch, batch = self.plan[k]
        if self._order[0] != epoch:
            self._order = (epoch, self.orders[epoch] if self.orders is not None
                           else uniform_order(len(self.dataset), self.seed, epoch))
        order = self._order[1]
        indices = order[batch * self.batch_size:(batch + 1) * self.batch_size]
        self.collator.epoch = epoch
        return batch, self.collator([self.dataset[i] for i in indices])


def decay_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's parameter groups: decay on matrices and embeddings, none on biases and LayerNorm
    weights (the one-dimensional ones in GPT-2 and RoBERTa; the Trainer's split by name)."""
    decay, rest = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else rest).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@dataclass
class _LogWindow:
    """The loss summed on the device since the last log, and what was logged before."""
    loss: Any
    last_logged_step: int = 0
    logged_loss_sum: float = 0.0
    pending: list[tuple] = field(default_factory=list)  # logs queued, read a step later
    last_time: tuple[float, int] | None = None


def train_plain(model: Any, dataset: Any, collator: Any, settings: LoopSettings, device: str,
                checkpoints: Path, resume_from: Path | None, throughput: Any,
                orders: list[list[int]] | None = None) -> LoopResult:
    """Pre-train `model` on `dataset` in this process; see the module's docstring."""
    import torch
    from transformers import get_scheduler

    device_ = torch.device(device)
    on_gpu = device_.type == "cuda"
    model.to(device_)
    model.train()
    step_model = torch.compile(model) if settings.compile else model
    optimizer = torch.optim.AdamW(decay_groups(model, settings.weight_decay), lr=settings.lr,
                                  betas=ADAM_BETAS, eps=ADAM_EPS,
                                  **({"fused": True} if settings.fused_adamw else {}))
    last_step = total_steps(settings, len(dataset))
    scheduler = get_scheduler(settings.lr_scheduler, optimizer,
                              num_warmup_steps=settings.warmup_steps,
                              num_training_steps=last_step)
    window = _LogWindow(loss=torch.zeros((), device=device_))
    step = 0
    if resume_from is not None:
        step = _load_checkpoint(resume_from, model, optimizer, scheduler, window, device_)
    history: list[dict[str, Any]] = list(_load_history(resume_from)) if resume_from else []
    start_step = step

    plan = micro_batches(len(dataset), settings, step, last_step)
    batches = BatchesOfTheRun(dataset, collator, plan, settings.batch_size, settings.seed, orders)
    # Workers seeded from their own generator: the global RNG, which dropout draws from, is
    # not touched by starting them.
    loader = torch.utils.data.DataLoader(
        batches, batch_size=None, shuffle=False, num_workers=settings.loader_workers,
        pin_memory=settings.pin_memory and on_gpu,
        prefetch_factor=4 if settings.loader_workers else None,
        generator=torch.Generator().manual_seed(settings.seed))
    writer = _tensorboard(settings.tensorboard_dir)
    watch = NonFiniteWatch()
    state = SimpleNamespace(global_step=step, max_steps=last_step)
    throughput.on_train_begin(None, state, None)
    batches_per_epoch = math.ceil(len(dataset) / settings.batch_size)
    per_epoch = steps_per_epoch(len(dataset), settings.batch_size, settings.grad_accum)
    first_batch_sha256 = None
    autocast = torch.autocast(device_type=device_.type, dtype=torch.bfloat16,
                              enabled=settings.bf16)

    def flush_logs() -> None:
        for entry in window.pending:
            _write_log(entry, window, history, watch, writer, settings, steps_bar)
        window.pending.clear()

    micro = iter(loader)
    steps_bar = progress.bar(last_step, "training", initial=step)
    try:
        while step < last_step:
            epoch = step // per_epoch
            update = step % per_epoch
            count = min(settings.grad_accum, batches_per_epoch - update * settings.grad_accum)
            step_loss = torch.zeros((), device=device_)
            fetched = [next(micro) for _ in range(count)]
            if first_batch_sha256 is None:
                first_batch_sha256 = hashlib.sha256(
                    fetched[0][1]["input_ids"].numpy().tobytes()).hexdigest()
            fetched = [(index, {k: v.to(device_, non_blocking=True) if torch.is_tensor(v) else v
                                for k, v in inputs.items()}) for index, inputs in fetched]
            # GPT-2's loss is a sum over the step's predicted tokens divided by their number
            # (the Trainer's num_items_in_batch; counted on the device, so nothing waits);
            # RoBERTa's the mean of each batch divided by the batches.
            predicted = (sum((inputs["labels"][:, 1:] != -100).sum() for _, inputs in fetched)
                         if settings.causal else None)
            for batch_index, inputs in fetched:
                if DOCUMENT_IDS in inputs:
                    inputs = with_document_mask(inputs, settings.causal)
                with autocast:
                    if settings.causal:
                        loss = step_model(**inputs, num_items_in_batch=predicted).loss
                    else:
                        loss = step_model(**inputs).loss / count
                loss.backward()
                step_loss += loss.detach()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            learning_rate = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            steps_bar.update(1)
            watch.see(step_loss, step)
            window.loss += step_loss
            flush_logs()  # the previous step's log: read once this step is queued
            state.global_step = step
            throughput.on_step_end(None, state, None)
            epoch_progress = epoch + (batch_index + 1) / batches_per_epoch
            if step == 1 or step % settings.log_steps == 0:
                window.pending.append((step, epoch_progress, learning_rate,
                                       window.last_logged_step,
                                       *_to_host_later(window.loss, grad_norm, watch.device_flag())))
                window.last_logged_step = step
                window.loss.zero_()
            if step % settings.save_steps == 0 or step == last_step:
                flush_logs()
                _save_checkpoint(checkpoints / f"checkpoint-{step}", model, optimizer, scheduler,
                                 window, history, step, epoch_progress, watch)
        flush_logs()
        watch.check()
        throughput.on_train_end(None, state, None)
    finally:
        steps_bar.close()
        del micro
        if writer is not None:
            writer.close()
    window.logged_loss_sum += float(window.loss)
    return LoopResult(steps=step, history=history,
                      train_loss=window.logged_loss_sum / step if step else None,
                      first_batch_sha256=first_batch_sha256, resumed_from=resume_from,
                      start_step=start_step)


def _to_host_later(*values: Any) -> tuple[Any, Any]:
    """The values copied to host memory without waiting: (host tensor, the CUDA event after
    which it holds them, or None on a CPU)."""
    import torch

    stacked = torch.stack([torch.as_tensor(v, device=values[0].device).float() for v in values])
    if not stacked.is_cuda:
        return stacked, None
    host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
    host.copy_(stacked, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


def _write_log(entry: tuple, window: _LogWindow, history: list[dict[str, Any]],
               watch: NonFiniteWatch, writer: Any, settings: LoopSettings, bar: Any) -> None:
    step, epoch, learning_rate, since, host, event = entry
    if event is not None:
        event.synchronize()  # the logged step's work only: later steps stay queued
    total, grad_norm, first_bad = host.tolist()
    if first_bad:
        raise non_finite_error("loss", int(first_bad), "nan/inf")
    window.logged_loss_sum += total
    record = {"loss": round(total / (step - since), 4), "grad_norm": grad_norm,
              "learning_rate": learning_rate, "epoch": epoch, "step": step}
    now = time.perf_counter()
    if window.last_time is not None and step > window.last_time[1]:
        sequences = (step - window.last_time[1]) * settings.batch_size * settings.grad_accum
        seconds = now - window.last_time[0]
        record["throughput_samples_per_second"] = round(sequences / seconds, 3)
        record["throughput_tokens_per_second"] = round(
            sequences * settings.block_size / seconds, 1)
    window.last_time = (now, step)
    history.append(record)
    # shown as the Trainer's logs are, so either loop's progress reads the same
    show_training_log({k: v for k, v in record.items() if k != "step"},
                      bar if progress.showing() else None)
    if writer is not None:
        for name in ("loss", "grad_norm", "learning_rate", "epoch"):
            writer.add_scalar(f"train/{name}", record[name], step)


def _tensorboard(folder: Path | None) -> Any:
    if folder is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(folder))


def _save_checkpoint(checkpoint: Path, model: Any, optimizer: Any, scheduler: Any,
                     window: _LogWindow, history: list[dict[str, Any]], step: int,
                     epoch: float, watch: NonFiniteWatch) -> None:
    """checkpoint-N, written in a temporary folder and renamed; CHECKPOINT_RECORD last."""
    import torch
    from safetensors.torch import save_model

    watch.check()
    if not weights_are_finite(model):
        raise non_finite_error("weights", step, "nan/inf")
    temporary = checkpoint.with_name(checkpoint.name + ".tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        temporary.mkdir(parents=True)
        save_model(model, str(temporary / WEIGHTS_FILE))
        torch.save(optimizer.state_dict(), temporary / OPTIMIZER_FILE)
        torch.save(scheduler.state_dict(), temporary / SCHEDULER_FILE)
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        torch.save(rng, temporary / RNG_FILE)
        (temporary / STATE_FILE).write_text(json.dumps(
            {"global_step": step, "epoch": epoch, "log_history": history}, indent=1),
            encoding="utf-8")
        (temporary / LOGGING_RECORD).write_text(json.dumps(
            {"pending_loss": float(window.loss), "last_logged_step": window.last_logged_step,
             "logged_loss_sum": window.logged_loss_sum}), encoding="utf-8")
        record_checkpoint(temporary)
    except BaseException:  # a full disk: no half-written checkpoint left beside the whole ones
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    shutil.rmtree(checkpoint, ignore_errors=True)
    os.replace(temporary, checkpoint)
    for old in checkpoints_newest_first(checkpoint.parent)[SAVE_TOTAL_LIMIT:]:
        shutil.rmtree(old, ignore_errors=True)


def _load_checkpoint(checkpoint: Path, model: Any, optimizer: Any, scheduler: Any,
                     window: _LogWindow, device: Any) -> int:
    import torch
    from safetensors.torch import load_model

    load_model(model, str(checkpoint / WEIGHTS_FILE), device=str(device))
    optimizer.load_state_dict(torch.load(checkpoint / OPTIMIZER_FILE, map_location=device,
                                         weights_only=True))
    scheduler.load_state_dict(torch.load(checkpoint / SCHEDULER_FILE, weights_only=True))
    rng = torch.load(checkpoint / RNG_FILE, weights_only=True)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    logged = read_logging_window(checkpoint)
    if logged is not None:
        window.loss += logged["pending_loss"]
        window.last_logged_step = logged["last_logged_step"]
        window.logged_loss_sum = logged["logged_loss_sum"]
    return int(json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))["global_step"])


def _load_history(checkpoint: Path) -> list[dict[str, Any]]:
    return json.loads((checkpoint / STATE_FILE).read_text(encoding="utf-8"))["log_history"]

