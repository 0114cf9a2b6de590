"""Fault-table rows for issue 59 (writes): built with the constructors of table.py.

A disk that fills up or is read-only is a small tmpfs mounted in the world (as
tests/test_faults.py's full_disk does; a row skips where mounting needs privileges it lacks):
the one error line names the output that could not be written (row 12: pre-training; row 16:
export, baseline), or the token cache and the variable that places it (row 16: a read-only
LAB_CACHE), and nothing is left. A kill -9 leaves OUT.tmp-PID@HOST-...: the next run of that
output removes it, and only it (row 10). `lab baseline --out FOLDER` is refused like the other
file outputs (row 16). Row 9 (lab report on a nearly full disk) is tests/test_cli_errors.py's:
a report's files are each written whole, so a failed report does leave the ones before it.
"""
from __future__ import annotations

import atexit
import os
import platform
import subprocess
from pathlib import Path

from .table import BASELINE, EXPORT, INJECT, PRE, Case, Setup, error, ok
from .world import PRETRAIN, Result

_MOUNTED: set[Path] = set()


def _unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def tmpfs(name: str, size: str = "300k", read_only: bool = False, room: int | None = None
          ) -> Setup:
    """A fresh tmpfs of `size` at world/NAME (read-only, or filled until `room` bytes are
    left); the row is skipped where it cannot be mounted."""
    def make(root: Path) -> None:
        import pytest

        folder = root / name
        if folder in _MOUNTED:
            _unmount(folder)
        folder.mkdir(exist_ok=True)
        options = f"size={size}" + (",ro" if read_only else "")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
        if folder not in _MOUNTED:
            _MOUNTED.add(folder)
            atexit.register(_unmount, folder)
        if room is not None:
            stat = os.statvfs(folder)
            (folder / "filler").write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - room))
    return make


def dead_pid() -> int:
    """The id of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


HOST = platform.node() or "localhost"
STALE = "out-inject.tmp-{pid}@" + HOST + "-abcd1234"


def killed_run_left(root: Path) -> None:
    """The folder a kill -9 of `lab inject --out out-inject` left, and a live run's beside it
    (empty: the outcome counts what is inside a sibling of the output as the world's)."""
    (root / STALE.format(pid=dead_pid())).mkdir()
    (root / STALE.format(pid=1)).mkdir()  # pid 1 is always alive


def only_the_dead_runs_removed(root: Path, result: Result) -> str | None:
    left = sorted(p.name for p in root.glob("out-inject.tmp-*"))
    for name in left:  # the live run's folder is the world's to drop, after checking it stayed
        (root / name).rmdir()
    if left != [STALE.format(pid=1)]:
        return f"temporary siblings after the run: {left} (expected only the live run's)"
    return None


NO_CACHE_DIR = [arg for arg in PRETRAIN if arg not in ("--cache-dir", "cache")]
FULL = "No space left on device"

ROWS: list[Case] = [
    ok("writes: a killed inject's OUT.tmp-* is removed by the next run, a live one kept",
       [*INJECT, "--setting", "control"], "out-inject", killed_run_left,
       check=only_the_dead_runs_removed),
    # 1.2 MB: room for the weights (safetensors), not for the optimizer's state (torch.save)
    error("writes: pretrain on a full disk, torch.save's error", [*PRE, "--out", "full/pt"],
          f"full/pt.partial: cannot write ({FULL})", tmpfs("full", "1200k")),
    error("writes: export on a full disk names the output", [*EXPORT, "--out", "full/ex"],
          f"full/ex: cannot write ({FULL})", tmpfs("full")),
    error("writes: baseline on a full disk names --out",
          [*BASELINE, "--out", "full/baseline.json"],
          f"--out full/baseline.json: cannot write ({FULL})", tmpfs("full", room=0)),
    error("writes: a read-only LAB_CACHE is named, not --out", [*NO_CACHE_DIR, "--out", "out-pt"],
          "token cache ro-cache/tokens: cannot write (Read-only file system); set LAB_CACHE",
          tmpfs("ro-cache", read_only=True), env={"LAB_CACHE": "ro-cache"}),
    error("writes: baseline --out an existing folder", [*BASELINE, "--out", "userdir"],
          "userdir: is a directory (name the file to write)"),
    error("writes: baseline --out an existing folder, --force",
          [*BASELINE, "--out", "userdir", "--force"],
          "userdir: is a directory (name the file to write)"),
]
