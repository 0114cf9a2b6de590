"""CodeSearchNet corpora (Java, Python): CSN's sharded layout, CodeXGLUE's single-file layout,
or the hub. A corpus that `lab corpora extract` writes from other source trees has CSN's layout
and is read the same way."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Iterator

from lab.corpora.base import DatasetSpec, read_json_lines

NAME = "csn-java"
PYTHON_NAME = "csn-python"


def _shard_number(path: Path) -> int:
    match = re.search(r"_(\d+)\.jsonl(\.gz)?$", path.name)
    return int(match.group(1)) if match else -1


def find_language_local(language: str, folder: Path, split: str) -> list[Path] | None:
    """CSN's LANGUAGE/final/jsonl/SPLIT/LANGUAGE_SPLIT_N.jsonl.gz shards, else CodeXGLUE's
    SPLIT.jsonl(.gz)."""
    csn_dir = folder / language / "final" / "jsonl" / split
    shards = sorted(csn_dir.glob(f"{language}_{split}_*.jsonl*"), key=_shard_number)
    if shards:
        return shards
    for candidate in (folder / f"{split}.jsonl", folder / f"{split}.jsonl.gz"):
        if candidate.is_file():
            return [candidate]
    return None


find_local = functools.partial(find_language_local, "java")


def read_local(files: list[Path], split: str) -> Iterator[str]:
    """The `code` field of every record, in file order (the order defines stable indices)."""
    for path in files:
        for (code,) in read_json_lines(path, ("code",)):
            yield code


def read_hub_row(row: dict) -> str:
    return row["code"]


def corpus_spec(name: str, language: str) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        kind="corpus",
        splits=("train", "valid", "test"),
        subdir=f"codesearchnet-{language}",
        hub_id="google/code_x_glue_ct_code_to_text",
        hub_config=language,
        hub_splits={"train": "train", "valid": "validation", "test": "test"},
        layout_help=(
            f"CSN's {language}/final/jsonl/{{train,valid,test}}/{language}_{{split}}_N.jsonl.gz "
            "or CodeXGLUE's {train,valid,test}.jsonl"
        ),
        find_local=functools.partial(find_language_local, language),
        read_local=read_local,
        read_hub_row=read_hub_row,
        input_language=language,
    )


SPEC = corpus_spec(NAME, "java")
# CodeSearchNet Python, or a corpus `lab corpora extract --language python` writes from Python
# source (the pinned PyPI sources of scripts/fetch-python-sources.sh; the standard library).
PYTHON_SPEC = corpus_spec(PYTHON_NAME, "python")
