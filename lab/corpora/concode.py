"""CONCODE (CodeXGLUE text-to-code): NL (with class environment) input, Java output."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from lab.corpora.base import DatasetSpec, Task, one_file_per_split, read_json_lines

NAME = "concode"


def read_local(files: list[Path], split: str) -> Iterator[tuple[str, str]]:
    yield from read_json_lines(files[0], ("nl", "code"))


def read_hub_row(row: dict) -> tuple[str, str]:
    return row["nl"], row["code"]


SPEC = DatasetSpec(
    name=NAME,
    kind="benchmark",
    splits=("train", "dev", "test"),
    subdir="concode",
    hub_id="google/code_x_glue_tc_text_to_code",
    hub_config=None,
    hub_splits={"train": "train", "dev": "validation", "test": "test"},
    layout_help="CodeXGLUE's JSON lines {train,dev,test}.json with fields nl and code",
    find_local=one_file_per_split(".json"),
    read_local=read_local,
    read_hub_row=read_hub_row,
    input_language="nl",
    output_language="java",
    split_aliases=(("valid", "dev"), ("validation", "dev")),
    # Offline CONCODE has no train split (the shared copy holds dev and test): train on dev.
    task=Task("generation", NAME, "train", "dev", "test", "java", fallback_train_split="dev"),
)


PAPER_SPEC = DatasetSpec(
    name="concode-paper",
    kind="benchmark",
    splits=("dev", "test"),
    subdir="paper-subsets/concode",
    hub_id="",
    hub_config=None,
    hub_splits={},
    layout_help="the study's replication package subsets {dev,test}.jsonl",
    find_local=one_file_per_split(".jsonl"),
    read_local=read_local,
    read_hub_row=None,
    input_language="nl",
    output_language="java",
    split_aliases=(("valid", "dev"),),
)
