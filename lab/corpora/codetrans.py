"""CodeTrans (CodeXGLUE code-to-code translation): Java input, C# output, one function per line."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator


from lab.common import LabError
from lab.common import read_text_lines
from lab.corpora.base import DatasetSpec, Task, one_file_per_split, read_json_lines

NAME = "codetrans"


def find_local(folder: Path, split: str) -> list[Path] | None:
    java = folder / f"{split}.java-cs.txt.java"
    csharp = folder / f"{split}.java-cs.txt.cs"
    if java.is_file() and csharp.is_file():
        return [java, csharp]
    return None


def _lines(path: Path) -> list[str]:
    return [line.rstrip("\n").rstrip("\r") for _lineno, line in read_text_lines(path)]


def read_local(files: list[Path], split: str) -> Iterator[tuple[str, str]]:
    java_path, cs_path = files
    java, csharp = _lines(java_path), _lines(cs_path)
    if len(java) != len(csharp):
        raise LabError(
            f"{cs_path}: {len(csharp)} lines, but {java_path.name} has {len(java)}; "
            "line i of the .java file must pair with line i of the .cs file"
        )
    yield from zip(java, csharp)


def read_hub_row(row: dict) -> tuple[str, str]:
    return row["java"], row["cs"]


SPEC = DatasetSpec(
    name=NAME,
    kind="benchmark",
    splits=("train", "valid", "test"),
    subdir="codetrans",
    hub_id="google/code_x_glue_cc_code_to_code_trans",
    hub_config=None,
    hub_splits={"train": "train", "valid": "validation", "test": "test"},
    layout_help="CodeXGLUE's {train,valid,test}.java-cs.txt.{java,cs}",
    find_local=find_local,
    read_local=read_local,
    read_hub_row=read_hub_row,
    input_language="java",
    output_language="cs",
    split_aliases=(("dev", "valid"), ("validation", "valid")),
    task=Task("translation", NAME, "train", "valid", "test", "cs"),
)


def read_local_paper(files: list[Path], split: str) -> Iterator[tuple[str, str]]:
    yield from read_json_lines(files[0], ("java_code", "cs_code"))


PAPER_SPEC = DatasetSpec(
    name="codetrans-paper",
    kind="benchmark",
    splits=("valid", "test"),
    subdir="paper-subsets/codetrans",
    hub_id="",
    hub_config=None,
    hub_splits={},
    layout_help="the study's replication package subsets {valid,test}.jsonl",
    find_local=one_file_per_split(".jsonl"),
    read_local=read_local_paper,
    read_hub_row=None,
    input_language="java",
    output_language="cs",
    split_aliases=(("dev", "valid"),),
)

