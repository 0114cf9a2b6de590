"""CodeSearchNet Java: CSN's sharded layout, CodeXGLUE's single-file layout, or the hub."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from lab.corpora.base import DatasetSpec, read_json_lines

NAME = "csn-java"


def _shard_number(path: Path) -> int:
    match = re.search(r"_(\d+)\.jsonl(\.gz)?$", path.name)
    return int(match.group(1)) if match else -1


def find_local(folder: Path, split: str) -> list[Path] | None:
    csn_dir = folder / "java" / "final" / "jsonl" / split
    shards = sorted(csn_dir.glob(f"java_{split}_*.jsonl*"), key=_shard_number)
    if shards:
        return shards
    for candidate in (folder / f"{split}.jsonl", folder / f"{split}.jsonl.gz"):
        if candidate.is_file():
            return [candidate]
    return None


def read_local(files: list[Path], split: str) -> Iterator[str]:
    """The `code` field of every record, in file order (the order defines stable indices)."""
    for path in files:
        for (code,) in read_json_lines(path, ("code",)):
            yield code


def read_hub_row(row: dict) -> str:
    return row["code"]


SPEC = DatasetSpec(
    name=NAME,
    kind="corpus",
    splits=("train", "valid", "test"),
    subdir="codesearchnet-java",
    hub_id="google/code_x_glue_ct_code_to_text",
    hub_config="java",
    hub_splits={"train": "train", "valid": "validation", "test": "test"},
    layout_help=(
        "CSN's java/final/jsonl/{train,valid,test}/java_{split}_N.jsonl.gz or CodeXGLUE's "
        "{train,valid,test}.jsonl"
    ),
    find_local=find_local,
    read_local=read_local,
    read_hub_row=read_hub_row,
)
