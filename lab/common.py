"""Shared plumbing of every stage: user-facing errors, atomic outputs, hashes, manifests."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import lab
from lab import cpu_info


class LabError(Exception):
    """A problem with the user's input: the CLI prints it on one line and exits with code 2."""


class DataNotFound(LabError):
    """A dataset split that is neither local nor loadable from the hub (offline, no network,
    no `datasets` package): callers that can do without it (CONCODE's train split) catch this."""


def param(default: Any = dataclasses.MISSING, help: str = "", **shown: Any) -> Any:
    """A config field declared once, with its default and its meaning: the command line (its
    option and help) and the recipe reference are derived from it. `shown` says how the command
    line shows it: option="--name" (another name than the field's), flag=True (a bare --flag,
    without --no-flag), cli=False (no option: set by the study or the API only)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("param: a mutable default would be shared; use a tuple")
    return dataclasses.field(default=default, metadata={"help": help, **shown})


def corpora_param() -> Any:
    return param(None, "Folder holding the datasets (else $LAB_CORPORA, ./corpora, the hub).",
                 option="--corpora")


def option_name(field: Any) -> str:
    """The command-line option of a config field (`--batch-size`, or its declared option)."""
    return field.metadata.get("option") or "--" + field.name.replace("_", "-")


def refuse_unused_options(cfg: Any, users: dict[str, tuple[str, ...]], chosen: Any,
                          choice: str) -> None:
    """Refuse, in one line, an option given a value other than its default that none of the
    chosen methods reads (`lab decontam --methods exact --jaccard 0.5` ran exact and ignored
    --jaccard). `users`: config field -> the methods that read it; `choice`: their option."""
    fields = {field.name: field for field in dataclasses.fields(cfg)}
    for name, methods in users.items():
        value = getattr(cfg, name)
        if value != fields[name].default and not set(methods) & set(chosen):
            raise LabError(f"{option_name(fields[name])} {value}: no method in {choice} uses it "
                           f"(only {', '.join(methods)}); add one or leave the option out")


def command_line(cfg: Any) -> list[str]:
    """The options that give `cfg` back when its command parses them (the way a stage hands
    its config to a launcher that starts the command in other processes): every field shown
    on the command line whose value differs from its default."""
    args: list[str] = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if not field.metadata.get("cli", True) or value == field.default or value is None:
            continue
        name = option_name(field)
        if field.metadata.get("argument"):
            args.append(str(value))
        elif isinstance(value, bool):
            args.append(name if value else "--no-" + name[2:])
        elif isinstance(value, (tuple, list)):
            args += [name, ",".join(str(v) for v in value)]
        else:
            args += [name, str(value)]
    return args


def default_of(config: Any, name: str) -> Any:
    """The declared default of a config dataclass field."""
    return config.__dataclass_fields__[name].default


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def files_record(folder: Path, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """{relative path: {size, sha256}} of the files under `folder` (or of `names` in it): what
    a saved artefact (model, checkpoint, token cache) records so that its loader can tell a
    whole, unchanged copy from a damaged one."""
    folder = Path(folder)
    paths = ([folder / name for name in names] if names is not None
             else sorted(p for p in folder.rglob("*") if p.is_file()))
    return {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in paths}


_FILES_VERIFIED: set[tuple] = set()  # (folder, files' stats) whose hashes this process checked


def files_problem(folder: Path, files: Any) -> str | None:
    """None if every file of a files_record is in `folder` with its recorded size and sha256,
    else what is wrong. Sizes are checked every time; the hashes (streamed, a megabyte at a
    time) once per process and file version (path, size, mtime, inode)."""
    folder = Path(folder)
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        return "its record of file sizes and hashes is malformed"
    stats = []
    for name, expected in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            return f"{name} missing"
        st = path.stat()
        if st.st_size != expected.get("size"):
            return f"{name} has {st.st_size} bytes, {expected.get('size')} recorded"
        stats.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    key = (str(folder.resolve()), tuple(stats))
    if key not in _FILES_VERIFIED:
        for name, expected in sorted(files.items()):
            if sha256_file(folder / name) != expected.get("sha256"):
                return f"{name} differs from the sha256 recorded when it was written"
        _FILES_VERIFIED.add(key)
    return None


def safetensors_complete(path: Path) -> bool:
    """The header's tensors end exactly at the end of the file (a truncated copy does not)."""
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return False
    return Path(path).stat().st_size == 8 + length + max(ends, default=0)


def lab_cache_dir() -> Path:
    """Derived data the lab may rebuild at any time: $LAB_CACHE, default ~/.cache/lab."""
    return Path(os.environ.get("LAB_CACHE", Path.home() / ".cache" / "lab"))


def cached_sha256(path: Path) -> str:
    """sha256 of a data file, remembered by (real path, size, mtime_ns) in
    $LAB_CACHE/fingerprints.json: a study checks its multi-GB inputs at every start, and
    rehashes only the files that changed on disk."""
    path = Path(os.path.realpath(path))
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    store = lab_cache_dir() / "fingerprints.json"
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(key), str):
        return known[key]
    digest = sha256_file(path)
    # Entries of files gone (test folders, moved copies) are dropped, so the store stays small.
    known = {k: v for k, v in known.items() if os.path.exists(k.rsplit("|", 2)[0])}
    known[key] = digest
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(store, known)
    except OSError:
        pass  # a read-only cache only costs the hashing next time
    return digest


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU's model name (Linux): the same recipe and seed give the same numbers on the same
    kind of CPU; across vendors and instruction sets the last bits of a float sum may differ."""
    return cpu_info("model name") or platform.processor() or None


# The commit a copy without .git was made from: docker/Dockerfile sets it (--build-arg).
GIT_COMMIT_VARIABLE = "LAB_GIT_COMMIT"


def git_commit() -> str | None:
    """Commit of the lab's own checkout; outside git (an image, a wheel) GIT_COMMIT_VARIABLE's
    value, else None."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is None or out.returncode != 0:
        return os.environ.get(GIT_COMMIT_VARIABLE) or None
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
        "cpu": cpu_model(),
    }
    for module in ("numpy", "torch", "transformers", "tokenizers", "datasets"):
        mod = sys.modules.get(module)
        if mod is not None:
            record[module] = getattr(mod, "__version__", "unknown")
    torch = sys.modules.get("torch")
    if torch is not None:  # float sums, and so the numbers, depend on how many threads share them
        record["torch_threads"] = torch.get_num_threads()
        # ... and on the vector instructions the kernels use (AVX2 and AVX-512 sum differently)
        record["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return record


def read_text_file(path: Path, option: str = "") -> str:
    """A UTF-8 text file, or one line naming it (missing, a folder, unreadable, not UTF-8)."""
    path = Path(path)
    name = f"{option} {path}" if option else str(path)
    if not path.exists():
        raise LabError(f"{name}: no such file")
    if not path.is_file():
        raise LabError(f"{name}: not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LabError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise LabError(f"{name}: cannot read ({exc.strerror})") from None


def open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text or gzip file; an unreadable file (truncated or not gzip,
    not UTF-8) is a LabError naming the file instead of a traceback."""
    lineno = 0
    try:
        with open_text(path) as handle:
            for lineno, line in enumerate(handle, start=1):
                yield lineno, line
    except UnicodeDecodeError:
        raise LabError(f"{path}: not UTF-8 text (line {lineno + 1})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise LabError(f"{path}: unreadable after line {lineno} ({exc})") from None


def read_jsonl(path: Path, where: Callable[[int], str] | None = None
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSON-lines file, plain or gzip, read
    as it streams. A line that is not a JSON object is refused naming the file and line:
    `where(number)`, by default `path:number`. Callers refuse the fields they need themselves."""
    import orjson

    path = Path(path)
    if not path.exists():
        raise LabError(f"{path}: no such file")
    if not path.is_file():
        raise LabError(f"{path}: not a file")
    for number, line in read_text_lines(path):
        if not line.strip():
            continue
        at = where(number) if where else f"{path}:{number}"
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LabError(f"{at}: not valid JSON ({exc}; a corrupt JSON line)") from None
        if not isinstance(record, dict):
            raise LabError(f"{at}: expected a JSON object")
        yield number, record


@contextlib.contextmanager
def loading(path: Path, option: str = "") -> Iterator[None]:
    """Files a library loader reads (weights, configs, tokenizers): damage (truncated weights,
    invalid JSON, a broken archive) becomes one line naming the folder. The loaders raise a
    dozen exception types (SafetensorError, JSONDecodeError, OSError, RuntimeError, the
    tokenizers' plain Exception), so everything but a LabError is translated here, where
    the block only loads."""
    try:
        yield
    except LabError:
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        if os.environ.get("LAB_DEBUG") == "1":
            raise
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        name = f"{option} {path}" if option else str(path)
        raise LabError(f"{name}: cannot be loaded, damaged or incomplete ({detail})") from None


def config_record(cfg: Any) -> dict[str, Any]:
    """A command's config as its manifest records it: paths as text, at any depth (a tuple of
    corpora too), tuples as lists, so that the record is JSON and reads back as it was written."""
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {k: plain(v) for k, v in dataclasses.asdict(cfg).items()}


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


def read_json_if_there(path: Path) -> Any:
    """The JSON at `path`, None where there is no such file (a record not written yet); an
    unreadable one refused in one line naming it."""
    if not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None


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


# Files in which a lab output folder records the `kind` of the command that wrote it.
KIND_FILES = ("manifest.json", "summary.json", "metrics.json", "results.json", "lab_tokenizer.json",
              "lab_export.json", "merged.json")


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


SEED_MAX = 2**32 - 1  # numpy's seeds (transformers.set_seed seeds numpy too)


@functools.lru_cache(maxsize=1)
def lr_schedulers() -> tuple[str, ...]:
    """The scheduler names transformers knows (--lr-scheduler, pretrain.lr_scheduler): its
    SchedulerType enum, read from transformers' source where that finds it, because importing
    transformers.trainer_utils imports torch (about 3 s), which loading a recipe for `lab report`
    or a dry run does not otherwise need."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            tree = ast.parse((Path(folder) / "trainer_utils.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "SchedulerType":
                names = tuple(item.value.value for item in node.body
                              if isinstance(item, ast.Assign)
                              and isinstance(item.value, ast.Constant)
                              and isinstance(item.value.value, str))
                if names:
                    return names
    from transformers.trainer_utils import SchedulerType

    return tuple(kind.value for kind in SchedulerType)


def check_numbers(option: str = "--", **values: Any) -> None:
    """Refuse impossible numbers at once (one line naming the option): epochs and lr
    finite (lr > 0, epochs >= 0), seed in 0..2^32-1, warmup_steps >= 0, lr_scheduler one of
    transformers' schedulers. `option` prefixes the name (`--` for CLI options, `recipe field ` ...);
    values that are None are skipped."""
    import math

    def name(key: str) -> str:
        return option + (key.replace("_", "-") if option == "--" else key)

    for key, value in values.items():
        if value is None:
            continue
        if key == "lr_scheduler":
            if value not in (known := lr_schedulers()):
                raise LabError(f"{name(key)} {str(value)[:80]}: choose from {', '.join(known)}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LabError(f"{name(key)} {str(value)[:80]}: expected a number")
        if not math.isfinite(value):
            raise LabError(f"{name(key)} {value}: must be a finite number")
        if key == "seed" and not 0 <= value <= SEED_MAX:
            raise LabError(f"{name(key)} {value}: must be in 0..{SEED_MAX}")
        if key == "lr" and not value > 0:
            raise LabError(f"{name(key)} {value}: must be > 0")
        if key in ("epochs", "warmup_steps", "weight_decay") and value < 0:
            raise LabError(f"{name(key)} {value}: must be >= 0")


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


def table_cell(value: Any) -> Any:
    """A value as the lab's CSV tables hold it: floats to 6 places."""
    return round(value, 6) if isinstance(value, float) else value
