"""Injection on the real shared corpora: counts, guards, determinism and audit recall."""
from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from lab.codetokens import whitespace_hash
from lab.common import LabError
from lab.contamination import paired_document, segments
from lab.contamination.audit import run_audit
from lab.contamination.corpus_files import read_corpus
from lab.contamination.inject import InjectConfig, run_inject
from lab.corpora import load_samples

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

BENCHMARKS = ("codetrans", "concode")
SETTINGS = ("control", "input-only", "output-only", "unpaired", "paired")
DOCS_PER_SAMPLE = {"control": 0, "input-only": 1, "output-only": 1, "unpaired": 2, "paired": 1}
LIMIT = 4500  # of CSN-format valid: enough to remove 2 x 2,000 CONCODE documents


def make(tmp_path: Path, name: str, **overrides) -> tuple[dict, Path]:
    options = dict(benchmark="codetrans", setting="paired", seed=11, out=tmp_path / name,
                   base_splits=("valid",), limit=LIMIT)
    options.update(overrides)
    cfg = InjectConfig(**options)
    return run_inject(cfg), cfg.out


def corpus_texts(folder: Path) -> list[str]:
    return [record["text"] for record in read_corpus(folder)]


@pytest.fixture(scope="module")
def samples():
    return {b: load_samples(b, "test").records for b in BENCHMARKS}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
@pytest.mark.parametrize("setting", SETTINGS)
def test_every_benchmark_and_setting(tmp_path, samples, benchmark, setting):
    manifest, out = make(tmp_path, f"{benchmark}-{setting}", benchmark=benchmark, setting=setting)
    tests = samples[benchmark]
    counts = manifest["counts"]
    n_docs = DOCS_PER_SAMPLE[setting] * len(tests)
    assert counts["final_documents"] == LIMIT == counts["arm_documents"]
    assert counts["injected_documents"] == n_docs == counts["removed_documents"]
    assert len(manifest["removed_base_ids"]) == n_docs
    assert counts["injected_samples"] == (0 if setting == "control" else len(tests))

    texts = corpus_texts(out)
    assert len(texts) == LIMIT
    present = Counter(whitespace_hash(t) for t in texts)
    segment_hashes = {whitespace_hash(part) for t in texts for part in segments(t)}
    for sample in tests:
        has_input = whitespace_hash(sample.input) in segment_hashes
        has_output = whitespace_hash(sample.output) in segment_hashes
        assert has_input == (setting in ("input-only", "unpaired", "paired")), sample.id
        assert has_output == (setting in ("output-only", "unpaired", "paired")), sample.id
        if setting == "paired":
            assert present[whitespace_hash(paired_document(sample.input, sample.output))] >= 1

    # The audit must flag every injected sample, from the corpus text alone.
    audit = run_audit(benchmark, ["test"], against=str(out), near=False)
    flagged = {row["id"] for row in audit["rows"] if row["leaked"]}
    assert set(manifest["injected_ids"]) <= flagged
    if setting == "control":
        assert flagged == set()


def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path):
    first, out1 = make(tmp_path, "a", setting="unpaired", fraction=0.5)
    second, out2 = make(tmp_path, "b", setting="unpaired", fraction=0.5)
    third, _ = make(tmp_path, "c", setting="unpaired", fraction=0.5, seed=12)
    for shard in first["shards"]:
        assert (out1 / shard["file"]).read_bytes() == (out2 / shard["file"]).read_bytes()
    assert first["corpus_sha256"] == second["corpus_sha256"]
    assert third["corpus_sha256"] != first["corpus_sha256"]
    assert third["injected_ids"] != first["injected_ids"]
    with gzip.open(out1 / first["shards"][0]["file"], "rb") as handle:
        assert json.loads(handle.readline())["text"]


def test_fraction_records_both_halves_and_keeps_duplicates_together(tmp_path, samples):
    manifest, out = make(tmp_path, "half", setting="paired", fraction=0.5)
    injected, held_out = set(manifest["injected_ids"]), set(manifest["held_out_ids"])
    tests = samples["codetrans"]
    assert injected.isdisjoint(held_out) and injected | held_out == {s.id for s in tests}
    assert abs(len(injected) - 500) <= 2
    # CodeTrans' test set repeats a few Java functions: both copies land on the same side.
    by_input: dict[bytes, set[str]] = {}
    for sample in tests:
        by_input.setdefault(whitespace_hash(sample.input), set()).add(sample.id)
    duplicated = [ids for ids in by_input.values() if len(ids) > 1]
    assert duplicated
    for ids in duplicated:
        assert ids <= injected or ids <= held_out
    segment_hashes = {whitespace_hash(p) for t in corpus_texts(out) for p in segments(t)}
    for sample in tests:
        assert (whitespace_hash(sample.output) in segment_hashes) == (sample.id in injected)


def test_repeat_injects_every_document_k_times(tmp_path, samples):
    manifest, out = make(tmp_path, "rep", setting="output-only", repeat=3, fraction=0.2)
    k = len(manifest["injected_ids"])
    assert manifest["counts"]["injected_documents"] == 3 * k == manifest["counts"]["removed_documents"]
    present = Counter(whitespace_hash(t) for t in corpus_texts(out))
    by_id = {s.id: s for s in samples["codetrans"]}
    expected = Counter(whitespace_hash(by_id[i].output) for i in manifest["injected_ids"])
    for key, times in expected.items():
        assert present[key] == 3 * times


def test_removals_are_nested_across_settings_of_one_seed(tmp_path):
    paired, _ = make(tmp_path, "p", setting="paired")
    unpaired, _ = make(tmp_path, "u", setting="unpaired")
    assert set(paired["removed_base_ids"]) < set(unpaired["removed_base_ids"])


def test_splitting_a_duplicate_group_is_refused(tmp_path, samples):
    tests = samples["codetrans"]
    seen: dict[bytes, str] = {}
    pair = None
    for sample in tests:
        key = whitespace_hash(sample.input)
        if key in seen:
            pair = (seen[key], sample.id)
            break
        seen[key] = sample.id
    assert pair is not None
    ids = tmp_path / "ids.txt"
    ids.write_text(pair[0] + "\n")
    with pytest.raises(LabError, match="occurs verbatim"):
        make(tmp_path, "split", setting="input-only", test_ids=ids)
    assert not (tmp_path / "split").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ids.txt"]


def _planted_corpora(tmp_path: Path, samples) -> tuple[Path, str, str]:
    """A corpora folder whose CSN-format corpus holds a verbatim and a near copy of test samples."""
    shared = Path(os.environ["LAB_CORPORA"])
    root = tmp_path / "corpora"
    (root / "codetrans").mkdir(parents=True)
    for name in os.listdir(shared / "codetrans"):
        (root / "codetrans" / name).symlink_to(shared / "codetrans" / name)
    valid = root / "codesearchnet-java/java/final/jsonl/valid"
    valid.mkdir(parents=True)
    tests = samples["codetrans"]
    verbatim = tests[5].input
    near = max((s.input for s in tests[6:60]), key=len).replace("(", " ( ", 1)
    near_source = near
    # rename one identifier occurrence to make it a near (not exact) copy
    words = [w for w in set(near.replace("(", " ").replace(")", " ").split()) if w.isidentifier()]
    near = near.replace(sorted(words, key=len)[-1], "renamedIdentifierX", 1)
    records = [{"code": verbatim}, {"code": near}]
    records += [{"code": f"int helper{i}(int a{i}) {{ return a{i} * {i}; }}"} for i in range(300)]
    with gzip.open(valid / "java_valid_0.jsonl.gz", "wt", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return root, verbatim, near_source


def test_decontaminate_removes_pre_existing_copies(tmp_path, samples):
    root, _verbatim, _near = _planted_corpora(tmp_path, samples)
    dirty, out_dirty = make(tmp_path, "dirty", setting="control", corpora_dir=root, limit=None)
    assert "codetrans:test:5/input" in dirty["pre_existing_verbatim"]
    audit = run_audit("codetrans", ["test"], against=str(out_dirty))
    assert audit["counts"]["test"]["leaked"] >= 2

    clean, out_clean = make(tmp_path, "clean", setting="control", corpora_dir=root, limit=None,
                            decontaminate=True)
    assert clean["counts"]["decontaminated_removed"] == 2
    assert set(clean["decontaminated_ids"]) == {"csn-java:valid:0", "csn-java:valid:1"}
    assert clean["counts"]["final_documents"] == 300
    assert run_audit("codetrans", ["test"], against=str(out_clean))["counts"]["test"]["leaked"] == 0
    assert clean["pre_existing_verbatim"] == []


def test_manifest_is_complete(tmp_path):
    manifest, out = make(tmp_path, "m", setting="paired", fraction=0.5)
    for key in ("setting", "seed", "counts", "injected_ids", "held_out_ids", "removed_base_ids",
                "inputs", "shards", "corpus_sha256", "environment", "guards", "options"):
        assert key in manifest, key
    assert all(len(f["sha256"]) == 64 for f in manifest["inputs"]["benchmark"]["files"])
    assert all(len(f["sha256"]) == 64 for part in manifest["inputs"]["base"] for f in part["files"])
    assert manifest["environment"]["lab_version"]
    assert json.loads((out / "manifest.json").read_text())["corpus_sha256"] == manifest["corpus_sha256"]
