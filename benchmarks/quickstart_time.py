"""The quickstart's wall time at an earlier commit against now, side by side in one run.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quickstart_time.py \
        [--old bafe1c0] [--new HEAD] [--out /tmp/qs-bench] [--result benchmarks/quickstart_time.md]

Each commit is checked out as a git worktree (OUT/old-src, OUT/new-src) and runs its own
`recipes/quickstart.yaml` from an empty folder (OUT/old, OUT/new) with this virtual
environment's python, `PYTHONPATH` set to the worktree so that its `lab` is the one imported.
Both start at the same moment on the same cores, so whatever else the machine runs slows both
alike; when the faster one ends, the slower one has the cores to itself, which shortens it: the
ratio printed (new / old) is, if anything, too high. CPU seconds (user + system, the study and
every stage process it waited for) are printed beside the wall times: they depend less on load.

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
            print(f"{name}: ended after {ended[name][0] / 60:.1f} min", flush=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", default="bafe1c0")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--out", type=Path, default=Path("/tmp/qs-bench"))
    parser.add_argument("--result", type=Path, default=None, help="also write the lines here")
    args = parser.parse_args()
    if args.out.exists() and any((args.out / name).exists() for name in ("old", "new")):
        sys.exit(f"quickstart_time: error: {args.out} holds an earlier run; choose another --out")
    args.out.mkdir(parents=True, exist_ok=True)
    commits = {name: worktree(commit, args.out / f"{name}-src")
               for name, commit in (("old", args.old), ("new", args.new))}
    load_before = os.getloadavg()
    started = time.monotonic()
    runs = {name: start(args.out / f"{name}-src", args.out / name, args.out / f"{name}.log")
            for name in ("old", "new")}
    ended = wait_all(runs, started)
    load_after = os.getloadavg()
    (old_wall, old_cpu, old_rc), (new_wall, new_cpu, new_rc) = ended["old"], ended["new"]
    holds, checks = conclusion(args.out / "new/report/primary.csv")
    lines = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end "
        f"(both runs at once, beside whatever else ran)",
        f"old {commits['old'][:7]}: {old_wall / 60:.1f} min wall, {old_cpu / 60:.1f} min CPU, rc {old_rc}",
        f"new {commits['new'][:7]}: {new_wall / 60:.1f} min wall, {new_cpu / 60:.1f} min CPU, rc {new_rc}",
        f"ratio new / old: {new_wall / old_wall:.2f} wall, {new_cpu / old_cpu:.2f} CPU",
        *checks,
        f"conclusion {'holds' if holds and new_rc == 0 else 'does NOT hold'} in the new run",
    ]
    print("\n".join(lines))
    if args.result:
        temporary = args.result.with_name(f".{args.result.name}.tmp")
        temporary.write_text("```\n$ " + " ".join(["python", *sys.argv]) + "\n"
                             + "\n".join(lines) + "\n```\n")
        os.replace(temporary, args.result)


if __name__ == "__main__":
    main()
