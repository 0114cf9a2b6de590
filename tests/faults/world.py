"""The micro world the fault table runs in, and how `lab` runs there.

The world is one folder: a control and a paired arm, the study tokenizer, a 2-step micro GPT-2
`pt` and its E0 model `e0`, plus the small files rows name (ids.txt, pred.txt, a recipe, a copy
of the CodeTrans dataset in corp/, a user's folder userdir/ holding notes.txt). Rows run with it
as their working directory, so their arguments are short relative paths.

`run_lab` calls `lab.cli.main(argv)` in this process (a subprocess costs seconds of imports per
row); `start_lab` starts a real `python -m lab.cli` for the rows that must signal a process.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """`folder` mounted as a tmpfs of `size` (a full disk made small); the test is skipped where
    mounting is not allowed (needs root or CAP_SYS_ADMIN)."""
    import pytest

    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)

# Derived data the lab may rebuild at any time; a row's changes there are not the world's.
CACHES = ("cache", "lab-cache")

# The arms and tokenizer, as tests/conftest.py's micro_world builds them.
ARMS = (
    ("inject", "--benchmark", "codetrans", "--setting", "control", "--seed", "3", "--base-splits",
     "valid", "--limit", "700", "--out", "control"),
    ("tokenizer", "train", "--corpus", "control", "--out", "tok", "--vocab-size", "1200"),
    ("inject", "--benchmark", "codetrans", "--setting", "paired", "--seed", "3", "--base-splits",
     "valid", "--limit", "700", "--fraction", "0.1", "--out", "paired"),
)
PRETRAIN = ("pretrain", "--model", "gpt2", "--corpus", "paired", "--tokenizer", "tok",
            "--preset", "micro", "--max-steps", "2", "--block-size", "128", "--batch-size", "4",
            "--cache-dir", "cache")
MODELS = ((*PRETRAIN, "--out", "pt"),
          ("finetune", "--pretrained", "pt", "--task", "translation", "--epochs", "0",
           "--out", "e0"))


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    traceback: str | None = None  # an exception that escaped lab.cli.main


def lab_env(world: Path, env: Mapping[str, str] = {}) -> dict[str, str]:
    """What every row runs with: offline, wide tables, the lab's cache inside the world."""
    return {"HF_HUB_OFFLINE": "1", "COLUMNS": "200", "TOKENIZERS_PARALLELISM": "false",
            "LAB_CACHE": str(world / "lab-cache"), **env}


@contextlib.contextmanager
def inside(world: Path, env: Mapping[str, str] = {}, absent: Sequence[str] = ()) -> Iterator[None]:
    """Working directory, environment, signal handlers and `absent` modules (they import as
    not installed) for one in-process run; all restored after it."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    modules = {name: sys.modules.get(name) for name in absent}
    os.environ.update(lab_env(world, env))
    os.chdir(world)
    for name in absent:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for name, module in modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def run_lab(argv: Sequence[str], world: Path, env: Mapping[str, str] = {},
            absent: Sequence[str] = ()) -> Result:
    """`lab ARGV` in this process, in the world: its exit code and what it printed."""
    from lab.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc, escaped = 0, None
    with inside(world, env, absent), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # noqa: BLE001 (any escape is the finding)
            rc, escaped = 1, traceback.format_exc()
    return Result(rc, out.getvalue(), err.getvalue(), escaped)


def start_lab(argv: Sequence[str], world: Path, env: Mapping[str, str] = {}) -> subprocess.Popen:
    """`python -m lab.cli ARGV` as a process of its own, in the world (rows that signal it)."""
    return subprocess.Popen([sys.executable, "-m", "lab.cli", *argv], cwd=world,
                            env={**os.environ, **lab_env(world, env)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def must(argv: Sequence[str], world: Path) -> None:
    result = run_lab(argv, world)
    if result.rc != 0:
        raise RuntimeError(f"building the fault world failed at `lab {' '.join(argv)}`:\n"
                           f"{result.traceback or result.stderr[-3000:]}")


def build_world(root: Path, arms: Path | None = None) -> Path:
    """The world in `root`: the arms and tokenizer copied from `arms` (tests/conftest.py's
    micro_world) or built, then the models and the rows' small files."""
    root.mkdir(parents=True, exist_ok=True)
    if arms is not None:
        for name in ("control", "tok", "paired"):
            shutil.copytree(arms / name, root / name)
    else:
        for argv in ARMS:
            must(argv, root)
    for argv in MODELS:
        must(argv, root)
    (root / "ids.txt").write_text("codetrans:test:0\ncodetrans:test:1\n")
    (root / "pred.txt").write_text("a b c\nd e f\n")
    (root / "ref.txt").write_text("a b c\n")
    (root / "recipe.yaml").write_text((ROOT / "recipes" / "quickstart.yaml").read_text())
    (root / "records.jsonl").write_text('{"code": "int alpha = beta + 1;", "docstring": "one"}\n'
                                        '{"code": "int gamma = delta;", "docstring": "two"}\n')
    (root / "existing.json").write_text("{}\n")
    (root / "userdir").mkdir()
    (root / "userdir" / "notes.txt").write_text("mine\n")
    corpora = Path(os.environ["LAB_CORPORA"])
    shutil.copytree(corpora / "codetrans", root / "corp" / "codetrans")  # read-only in shared/
    for path in (root / "corp").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root
