"""The outcomes a fault-table row may expect, one judging function each.

Each takes the row and the world and returns a Verdict: the line to show (the error line, or
what happened) and the problems found (none: the row passes). Every outcome also checks that
nothing in the world outside the row's own outputs and the caches changed: no file added,
removed or rewritten (by size and mtime). That is what makes the `--force` rows meaningful: a
refused output must leave every input, and every folder the user owns, as it was.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .world import CACHES, Result, run_lab, start_lab

if TYPE_CHECKING:
    from .table import Case


@dataclass
class Verdict:
    shown: str
    problems: list[str] = field(default_factory=list)
    rc: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def outputs_of(argv: tuple[str, ...]) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--out"]


def outputs(case: Case) -> list[str]:
    """What a row's command writes: its --out, else the row's `writes`."""
    return outputs_of(case.argv) or ([case.writes] if case.writes else [])


def with_out(argv: tuple[str, ...], out: str) -> tuple[str, ...]:
    """The same command writing to `out` instead."""
    i = argv.index("--out")
    return (*argv[: i + 1], out, *argv[i + 2:])


def snapshot(world: Path) -> dict[str, tuple]:
    """(size, mtime_ns) of every file, "dir" for every folder, under the world; caches left out."""
    seen: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(world):
        rel = os.path.relpath(folder, world)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in CACHES]
        for name in dirs:
            seen[os.path.normpath(os.path.join(rel, name))] = ("dir",)
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            seen[os.path.normpath(os.path.join(rel, name))] = (st.st_size, st.st_mtime_ns)
    return seen


def _mine(path: str, outs: list[str], siblings: bool) -> bool:
    """Whether `path` (relative to the world) is one of `outs` or inside one (with `siblings`,
    also OUT.anything beside it: a report, a lock, a .partial)."""
    for out in outs:
        if out in (".", "") or out.startswith(".."):
            continue
        if path == out or path.startswith(out + "/"):
            return True
        if siblings and os.path.dirname(path) == os.path.dirname(out) and \
                os.path.basename(path).startswith(os.path.basename(out) + "."):
            return True
    return False


def changes(before: dict[str, tuple], after: dict[str, tuple], outs: list[str],
            siblings: bool = False) -> list[str]:
    """What changed in the world besides the row's own outputs."""
    found = []
    for label, paths in (("removed", before.keys() - after.keys()),
                         ("added", after.keys() - before.keys()),
                         ("changed", {p for p in before.keys() & after.keys()
                                      if before[p] != after[p] and before[p] != ("dir",)})):
        paths = sorted(p for p in paths if not _mine(p, outs, siblings))
        if paths:
            found.append(f"{label} {', '.join(paths[:3])}" + (" ..." if len(paths) > 3 else ""))
    return found


def clean(world: Path, outs: list[str], before: dict[str, tuple]) -> None:
    """Remove what a row wrote that was not there before it (its outputs and their siblings),
    so that the next row finds the world as it was."""
    for path in sorted(set(snapshot(world)) - set(before)):
        if _mine(path, outs, siblings=True) and os.path.lexists(world / path):
            target = world / path
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()


def _escaped(result: Result) -> str | None:
    if result.traceback:
        return "traceback: " + result.traceback.strip().splitlines()[-1]
    if "Traceback (most recent call last)" in result.stderr:
        return "traceback on stderr"
    return None


def _first_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("lab: error: ")]
    return (lines or result.stdout.strip().splitlines() or [""])[0]


def expect_error(case: Case, world: Path) -> Verdict:
    """Exit 2 and exactly one `lab: error:` line, the last of stderr, naming the fragment; no
    traceback; an --out that was not there is still not there, and nothing else changed."""
    outs = outputs(case)
    fresh = [out for out in outs if not os.path.lexists(world / out)]
    before = snapshot(world)
    result = run_lab(case.argv, world, case.env, case.absent)
    problems = []
    if (escaped := _escaped(result)) is not None:
        problems.append(escaped)
    if result.rc != 2:
        problems.append(f"rc {result.rc}")
    errors = [line for line in result.stderr.splitlines() if line.startswith("lab: error: ")]
    if len(errors) != 1:
        problems.append(f"{len(errors)} error lines")
    elif result.stderr.rstrip().splitlines()[-1] != errors[0]:
        problems.append("the error line is not the last line of stderr")
    elif case.fragment not in errors[0]:
        problems.append(f"does not name {case.fragment!r}")
    problems += [f"left {out}" for out in fresh if os.path.lexists(world / out)]
    problems += changes(before, snapshot(world), fresh)
    clean(world, fresh, before)
    return Verdict(_first_line(result), problems, result.rc)


def expect_ok(case: Case, world: Path) -> Verdict:
    """Exit 0 (a fault the lab heals by itself, or a dry run reports), a line of the output
    holding the fragment, the row's own check, nothing but its outputs changed."""
    outs = outputs(case)
    before = snapshot(world)
    result = run_lab(case.argv, world, case.env, case.absent)
    problems = [p for p in (_escaped(result), result.rc and f"rc {result.rc}") if p]
    said = [line for line in (result.stdout + result.stderr).splitlines() if case.fragment in line]
    if not said:
        problems.append(f"no line of the output says {case.fragment!r}")
    if case.check is not None and (problem := case.check(world, result)):
        problems.append(problem)
    problems += changes(before, snapshot(world), outs, siblings=True)
    clean(world, outs, before)
    shown = said[0].strip() if said and not problems else _first_line(result)
    return Verdict(shown, problems, result.rc)


def _fingerprint(out: Path, patterns: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of the files of an output that `patterns` name (globs under it; "" for a
    file output itself)."""
    if not out.exists():
        return {}
    if out.is_file():
        return {"": out.read_bytes()}
    return {str(p.relative_to(out)): p.read_bytes()
            for pattern in patterns for p in sorted(out.glob(pattern)) if p.is_file()}


def _compare(first: dict[str, bytes], second: dict[str, bytes], what: str) -> list[str]:
    if not first:
        return [f"no file of {what} to compare"]
    if first.keys() != second.keys():
        return [f"{what}: files differ ({sorted(first.keys() ^ second.keys())[:3]})"]
    differing = [name or "the file" for name in first if first[name] != second[name]]
    return [f"{what}: {', '.join(differing[:3])} not byte-identical"] if differing else []


def _run_ok(case: Case, argv: tuple[str, ...], world: Path, problems: list[str]) -> None:
    result = run_lab(argv, world, case.env, case.absent)
    if result.rc != 0 or result.traceback:
        problems.append(f"`lab {' '.join(argv)}`: rc {result.rc}: "
                        f"{_escaped(result) or _first_line(result)}")


def expect_same(case: Case, world: Path) -> Verdict:
    """The command twice gives byte-identical files (`case.files`): into a second --out, or
    again into the same --out with `case.again` (--force), or once, compared with the world's
    `case.reference`."""
    (out,) = outputs(case)
    second = out if case.again is not None else case.reference or out + "-again"
    before = snapshot(world)
    problems: list[str] = []
    _run_ok(case, case.argv, world, problems)
    first = _fingerprint(world / out, case.files)
    if not problems and case.reference is None:
        argv = (*case.argv, *case.again) if case.again is not None else with_out(case.argv, second)
        _run_ok(case, argv, world, problems)
    if not problems:
        problems += _compare(first, _fingerprint(world / second, case.files), f"{out} vs {second}")
    problems += changes(before, snapshot(world), [out, second], siblings=True)
    clean(world, [out, second], before)
    return Verdict("byte-identical" if not problems else problems[0], problems,
                   None if problems else 0)


def expect_resumed(case: Case, world: Path) -> Verdict:
    """Killed with `case.kill_with` once `case.when` exists, then run again with `case.again`
    (--resume): the same files as a run never interrupted."""
    (out,) = outputs_of(case.argv)
    whole = out + "-whole"
    before = snapshot(world)
    problems: list[str] = []
    _run_ok(case, with_out(case.argv, whole), world, problems)
    proc = start_lab(case.argv, world, case.env)
    mark = world / case.when.format(out=out)
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(case.kill_with)
    _, err = proc.communicate(timeout=120)
    if not mark.exists() or (world / out).exists():
        problems.append(f"the run ended before it could be killed (rc {proc.returncode}): "
                        f"{err.strip()[-300:]}")
    if not problems:
        _run_ok(case, (*case.argv, *case.again), world, problems)
    if not problems:
        problems += _compare(_fingerprint(world / whole, case.files),
                             _fingerprint(world / out, case.files), f"{out} vs {whole}")
    problems += changes(before, snapshot(world), [out, whole], siblings=True)
    clean(world, [out, whole], before)
    shown = f"killed ({signal.Signals(case.kill_with).name}), resumed: same as uninterrupted"
    return Verdict(shown if not problems else problems[0], problems, proc.returncode)


OUTCOMES: dict[str, Callable[[Case, Path], Verdict]] = {
    "error": expect_error, "ok": expect_ok, "same": expect_same, "resumed": expect_resumed}


def judge(case: Case, world: Path) -> Verdict:
    """Set the row's fault up in the world, run it, judge it by its expected outcome."""
    if case.setup is not None:
        case.setup(world)
    return OUTCOMES[case.expect](case, world)
