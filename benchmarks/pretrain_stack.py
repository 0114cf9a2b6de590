"""`lab pretrain`'s training stack against a plain PyTorch loop, on the same batches.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/pretrain_stack.py

The lab pre-trains through the Hugging Face Trainer (its guarded subclass, the arguments
`lab pretrain` passes, the lab's packed dataset and collator). The named baseline is the loop
the Trainer stands for, written out:

    batch = collator(features); loss = model(**batch).loss; loss.backward()
    clip_grad_norm_(1.0); optimizer.step(); scheduler.step(); optimizer.zero_grad()

with torch's AdamW and the same linear schedule. Both train the same model from the same initial
weights on the same batches: the Trainer's run records the features of every batch it collates,
and the plain loop collates exactly those again (collation is part of training in both). Timed:
the steady state, from the end of the warm-up steps to the end of the last step (the Trainer's
step-end callback; checkpoints are never saved: save_steps is past the last step). Useful tokens
are the non-padding tokens of the timed batches. Each repeat runs both stacks, alternating which
goes first, at each thread count; medians over repeats are reported with the ratio
lab / plain, and the target is lab >= 0.9 x plain at every thread count.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.9


def build_inputs(tmp: Path, docs: int, vocab: int, seed: int):
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import load_tokenizer, train_tokenizer

    arm, tok_dir = tmp / "arm", tmp / "tokenizer"
    run_inject(InjectConfig(benchmark="codetrans", setting="control", seed=seed, out=arm,
                            limit=docs))
    train_tokenizer(arm, tok_dir, [], vocab_size=vocab)
    return arm, tok_dir, load_tokenizer(tok_dir)


class RecordingCollator:
    """The lab's collator, keeping every batch's features (in collation order) and its useful
    tokens, so that the plain loop can train on the very same batches."""

    def __init__(self, collator: Any, pad: int):
        self.collator, self.pad = collator, pad
        self.features: list[list[dict[str, Any]]] = []
        self.useful: list[int] = []

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        self.features.append(features)
        self.useful.append(sum(int((f["input_ids"] != self.pad).sum()) for f in features))
        return self.collator(features)


def lab_stack(cfg: Any, tokenizer: Any, dataset: Any, collator: Any, init_state: dict,
              warmup: int, steps: int, work: Path) -> tuple[float, RecordingCollator]:
    """Seconds of the timed steps of `lab pretrain`'s Trainer, and the batches it trained on."""
    from transformers import TrainerCallback

    from lab.models import build_config, build_model
    from lab.train.pretrain import _make_trainer_class, _training_arguments

    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    model = build_model(cfg.model, build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size))
    model.load_state_dict(init_state)
    recording = RecordingCollator(collator, tokenizer.pad_token_id)
    trainer = _make_trainer_class()(model=model, args=_training_arguments(cfg, work),
                                    train_dataset=dataset, data_collator=recording,
                                    callbacks=[StepClock()])
    trainer.train()
    return ends[warmup + steps - 1] - ends[warmup - 1], recording


def plain_loop(cfg: Any, tokenizer: Any, recording: RecordingCollator, collator: Any,
               init_state: dict, warmup: int, steps: int) -> float:
    """Seconds of the same timed steps in the loop the Trainer stands for."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from lab.models import build_config, build_model

    model = build_model(cfg.model, build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size))
    model.load_state_dict(init_state)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    schedule = get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, warmup + steps)
    started = 0.0
    for step, features in enumerate(recording.features[: warmup + steps]):
        if step == warmup:
            started = time.perf_counter()
        batch = collator(features)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000, help="CSN documents in the arm")
    parser.add_argument("--model", default="gpt2", choices=("gpt2", "roberta"))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the corpora folder (for example ../shared/corpora)")
    if min(opts.warmup, opts.steps, opts.repeats) < 1:
        sys.exit("--warmup, --steps and --repeats must be >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from transformers.utils import logging as hf_logging

    from lab.models import build_config, build_model, position_offset
    from lab.tokenizer import tokenizer_hash
    from lab.train.packing import PackedCollator, PackedDataset, pack_documents, tokenize_corpus
    from lab.train.pretrain import PretrainConfig, resolve_for_device
    from lab.train.speed import training_device

    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory(prefix="lab-stack-") as tmp_name:
        tmp = Path(tmp_name)
        arm, tok_dir, tokenizer = build_inputs(tmp, opts.docs, 8000, opts.seed)
        cfg = PretrainConfig(model=opts.model, corpus=arm, tokenizer=tok_dir, out=tmp / "out",
                             preset=opts.preset, batch_size=opts.batch_size,
                             block_size=opts.block_size, seed=opts.seed,
                             max_steps=opts.warmup + opts.steps, save_steps=10 ** 6,
                             log_steps=10 ** 6, report_to="none")
        cfg = resolve_for_device(cfg, training_device())  # what `lab pretrain` runs with
        corpus = tokenize_corpus(arm, tokenizer, tokenizer_hash(tok_dir), tmp / "cache")
        packing = pack_documents(corpus.lengths(), cfg.block_size, samples=corpus.injected)
        dataset = PackedDataset(corpus, packing, tokenizer.bos_token_id, tokenizer.eos_token_id,
                                tokenizer.pad_token_id)
        torch.manual_seed(opts.seed)
        config = build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size)
        init_state = {k: v.clone() for k, v in build_model(cfg.model, config).state_dict().items()}

        def collator() -> Any:
            return PackedCollator(tokenizer, mlm=cfg.model == "roberta", seed=cfg.seed,
                                  position_offset=position_offset(config))

        print(f"{cfg.model} {cfg.preset}, batch {cfg.batch_size} x {cfg.block_size}, "
              f"{opts.warmup} warm-up + {opts.steps} timed steps, {opts.repeats} repeats, "
              f"{len(corpus)} documents; torch {torch.__version__}", flush=True)
        worst = float("inf")
        for threads in [int(t) for t in opts.threads.split(",") if t]:
            torch.set_num_threads(threads)
            rates: dict[str, list[float]] = {"lab": [], "plain": []}
            # The batches (and their useful tokens) of this run, recorded by an untimed run.
            _, recording = lab_stack(cfg, tokenizer, dataset, collator(), init_state,
                                     opts.warmup, opts.steps, tmp / f"t{threads}-record")
            useful = sum(recording.useful[opts.warmup: opts.warmup + opts.steps])
            for repeat in range(opts.repeats):
                # Alternate which stack runs first, so drifting load hits both alike.
                for stack in (("lab", "plain") if repeat % 2 == 0 else ("plain", "lab")):
                    if stack == "lab":
                        seconds, _ = lab_stack(cfg, tokenizer, dataset, collator(), init_state,
                                               opts.warmup, opts.steps, tmp / f"t{threads}-{repeat}")
                    else:
                        seconds = plain_loop(cfg, tokenizer, recording, collator(), init_state,
                                             opts.warmup, opts.steps)
                    rates[stack].append(useful / seconds)
            lab, plain = (statistics.median(rates[k]) for k in ("lab", "plain"))
            worst = min(worst, lab / plain)
            print(f"threads {threads}: lab pretrain (Trainer) {lab:,.0f} useful tokens/s, plain "
                  f"loop {plain:,.0f} (medians of {opts.repeats}; runs: lab "
                  f"{', '.join(f'{r:,.0f}' for r in rates['lab'])}, plain "
                  f"{', '.join(f'{r:,.0f}' for r in rates['plain'])}); ratio {lab / plain:.2f}x "
                  f"(target >= {TARGET}x)", flush=True)
        print(f"worst ratio {worst:.2f}x: {'meets' if worst >= TARGET else 'misses'} the target")


if __name__ == "__main__":
    main()
