"""CodeSearchNet Java summarisation (code -> NL): CodeXGLUE code-to-text's Java task, read from
the CSN-format corpus the lab pre-trains on (lab.corpora.csn's layouts, or the hub).

A sample is one method: input its `code` field, output its summary as CodeXGLUE's code-to-text
takes it, the `docstring_tokens` (CSN's first sentence of the Javadoc, tokenised) joined by
single spaces. CSN keeps a Java method's Javadoc in `docstring`, not in `code`; a record whose
`code` opens with a Javadoc block (another extractor's output) has that block left out, so that
the input never holds its own summary (`javadoc_stripped` counts them; the shared corpus has
none, tests/test_csn_summaries.py).

Splits, chosen so that a study whose base is csn-java's train split never pre-trains on a
sample it fine-tunes on, selects with, or is scored on:
- `test`: CSN's test split (repository-disjoint from its train split);
- `tune` and `select`: CSN's valid split, a method in `select` when the sha256 of its `url`
  (one per method) under SELECT_SEED falls in the first SELECT_SHARE of the range, else in
  `tune`. Fine-tuning trains on `tune` and picks its checkpoint on `select`; a placebo draws
  from the splits no model fine-tunes on. The cut is per method, not per repository: CSN's valid
  split holds 23 repositories, one of them a third of its methods, so a repository cut could not
  keep the selection split near its share.
The names are not `train`/`valid` on purpose: csn-java's `train` is the pre-training base.
Each split is in a seeded order (ORDER_SEED; DatasetSpec.order_seed), not CSN's: CSN's test
split runs repository by repository (its first 2,000 methods are one of its 14 repositories), so
a mini recipe's first 200 samples are a draw across them.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Iterator

from lab.common import LabError, read_jsonl
from lab.corpora import csn
from lab.corpora.base import DatasetSpec, Task

NAME = "csn-summaries"
TUNE, SELECT, TEST = "tune", "select", "test"
# The CSN split each of this benchmark's splits is read from.
CSN_SPLIT = {TUNE: "valid", SELECT: "valid", TEST: "test"}
SELECT_SEED = "csn-summaries/select"
SELECT_SHARE = 0.1
ORDER_SEED = "csn-summaries/order"
_LEADING_JAVADOC = re.compile(r"\A\s*/\*\*.*?\*/\s*", re.DOTALL)


def in_select(url: str) -> bool:
    """Whether the method at `url` belongs to the `select` split (module docstring)."""
    digest = hashlib.sha256(f"{SELECT_SEED}/{url}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < SELECT_SHARE * 2 ** 64


def in_split(record: dict[str, Any], split: str) -> bool:
    """Whether a record of CSN's CSN_SPLIT[split] belongs to this benchmark's `split`."""
    if split == TEST:
        return True
    return in_select(str(record.get("url", ""))) == (split == SELECT)


def summary(docstring_tokens: list[str]) -> str:
    """CodeXGLUE code-to-text's target (its run.py): the tokens joined by spaces, new lines
    deleted, whitespace collapsed."""
    return " ".join(" ".join(docstring_tokens).replace("\n", "").split())


def method_code(code: str) -> str:
    """The `code` field, less a leading Javadoc block where an extractor left one in."""
    return _LEADING_JAVADOC.sub("", code, count=1)


def pair(record: dict[str, Any], where: str) -> tuple[str, str]:
    """(input, output) of one CSN record; a record without its fields is refused at `where`."""
    code, tokens = record.get("code"), record.get("docstring_tokens")
    if not isinstance(code, str):
        raise LabError(f"{where}: field 'code' is missing or not a string")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise LabError(f"{where}: field 'docstring_tokens' is missing or not a list of strings")
    return method_code(code), summary(tokens)


def find_local(folder: Path, split: str) -> list[Path] | None:
    return csn.find_local(folder, CSN_SPLIT[split])


def read_local(files: list[Path], split: str) -> Iterator[tuple[str, str]]:
    for path in files:
        for number, record in read_jsonl(path):
            if in_split(record, split):
                yield pair(record, f"{path}:{number}")


def read_hub_row(row: dict) -> tuple[str, str]:
    return pair(row, f"hub {csn.SPEC.hub_id}")


def hub_row_in_split(row: dict, split: str) -> bool:
    return in_split(row, split)


SPEC = DatasetSpec(
    name=NAME,
    kind="benchmark",
    splits=(TUNE, SELECT, TEST),
    subdir=csn.SPEC.subdir,
    hub_id=csn.SPEC.hub_id,
    hub_config=csn.SPEC.hub_config,
    hub_splits={split: csn.SPEC.hub_splits[csn_split] for split, csn_split in CSN_SPLIT.items()},
    layout_help=csn.SPEC.layout_help + " with fields code, docstring_tokens and url",
    find_local=find_local,
    read_local=read_local,
    read_hub_row=read_hub_row,
    hub_row_in_split=hub_row_in_split,
    order_seed=ORDER_SEED,
    drawn_from=(csn.NAME, tuple(sorted(set(CSN_SPLIT.values())))),
    input_language="java",
    output_language="nl",
    task=Task("summarisation", NAME, TUNE, SELECT, TEST, "nl"),
)
