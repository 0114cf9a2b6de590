"""Batched, KV-cached greedy decoding against one-sample-at-a-time generation.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/generation.py [--model DIR]

Both paths are the lab's own `lab.eval.generate.generate` (KV cache on), on a `tiny` GPT-2 and
CodeTrans test prompts; only the batch size differs (--batch-size vs 1). Useful tokens are the
generated tokens up to and including </s> (padding of finished rows is not counted). The batched
path decodes --samples prompts; the one-at-a-time baseline decodes the first --baseline-samples
of them (it is slow; tokens/s is a rate). Without --model, a tiny GPT-2 is pre-trained briefly
on a 2,000-document control arm so that outputs have realistic lengths. Target: >= 5x.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_model(tmp: Path) -> Path:
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import train_tokenizer
    from lab.train.pretrain import PretrainConfig, run_pretrain

    run_inject(InjectConfig(benchmark="codetrans", setting="control", seed=0, limit=2000,
                            out=tmp / "control"))
    train_tokenizer(tmp / "control", tmp / "tok", ["codetrans"], vocab_size=8000)
    run_pretrain(PretrainConfig(model="gpt2", corpus=tmp / "control", tokenizer=tmp / "tok",
                                out=tmp / "pt", preset="tiny", max_steps=40, lr=2e-3,
                                batch_size=16, block_size=256, save_steps=1000,
                                cache_dir=tmp / "cache"))
    return tmp / "pt"


def count_tokens(tokenizer, texts: list[str]) -> int:
    # Re-tokenised outputs plus the closing </s>: what the model emitted before stopping.
    return sum(len(tokenizer(" " + t, add_special_tokens=False)["input_ids"]) + 1 for t in texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a lab pretrain GPT-2 directory")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--baseline-samples", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the corpora folder (for example ../shared/corpora)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from lab.corpora import load_samples
    from lab.eval.generate import generate, load_generator
    from lab.tasks import Decoding

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = opts.model or build_model(Path(tmp))
        model, tokenizer, _manifest, architecture = load_generator(model_dir)
        sources = [s.input for s in load_samples("codetrans", "test").records[: opts.samples]]
        greedy = Decoding()

        def run(batch: list[str], batch_size: int) -> tuple[float, int, list[str]]:
            started = time.perf_counter()
            outputs = generate(model, tokenizer, architecture, batch, greedy, 128,
                               opts.max_new_tokens, batch_size)
            return time.perf_counter() - started, count_tokens(tokenizer, outputs), outputs

        batched, single = [], []
        for _ in range(opts.repeats):
            seconds, tokens, outputs = run(sources, opts.batch_size)
            batched.append(tokens / seconds)
            seconds, tokens, one_by_one = run(sources[: opts.baseline_samples], 1)
            single.append(tokens / seconds)
        same = sum(a == b for a, b in zip(outputs, one_by_one))
        b_med, s_med = statistics.median(batched), statistics.median(single)
        print(f"tiny GPT-2 ({model_dir}), greedy, max {opts.max_new_tokens} new tokens")
        print(f"{'path':<34} {'median tok/s':>12}  runs")
        print(f"{f'batched (batch {opts.batch_size}, {len(sources)} prompts)':<34} {b_med:12.1f}  "
              + ", ".join(f"{x:.1f}" for x in batched))
        print(f"{f'one at a time ({opts.baseline_samples} prompts)':<34} {s_med:12.1f}  "
              + ", ".join(f"{x:.1f}" for x in single))
        ratio = b_med / s_med
        print(f"ratio batched / one-at-a-time: {ratio:.2f}x (target >= 5x: "
              f"{'MET' if ratio >= 5 else 'NOT MET'})")
        print(f"identical outputs on the shared prompts: {same}/{len(one_by_one)} "
              "(greedy; float differences between batch shapes can flip a few)")
        print(f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
