"""How a lab command writes: the one rule for outputs (check_output: an output never destroys
anything but the same command's earlier result, and never lies in or holds an input), folders
and files made whole or not at all (atomic_output_dir, atomic_file: a temporary sibling renamed
into place, the ones a killed run left removed), deterministic JSON and JSON lines, and a failed
write (disk full, read-only) as one line naming the output (write_error).

Below lab.common, which re-exports every public name here: callers import them from either."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from lab.errors import LabError


def dumps_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, fixed indentation) so equal content gives equal bytes."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Any]:
    """A binary handle on a temporary sibling of `path` that replaces it when the block ends;
    on any failure the temporary file is removed and `path` stays as it was. A failed write
    (disk full, read-only folder) is an OSError naming `path` itself: a write to an open
    handle names no file, and the temporary one is gone."""
    path = Path(path)
    tmp = None
    try:
        remove_stale_siblings(path)
        fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and (
                exc.filename is None or _temporary_of(Path(exc.filename), path)):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def _temporary_of(candidate: Path, path: Path) -> bool:
    """Whether `candidate` is one of atomic_file's temporary siblings of `path`."""
    return candidate.parent == path.parent and candidate.name.startswith(path.name + ".tmp-")


def share_tree(folder: Path) -> None:
    """Make an output readable by all, as every lab output is (folders 0755, files 0644, an
    executable keeping its x bits): libraries write some files 0600 (safetensors saves model
    weights through a private temporary file)."""
    for root, dirs, files in os.walk(folder):
        os.chmod(root, os.stat(root).st_mode & 0o7777 | 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode & 0o7777 | 0o644)


def write_json_atomic(path: Path, obj: Any) -> None:
    with atomic_file(path) as handle:
        handle.write(dumps_json(obj).encode("utf-8"))


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_file(path) as handle:
        handle.write(text.encode("utf-8"))


def write_jsonl(path: Path, rows: Any, sort_keys: bool = True) -> None:
    """One JSON object per line (UTF-8, compact), written atomically. Keys sorted by default
    (equal rows give equal bytes); sort_keys=False keeps each row's order (a file that mirrors
    its input's fields)."""
    import orjson

    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    with atomic_file(path) as handle:
        for row in rows:
            handle.write(orjson.dumps(row, option=option) + b"\n")


# The record each kind of lab output folder keeps, named once here: the command that writes it
# and every reader import the name.
MANIFEST = "manifest.json"  # a model's, corpus's or stage's record of how it was made
EVALUATION = "metrics.json"  # what lab evaluate writes last in its output folder
TOKENIZER_RECORD = "lab_tokenizer.json"
EXPORT_RECORD = "lab_export.json"
MERGED = "merged.json"  # written last in a merged folder: its sources and what each gave
EXTRACT_MANIFEST = "extract-manifest.json"
LLM_RESULTS = "results.json"
# Files in which a lab output folder records the `kind` of the command that wrote it.
KIND_FILES = (MANIFEST, "summary.json", EVALUATION, LLM_RESULTS, TOKENIZER_RECORD, EXPORT_RECORD,
              MERGED, EXTRACT_MANIFEST)


# Outputs written before their command recorded a kind, recognised by their fields.
_LEGACY_KINDS = (("lab-audit", {"against", "splits_audited", "counts"}),
                 ("lab-perturbation", {"input_sha256", "records", "fields", "code_fields"}),
                 ("lab-merged", {"recipe", "seeds", "evaluations", "sources"}))


def _json_kind(path: Path) -> str | None:
    try:
        if path.stat().st_size > 64 << 20:
            return None
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    kind = found.get("kind")
    if kind is None:
        kind = next((name for name, keys in _LEGACY_KINDS if keys <= found.keys()), None)
    return kind if isinstance(kind, str) else None


def output_kind(path: Path) -> str | None:
    """The `kind` recorded by the lab command that wrote `path`, else None: a folder's
    manifest.json / summary.json / metrics.json / results.json; a file's own JSON, else its
    PATH.report.json (lab perturb)."""
    path = Path(path)
    if path.is_dir():
        for name in KIND_FILES:
            if (kind := _json_kind(path / name)) is not None:
                return kind
        return None
    return _json_kind(path) or _json_kind(path.with_name(path.name + ".report.json"))


def check_output(out: Path, force: bool, kind: str, inputs: Iterable[Any] = (),
                 what: str = "directory") -> None:
    """The one rule for outputs, checked before any work: an output never destroys or changes
    anything but this command's own previous result.

    `out` may never be one of the command's `inputs` (files or folders; None skipped), hold
    one, or lie inside one (a model's, a corpus's or the datasets' folder stays as its command
    wrote it). An existing `out` is replaced only with `force`, and only if it is a previous
    output of the same command (its recorded `kind`): an unrelated folder, another command's
    output (a model, a corpus) or a bare file is refused.
    """
    out = Path(out)
    _check_parent_is_a_folder(out)
    check_apart(out, inputs)
    if not os.path.lexists(out):
        return
    if what == "file" and out.is_dir():  # neither replaced nor written into, with --force or not
        raise LabError(f"{out}: is a directory (name the file to write)")
    if what == "directory" and out.is_file():  # the same the other way round
        raise LabError(f"{out}: is a file (name the folder to write)")
    if not force:
        raise LabError(f"{out}: output {what} exists (use --force to replace it)")
    found = output_kind(out)
    if found != kind:
        described = f"it holds a {found} output" if found else "no lab manifest says what it is"
        raise LabError(f"{out}: --force refused: not a previous {kind} output ({described}); "
                       "--force replaces only this command's own earlier output")
    if what == "directory" and not out.is_dir():
        raise LabError(f"{out}: exists and is not a directory")


def check_apart(out: Path, inputs: Iterable[Any]) -> None:
    """check_output's rule between an output and the inputs (files or folders; None skipped):
    `out` is none of them, holds none and lies inside none."""
    real = Path(os.path.realpath(out))
    for item in inputs:
        if item is None or not os.path.lexists(item):
            continue  # nothing there to protect
        source = Path(os.path.realpath(item))
        if source == real:
            raise LabError(f"{out}: is an input of this command ({item}); choose another output")
        if real in source.parents:
            raise LabError(f"{out}: contains an input of this command ({item}); choose another "
                           "output")
        if source in real.parents and source.is_dir():
            raise LabError(f"{out}: lies inside an input of this command ({item}); choose "
                           "another output")


def beside(path: Path, suffix: str) -> Path:
    """PATH-SUFFIX next to PATH: where a command that reads a folder writes by default (never
    inside it, check_output)."""
    path = Path(path)
    path = path if path.name else path.resolve()
    return path.with_name(f"{path.name}-{suffix}")


def _check_parent_is_a_folder(out: Path) -> None:
    """`--out notes.txt/run`: say so, before mkdir reports a bare 'File exists'."""
    existing = next((p for p in Path(out).parents if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        raise LabError(f"{out}: {existing} is a file, not a folder")


# Errors only a write meets: shutil.copytree reports its copies' failures as text naming both
# files, and with these the destination is surely at fault.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def _within_output(name: Any, out: Path) -> bool:
    """`name` is `out`, lies inside it, or is one of its siblings OUT.* (OUT.tmp-..., OUT.partial)."""
    path, out = Path(os.path.abspath(name)), Path(os.path.abspath(out))
    return path == out or out in path.parents or any(
        part.parent == out.parent and part.name.startswith(out.name + ".")
        for part in (path, *path.parents))


def _free_bytes(path: Path) -> int | None:
    folder = next((p for p in (Path(os.path.abspath(path)), *Path(os.path.abspath(path)).parents)
                   if p.exists()), None)
    try:
        stat = os.statvfs(folder)
    except (OSError, TypeError):
        return None
    return stat.f_bavail * stat.f_frsize


def write_error(exc: BaseException, out: Path) -> LabError | None:
    """A failed write of `out` (disk full, read-only or immutable folder) as one line naming
    it, else None (the exception is someone else's: a LabError, an input's OSError, which the
    CLI reports naming its own file). Writers wrap the OS error differently: OSError itself
    (shutil's copies name the source first, the destination second), shutil.copytree's list of
    them, safetensors' 'I/O error: ... (os error 28)', torch.save's C++ stream errors, which
    lose the errno ('[enforce fail at inline_container.cc] unexpected pos', 'open file failed
    with strerror: ...'; its reader's errors, a damaged checkpoint, are not a write's)."""
    import re

    if isinstance(exc, LabError):
        return None
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        for _source, target, why in exc.args[0]:  # copytree: (source, destination, reason)
            code = re.search(r"\[Errno (\d+)\]", str(why))
            if code and int(code.group(1)) in _WRITE_ERRNOS and _within_output(target, out):
                return LabError(f"{out}: cannot write ({os.strerror(int(code.group(1)))})")
        return None
    if isinstance(exc, OSError) and exc.errno is not None:
        named = [name for name in (exc.filename, exc.filename2) if name is not None]
        if not named or any(_within_output(name, out) for name in named):
            return LabError(f"{out}: cannot write ({exc.strerror})")
        return None  # a file elsewhere (an input, a cache): the CLI names it
    for cause in (exc.__cause__, exc.__context__):  # an OSError re-raised as something else
        if isinstance(cause, OSError) and (found := write_error(cause, out)):
            return found
    message = str(exc)
    if code := re.search(r"\(os error (\d+)\)", message):
        return LabError(f"{out}: cannot write ({os.strerror(int(code.group(1)))})")
    if reason := re.search(r"open file failed with strerror: ([^\n]+)", message):
        return LabError(f"{out}: cannot write ({reason.group(1).strip()})")
    if any(sign in message for sign in ("PytorchStreamWriter failed writing", "unexpected pos",
                                        "iostream error")):
        free = _free_bytes(out)
        if free is not None and free < 1 << 20:  # the C++ stream keeps no errno: ask the disk
            return LabError(f"{out}: cannot write ({os.strerror(errno.ENOSPC)})")
        return LabError(f"{out}: cannot write (torch.save failed: {message.splitlines()[0][:120]}; "
                        "disk full or an I/O error?)")
    return None


def _owner() -> str:
    return f"{os.getpid()}@{platform.node() or 'localhost'}"


def temporary_prefix(path: Path, kind: str = "tmp") -> str:
    """The name's start of a temporary sibling of `path` (tempfile adds 8 random characters):
    PATH.tmp-PID@HOST- (or .old-, an output being swapped out) says who builds it, so that a
    later run of the same output removes the ones whose process is gone (remove_stale_siblings)."""
    return f"{Path(path).name}.{kind}-{_owner()}-"


def remove_stale_siblings(out: Path) -> list[Path]:
    """Remove the OUT.tmp-* and OUT.old-* folders (atomic_output_dir) or files (atomic_file)
    that a killed run of `out` left (kill -9, power loss), and return them: only this
    machine's (a folder shared with other machines holds theirs, whose processes this one
    cannot see) whose process is no longer alive."""
    import glob
    import re

    out = Path(out)
    owned = re.compile(re.escape(out.name) + r"\.(?:tmp|old)-(\d+)@(.+)-[a-z0-9_]{8}$")
    here = _owner().split("@", 1)[1]
    removed = []
    for kind in ("tmp", "old"):
        for sibling in out.parent.glob(f"{glob.escape(out.name)}.{kind}-*"):
            found = owned.match(sibling.name)
            if found and found.group(2) == here and not _process_alive(int(found.group(1))):
                if sibling.is_dir() and not sibling.is_symlink():
                    shutil.rmtree(sibling, ignore_errors=True)
                else:
                    sibling.unlink(missing_ok=True)
                removed.append(sibling)
    return removed


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, someone else's
        return True
    return True


@contextlib.contextmanager
def atomic_output_dir(out: Path, force: bool = False, kind: str | None = None,
                      inputs: Iterable[Any] = ()) -> Iterator[Path]:
    """Yield a temporary sibling of `out`; it becomes `out` only if the block completes.

    A failure (or a kill) leaves `out` as it was: absent, or the previous complete result.
    With `kind`, `out` is checked as in check_output; without it (older callers), --force
    still replaces only a folder that some lab command wrote.
    """
    out = Path(out)
    _check_parent_is_a_folder(out)
    if kind is not None:
        check_output(out, force, kind, inputs)
    elif out.exists() and not force:
        raise LabError(f"{out}: output directory exists (use --force to replace it)")
    elif out.exists() and output_kind(out) is None:
        raise LabError(f"{out}: --force refused: not a lab output (--force replaces only a "
                       "previous output of the same command)")
    if out.exists() and not out.is_dir():
        raise LabError(f"{out}: exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(out)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(out), dir=out.parent))
    except OSError as exc:
        raise LabError(f"{out}: cannot write in {out.parent} ({exc.strerror})") from None
    os.chmod(tmp, 0o755)
    try:
        yield tmp
    except BaseException as exc:
        failure = write_error(exc, out)  # first: it may ask the disk how full it is
        shutil.rmtree(tmp, ignore_errors=True)
        raise failure or exc
    share_tree(tmp)
    if out.exists():
        trash = Path(tempfile.mkdtemp(prefix=temporary_prefix(out, "old"), dir=out.parent))
        os.replace(out, trash / "old")
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, out)


def write_rows_and_summary(out: Path, rows_file: str, rows: list[dict[str, Any]],
                           summary: dict[str, Any], *, force: bool, kind: str,
                           inputs: Iterable[Any]) -> None:
    """A result folder made whole or not at all (atomic_output_dir): one JSON line per row in
    `rows_file`, and summary.json."""
    with atomic_output_dir(Path(out), force=force, kind=kind, inputs=inputs) as tmp:
        write_jsonl(tmp / rows_file, rows)
        write_json_atomic(tmp / "summary.json", summary)
