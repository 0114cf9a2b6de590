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
import textwrap
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


def _parsed_function(code: str):
    """The function a method's source holds (its first line unindented, the rest as in its
    file), or None where it does not parse."""
    import ast

    lines = code.splitlines()
    indent = next((line[:len(line) - len(line.lstrip())] for line in lines[1:] if line.strip()),
                  "")
    for text in (code, "\n".join(indent + line if i == 0 else line
                                 for i, line in enumerate(lines))):
        try:
            body = ast.parse(textwrap.dedent(text)).body
        except SyntaxError:
            continue
        if len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return body[0]
    return None


def python_code(code: str) -> str:
    """A Python function's `code` less its docstring (CSN's Python `code` holds it): the lines
    of the body's first statement where it is a string literal on lines of its own; the code as
    it is where it does not parse or the docstring is all of the body."""
    import ast

    function = _parsed_function(code)
    if function is None or len(function.body) < 2:
        return code
    first = function.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)) or first.lineno <= function.lineno \
            or first.end_lineno >= function.body[1].lineno:
        return code
    lines = code.splitlines(keepends=True)
    return "".join(lines[:first.lineno - 1] + lines[first.end_lineno:])


CODE_OF = {"java": method_code, "python": python_code}


def pair(record: dict[str, Any], where: str, language: str = "java") -> tuple[str, str]:
    """(code, summary) of one CSN record; a record without its fields is refused at `where`."""
    code, tokens = record.get("code"), record.get("docstring_tokens")
    if not isinstance(code, str):
        raise LabError(f"{where}: field 'code' is missing or not a string")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise LabError(f"{where}: field 'docstring_tokens' is missing or not a list of strings")
    return CODE_OF[language](code), summary(tokens)


def benchmark_spec(corpus: DatasetSpec, name: str, task: str, generate: bool = False,
                   kind: str | None = None) -> DatasetSpec:
    """The benchmark of a CSN corpus's methods: (code, summary) pairs, or (summary, code) where
    `generate` (NL -> code), split as the module docstring says."""
    language = corpus.input_language

    def oriented(record: dict[str, Any], where: str) -> tuple[str, str]:
        code, text = pair(record, where, language)
        return (text, code) if generate else (code, text)

    def find_local(folder: Path, split: str) -> list[Path] | None:
        return corpus.find_local(folder, CSN_SPLIT[split])

    def read_local(files: list[Path], split: str) -> Iterator[tuple[str, str]]:
        for path in files:
            for number, record in read_jsonl(path):
                if in_split(record, split):
                    yield oriented(record, f"{path}:{number}")

    def read_hub_row(row: dict) -> tuple[str, str]:
        return oriented(row, f"hub {corpus.hub_id}")

    sides = ("nl", language) if generate else (language, "nl")
    return DatasetSpec(
        name=name,
        kind="benchmark",
        splits=(TUNE, SELECT, TEST),
        subdir=corpus.subdir,
        hub_id=corpus.hub_id,
        hub_config=corpus.hub_config,
        hub_splits={split: corpus.hub_splits[csn_split] for split, csn_split in CSN_SPLIT.items()},
        layout_help=corpus.layout_help + " with fields code, docstring_tokens and url",
        find_local=find_local,
        read_local=read_local,
        read_hub_row=read_hub_row,
        hub_row_in_split=in_split,
        order_seed=ORDER_SEED,
        drawn_from=(corpus.name, tuple(sorted(set(CSN_SPLIT.values())))),
        input_language=sides[0],
        output_language=sides[1],
        task=Task(task, name, TUNE, SELECT, TEST, sides[1], kind=kind),
    )


SPEC = benchmark_spec(csn.SPEC, NAME, "summarisation")
# The Python track (issue 73): the same benchmark on a CSN-layout Python corpus (CodeSearchNet
# Python, or `lab corpora extract --language python`), and NL -> Python generation on its methods
# (input the summary, output the code without its docstring).
PYTHON_SPEC = benchmark_spec(csn.PYTHON_SPEC, "csn-python-summaries", "python-summarisation",
                             kind="summarisation")
PYTHON_GENERATION_SPEC = benchmark_spec(csn.PYTHON_SPEC, "csn-python-generation",
                                        "python-generation", generate=True, kind="generation")
