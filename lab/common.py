"""Shared plumbing of every stage: user-facing errors, atomic outputs, hashes, manifests."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import lab


class LabError(Exception):
    """A problem with the user's input: the CLI prints it on one line and exits with code 2."""


class DataNotFound(LabError):
    """A dataset split that is neither local nor loadable from the hub (offline, no network,
    no `datasets` package): callers that can do without it (CONCODE's train split) catch this."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_commit() -> str | None:
    """Commit of the lab's own checkout (None when installed from a wheel or outside git)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    commit = out.stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=here, capture_output=True, text=True, timeout=10,
    )
    return commit + ("-dirty" if dirty.stdout.strip() else "")


def environment_record() -> dict[str, Any]:
    """Versions that a result depends on; every manifest carries it."""
    record: dict[str, Any] = {
        "lab_version": lab.__version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for module in ("numpy", "torch", "transformers", "tokenizers", "datasets"):
        mod = sys.modules.get(module)
        if mod is not None:
            record[module] = getattr(mod, "__version__", "unknown")
    torch = sys.modules.get("torch")
    if torch is not None:  # float sums, and so the numbers, depend on how many threads share them
        record["torch_threads"] = torch.get_num_threads()
    return record


def dumps_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, fixed indentation) so equal content gives equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(dumps_json(obj))
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: Any) -> None:
    """One JSON object per line, keys sorted (equal rows give equal bytes); for files inside an
    atomic_output_dir."""
    import orjson

    with open(path, "wb") as handle:
        for row in rows:
            handle.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")


@contextlib.contextmanager
def atomic_output_dir(out: Path, force: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of `out`; it becomes `out` only if the block completes.

    A failure (or a kill) leaves `out` as it was: absent, or the previous complete result.
    """
    out = Path(out)
    if out.exists() and not force:
        raise LabError(f"{out}: output directory exists (use --force to replace it)")
    if out.exists() and not out.is_dir():
        raise LabError(f"{out}: exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        trash = Path(tempfile.mkdtemp(prefix=out.name + ".old-", dir=out.parent))
        os.replace(out, trash / "old")
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, out)
