"""Canonical records, data discovery and the readers shared by the dataset loaders."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from lab.common import DataNotFound, LabError, read_jsonl, read_text_file


@dataclass(frozen=True)
class Document:
    """One pre-training document. `id` is stable: dataset:split:index."""

    id: str
    text: str


@dataclass(frozen=True)
class Sample:
    """One benchmark sample. `output` is "" where the split carries no reference."""

    id: str
    split: str
    index: int
    input: str
    output: str


def sample_id(dataset: str, split: str, index: int) -> str:
    return f"{dataset}:{split}:{index}"


def read_sample_ids(path: Path, option: str, samples: list[Sample]) -> list[int]:
    """The positions in `samples` (one split of one dataset) of the ids a file lists, sorted
    and each once: the one reader of `lab inject --test-ids` and `lab evaluate --ids`. An id is
    DATASET:SPLIT:N (codetrans:test:17) or the bare N (17); ids are separated by new lines,
    commas or spaces; `#` starts a comment."""
    prefix = samples[0].id.rsplit(":", 1)[0] if samples else "DATASET:SPLIT"
    form = f"ids are {prefix}:N or N, N from 0 to {len(samples) - 1}"
    if not os.path.lexists(path):  # a list given in place of its file, say
        raise LabError(f"{option} {path}: no such file (a file of sample ids; {form})")
    positions = {s.id: i for i, s in enumerate(samples)}
    chosen = set()
    for lineno, line in enumerate(read_text_file(path, option).splitlines(), 1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            key = f"{prefix}:{int(token)}" if token.isascii() and token.isdigit() else token
            if key not in positions:
                raise LabError(f"{option} {path}:{lineno}: unknown sample id '{token}' ({form})")
            chosen.add(positions[key])
    if not chosen:
        raise LabError(f"{option} {path}: no sample ids in it ({form})")
    return sorted(chosen)


def lab_corpora_folders() -> list[Path]:
    """LAB_CORPORA's folders: one, or several separated by os.pathsep as PATH lists them (the
    shared corpora and a corpus built here, such as the standard library's Python corpus that
    scripts/test.sh extracts), searched in that order."""
    return [Path(folder) for folder in os.environ.get("LAB_CORPORA", "").split(os.pathsep)
            if folder]


def candidate_roots(corpora_dir: Path | None) -> list[tuple[str, Path]]:
    """Where local data is looked for, in order: --corpora, LAB_CORPORA (one folder, or several
    separated by os.pathsep), ./corpora."""
    roots: list[tuple[str, Path]] = []
    if corpora_dir is not None:
        corpora_dir = Path(corpora_dir)
        if not corpora_dir.is_dir():
            raise LabError(f"--corpora {corpora_dir}: no such directory")
        roots.append(("--corpora", corpora_dir))
    for folder in lab_corpora_folders():
        if not folder.is_dir():
            raise LabError(f"LAB_CORPORA={os.environ['LAB_CORPORA']}: no such directory "
                           f"'{folder}'")
        roots.append(("LAB_CORPORA", folder))
    roots.append(("./corpora", Path("corpora")))
    return roots


def hub_allowed() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True", "YES", "yes")


def check_hub_reachable(hub_id: str) -> None:
    """Fail at once where the hub's host has no address: `datasets` would retry for half a minute
    (five times, 1 to 8 s apart) before saying the same."""
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        raise DataNotFound(f"hub dataset {hub_id}: the hub ({host}) cannot be reached "
                           f"({exc.strerror or exc})") from None


def load_hub_split(hub_id: str, config: str | None, split: str) -> Iterable[dict[str, Any]]:
    """Rows of a hub dataset split; only reached when no local copy exists."""
    try:
        import datasets  # noqa: PLC0415 - optional dependency, imported only when used
    except ImportError as exc:
        raise DataNotFound(
            f"hub dataset {hub_id}: the 'datasets' package is not installed (.venv/bin/pip install -e '.[hub]')"
        ) from exc
    check_hub_reachable(hub_id)
    try:
        return datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:  # the hub raises many types; the user needs one line
        raise DataNotFound(f"hub dataset {hub_id} split {split}: could not load ({exc})") from exc


def one_file_per_split(suffix: str) -> Callable[[Path, str], list[Path] | None]:
    """A finder for layouts with one file per split, named SPLIT + suffix."""
    def find(folder: Path, split: str) -> list[Path] | None:
        path = folder / f"{split}{suffix}"
        return [path] if path.is_file() else None

    return find


def read_json_lines(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Yield the named string fields of each JSON line; a bad line names file:line."""
    for lineno, record in read_jsonl(path):
        values = []
        for field in fields:
            value = record.get(field)
            if value is None:
                raise LabError(f"{path}:{lineno}: missing field '{field}'")
            if not isinstance(value, str):
                raise LabError(f"{path}:{lineno}: field '{field}' is not a string")
            values.append(value)
        yield tuple(values)


@dataclass(frozen=True)
class Task:
    """A fine-tuning task, declared by its benchmark's module (its DatasetSpec's `task`):
    lab.tasks.TASKS is read off the registered datasets, so adding a task is its benchmark's
    module plus its line in lab.corpora.DATASETS.

    `fallback_train_split`: where the train split may be missing (offline CONCODE has none), the
    split fine-tuning trains on instead, with no validation split (lab.tasks.fine_tuning_split);
    None: the train split is required."""

    name: str
    benchmark: str
    train_split: str
    valid_split: str
    test_split: str
    target_language: str
    fallback_train_split: str | None = None
    # translation, generation or summarisation where the name is not one of them (a second
    # language's task, python-summarisation): what EM's definition and the baselines key on.
    kind: str | None = None

    @property
    def family(self) -> str:
        return self.kind or self.name

    def record(self) -> dict[str, str]:
        """The task as a fine-tuned model's manifest states it: the six fields it has always
        held (which split was trained on is the manifest's data note)."""
        return {"name": self.name, "benchmark": self.benchmark, "train_split": self.train_split,
                "valid_split": self.valid_split, "test_split": self.test_split,
                "target_language": self.target_language}


@dataclass(frozen=True)
class DatasetSpec:
    """What the lab knows of one dataset: its splits, local layouts, hub id and sides."""

    name: str
    kind: str  # "corpus" (pre-training documents) or "benchmark" (input/output samples)
    splits: tuple[str, ...]
    subdir: str
    hub_id: str
    hub_config: str | None
    hub_splits: dict[str, str]
    layout_help: str
    find_local: Callable[[Path, str], list[Path] | None]
    read_local: Callable[[list[Path], str], Iterator[Any]]
    read_hub_row: Callable[[dict], Any] | None
    input_language: str = "java"
    output_language: str = ""
    split_aliases: tuple[tuple[str, str], ...] = ()
    task: Task | None = None  # the fine-tuning task a benchmark is the data of (lab.tasks)
    # Where two of the dataset's splits are cut from one hub split (csn-summaries' tune and
    # select): whether a hub row belongs to the split asked for.
    hub_row_in_split: Callable[[dict, str], bool] | None = None
    # A benchmark whose samples are a pre-training corpus's records: (that corpus, its splits the
    # samples come from), which lab inject refuses as a base split (they would be in every arm).
    drawn_from: tuple[str, tuple[str, ...]] | None = None
    # Where the source's order is not a draw (CSN's splits run repository by repository, so a
    # split's first 200 methods are one repository's): each split's samples are put in the
    # order of the sha256 of this seed with their input and output, a seeded order that holds
    # whatever file or hub row order they came in; the first N (--samples) are then a draw.
    order_seed: str | None = None

    def canonical_split(self, split: str) -> str:
        aliases = dict(self.split_aliases)
        split = aliases.get(split, split)
        if split not in self.splits:
            raise LabError(f"{self.name}: unknown split '{split}' (choose from {', '.join(self.splits)})")
        return split

    def locate(self, split: str, corpora_dir: Path | None) -> tuple[str, list[Path] | None]:
        """(where, files): the first local root holding the split, else ("hub", None)."""
        split = self.canonical_split(split)
        for _label, root in candidate_roots(corpora_dir):
            files = self.find_local(root / self.subdir, split)
            if files:
                return str(root / self.subdir), files
        if self.hub_id and hub_allowed():
            return "hub", None
        raise DataNotFound(self.missing_message(split, corpora_dir))

    def missing_message(self, split: str, corpora_dir: Path | None, why: str | None = None) -> str:
        looked = ", ".join(str(root / self.subdir) for _l, root in candidate_roots(corpora_dir))
        if why is None:
            why = "the hub is offline (HF_HUB_OFFLINE=1)" if self.hub_id else "it has no hub copy"
        return (
            f"{self.name} split '{split}' not found locally (looked in {looked}) and {why}: put {self.layout_help} under <DIR>/{self.subdir}/ and "
            f"pass --corpora DIR or set LAB_CORPORA=DIR"
        )
