"""The quickstart's wall time at an earlier commit against now, side by side in one run.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quickstart_time.py \
        [--old bafe1c0] [--new HEAD] [--out /tmp/qs-bench] [--result benchmarks/quickstart_time.md] \
        [--alone ROUNDS]

Each commit is checked out as a git worktree (OUT/old-src, OUT/new-src) and runs its own
`recipes/quickstart.yaml` from an empty folder (OUT/old, OUT/new) with this virtual
environment's python, `PYTHONPATH` set to the worktree so that its `lab` is the one imported.
Both start at the same moment on the same cores, so whatever else the machine runs slows both
alike; when the faster one ends, the slower one has the cores to itself, which shortens it: the
ratio printed (new / old) is, if anything, too high. CPU seconds (user + system, the study and
every stage process it waited for) are printed beside the wall times: they depend less on load.

With --alone ROUNDS the two commits instead run one at a time, each with the cores to itself,
ROUNDS times each in alternating order (old, new, then new, old, ...) so that a drift in the
machine's load falls on both; the medians of the wall and CPU times are compared. This is the
measure of "wall time on the same 2 cores"; run it on a quiet machine (the load average before
each run is printed so that a busy one shows).

Then it reads the new run's primary table (OUT/new/report/primary.csv) and says whether the
quickstart's conclusion holds: the split-half lift at E = 0 and the decay (E = 0 minus the
largest E) both positive and significant after Holm. The same lines go to --result (markdown).
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(commit: str, path: Path) -> str:
    """Check `commit` out at `path` (detached) unless it is there; return its full hash."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), full],
                       check=True, capture_output=True)
    return full


def start(source: Path, out: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, "-m", "lab.cli", "study", str(source / "recipes/quickstart.yaml"),
               "--out", str(out)]
    return subprocess.Popen(command, cwd=source, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def run_alone(source: Path, out: Path, log: Path) -> tuple[float, float, int, float]:
    """Wall seconds, CPU seconds, exit code and the 1-minute load average before the run."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    ended = wait_all({"run": start(source, out, log)}, started)["run"]
    return (*ended, load)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def wait_all(runs: dict[str, subprocess.Popen], started: float) -> dict[str, tuple[float, float, int]]:
    """Wall seconds, CPU seconds and exit code of each run, as each ends."""
    by_pid = {process.pid: name for name, process in runs.items()}
    ended: dict[str, tuple[float, float, int]] = {}
    while by_pid:
        pid, status, usage = os.wait4(-1, 0)
        if pid in by_pid:
            name = by_pid.pop(pid)
            ended[name] = (time.monotonic() - started, usage.ru_utime + usage.ru_stime,
                           os.waitstatus_to_exitcode(status))
            print(f"{name}: ended after {ended[name][0] / 60:.1f} min, "
                  f"{ended[name][1] / 60:.1f} CPU-min, rc {ended[name][2]}", flush=True)
    return ended


def conclusion(primary: Path) -> tuple[bool, list[str]]:
    """Whether the split-half lift at E = 0 and the decay are positive and significant."""
    if not primary.exists():
        return False, [f"no {primary}"]
    rows = list(csv.DictReader(primary.open()))
    lines, holds = [], True
    for question, epochs in (("split-half", "0"), ("decay", "0")):
        row = next((r for r in rows if r["question"] == question and r["epochs"] == epochs), None)
        if row is None:
            holds = False
            lines.append(f"{question} E = {epochs}: missing from the primary table")
            continue
        ok = row["significant"] == "True" and float(row["estimate"]) > 0
        holds = holds and ok
        to = f" -> {row['epochs_to']}" if row["epochs_to"] else ""
        lines.append(f"{question} E = {epochs}{to}: {float(row['estimate']):+.2f} "
                     f"[{float(row['ci_low']):+.2f}, {float(row['ci_high']):+.2f}], "
                     f"Holm p {float(row['p_holm']):.3g}, {row['samples']} samples: "
                     f"{'holds' if ok else 'FAILS'}")
    return holds, lines


def together(out: Path, commits: dict[str, str]) -> tuple[list[str], bool]:
    load_before = os.getloadavg()
    started = time.monotonic()
    runs = {name: start(out / f"{name}-src", out / name, out / f"{name}.log")
            for name in ("old", "new")}
    ended = wait_all(runs, started)
    load_after = os.getloadavg()
    (old_wall, old_cpu, old_rc), (new_wall, new_cpu, new_rc) = ended["old"], ended["new"]
    return [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end "
        f"(both runs at once, beside whatever else ran)",
        f"old {commits['old'][:7]}: {old_wall / 60:.1f} min wall, {old_cpu / 60:.1f} min CPU, rc {old_rc}",
        f"new {commits['new'][:7]}: {new_wall / 60:.1f} min wall, {new_cpu / 60:.1f} min CPU, rc {new_rc}",
        f"ratio new / old: {new_wall / old_wall:.2f} wall, {new_cpu / old_cpu:.2f} CPU",
    ], new_rc == 0


def alone(out: Path, commits: dict[str, str], rounds: int) -> tuple[list[str], bool]:
    times: dict[str, list[tuple[float, float, int, float]]] = {"old": [], "new": []}
    for number in range(1, rounds + 1):
        for name in ("old", "new") if number % 2 else ("new", "old"):
            folder = "new" if (name, number) == ("new", 1) else f"{name}-{number}"
            times[name].append(run_alone(out / f"{name}-src", out / folder,
                                         out / f"{folder}.log"))
    lines = [f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
             f"one run at a time, {rounds} round(s) in alternating order"]
    medians = {}
    for name in ("old", "new"):
        runs = times[name]
        medians[name] = (median([r[0] for r in runs]), median([r[1] for r in runs]))
        each = "; ".join(f"{wall / 60:.1f} min wall, {cpu / 60:.1f} CPU-min, rc {rc}, "
                         f"load {load:.1f} before" for wall, cpu, rc, load in runs)
        lines.append(f"{name} {commits[name][:7]}: median {medians[name][0] / 60:.1f} min wall, "
                     f"{medians[name][1] / 60:.1f} min CPU ({each})")
    lines.append(f"ratio new / old (medians): {medians['new'][0] / medians['old'][0]:.2f} wall, "
                 f"{medians['new'][1] / medians['old'][1]:.2f} CPU")
    return lines, all(rc == 0 for _, _, rc, _ in times["new"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", default="bafe1c0")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--out", type=Path, default=Path("/tmp/qs-bench"))
    parser.add_argument("--result", type=Path, default=None, help="also write the lines here")
    parser.add_argument("--alone", type=int, default=0, metavar="ROUNDS",
                        help="run the commits one at a time, ROUNDS times each, and compare medians")
    args = parser.parse_args()
    if args.alone < 0:
        parser.error("--alone: a number of rounds, 0 (both at once) or more")
    if args.out.exists() and any((args.out / name).exists() for name in ("old", "new")):
        sys.exit(f"quickstart_time: error: {args.out} holds an earlier run; choose another --out")
    args.out.mkdir(parents=True, exist_ok=True)
    commits = {name: worktree(commit, args.out / f"{name}-src")
               for name, commit in (("old", args.old), ("new", args.new))}
    if args.alone:
        lines, new_ok = alone(args.out, commits, args.alone)
    else:
        lines, new_ok = together(args.out, commits)
    holds, checks = conclusion(args.out / "new/report/primary.csv")
    lines += [*checks, f"conclusion {'holds' if holds and new_ok else 'does NOT hold'} in the new run"]
    print("\n".join(lines))
    if args.result:
        temporary = args.result.with_name(f".{args.result.name}.tmp")
        temporary.write_text("```\n$ " + " ".join(["python", *sys.argv]) + "\n"
                             + "\n".join(lines) + "\n```\n")
        os.replace(temporary, args.result)


if __name__ == "__main__":
    main()
