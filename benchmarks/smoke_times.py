"""Every shipped recipe's smoke run (`lab study RECIPE --smoke`), one at a time from an empty
folder with the machine's cores to itself: its wall and CPU time against the targets of issue
68 (each at most 3 minutes on two cores, all together at most 15).

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/smoke_times.py \
        [--out /tmp/smoke-times] [--rounds 1] [recipes/quickstart.yaml ...]

The recipes are those tests/test_smoke.py runs: every file under recipes/. A recipe's first run in a fresh folder builds DeepSpeed's CPU comm op where
the recipe uses DeepSpeed (about 20 s, once per TORCH_EXTENSIONS_DIR): this script builds it
into OUT/torch-extensions before timing, as CI's test workers share one build. With --rounds
R each recipe runs R times and its median is printed. The load average before each run is
printed, so that a busy machine shows.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
PER_RECIPE_TARGET = 180.0
ALL_TARGET = 900.0


def run(recipe: Path, out: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the run and its children, exit code)."""
    shutil.rmtree(out, ignore_errors=True)
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(recipe), "--smoke",
                           "--out", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
    return wall, cpu, done.returncode


def main() -> None:
    from test_smoke import _studies

    parser = argparse.ArgumentParser()
    parser.add_argument("recipes", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/smoke-times"))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    recipes = [p.resolve() for p in args.recipes] or _studies()
    os.environ["TORCH_EXTENSIONS_DIR"] = str(args.out / "torch-extensions")
    warm = ROOT / "recipes" / "paper" / "timing.yaml"  # the smallest DeepSpeed recipe: the build
    run(warm, args.out / "warm-up")
    total = 0.0
    print(f"| recipe | wall (median of {args.rounds}) | CPU | rc | load before |")
    print("|---|---|---|---|---|")
    for recipe in recipes:
        walls, cpus, codes = [], [], []
        load = os.getloadavg()[0]
        for _ in range(args.rounds):
            wall, cpu, code = run(recipe, args.out / recipe.stem)
            walls.append(wall)
            cpus.append(cpu)
            codes.append(code)
        wall = statistics.median(walls)
        total += wall
        flag = "" if wall <= PER_RECIPE_TARGET else f" (over {PER_RECIPE_TARGET:.0f} s)"
        print(f"| {recipe.relative_to(ROOT / 'recipes')} | {wall:.0f} s{flag} | "
              f"{statistics.median(cpus):.0f} s | {max(codes)} | {load:.2f} |", flush=True)
    print(f"\nall {len(recipes)} recipes: {total / 60:.1f} min wall (target "
          f"{ALL_TARGET / 60:.0f} min: {'met' if total <= ALL_TARGET else 'not met'})")


if __name__ == "__main__":
    main()
