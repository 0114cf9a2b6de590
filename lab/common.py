"""Shared plumbing of every stage: config fields declared once (param), hashes and file records,
the environment a result depends on, the text and JSON-lines readers, the number checks.

The errors (lab.errors) and the writing side (lab.outputs: atomic outputs, the output rule,
write errors) live in their own modules; every name of theirs is re-exported here, so callers
import them from lab.common as before."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import hashlib
import json
import os
import platform
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import lab
from lab import cpu_info
from lab.errors import DataNotFound, LabError
from lab.outputs import (EVALUATION, EXPORT_RECORD, EXTRACT_MANIFEST, KIND_FILES, LLM_RESULTS,
                         MANIFEST, MERGED, TOKENIZER_RECORD, atomic_file, atomic_output_dir,
                         beside, check_apart, check_output, dumps_json, output_kind,
                         remove_stale_siblings, share_tree, temporary_prefix, write_error,
                         write_json_atomic, write_jsonl, write_rows_and_summary, write_text_atomic)


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


VECTOR_EXTENSIONS = frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
                               "amx_bf16", "amx_tile", "asimd", "sve"})


def environment_record() -> dict[str, Any]:
    """Versions that a result depends on; every manifest carries it."""
    record: dict[str, Any] = {
        "lab_version": lab.__version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        # a model name ("AMD EPYC") can hide which vector extensions the libraries may use
        "cpu_extensions": sorted(set((cpu_info("flags") or "").split()) & VECTOR_EXTENSIONS),
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
        for variable in lab.PINNED_LIBRARY_ISA:  # ... and of the matrix-product libraries
            record[variable.lower()] = os.environ.get(variable)
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


def read_json_if_there(path: Path) -> Any:
    """The JSON at `path`, None where there is no such file (a record not written yet); an
    unreadable one refused in one line naming it."""
    if not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None


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


def table_cell(value: Any) -> Any:
    """A value as the lab's CSV tables hold it: floats to 6 places."""
    return round(value, 6) if isinstance(value, float) else value


def duration_text(seconds: float) -> str:
    """A duration as the lab prints it: seconds, minutes or hours, whichever reads best."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
