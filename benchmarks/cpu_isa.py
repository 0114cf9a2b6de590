"""What pinning torch's CPU kernels to AVX2 (the lab's default on x86-64, lab/__init__.py) costs
against the kernels torch picks for the CPU (the baseline: AVX-512 where the CPU has it), and
whether the two compute the same weights.

    HF_HUB_OFFLINE=1 python benchmarks/cpu_isa.py                      # the quickstart's shape
    HF_HUB_OFFLINE=1 python benchmarks/cpu_isa.py --steps 3 --repeats 1   # smoke run

torch fixes its kernels' instruction set at its first computation, so each setting runs in a
process of its own, started alternately (pinned, native, pinned, ...) so that load from other
processes hits both alike. Each process trains the quickstart's `tiny` GPT-2 (the training step
of benchmarks/cpu_precision.py, float32 eager) from the same initial weights on the same seeded
batches and prints its step times and a checksum of the weights after the last step. Printed:
median tokens/s per setting, the ratio to the baseline, and whether the weights agree across
repeats (they must: same process, same numbers) and across settings (on an AVX-512 CPU they do
not: that is why the lab pins). On a CPU without AVX-512 the two settings are the same kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BASELINE = "native"


def _settings() -> dict[str, str]:
    """Setting name -> ATEN_CPU_CAPABILITY: the lab's pin, and what torch picks unpinned."""
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    return {"pinned": "avx2", BASELINE: "avx512" if "avx512f" in flags else "avx2"}


def _child(args: argparse.Namespace) -> None:
    import torch

    from cpu_precision import _Vocabulary, _variant
    from lab.models import build_config, build_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = build_config("gpt2", "tiny", _Vocabulary(args.vocab), args.block)
    state = build_model("gpt2", config).state_dict()
    step = _variant("fp32 eager", state, config, 5e-4)
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(3, args.vocab, (args.batch, args.block), generator=generator)
               for _ in range(args.warmup + args.steps)]
    seconds = []
    for index, batch in enumerate(batches):
        started = time.perf_counter()
        step(batch)
        if index >= args.warmup:
            seconds.append(time.perf_counter() - started)
    checksum = repr(sum(float(p.double().sum()) for p in step.model.parameters()))
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                      "seconds": seconds, "checksum": checksum}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="processes per setting")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    settings = _settings()
    runs: dict[str, list[dict]] = {name: [] for name in settings}
    for repeat in range(args.repeats):
        for name in (list(settings) if repeat % 2 == 0 else list(settings)[::-1]):
            env = {**os.environ, "ATEN_CPU_CAPABILITY": settings[name]}
            done = subprocess.run([sys.executable, __file__, "--child", *sys.argv[1:]], env=env,
                                  capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    tokens = args.batch * args.block
    print(f"GPT-2 tiny, vocabulary {args.vocab}, block {args.block}, batch {args.batch}, "
          f"{args.threads} threads, float32; median of {args.repeats} x {args.steps} steps")
    base = tokens / statistics.median(s for run in runs[BASELINE] for s in run["seconds"])
    print(f"{'setting':<8} {'kernels':<8} {'tokens/s':>9} {'vs ' + BASELINE:>10}  weights after "
          f"{args.warmup + args.steps} steps")
    for name, found in runs.items():
        rate = tokens / statistics.median(s for run in found for s in run["seconds"])
        sums = sorted({run["checksum"] for run in found})
        print(f"{name:<8} {found[0]['capability']:<8} {rate:>9,.0f} {rate / base:>9.2f}x  "
              f"checksum {' / '.join(sums)}" + (" (differs across repeats!)" if len(sums) > 1
                                                 else ""))
    same = runs["pinned"][0]["checksum"] == runs[BASELINE][0]["checksum"]
    print("pinned and native compute " + ("the same weights" if same else "other weights"))


if __name__ == "__main__":
    main()
