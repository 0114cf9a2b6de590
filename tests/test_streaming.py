"""Corpora beyond memory: format 2 (streamed) injection and the streaming audit, single-process
and on datatrove's local executor, checked against the in-memory path on CSN-format data."""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from lab.common import LabError
from lab.contamination.audit import audit_samples, run_audit
from lab.contamination.overlap import OverlapIndex
from lab.corpora.shards import read_corpus, verify_corpus
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.streaming import HASH_BYTES, seeded_key
from lab.corpora import load_documents, load_samples
from lab.executor import ExecutorConfig

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

SHARDS = 3          # train files of the fixture corpus
PER_SHARD = 1200    # real CSN-format documents per train file


def _rename_one_identifier(code: str) -> str:
    """A near-duplicate: one identifier renamed throughout (the rest of the tokens kept)."""
    names = [n for n in re.findall(r"\b[a-z][A-Za-z0-9]{3,}\b", code)
             if n not in {"this", "public", "private", "return", "static", "final", "void"}]
    if not names:
        return code + " // x"
    return re.sub(rf"\b{names[0]}\b", names[0] + "Renamed", code)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Path:
    """A CSN-format corpus in CSN's sharded layout (3 train files, valid, test) of real
    CSN-format documents, with CodeTrans test sides planted verbatim, as near-duplicates and
    inside a `<SEP>` document, beside the real CodeTrans."""
    real = Path(os.environ["LAB_CORPORA"])
    root = tmp_path_factory.mktemp("stream-corpora")
    (root / "codetrans").symlink_to(real / "codetrans")
    docs = [d.text for d in load_documents("csn-java", ["valid"], real)[0].records]
    tests = load_samples("codetrans", "test", real).records
    planted = ([s.input for s in tests[:15]] + [_rename_one_identifier(s.input) for s in tests[15:30]]
               + [f"{s.input} <SEP> {s.output}" for s in tests[30:35]] + [tests[40].output])
    csn = root / "codesearchnet-java" / "java" / "final" / "jsonl"
    chunks = {"train": [docs[i * PER_SHARD:(i + 1) * PER_SHARD] for i in range(SHARDS)],
              "valid": [docs[SHARDS * PER_SHARD:SHARDS * PER_SHARD + 300]],
              "test": [docs[SHARDS * PER_SHARD + 300:SHARDS * PER_SHARD + 600]]}
    for number, text in enumerate(planted):  # spread over the train files
        chunks["train"][number % SHARDS].insert(7 * number % PER_SHARD, text)
    for split, files in chunks.items():
        (csn / split).mkdir(parents=True)
        for number, texts in enumerate(files):
            with gzip.open(csn / split / f"java_{split}_{number}.jsonl.gz", "wt") as handle:
                handle.writelines(json.dumps({"code": t}) + "\n" for t in texts)
    return root


def inject(corpora: Path, out: Path, **options) -> dict:
    settings = dict(benchmark="codetrans", setting="paired", seed=5, out=out,
                    corpora_dir=corpora, fraction=0.5, samples=200)
    settings.update(options)
    return run_inject(InjectConfig(**settings))


def keyed_documents(corpora: Path) -> list[tuple[str, str]]:
    return [(d.id, d.text) for part in load_documents("csn-java", ["train", "valid", "test"],
                                                       corpora) for d in part.records]


def test_format2_is_format1_but_for_the_documented_choices(corpora, tmp_path):
    """Without --limit both formats decontaminate the same documents and inject the same ones;
    they differ only in which documents are removed and in the order, and format 2's choices
    are the documented ones (k smallest 'remove' keys; 'order' keys within and across
    shards)."""
    one = inject(corpora, tmp_path / "one", decontaminate=True)
    two = inject(corpora, tmp_path / "two", decontaminate=True, corpus_format=2, shard_size=1000)
    assert one["corpus_format"] == 1 and two["corpus_format"] == 2
    assert two["decontaminated_ids"] == one["decontaminated_ids"]
    assert len(one["decontaminated_ids"]) > 21  # the planted copies and pairs, some near copies
    for key in ("injected_ids", "held_out_ids", "pre_existing_verbatim", "guards", "inputs"):
        assert two[key] == one[key], key
    counts = {k: v for k, v in one["counts"].items() if k != "injected_char_fraction"}
    assert {k: two["counts"][k] for k in counts} == counts
    assert one["removed_base_ids"] != two["removed_base_ids"]

    clean = [(i, t) for i, t in keyed_documents(corpora) if i not in set(two["decontaminated_ids"])]
    k = two["counts"]["removed_documents"]
    expected_removed = sorted(clean, key=lambda d: (seeded_key(5, "remove", d[0]), d[0]))[:k]
    assert sorted(i for i, _ in expected_removed) == two["removed_base_ids"]

    documents = {r["id"]: r for r in read_corpus(tmp_path / "two")}
    removed = set(two["removed_base_ids"])
    assert {i for i, _ in clean if i not in removed} == {i for i in documents
                                                         if not i.startswith("inject:")}
    injected_one = sorted(r["id"] for r in read_corpus(tmp_path / "one") if r["side"] != "base")
    assert sorted(i for i in documents if i.startswith("inject:")) == injected_one
    buckets = len(two["shards"])
    assert buckets == -(-two["counts"]["final_documents"] // 1000) > 1
    for number, shard in enumerate(two["shards"]):
        keys = [seeded_key(5, "order", r["id"]) for r in read_corpus_shard(tmp_path / "two", shard)]
        assert keys == sorted(keys)
        assert {(key * buckets) >> (8 * HASH_BYTES) for key in keys} == {number}
    verify_corpus(tmp_path / "two")


def read_corpus_shard(folder: Path, shard: dict) -> list[dict]:
    with gzip.open(folder / shard["file"], "rb") as handle:
        return [json.loads(line) for line in handle]


def test_format2_limit_keeps_the_smallest_limit_keys_and_removals_nest(corpora, tmp_path):
    unpaired = inject(corpora, tmp_path / "unpaired", setting="unpaired", limit=2000,
                      corpus_format=2)
    paired = inject(corpora, tmp_path / "paired", limit=2000, corpus_format=2)
    everything = keyed_documents(corpora)
    limited = {i for i, _ in sorted(everything, key=lambda d: (seeded_key(5, "limit", d[0]),
                                                               d[0]))[:2000]}
    base_ids = {r["id"] for r in read_corpus(tmp_path / "paired") if r["side"] == "base"}
    assert base_ids | set(paired["removed_base_ids"]) == limited
    assert paired["counts"]["final_documents"] == 2000 == unpaired["counts"]["final_documents"]
    # paired removes the first k of the order unpaired removes 2k of
    assert set(paired["removed_base_ids"]) < set(unpaired["removed_base_ids"])
    assert 2 * len(paired["removed_base_ids"]) == len(unpaired["removed_base_ids"])


def test_datatrove_tasks_give_the_single_process_corpus(corpora, tmp_path):
    """The same arm from one in-process task and from 2 tasks on datatrove's local executor:
    the same shard bytes, the same manifest but for timing and the executor's record. Every
    step runs: --limit (histogram, boundary, removal), --decontaminate, a dose ladder."""
    options = dict(limit=3000, decontaminate=True, doses=(0, 1, 3), fraction=None,
                   corpus_format=2, shard_size=900)
    single = inject(corpora, tmp_path / "single", **options)
    double = inject(corpora, tmp_path / "double", tasks=2, **options)
    assert double["executor"] == {"executor": "local", "tasks": 2}
    assert (tmp_path / "double").exists() and not list(tmp_path.glob("double.tmp-*"))
    ignored = {"wall_seconds", "environment", "executor"}
    assert {k: v for k, v in single.items() if k not in ignored} == \
        {k: v for k, v in double.items() if k not in ignored}
    for shard in single["shards"]:
        assert (tmp_path / "single" / shard["file"]).read_bytes() == \
            (tmp_path / "double" / shard["file"]).read_bytes()
    assert single["counts"]["decontaminated_removed"] > 0


def test_streaming_audit_equals_an_index_of_the_whole_corpus(corpora):
    """lab audit streams the corpus past an index of the samples; a look-up of each sample in
    an index of the whole corpus (the method before streaming) gives the same rows."""
    tests = load_samples("codetrans", "test", corpora).records
    index = OverlapIndex(keyed_documents(corpora))
    expected = audit_samples(tests, index, "java", "cs")
    for row in expected:
        row.pop("_matched")
    single = run_audit("codetrans", ["test"], "csn-java", corpora)
    double = run_audit("codetrans", ["test"], "csn-java", corpora,
                       executor=ExecutorConfig(tasks=2))
    assert single["rows"] == expected == double["rows"]
    assert single["counts"]["test"]["exact"] >= 15 and single["counts"]["test"]["near_only"] >= 5
    assert single["corpus_documents"] == index.documents == double["corpus_documents"]
    assert single["matched_documents"] == double["matched_documents"]


def test_audit_of_a_format2_arm_streams_its_shards(corpora, tmp_path):
    manifest = inject(corpora, tmp_path / "arm", corpus_format=2, shard_size=1500, samples=100,
                      fraction=None)
    audit = run_audit("codetrans", ["test"], str(tmp_path / "arm"), corpora, near=False,
                      executor=ExecutorConfig(tasks=2))
    assert audit["corpus_documents"] == manifest["counts"]["final_documents"]
    injected = set(manifest["injected_ids"])
    rows = {r["id"]: r for r in audit["rows"]}
    assert all(rows[i]["exact"] for i in injected)


@pytest.mark.parametrize("options, message", [
    (dict(corpus_format=3), "--format 3: unknown corpus format"),
    (dict(tasks=2), "format 1 builds the arm in one process; use --format 2"),
    (dict(corpus_format=2, tasks=0), "--tasks 0: must be a whole number >= 1"),
    (dict(corpus_format=2, executor="ray"), "--executor ray: unknown executor"),
    (dict(corpus_format=2, executor="slurm"), "--executor slurm: give --slurm-partition"),
    (dict(corpus_format=2, limit=10 ** 9), "--limit 1000000000: the base corpus holds only"),
])
def test_impossible_streaming_options(corpora, tmp_path, options, message):
    with pytest.raises(LabError, match=re.escape(message)):
        inject(corpora, tmp_path / "arm", **options)
    assert not (tmp_path / "arm").exists() and not list(tmp_path.glob("arm.tmp-*"))


# --- the token cache, shard by shard ---------------------------------------------------------------

def test_token_cache_is_built_per_shard_and_concatenates_to_the_whole_corpus(corpora, tmp_path):
    """One cache entry per corpus shard, filled by 1 or 2 tasks (datatrove), gives the tokens a
    single pass of the tokenizer over the whole corpus gives, document by document."""
    import numpy as np

    from lab.tokenizer import load_tokenizer, tokenizer_hash, train_tokenizer
    from lab.train.packing import (PackedDataset, TokenizedCorpus, pack_documents,
                                    tokenize_corpus)

    arm = tmp_path / "arm"
    run_inject(InjectConfig(benchmark="codetrans", setting="unpaired", seed=1, fraction=0.02,
                            shard_size=900, corpora_dir=corpora, out=arm))
    shards = verify_corpus(arm)["shards"]
    assert len(shards) >= 4
    run_inject(InjectConfig(benchmark="codetrans", setting="control", seed=1,
                            corpora_dir=corpora, out=tmp_path / "control"))
    train_tokenizer(tmp_path / "control", tmp_path / "tok", ["codetrans"], vocab_size=800,
                    corpora_dir=corpora)
    tok = load_tokenizer(tmp_path / "tok")
    records = list(read_corpus(arm))
    expected = tok([r["text"] for r in records], add_special_tokens=False)["input_ids"]

    built = {tasks: tokenize_corpus(arm, tok, tokenizer_hash(tmp_path / "tok"),
                                    tmp_path / f"cache-{tasks}", tasks=tasks) for tasks in (1, 2)}
    for corpus in built.values():
        assert len(corpus.entries) == len(shards) == len(corpus.parts)
        assert corpus.doc_ids == [r["id"] for r in records]
        assert corpus.injected == [r["sample"] or None for r in records]
        assert corpus.lengths().tolist() == [len(ids) for ids in expected]
        for i in range(0, len(records), 97):
            assert corpus.document(i).tolist() == expected[i]
        assert corpus.document(len(records) - 1).tolist() == expected[-1]
    one, two = built[1], built[2]
    assert np.array_equal(one.tokens, two.tokens) and np.array_equal(one.offsets, two.offsets)
    for a, b in zip(one.entries, two.entries):
        assert a.name == b.name
        assert (a / "tokens.npy").read_bytes() == (b / "tokens.npy").read_bytes()
    # Packed sequences read across shard boundaries as from one flat array.
    flat = TokenizedCorpus(parts=[np.asarray(one.tokens)], offsets=one.offsets,
                           doc_ids=one.doc_ids, injected=one.injected, key="flat")
    packing = pack_documents(one.lengths(), 128, samples=one.injected)
    special = (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    sharded_set, flat_set = PackedDataset(one, packing, *special), PackedDataset(flat, packing, *special)
    for index in range(len(sharded_set)):
        assert np.array_equal(sharded_set.sequence(index), flat_set.sequence(index))
    # The same arm reuses its entries.
    again = tokenize_corpus(arm, tok, tokenizer_hash(tmp_path / "tok"), tmp_path / "cache-1")
    assert again.entries == one.entries
