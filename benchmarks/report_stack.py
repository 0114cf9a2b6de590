"""`lab report` on one finished study, this tree against a baseline commit (the named baseline:
e8beb17, the last commit before the report's HTML moved to Jinja2, its LaTeX and CSV tables to
pandas, its sign-flip test to scipy's permutation_test and the model cards to huggingface_hub).

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/report_stack.py \
        --study runs/quickstart [--baseline e8beb17] [--repeats 5]

The study is copied twice without its weights and checkpoints (the report reads neither), the
baseline is checked out in a temporary git worktree, and the two trees run `lab report` in
turns, each in a fresh process (start-up and imports included), the order alternating between
repetitions so that a machine's load falls on both alike. Prints each run, the medians and their
ratio (this tree / baseline; <= 1.1 is "no slowdown that matters"), and whether the two reports'
tables (table.csv, primary.csv) are byte-identical.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = shutil.ignore_patterns("*.safetensors", "*.bin", "checkpoint-*", "*.partial", "optimizer.pt")
COMPARED = ("table.csv", "primary.csv")


def timed_report(tree: Path, study: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lab.cli", "report", str(study)], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": str(tree)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, required=True)
    parser.add_argument("--baseline", default="e8beb17")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        tmp = Path(tmp)
        baseline = tmp / "baseline-tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline],
                       cwd=ROOT, check=True, capture_output=True)
        try:
            trees = {"baseline": baseline, "this tree": ROOT}
            studies = {name: tmp / f"study-{i}" for i, name in enumerate(trees)}
            for study in studies.values():
                shutil.copytree(args.study, study, ignore=SKIPPED, symlinks=True)
            seconds: dict[str, list[float]] = {name: [] for name in trees}
            for repeat in range(args.repeats):
                order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
                for name in order:
                    seconds[name].append(timed_report(trees[name], studies[name]))
                print(f"repeat {repeat + 1}: " + ", ".join(
                    f"{name} {seconds[name][-1]:.2f} s" for name in trees), flush=True)
            medians = {name: statistics.median(values) for name, values in seconds.items()}
            print(f"median: baseline ({args.baseline}) {medians['baseline']:.2f} s, this tree "
                  f"{medians['this tree']:.2f} s; ratio {medians['this tree'] / medians['baseline']:.2f}x")
            for table in COMPARED:
                same = ((studies["baseline"] / "report" / table).read_bytes()
                        == (studies["this tree"] / "report" / table).read_bytes())
                print(f"report/{table}: {'byte-identical' if same else 'DIFFERS'}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT,
                           capture_output=True)


if __name__ == "__main__":
    main()
