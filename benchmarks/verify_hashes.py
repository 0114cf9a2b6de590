"""What checking every recorded hash on load costs: each artefact's load with its check against
the same load without it (the named baseline), side by side in one process.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/verify_hashes.py \
        [--preset paper] [--repeats 5] [--limit 0]

- weights: a GPT-2 of the preset (paper: 12 layers x 768, a 50k vocabulary, about 0.5 GB of
  float32) saved as a lab model folder; `load_weights` alone vs `check_model_files` (sizes and a
  streamed sha256 of every file under model/) followed by the same load;
- corpus: a control arm over the CSN-format corpus (`--limit` documents, 0 for all);
  `verify_corpus` (every shard hashed) vs one pass reading every document, which the first
  stage that uses an arm (tokenizer training, tokenization) makes anyway;
- tokenizer: `load_tokenizer` (it checks tokenizer.json) vs transformers' own load of the file.

Each check runs as a fresh process would (the per-process memory of checked files is cleared);
files are in the page cache for both sides alike, which favours neither (a cold read costs the
load the same bytes). Prints each median and the ratio (with the check / without).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab import common  # noqa: E402
from lab.corpora import shards  # noqa: E402

SIZES = {"paper": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50_000, n_positions=1024),
         "small": dict(n_layer=6, n_embd=512, n_head=8, vocab_size=50_000, n_positions=512),
         "tiny": dict(n_layer=4, n_embd=256, n_head=4, vocab_size=50_000, n_positions=512)}


def forget_checks() -> None:
    """As a new process: nothing checked yet."""
    common._FILES_VERIFIED.clear()
    shards._VERIFIED.clear()


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        forget_checks()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def side_by_side(name: str, checked: Callable[[], object], plain: Callable[[], object],
                 repeats: int, size: int) -> dict:
    checked(), plain()  # warm both (imports, page cache)
    with_check, without = [], []
    for turn in range(repeats):  # alternating, so the machine's load falls on both alike
        pair = [(checked, with_check), (plain, without)]
        for work, times in (pair if turn % 2 == 0 else pair[::-1]):
            times.append(median_seconds(work, 1))
    row = {"artefact": name, "bytes": size, "with_check_s": statistics.median(with_check),
           "without_s": statistics.median(without)}
    row["ratio"] = row["with_check_s"] / row["without_s"]
    print(f"{name:10s} {size / 1e6:9.1f} MB   with check {row['with_check_s']:7.3f} s   "
          f"without {row['without_s']:7.3f} s   ratio {row['ratio']:.2f}x", flush=True)
    return row


def bench_weights(root: Path, preset: str, repeats: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    from lab.models import MODEL_FILES, WEIGHTS_SUBDIR, check_model_files, load_weights

    folder = root / "model-folder"
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(**SIZES[preset])).save_pretrained(str(folder / WEIGHTS_SUBDIR))
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"},
                MODEL_FILES: common.files_record(folder / WEIGHTS_SUBDIR)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    size = sum(entry["size"] for entry in manifest[MODEL_FILES].values())

    def plain():
        return load_weights(AutoModelForCausalLM, folder / WEIGHTS_SUBDIR)

    def checked():
        check_model_files(folder, "--model")
        return plain()

    return side_by_side(f"weights ({preset})", checked, plain, repeats, size)


def bench_corpus(root: Path, limit: int, repeats: int) -> dict:
    from lab.contamination.inject import InjectConfig, run_inject

    arm = root / "control"
    run_inject(InjectConfig(setting="control", benchmark="codetrans", seed=0, out=arm,
                            **({"limit": limit} if limit else {})))
    size = sum(p.stat().st_size for p in (arm / "corpus").iterdir())

    def plain():
        return sum(1 for _ in shards.read_corpus(arm))

    def checked():
        shards.verify_corpus(arm)
        return plain()

    return side_by_side("corpus", checked, plain, repeats, size)


def bench_tokenizer(root: Path, repeats: int) -> dict:
    """A tokenizer of the study's vocabulary size, trained on 20,000 documents of the arm."""
    from transformers import PreTrainedTokenizerFast

    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import load_tokenizer, train_tokenizer

    arm, tok = root / "tokenizer-arm", root / "tok"
    run_inject(InjectConfig(setting="control", benchmark="codetrans", seed=0, out=arm,
                            limit=20_000))
    train_tokenizer(arm, tok, [], vocab_size=50_000)

    def plain():
        return PreTrainedTokenizerFast.from_pretrained(str(tok))

    return side_by_side("tokenizer", lambda: load_tokenizer(tok), plain, repeats,
                        (tok / "tokenizer.json").stat().st_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(SIZES), default="paper")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=int, default=0,
                        help="Corpus documents (0: the whole CSN-format corpus).")
    args = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the folder holding the datasets (../shared/corpora here)")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="lab-verify-bench-") as tmp:
        root = Path(tmp)
        rows = [bench_weights(root, args.preset, args.repeats),
                bench_corpus(root, args.limit, args.repeats),
                bench_tokenizer(root, args.repeats)]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
