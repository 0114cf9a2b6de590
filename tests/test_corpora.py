"""Dataset loaders: real counts, stable ids, layouts, search order, offline errors, hub mapping."""
from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.codetokens import code_tokens
from lab.common import LabError
from lab.corpora import dataset_stats, dataset_table, load_documents, load_samples

corpora_module = importlib.import_module("lab.corpora")  # where _rows looks up load_hub_split


@pytest.fixture(autouse=True)
def offline_and_isolated(request, monkeypatch, tmp_path):
    """Offline, in a working directory without ./corpora, and (unless a test uses the real
    data) without $LAB_CORPORA, so that tiny corpora never fall through to the real ones."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if "corpora_root" not in request.fixturenames:
        monkeypatch.delenv("LAB_CORPORA", raising=False)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return workdir


# --- counts on the real shared data -----------------------------------------------------------

def test_real_csn_counts_and_ids(corpora_root):
    parts = load_documents("csn-java", ["train", "valid", "test"], corpora_root)
    counts = {part.split: len(part.records) for part in parts}
    assert counts == {"train": 97_408, "valid": 11_482, "test": 11_438}
    for part in parts:
        assert part.where == str(corpora_root / "codesearchnet-java")
        assert [p.name for p in part.files][0] == f"java_{part.split}_0.jsonl.gz"
        assert part.records[0].id == f"csn-java:{part.split}:0"
        assert part.records[-1].id == f"csn-java:{part.split}:{len(part.records) - 1}"
        assert len({doc.id for doc in part.records}) == len(part.records)


@pytest.mark.parametrize("name, split, count", [
    ("codetrans", "train", 10_300),
    ("codetrans", "valid", 500),
    ("codetrans", "test", 1_000),
    ("concode", "dev", 2_000),
    ("concode", "test", 2_000),
    ("codetrans-paper", "test", 1_000),
    ("codetrans-paper", "valid", 500),
    ("concode-paper", "test", 1_000),
    ("concode-paper", "dev", 500),
])
def test_real_benchmark_counts_and_ids(corpora_root, name, split, count):
    loaded = load_samples(name, split, corpora_root)
    assert len(loaded.records) == count
    assert loaded.dataset == name and loaded.split == split
    for i in (0, count // 2, count - 1):
        sample = loaded.records[i]
        assert sample.id == f"{name}:{split}:{i}"
        assert (sample.split, sample.index) == (split, i)
        assert sample.input.strip()


def test_real_codetrans_pairs_line_i_with_line_i(corpora_root):
    folder = corpora_root / "codetrans"
    java = (folder / "test.java-cs.txt.java").read_text(encoding="utf-8").splitlines()
    csharp = (folder / "test.java-cs.txt.cs").read_text(encoding="utf-8").splitlines()
    loaded = load_samples("codetrans", "test", corpora_root)
    assert [s.input for s in loaded.records] == java
    assert [s.output for s in loaded.records] == csharp


def test_real_concode_test_has_references_and_train_is_missing_offline(corpora_root):
    assert len(load_samples("concode", "test", corpora_root, require_references=True).records) == 2000
    where = {(r["dataset"], r["split"]): r["where"] for r in dataset_table(corpora_root)}
    assert where[("concode", "train")] == "missing"
    assert where[("concode", "dev")] == str(corpora_root / "concode")
    assert where[("csn-java", "train")] == str(corpora_root / "codesearchnet-java")
    assert where[("concode-paper", "test")] == str(corpora_root / "paper-subsets" / "concode")


def test_real_stats_of_a_paper_subset(corpora_root):
    rows = {row["split"]: row for row in dataset_stats("concode-paper", corpora_root)}
    assert rows["dev"]["records"] == 500 and rows["test"]["records"] == 1000
    for row in rows.values():
        for side in ("input", "output"):
            q = row[side]
            assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"]


# --- ids, pairing and layouts on tiny synthetic corpora ---------------------------------------

def test_ids_are_dataset_split_index_and_stable(tiny_corpora):
    first = load_documents("csn-java", ["train", "valid", "test"], tiny_corpora)
    again = load_documents("csn-java", ("test", "train"), tiny_corpora)
    for part in first:
        assert [d.id for d in part.records] == [
            f"csn-java:{part.split}:{i}" for i in range(len(part.records))]
    by_id = {d.id: d.text for part in first for d in part.records}
    assert all(by_id[d.id] == d.text for part in again for d in part.records)
    shard = tiny_corpora / "codesearchnet-java/java/final/jsonl/valid/java_valid_0.jsonl.gz"
    with gzip.open(shard, "rt", encoding="utf-8") as handle:
        codes = [json.loads(line)["code"] for line in handle]
    assert [d.text for d in first[1].records] == codes

    samples = load_samples("concode", "valid", tiny_corpora)  # alias of dev
    assert samples.split == "dev"
    assert [s.id for s in samples.records] == [f"concode:dev:{i}" for i in range(20)]
    assert [s.index for s in samples.records] == list(range(20))


def test_codetrans_pairs_lines_and_refuses_unequal_files(tiny_corpora):
    folder = tiny_corpora / "codetrans"
    java = (folder / "valid.java-cs.txt.java").read_text(encoding="utf-8").splitlines()
    csharp = (folder / "valid.java-cs.txt.cs").read_text(encoding="utf-8").splitlines()
    loaded = load_samples("codetrans", "dev", tiny_corpora)  # alias of valid
    assert loaded.split == "valid"
    assert [(s.input, s.output) for s in loaded.records] == list(zip(java, csharp))
    assert loaded.files == [folder / "valid.java-cs.txt.java", folder / "valid.java-cs.txt.cs"]

    with open(folder / "valid.java-cs.txt.java", "a", encoding="utf-8") as handle:
        handle.write("public void extraLine() {}\n")
    with pytest.raises(LabError, match=r"valid\.java-cs\.txt\.cs: 20 lines, but .* has 21"):
        load_samples("codetrans", "valid", tiny_corpora)


def test_codexglue_single_file_csn_layout(tmp_path):
    folder = tmp_path / "cx" / "codesearchnet-java"
    folder.mkdir(parents=True)
    rows = [{"code": f"public int size{i}() {{ return items{i}.size(); }}", "docstring": "x"}
            for i in range(7)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                        encoding="utf-8")
    with gzip.open(folder / "valid.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write(json.dumps(rows[0]) + "\n")
    train, valid = load_documents("csn-java", ["train", "valid"], tmp_path / "cx")
    assert [d.text for d in train.records] == [r["code"] for r in rows]
    assert [d.id for d in train.records] == [f"csn-java:train:{i}" for i in range(7)]
    assert train.files == [folder / "train.jsonl"] and train.where == str(folder)
    assert valid.files == [folder / "valid.jsonl.gz"] and len(valid.records) == 1
    with pytest.raises(LabError, match="csn-java split 'test' not found locally"):
        load_documents("csn-java", ["test"], tmp_path / "cx")
    # A second read (a study's next arm) is the first one's, in lists of its own, until a file
    # changes: then the file is read again.
    again = load_documents("csn-java", ["train", "valid"], tmp_path / "cx")[0]
    assert again.records == train.records and again.records is not train.records
    again.records.clear()
    assert len(load_documents("csn-java", ["train", "valid"], tmp_path / "cx")[0].records) == 7
    (folder / "train.jsonl").write_text(json.dumps(rows[3]) + "\n", encoding="utf-8")
    changed = load_documents("csn-java", ["train", "valid"], tmp_path / "cx")[0]
    assert [d.text for d in changed.records] == [rows[3]["code"]]


def test_csn_shards_are_read_in_numeric_order(tmp_path):
    folder = tmp_path / "c" / "codesearchnet-java" / "java" / "final" / "jsonl" / "train"
    folder.mkdir(parents=True)
    for n in range(12):
        with gzip.open(folder / f"java_train_{n}.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.write(json.dumps({"code": f"void shard{n}() {{}}"}) + "\n")
    (part,) = load_documents("csn-java", ["train"], tmp_path / "c")
    assert [d.text for d in part.records] == [f"void shard{n}() {{}}" for n in range(12)]


# --- where data is looked for ------------------------------------------------------------------

def _concode_root(root: Path, n: int, splits=("dev",)) -> Path:
    (root / "concode").mkdir(parents=True)
    for split in splits:
        lines = [json.dumps({"nl": f"{root.name} {split} {i}", "code": f"int function ( ) {{ return {i} ; }}"})
                 for i in range(n)]
        (root / "concode" / f"{split}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_search_order_corpora_then_env_then_cwd(tmp_path, monkeypatch, offline_and_isolated):
    flag = _concode_root(tmp_path / "flag", 1)
    env = _concode_root(tmp_path / "env", 2, splits=("dev", "test"))
    _concode_root(offline_and_isolated / "corpora", 3, splits=("dev", "test"))
    monkeypatch.setenv("LAB_CORPORA", str(env))

    loaded = load_samples("concode", "dev", flag)
    assert (loaded.where, len(loaded.records)) == (str(flag / "concode"), 1)
    assert loaded.records[0].input.startswith("flag dev")
    loaded = load_samples("concode", "dev")
    assert (loaded.where, len(loaded.records)) == (str(env / "concode"), 2)
    # a split missing under --corpora falls through to the next root
    loaded = load_samples("concode", "test", flag)
    assert (loaded.where, len(loaded.records)) == (str(env / "concode"), 2)

    # LAB_CORPORA may list several folders (os.pathsep), searched in order: a split found in
    # none of the earlier ones comes from a later one
    second = _concode_root(tmp_path / "second", 4, splits=("dev", "train"))
    monkeypatch.setenv("LAB_CORPORA", os.pathsep.join([str(env), str(second)]))
    assert load_samples("concode", "dev").where == str(env / "concode")
    assert load_samples("concode", "train").where == str(second / "concode")

    monkeypatch.delenv("LAB_CORPORA")
    loaded = load_samples("concode", "dev")
    assert (loaded.where, len(loaded.records)) == (str(Path("corpora") / "concode"), 3)
    assert loaded.records[0].input.startswith("corpora dev")


def test_missing_corpora_or_env_directory_is_an_error(tmp_path, monkeypatch, tiny_corpora):
    with pytest.raises(LabError, match=r"--corpora .*nope: no such directory"):
        load_samples("codetrans", "test", tmp_path / "nope")
    with pytest.raises(LabError, match=r"--corpora .*nope: no such directory"):
        dataset_table(tmp_path / "nope")
    monkeypatch.setenv("LAB_CORPORA", str(tmp_path / "gone"))
    with pytest.raises(LabError, match=r"LAB_CORPORA=.*gone: no such directory"):
        load_documents("csn-java", ["test"], tiny_corpora)
    with pytest.raises(LabError, match=r"LAB_CORPORA=.*gone: no such directory"):
        dataset_table()
    monkeypatch.setenv("LAB_CORPORA", os.pathsep.join([str(tmp_path), str(tmp_path / "gone")]))
    with pytest.raises(LabError, match=r"LAB_CORPORA=.*: no such directory '.*gone'"):
        dataset_table()


@pytest.mark.parametrize("name, split, layout, subdir", [
    ("codetrans", "test", "{train,valid,test}.java-cs.txt.{java,cs}", "codetrans"),
    ("csn-java", "train", "java/final/jsonl/{train,valid,test}/", "codesearchnet-java"),
    ("concode", "train", "{train,dev,test}.json", "concode"),
])
def test_offline_with_nothing_local_says_where_to_put_files(monkeypatch, name, split, layout,
                                                            subdir):
    load = load_documents if name == "csn-java" else load_samples
    with pytest.raises(LabError) as info:
        load(name, [split] if name == "csn-java" else split)
    message = str(info.value)
    assert f"{name} split '{split}' not found locally" in message
    assert "HF_HUB_OFFLINE=1" in message
    assert "--corpora DIR" in message and "LAB_CORPORA=DIR" in message
    assert layout in message and f"under <DIR>/{subdir}/" in message
    assert "\n" not in message


def test_paper_subsets_have_no_hub_fallback(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(LabError, match="has no hub copy.*paper-subsets/codetrans"):
        load_samples("codetrans-paper", "test")


def test_concode_train_missing_offline_and_hub_online(tiny_corpora, monkeypatch):
    where = {(r["dataset"], r["split"]): r["where"] for r in dataset_table(tiny_corpora)}
    assert where[("concode", "train")] == "missing"
    assert where[("concode", "test")] == str(tiny_corpora / "concode")
    assert where[("codetrans-paper", "test")] == "missing"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    where = {(r["dataset"], r["split"]): r["where"] for r in dataset_table(tiny_corpora)}
    assert where[("concode", "train")] == "hub"
    assert where[("codetrans-paper", "test")] == "missing"


# --- references and statistics -----------------------------------------------------------------

def test_require_references_refuses_empty_concode_test(tiny_corpora):
    path = tiny_corpora / "concode" / "test.json"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({**r, "code": ""}) + "\n" for r in rows), encoding="utf-8")
    loaded = load_samples("concode", "test", tiny_corpora)  # loading alone is allowed
    assert len(loaded.records) == 25 and all(s.output == "" for s in loaded.records)
    with pytest.raises(LabError) as info:
        load_samples("concode", "test", tiny_corpora, require_references=True)
    message = str(info.value)
    assert message.startswith(f"{path}:")
    assert "25 of 25" in message and "empty reference" in message
    # a split with references passes
    assert len(load_samples("concode", "dev", tiny_corpora, require_references=True).records) == 20


def test_dataset_stats_counts_and_quantiles(tiny_corpora):
    rows = {row["split"]: row for row in dataset_stats("csn-java", tiny_corpora)}
    assert {s: r["records"] for s, r in rows.items()} == {"train": 240, "valid": 40, "test": 40}
    (valid,) = load_documents("csn-java", ["valid"], tiny_corpora)
    lengths = np.asarray([len(code_tokens(d.text)) for d in valid.records])
    q = rows["valid"]["text"]
    assert q["mean"] == round(float(lengths.mean()), 1)
    assert q["p50"] == pytest.approx(np.quantile(lengths, 0.5))
    assert q["p90"] == pytest.approx(np.quantile(lengths, 0.9))
    assert q["p99"] == pytest.approx(np.quantile(lengths, 0.99))
    assert q["max"] == lengths.max()
    assert rows["valid"]["where"] == str(tiny_corpora / "codesearchnet-java")

    rows = {row["split"]: row for row in dataset_stats("concode", tiny_corpora)}
    assert rows["train"]["records"] is None and rows["train"]["where"] == "missing"
    assert rows["dev"]["records"] == 20 and rows["test"]["records"] == 25
    for side in ("input", "output"):
        q = rows["test"][side]
        assert 0 < q["p50"] <= q["p90"] <= q["p99"] <= q["max"]
    with pytest.raises(LabError, match="unknown dataset 'nope'"):
        dataset_stats("nope", tiny_corpora)


# --- the hub path (mocked) --------------------------------------------------------------------

def test_hub_rows_map_to_records_when_online_and_nothing_local(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []
    rows = {
        "google/code_x_glue_cc_code_to_code_trans": [
            {"id": i, "java": f"int get{i}() {{return v{i};}}", "cs": f"int Get{i}(){{return v{i};}}"}
            for i in range(3)],
        "google/code_x_glue_tc_text_to_code": [
            {"id": 0, "nl": "return size", "code": "int function ( ) { return size ; }"}],
        "google/code_x_glue_ct_code_to_text": [
            {"id": i, "repo": "r", "func_name": f"f{i}", "code": f"void f{i}() {{}}",
             "docstring": "d"} for i in range(4)],
    }

    def fake_load_hub_split(hub_id, config, split):
        calls.append((hub_id, config, split))
        return iter(rows[hub_id])

    monkeypatch.setattr(corpora_module, "load_hub_split", fake_load_hub_split)

    loaded = load_samples("codetrans", "valid")
    assert loaded.where == "hub" and loaded.files == []
    assert [(s.id, s.input, s.output) for s in loaded.records] == [
        (f"codetrans:valid:{i}", f"int get{i}() {{return v{i};}}", f"int Get{i}(){{return v{i};}}")
        for i in range(3)]
    assert loaded.provenance()["hub_id"] == "google/code_x_glue_cc_code_to_code_trans"

    (sample,) = load_samples("concode", "train").records
    assert (sample.id, sample.input, sample.output) == (
        "concode:train:0", "return size", "int function ( ) { return size ; }")

    (part,) = load_documents("csn-java", ["valid"])
    assert [(d.id, d.text) for d in part.records] == [
        (f"csn-java:valid:{i}", f"void f{i}() {{}}") for i in range(4)]

    assert calls == [
        ("google/code_x_glue_cc_code_to_code_trans", None, "validation"),
        ("google/code_x_glue_tc_text_to_code", None, "train"),
        ("google/code_x_glue_ct_code_to_text", "java", "validation"),
    ]


def test_without_lab_corpora_or_a_reachable_hub_the_error_names_lab_corpora_at_once(tmp_path):
    """A user who forgot LAB_CORPORA (and HF_HUB_OFFLINE) is told before the hub is tried, and the
    error names LAB_CORPORA: an unresolvable hub host fails at once, not after datasets' five
    retries (26 s here before)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_CORPORA", "HF_HUB_OFFLINE")}
    env["HF_ENDPOINT"] = "https://hub.invalid"  # .invalid never resolves (RFC 2606)
    done = subprocess.run([sys.executable, "-m", "lab.cli", "inject", "--benchmark", "codetrans",
                           "--setting", "paired", "--seed", "0", "--out", str(tmp_path / "arm")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 2, done.stderr
    assert lines[0].startswith("lab: codetrans split 'test' has no local copy") and "HF_HUB_OFFLINE=1" in lines[0]
    assert lines[1].startswith("lab: error: codetrans split 'test' not found locally")
    assert "the hub (hub.invalid) cannot be reached" in lines[1] and "set LAB_CORPORA=DIR" in lines[1]
    assert "Retrying" not in done.stderr and not (tmp_path / "arm").exists()


def test_a_relative_lab_corpora_is_resolved_before_tests_change_folder(corpora_root):
    """Many tests run the CLI with a temporary folder as cwd; the README passes
    LAB_CORPORA=../shared/corpora, which only means the right folder from the checkout."""
    assert Path(os.environ["LAB_CORPORA"]).is_absolute(), os.environ["LAB_CORPORA"]
    assert (Path(os.environ["LAB_CORPORA"]) / "codetrans").is_dir()
