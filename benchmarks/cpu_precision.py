"""What a CPU offers beyond float32 eager for the quickstart's pre-training: bf16 autocast and
torch.compile, against float32 eager (the named baseline), on the same model, batch and tokens.

    HF_HUB_OFFLINE=1 python benchmarks/cpu_precision.py                 # the quickstart's shape
    HF_HUB_OFFLINE=1 python benchmarks/cpu_precision.py --steps 4 --repeats 1   # smoke run

Model: the `tiny` GPT-2 of the quickstart (4 layers, 256 wide, vocabulary 4,000, block 256,
batch 16) built by `lab.models`. Data: seeded random token ids (the speed of a dense forward and
backward pass does not depend on which ids they are). Each step is the lab's training step
without the Trainer around it: forward, loss, backward, gradient clipping at 1.0, AdamW. Each
variant builds its model from the same initial weights; compiled variants are compiled (and
warmed up) before timing, and the compile time is printed on its own, because it is paid once
per stage. The variants are timed round-robin, rotating the order each repeat, so that load from
other processes hits all alike; medians over repeats. Threads: --threads (default: the cores),
as a study fixes them for every stage.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {  # name: (bf16 autocast, torch.compile)
    "fp32 eager": (False, False),
    "bf16 eager": (True, False),
    "fp32 compile": (False, True),
    "bf16 compile": (True, True),
}
BASELINE = "fp32 eager"


class _Vocabulary:
    """What lab.models.build_config reads of a tokenizer."""

    def __init__(self, size: int):
        self.size, self.bos_token_id, self.eos_token_id, self.pad_token_id = size, 0, 2, 1

    def __len__(self) -> int:
        return self.size


def _variant(name: str, state: dict, config, lr: float):
    import torch

    from lab.models import build_model

    bf16, compiled = VARIANTS[name]
    model = build_model("gpt2", config)
    model.load_state_dict(state)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    forward = torch.compile(model) if compiled else model

    def step(batch):
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
                    else contextlib.nullcontext())
        with autocast:
            loss = forward(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss)

    step.model = model  # what it trains (benchmarks/cpu_isa.py compares the weights)
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant and repeat")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (after compiling)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()

    import torch

    from lab.models import build_config, build_model

    torch.set_num_threads(args.threads)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or BASELINE not in names:
        sys.exit(f"--variants: choose from {', '.join(VARIANTS)} ({BASELINE} is the baseline)")
    torch.manual_seed(0)
    config = build_config("gpt2", args.preset, _Vocabulary(args.vocab), args.block)
    state = build_model("gpt2", config).state_dict()
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(3, args.vocab, (args.batch, args.block), generator=generator)
               for _ in range(args.steps)]

    steps, compile_seconds = {}, {}
    for name in names:
        started = time.perf_counter()
        steps[name] = _variant(name, state, config, 5e-4)
        for _ in range(args.warmup):
            steps[name](batches[0])
        compile_seconds[name] = time.perf_counter() - started
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for i, batch in enumerate(batches):
            for name in order[i % len(order):] + order[:i % len(order)]:
                started = time.perf_counter()
                steps[name](batch)
                seconds[name].append(time.perf_counter() - started)
    tokens = args.batch * args.block
    print(f"GPT-2 {args.preset}, vocabulary {args.vocab}, block {args.block}, batch {args.batch}, "
          f"{args.threads} threads, torch {torch.__version__}; median of "
          f"{args.repeats * args.steps} steps per variant")
    base = tokens / statistics.median(seconds[BASELINE])
    print(f"{'variant':<14} {'tokens/s':>10} {'vs ' + BASELINE:>14} {'build+warm-up s':>16}")
    for name in names:
        rate = tokens / statistics.median(seconds[name])
        print(f"{name:<14} {rate:>10,.0f} {rate / base:>13.2f}x {compile_seconds[name]:>16.1f}")


if __name__ == "__main__":
    main()
