"""The corpus reader's check of an embedded arm's placements (lab.corpora.placements): a clean
embedded arm verifies (also after `--decontaminate-with oracle`, whose stand-ins sit in the
removed copies' hosts, and `ngram13`); `lab corpora verify` refuses, in one line naming the
field and with exit code 2, a shifted offset, a host text changed at its block, a host document
removed from the shards, a host that is still a base document, two blocks in one host, and a
placement too many. Each damage rewrites the shards' hashes and counts, so the check reached is
the placements', not the shard hashes'."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest

from lab.common import LabError
from lab.corpora.shards import corpus_line, shards_digest, verify_corpus, write_shard

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

Damage = Callable[[dict[str, Any], list[dict[str, Any]]], None]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> Path:
    """A tiny embedded CONCODE arm (tests/test_embedded_form.py's): 20 injected documents, each
    inside its own host, in 200 base documents."""
    from lab.contamination.inject import InjectConfig, run_inject

    out = tmp_path_factory.mktemp("placements") / "embedded"
    run_inject(InjectConfig(benchmark="concode", setting="unpaired", seed=4, out=out,
                            base_splits=("valid",), limit=200, samples=20, fraction=0.5,
                            repeat=1, contamination_form="embedded"))
    return out


def damaged(source: Path, target: Path, damage: Damage) -> Path:
    """A copy of the arm `source` whose manifest and documents `damage` edits in place, its
    shards rewritten with their sha256, counts and corpus_sha256 made to agree."""
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    records = [orjson.loads(line) for shard in manifest["shards"]
               for line in gzip.decompress((target / shard["file"]).read_bytes()).splitlines()]
    damage(manifest, records)
    for shard in manifest["shards"]:
        (target / shard["file"]).unlink()
    shard = manifest["shards"][0]
    shard["documents"] = len(records)
    shard["sha256"] = write_shard(target / shard["file"],
                                  b"".join(corpus_line(r) for r in records))
    manifest["shards"] = [shard]
    manifest["corpus_sha256"] = shards_digest(manifest["shards"])
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


def lab_verify(folder: Path, capsys) -> tuple[int, str]:
    from lab.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["corpora", "verify", str(folder)])
    return int(exited.value.code), capsys.readouterr().err


def placed(manifest: dict[str, Any], records: list[dict[str, Any]], i: int = 0
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The i-th placement and the document holding its block."""
    where = manifest["embedding"]["documents"][i]
    return where, next(r for r in records if r["id"] == where["id"])


def shift(manifest, records):
    where, _ = placed(manifest, records)
    where["start"] += 1
    where["end"] += 1


def change_text(manifest, records):
    where, record = placed(manifest, records)
    at = where["start"] + 1
    other = "y" if record["text"][at] == "x" else "x"
    record["text"] = record["text"][:at] + other + record["text"][at + 1:]


def remove_host(manifest, records):
    """The document holding a block (the host as written) gone from the shards."""
    _where, record = placed(manifest, records)
    records.remove(record)


def host_kept(manifest, records):
    where, _ = placed(manifest, records)
    records.append({"id": where["host"], "text": "class Kept {}"})


def same_host(manifest, records):
    first, _ = placed(manifest, records, 0)
    second, _ = placed(manifest, records, 1)
    second["host"] = first["host"]


def one_more(manifest, records):
    """A second block listed in the first placement's document, over its block."""
    documents = manifest["embedding"]["documents"]
    documents.append(dict(documents[0]))


@pytest.mark.parametrize("damage, field, says", [
    (shift, "embedding.documents[0].start", "offsets shifted"),
    (change_text, "embedding.documents[0].sha256", "was changed"),
    (remove_host, "embedding.documents[0].id", "0 injected documents of that id"),
    (host_kept, "embedding.documents[0].host", "still hold"),
    (same_host, "embedding.documents[1].host", "the host of embedding.documents[0] too"),
    (one_more, "embedding.documents[20].start", "overlaps embedding.documents[0]"),
])
def test_a_damaged_placement_is_refused_naming_the_field(embedded, tmp_path, capsys, damage,
                                                         field, says):
    folder = damaged(embedded, tmp_path / damage.__name__, damage)
    code, err = lab_verify(folder, capsys)
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"lab: error: {folder / 'manifest.json'}: field '{field}'"), err
    assert says in err, err


def test_an_untouched_copy_verifies_and_every_placement_was_checked(embedded, tmp_path):
    """The rewrite alone changes nothing the check sees; the record's sha256 is the block's."""
    manifest = verify_corpus(damaged(embedded, tmp_path / "copy", lambda m, r: None))
    records = {r["id"]: r["text"] for shard in manifest["shards"] for r in
               map(orjson.loads, gzip.decompress((tmp_path / "copy" / shard["file"])
                                                  .read_bytes()).splitlines())}
    documents = manifest["embedding"]["documents"]
    assert len(documents) == manifest["counts"]["injected_documents"] == 20
    for where in documents:
        block = records[where["id"]][where["start"]:where["end"]]
        assert hashlib.sha256(block.encode()).hexdigest() == where["sha256"]


@pytest.mark.parametrize("method", ["oracle", "ngram13"])
def test_a_decontaminated_embedded_arm_verifies(tmp_path, method):
    """CodeTrans input-only (its Java side has hosts) with 6 samples injected once: the oracle
    replaces every copy by its stand-in in the same host (0 placements left, 6 stand-ins),
    ngram13 leaves the copies it misses."""
    from lab.contamination.inject import InjectConfig, run_inject

    out = tmp_path / method
    manifest = run_inject(InjectConfig(
        benchmark="codetrans", setting="input-only", seed=0, out=out, base_splits=("valid",),
        limit=300, samples=12, doses=(0, 1), contamination_form="embedded",
        decontaminate_with=method))
    verify_corpus(out)
    record = manifest["decontamination"]
    stand_ins = [r for r in record["placebo_replacements"] if "host" in r]
    assert len(stand_ins) == record["replaced_by_placebo"]
    assert len(manifest["embedding"]["documents"]) == manifest["counts"]["injected_documents"]
    assert len(manifest["embedding"]["documents"]) + len(stand_ins) == 6
    if method == "oracle":
        assert len(stand_ins) == 6 and all(len(r["sha256"]) == 64 for r in stand_ins)
        def shift_stand_in(manifest, _records):
            row = manifest["decontamination"]["placebo_replacements"][0]
            row.update(start=row["start"] - 1, end=row["end"] - 1)

        broken = damaged(out, tmp_path / "broken", shift_stand_in)
        with pytest.raises(LabError, match=r"decontamination\.placebo_replacements\[0\]\.start"):
            verify_corpus(broken)


def test_a_host_never_comes_back_as_a_refill(tmp_path, monkeypatch):
    """A method that flags one base document of the arm and every candidate outside it but the
    hosts and the last one in the refill order (Y): the refill is Y, not a host, which would
    then be in the arm twice (around its block and as itself) and be refused."""
    import random

    from lab.contamination.inject import InjectConfig, run_inject
    from lab.corpora import load_documents
    from lab.corpora.shards import read_corpus
    from lab.decontam import DECONTAMINATORS, Decontaminator

    options = dict(benchmark="codetrans", setting="input-only", seed=0, base_splits=("valid",),
                   limit=300, samples=12, doses=(0, 1), contamination_form="embedded")
    plain = run_inject(InjectConfig(out=tmp_path / "plain", **options))
    hosts = {e["host"] for e in plain["embedding"]["documents"]}
    arm = list(read_corpus(tmp_path / "plain"))
    everything = [d for part in load_documents("csn-java", ("valid",)) for d in part.records]
    rank = list(range(len(everything)))
    random.Random("0/refill").shuffle(rank)  # the refill order the manifest's refill_rule states
    in_arm = {d["id"] for d in arm}
    last = [everything[j] for j in rank if everything[j].id not in in_arm | hosts][-1]
    host_texts = {d.text for d in everything if d.id in hosts}
    arm_texts = {d["text"] for d in arm}
    flagged = next(d["text"] for d in arm if not d["sample"])

    def flag(texts, reference, options):
        return [t == flagged or (t not in host_texts | arm_texts and t != last.text)
                for t in texts]

    monkeypatch.setitem(DECONTAMINATORS, "all-but-hosts",
                        Decontaminator("all-but-hosts", flag, "t"))
    manifest = run_inject(InjectConfig(out=tmp_path / "clean", decontaminate_with="all-but-hosts",
                                       **options))
    record = manifest["decontamination"]
    assert record["flagged_documents"] == 1 and record["refilled_ids"] == [last.id]
    verify_corpus(tmp_path / "clean")
