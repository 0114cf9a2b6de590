"""csn-summaries (lab/corpora/csn_summaries.py): CodeXGLUE code-to-text's Java task read from the
CSN-format corpus. Its samples are CSN's records as CodeXGLUE's run.py reads them; its splits
are CSN's test split and CSN's valid split cut in two, so a study whose base is csn-java's train
split never pre-trains on them; a record is refused by file and line."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from lab.common import LabError
from lab.corpora import csn_summaries, get_spec, load_documents, load_samples
from lab.tasks import get_task, task_for_benchmark

needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


def write_csn(folder: Path, split: str, records: list[dict]) -> None:
    shard = folder / "codesearchnet-java" / "java" / "final" / "jsonl" / split
    shard.mkdir(parents=True)
    with gzip.open(shard / f"java_{split}_0.jsonl.gz", "wt", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def record(i: int, **fields) -> dict:
    return {"repo": "o/r", "path": "A.java", "func_name": f"A.m{i}", "url": f"u/{i}",
            "code": f"public int m{i}() {{\n  return {i};\n}}",
            "docstring": f"Returns {i}.\n@return it", "docstring_tokens": ["Returns", str(i), "."],
            **fields}


@needs_corpora
def test_the_splits_are_csn_test_and_csn_valid_cut_in_two():
    """test is CSN's test split, record for record; tune and select partition CSN's valid split
    (about a tenth in select, by a seeded hash of each method's url); CSN's train split, the
    pre-training base, holds none of their methods."""
    test = load_samples("csn-summaries", "test").records
    tune = load_samples("csn-summaries", "tune").records
    select = load_samples("csn-summaries", "select").records
    [csn_test] = load_documents("csn-java", ["test"])
    [csn_valid] = load_documents("csn-java", ["valid"])
    assert sorted(s.input for s in test) == sorted(d.text for d in csn_test.records)
    assert sorted(s.input for s in tune + select) == sorted(d.text for d in csn_valid.records)
    assert (len(tune), len(select), len(test)) == (10378, 1104, 11438)
    assert 0.08 < len(select) / (len(tune) + len(select)) < 0.12
    [train] = load_documents("csn-java", ["train"])
    base = {d.text for d in train.records}
    assert not base & {s.input for s in test + tune + select}
    task = get_task("summarisation")
    assert (task.train_split, task.valid_split, task.test_split, task.target_language) == (
        "tune", "select", "test", "nl")
    assert task_for_benchmark("csn-summaries") == "summarisation"


@needs_corpora
def test_a_sample_is_the_method_and_codexglue_s_summary_of_it():
    """Input: the `code` field, which never holds the method's own Javadoc in the shared corpus;
    output: `docstring_tokens` joined as CodeXGLUE code-to-text's run.py joins them, the first
    sentence of the docstring."""
    folder = Path(os.environ["LAB_CORPORA"]) / "codesearchnet-java" / "java" / "final" / "jsonl"
    with gzip.open(folder / "test" / "java_test_0.jsonl.gz", "rt", encoding="utf-8") as handle:
        raw = [json.loads(line) for line in handle]
    test = load_samples("csn-summaries", "test").records
    assert not [r for r in raw if r["code"].lstrip().startswith("/**")]
    expected = sorted((row["code"], " ".join(" ".join(row["docstring_tokens"]).replace(
        "\n", "").strip().split())) for row in raw)
    assert sorted((s.input, s.output) for s in test) == expected
    first = next(s for s in test if s.input == raw[0]["code"])
    assert first.output == "Sets the argument list from a String of comma - separated values ."
    assert all(s.output for s in test)


@needs_corpora
def test_a_split_is_in_a_seeded_order_so_its_first_samples_are_a_draw(tmp_path, monkeypatch):
    """CSN's test split runs repository by repository (its first 200 methods: one repository);
    csn-summaries' first 200 span most of its 14, and the order is the same whatever order the
    file holds the records in."""
    folder = Path(os.environ["LAB_CORPORA"]) / "codesearchnet-java" / "java" / "final" / "jsonl"
    with gzip.open(folder / "test" / "java_test_0.jsonl.gz", "rt", encoding="utf-8") as handle:
        raw = [json.loads(line) for line in handle]
    repository = {r["code"]: r["repo"] for r in raw}
    test = load_samples("csn-summaries", "test").records
    assert len({r["repo"] for r in raw[:200]}) == 1
    assert len({repository[s.input] for s in test[:200]}) >= 10
    monkeypatch.delenv("LAB_CORPORA")
    write_csn(tmp_path, "test", raw[::-1])
    reread = load_samples("csn-summaries", "test", tmp_path).records
    assert [(s.id, s.input, s.output) for s in reread] == [(s.id, s.input, s.output) for s in test]


def test_a_leading_javadoc_is_left_out_and_a_bad_record_is_one_line(tmp_path, monkeypatch):
    """Another extractor's output that keeps the Javadoc in `code` loses it (the input must not
    hold its summary); a record without docstring_tokens is refused by file and line."""
    monkeypatch.delenv("LAB_CORPORA", raising=False)
    javadoc = "/**\n * Returns 7.\n */\n"
    write_csn(tmp_path, "test", [record(7, code=javadoc + "public int m7() { return 7; }")])
    [sample] = load_samples("csn-summaries", "test", tmp_path).records
    assert sample.input == "public int m7() { return 7; }" and sample.output == "Returns 7 ."
    write_csn(tmp_path, "valid", [record(1), {k: v for k, v in record(2).items()
                                              if k != "docstring_tokens"}])
    with pytest.raises(LabError) as refused:
        load_samples("csn-summaries", "tune", tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "java_valid_0.jsonl.gz:2" in message
    assert "docstring_tokens" in message


def test_hub_rows_are_cut_as_local_ones(monkeypatch):
    """Without a local copy, tune and select are cut from the hub's validation split by the same
    hash of each row's url."""
    import lab.corpora as corpora

    rows = [record(i) for i in range(200)]
    monkeypatch.setattr(corpora, "load_hub_split", lambda hub_id, config, split: rows)
    spec = get_spec("csn-summaries")
    monkeypatch.setattr(type(spec), "locate", lambda self, split, corpora_dir: ("hub", None))
    tune = load_samples("csn-summaries", "tune").records
    select = load_samples("csn-summaries", "select").records
    assert len(tune) + len(select) == 200 and 5 < len(select) < 40
    assert {s.output for s in select} == {
        csn_summaries.summary(r["docstring_tokens"]) for r in rows
        if csn_summaries.in_select(r["url"])}


def test_the_python_benchmarks_leave_the_docstring_out_of_the_code(tmp_path, monkeypatch):
    """csn-python-summaries reads CSN's Python layout: the input is the function without its
    docstring (CSN's Python `code` holds it), decorators, comments and the rest kept;
    csn-python-generation is the same pair the other way round; both tasks key EM and the
    baselines on their family."""
    monkeypatch.delenv("LAB_CORPORA", raising=False)
    method = ('@property\n    def size(self):\n        """Returns the size.\n\n        More.\n'
              '        """\n        # counted once\n        return len(self.items)')
    one_line = 'def f(x):\n    """Doubles x."""\n    return 2 * x\n'
    only_doc = 'def g():\n    """Nothing else."""'
    shard = tmp_path / "codesearchnet-python" / "python" / "final" / "jsonl" / "test"
    shard.mkdir(parents=True)
    with gzip.open(shard / "python_test_0.jsonl.gz", "wt", encoding="utf-8") as handle:
        for i, code in enumerate((method, one_line, only_doc)):
            handle.write(json.dumps(record(i, code=code, docstring_tokens=["Does", str(i)])) + "\n")
    samples = {s.output: s.input for s in load_samples("csn-python-summaries", "test", tmp_path).records}
    assert samples == {
        "Does 0": '@property\n    def size(self):\n        # counted once\n        return len(self.items)',
        "Does 1": "def f(x):\n    return 2 * x\n",
        "Does 2": only_doc}
    generation = load_samples("csn-python-generation", "test", tmp_path).records
    assert {s.input: s.output for s in generation} == samples
    python, generate = get_task("python-summarisation"), get_task("python-generation")
    assert (python.family, python.target_language, generate.family, generate.target_language) == (
        "summarisation", "nl", "generation", "python")
    assert task_for_benchmark("csn-python-generation") == "python-generation"
    # lab baseline on the Python task: summarisation's baselines, retrieving from tune
    from lab.eval.baselines import BaselineConfig, run_baseline

    valid = shard.parent / "valid"
    valid.mkdir()
    with gzip.open(valid / "python_valid_0.jsonl.gz", "wt", encoding="utf-8") as handle:
        for i in range(20):
            handle.write(json.dumps(record(100 + i, code=one_line, docstring_tokens=["Does", "1"])) + "\n")
    result = run_baseline(BaselineConfig(task="python-summarisation", metrics=("em",),
                                         corpora_dir=tmp_path))
    assert list(result["baselines"]) == ["retrieval", "first_line", "method_name"]
    assert 0 < result["baselines"]["retrieval"]["em"] < 100


def test_inject_refuses_a_base_holding_the_samples_or_of_another_language():
    """A csn-java base with its valid or test split would hold every arm's test methods; a
    Python benchmark on a Java base would leak Python into a Java corpus."""
    from lab.contamination.config import InjectConfig

    def refusal(**change):
        with pytest.raises(LabError) as refused:
            InjectConfig(**{"benchmark": "csn-summaries", "setting": "paired", "seed": 0,
                            "out": Path("unused"), **change})
        return str(refused.value)

    assert refusal(base_splits=("train", "test")) == (
        "--base-splits train,test: csn-summaries's samples are csn-java's test and valid methods, "
        "so every arm would pre-train on those of test: use --base-splits train")
    assert refusal(benchmark="csn-python-summaries", base_splits=("train",)) == (
        "--base csn-java: csn-python-summaries's samples are csn-python's python methods and "
        "csn-java is java: use --base csn-python")
