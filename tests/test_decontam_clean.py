"""`lab decontam --write-clean` (lab.decontam.clean): a tiny folder in CodeSearchNet's jsonl.gz
layout with two CodeTrans test functions planted inside base documents is cleaned: every other
line is kept byte for byte and in order, flagged.csv names the plants, and --tasks 2 writes the
same bytes as --tasks 1; the bad inputs are one line and write nothing."""
from __future__ import annotations

import csv
import gzip
import json
import os
from pathlib import Path

import pytest

from lab.common import LabError

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

FILES = ("java/final/jsonl/train/java_train_0.jsonl.gz", "java/final/jsonl/train/java_train_1.jsonl.gz")
PLANTS = {(FILES[0], 3): 0, (FILES[1], 5): 1}  # (file, line) -> the CodeTrans test sample


def _record(i: int, code: str) -> dict:
    return {"repo": "u/r", "path": f"src/A{i}.java", "func_name": f"A{i}.get", "code": code,
            "docstring": "d", "url": f"https://example.org/A{i}#L1", "partition": "train"}


@pytest.fixture(scope="module")
def csn_folder(tmp_path_factory) -> tuple[Path, dict[tuple[str, int], bytes]]:
    """Two shards of 8 lines each; the plants are sample 0's Java inside a class and sample
    1's laid over several lines (exact normalises whitespace)."""
    from lab.corpora import load_samples

    samples = load_samples("codetrans", "test").records
    folder = tmp_path_factory.mktemp("csn") / "corpus"
    lines: dict[tuple[str, int], bytes] = {}
    for number, name in enumerate(FILES):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = []
        for line in range(1, 9):
            i = number * 100 + line
            code = f"public int get{i}() {{\n    return field{i} * {i};\n}}"
            if (name, line) in PLANTS:
                java = samples[PLANTS[(name, line)]].input
                code = (f"class Host{i} {{\n  {java}\n}}" if number == 0
                        else "\n    ".join(java.split(" ")))
            raw = json.dumps(_record(i, code)).encode() + b"\n"
            lines[(name, line)] = raw
            payload.append(raw)
        with gzip.open(path, "wb") as handle:
            handle.write(b"".join(payload))
    return folder, lines


def _clean(corpus: Path, target: Path, **options):
    from lab.decontam.run import DecontamConfig, run_decontam

    return run_decontam(DecontamConfig(corpus=corpus, write_clean=target,
                                       **{"benchmark": "codetrans:test",
                                          "methods": ("exact", "ngram13"), **options}))


def _flagged(out: Path) -> list[dict[str, str]]:
    with open(out / "flagged.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_clean_keeps_every_other_line_byte_identical_and_flagged_csv_names_the_plants(
        csn_folder, tmp_path):
    folder, lines = csn_folder
    result = _clean(folder, tmp_path / "clean")
    assert (result["documents"], result["kept"], result["removed"]) == (16, 14, 2)
    for name in FILES:
        with gzip.open(tmp_path / "clean" / name, "rb") as handle:
            kept = handle.read()
        assert kept == b"".join(raw for (file, _line), raw in sorted(lines.items())
                                if file == name and (file, _line) not in PLANTS)
    exact = {(row["file"], int(row["line"])): row for row in _flagged(tmp_path / "clean")
             if row["method"] == "exact"}
    assert set(exact) == set(PLANTS)
    for where, index in PLANTS.items():
        row = exact[where]
        assert row["sample"] == f"codetrans:test:{index}" and row["score"] == "1.0"
        code = json.loads(lines[where])["code"]
        # the span is the copy in the document's own characters, line breaks and all
        copy = " ".join(code[int(row["start"]):int(row["end"])].split())
        assert copy[:160] == row["matched"] and len(copy) > 60
        assert row["document"].startswith("https://example.org/A")
    summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert summary["kind"] == "lab-decontam-clean" and summary["flagged_by_method"]["exact"] == 2
    # winnow names the sample and its containment, with no span (its fingerprints say which)
    _clean(folder, tmp_path / "winnow", methods=("winnow",))
    rows = {(row["file"], int(row["line"])): row for row in _flagged(tmp_path / "winnow")}
    assert set(rows) == set(PLANTS)
    assert all(rows[where]["sample"] == f"codetrans:test:{index}" and rows[where]["start"] == ""
               and float(rows[where]["score"]) >= 0.5 for where, index in PLANTS.items())


def test_tasks_2_writes_the_same_bytes_as_tasks_1(csn_folder, tmp_path, monkeypatch):
    from lab.decontam import clean

    monkeypatch.setattr(clean, "BATCH", 3)  # batches inside a file change nothing either
    folder, _lines = csn_folder
    _clean(folder, tmp_path / "one")
    _clean(folder, tmp_path / "two", tasks=2)
    for name in (*FILES, "flagged.csv", "summary.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


@pytest.mark.parametrize("options, says", [
    ({"benchmark": "codetrans:nonesuch"}, "unknown split 'nonesuch'"),
    ({"benchmark": "nonesuch"}, "unknown dataset 'nonesuch'"),
    ({"benchmark": "csn-java"}, "not a benchmark"),
    ({"benchmark": None}, "--write-clean: give --benchmark"),
    ({"curve_n": (13,)}, "--curve-n: not with --write-clean"),
    ({"out": "elsewhere"}, "not with --write-clean"),
])
def test_bad_inputs_are_one_line_and_write_nothing(csn_folder, tmp_path, options, says):
    folder, _lines = csn_folder
    with pytest.raises(LabError, match=says.replace("(", r"\(")):
        _clean(folder, tmp_path / "clean", **options)
    assert not (tmp_path / "clean").exists()


def test_a_folder_of_neither_layout_is_refused(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine\n")
    with pytest.raises(LabError, match="neither a lab corpus"):
        _clean(tmp_path / "notes", tmp_path / "clean")
    assert not (tmp_path / "clean").exists()
