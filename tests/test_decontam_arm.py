"""`lab inject --decontaminate-with METHOD` (recipe `injection.decontaminate_with`): the built
arm decontaminated by a lab.decontam method or the ground-truth `oracle`, a removed test-sample
copy replaced by its placebo stand-in's copy (so the C# the model sees stays) and a flagged base
document by a clean base document from outside the arm (same size), the ground truth kept true
(verify_corpus), the intended injection recorded; a renamed arm survives `exact` in part; the
bad inputs; the stage key."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(benchmark="codetrans", setting="paired", seed=0, base_splits=("valid",), limit=300,
             samples=12, doses=(0, 1))


def needs_corpora() -> None:
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")


def arm(out: Path, **options) -> dict:
    """A paired CodeTrans arm over 300 CSN-format documents (tests/test_decontam.py's): of the
    test split's first 12 samples, 6 injected once, 6 held out."""
    from lab.contamination.inject import InjectConfig, run_inject

    return run_inject(InjectConfig(out=out, **{**SMALL, **options}))


def shard_bytes(folder: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((folder / "corpus").glob("*.jsonl.gz"))]


def test_exact_removes_every_verbatim_copy_keeps_the_size_and_verifies(tmp_path):
    needs_corpora()
    from lab.corpora.shards import read_corpus, verify_corpus

    plain = arm(tmp_path / "plain")
    clean = arm(tmp_path / "exact", decontaminate_with="exact")
    intended = plain["injected_ids"]
    assert len(intended) == 6
    assert clean["intended_injected_ids"] == intended
    assert clean["injected_ids"] == []  # exact recall is 1.0 on verbatim copies at dose 1
    record = clean["decontamination"]
    assert record["method"] == "exact" and clean["options"]["decontaminate_with"] == "exact"
    assert record["removed_injected_ids"] == intended
    assert record["surviving_copies"] == {i: 0 for i in intended}
    assert record["flagged_injected_documents"] == record["replaced_by_placebo"] == 6
    assert record["flagged_documents"] == 6 + record["removed_base_documents"]
    assert record["refilled"] == record["removed_base_documents"]
    assert clean["held_out_ids"] == plain["held_out_ids"]
    assert clean["counts"]["final_documents"] == plain["counts"]["final_documents"] == 300
    assert clean["counts"]["injected_samples"] == clean["counts"]["injected_documents"] == 0
    assert clean["counts"]["held_out_samples"] == 6
    verify_corpus(tmp_path / "exact")  # shards, membership and counts
    documents = list(read_corpus(tmp_path / "exact"))
    assert len(documents) == 300 and not any(d["sample"] for d in documents)
    refilled = set(record["refilled_ids"])
    assert refilled <= {d["id"] for d in documents}
    assert not refilled & {d["id"] for d in read_corpus(tmp_path / "plain")}
    placebo = {r["placebo_document"] for r in record["placebo_replacements"]}
    assert placebo <= {d["id"] for d in documents}
    # Same seed, same bytes; an arm without the option is the arm made before it.
    again = arm(tmp_path / "again", decontaminate_with="exact")
    assert shard_bytes(tmp_path / "again") == shard_bytes(tmp_path / "exact")
    assert again["corpus_sha256"] == clean["corpus_sha256"]
    assert "decontamination" not in plain and "intended_injected_ids" not in plain
    assert "decontaminate_with" not in plain["options"]


def test_a_renamed_arm_survives_exact_in_part(tmp_path):
    needs_corpora()
    from lab.corpora.shards import verify_corpus

    manifest = arm(tmp_path / "renamed", decontaminate_with="exact", contamination_form="renamed")
    record = manifest["decontamination"]
    intended = manifest["intended_injected_ids"]
    survived = manifest["injected_ids"]
    # Measured: renaming hides every one of the six copies from exact (0 flagged).
    assert len(intended) == 6 and len(survived) == 6 - len(record["removed_injected_ids"])
    assert survived and set(survived) | set(record["removed_injected_ids"]) == set(intended)
    assert record["flagged_injected_documents"] == 0 and survived == intended
    assert manifest["counts"]["final_documents"] == 300
    verify_corpus(tmp_path / "renamed")


def test_base_documents_flagged_in_the_control_and_placebo_are_replaced(tmp_path, monkeypatch):
    """The control injects nothing: a method flagging base documents (a stand-in for natural
    overlap: every document whose id ends in 7) removes them and refills as many clean ones."""
    needs_corpora()
    from lab.corpora.shards import read_corpus, verify_corpus
    from lab.decontam import DECONTAMINATORS, Decontaminator

    def flag(texts, reference, options):
        return [hash_of(t) % 10 == 7 for t in texts]

    monkeypatch.setitem(DECONTAMINATORS, "every-tenth", Decontaminator("every-tenth", flag, "test"))
    for setting in ("control", "paired-placebo"):
        out = tmp_path / setting
        manifest = arm(out, setting=setting, decontaminate_with="every-tenth")
        record = manifest["decontamination"]
        assert record["removed_base_documents"] > 0
        assert record["refilled"] == record["flagged_documents"]
        assert record["refill_candidates_flagged"] > 0  # flagged candidates are skipped
        documents = list(read_corpus(out))
        assert len(documents) == 300
        assert not any(flag([d["text"]], None, None)[0] for d in documents)
        assert not set(record["removed_base_document_ids"]) & {d["id"] for d in documents}
        verify_corpus(out)
        if setting == "paired-placebo":
            assert manifest["placebo_ids"] == [i for i in manifest["intended_placebo_ids"]
                                               if i not in record["removed_injected_ids"]]


def hash_of(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def test_an_edited_decontamination_record_is_refused(tmp_path):
    needs_corpora()
    from lab.corpora.shards import verify_corpus

    arm(tmp_path / "exact", decontaminate_with="exact")
    path = tmp_path / "exact" / "manifest.json"
    manifest = json.loads(path.read_text())
    kept = manifest["decontamination"]["removed_injected_ids"].pop()
    path.write_text(json.dumps(manifest))
    with pytest.raises(LabError, match="removed_injected_ids"):
        verify_corpus(tmp_path / "exact")
    manifest["decontamination"]["removed_injected_ids"].append(kept)
    manifest["decontamination"]["surviving_copies"][kept] = 1
    path.write_text(json.dumps(manifest))
    with pytest.raises(LabError, match="surviving_copies"):
        verify_corpus(tmp_path / "exact")


def test_too_few_clean_documents_to_refill_is_refused(tmp_path, monkeypatch):
    needs_corpora()
    from lab.decontam import DECONTAMINATORS, Decontaminator

    monkeypatch.setitem(DECONTAMINATORS, "everything",
                        Decontaminator("everything", lambda t, r, o: [True] * len(t), "test"))
    with pytest.raises(LabError, match=r"^--decontaminate-with everything: \d+ documents to refill"):
        arm(tmp_path / "all", decontaminate_with="everything")
    assert not (tmp_path / "all").exists()


def test_an_unknown_method_is_one_line_exit_2(tmp_path):
    needs_corpora()
    out = tmp_path / "arm"
    result = subprocess.run(
        [sys.executable, "-m", "lab.cli", "inject", "--benchmark", "codetrans", "--setting",
         "paired", "--seed", "0", "--out", str(out), "--decontaminate-with", "nope"],
        cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("lab: error: ")
    assert "--decontaminate-with nope: unknown method (choose from exact," in result.stderr
    assert not out.exists()


def test_oracle_is_refused_as_a_lab_decontam_method():
    from lab.decontam import check_methods

    with pytest.raises(LabError, match=r"^--methods oracle: not a decontaminator"):
        check_methods(["exact", "oracle"])


def target_documents(out: Path) -> list[dict]:
    """The arm's documents holding a CodeTrans pair (its only C#): injected copies and the
    placebo copies standing in for removed ones."""
    from lab.corpora.shards import read_corpus

    return [d for d in read_corpus(out) if d["id"].startswith(("inject:", "placebo:"))]


def test_a_decontaminated_arm_keeps_its_size_and_its_target_language_documents(tmp_path):
    """exact removes the verbatim copies; each is replaced by its placebo stand-in's copy (a
    benchmark pair of a non-test split, not a reference sample), so the arm keeps its size and
    as many C# documents as it was built with, and the record says which replaced which."""
    needs_corpora()
    from lab.corpora.shards import verify_corpus

    plain = arm(tmp_path / "plain", doses=(0, 2))
    clean = arm(tmp_path / "exact", doses=(0, 2), decontaminate_with="exact")
    verify_corpus(tmp_path / "exact")
    assert clean["counts"]["final_documents"] == plain["counts"]["final_documents"] == 300
    before, after = target_documents(tmp_path / "plain"), target_documents(tmp_path / "exact")
    assert len(before) == len(after) == 12 and all(d["sample"] for d in before)
    assert all("<SEP>" in d["text"] for d in after)  # paired: java <SEP> c#
    record = clean["decontamination"]
    references = set(plain["injected_ids"]) | set(plain["held_out_ids"])
    replaced = record["placebo_replacements"]
    assert len(replaced) == 12 and {r["sample"] for r in replaced} == set(plain["injected_ids"])
    assert not {r["placebo"] for r in replaced} & references
    assert all(not r["placebo"].startswith("codetrans:test:") for r in replaced)
    assert {r["placebo_document"] for r in replaced} == {d["id"] for d in after}
    assert all(not d["sample"] for d in after)  # written as base documents: nothing leaked
    # The stand-ins are the placebo arm's draw of this seed: the same pairs, sample for sample.
    placebo = arm(tmp_path / "placebo", setting="paired-placebo", doses=(0, 2))
    matched = dict(zip(placebo["placebo"]["matched_test_ids"], placebo["placebo_ids"]))
    assert all(matched[r["sample"]] == r["placebo"] for r in replaced)


def test_an_oracle_arm_holds_no_reference_sample(tmp_path):
    needs_corpora()
    from lab.corpora.shards import read_corpus, verify_corpus

    for form in ("verbatim", "renamed"):  # renamed hides its copies from exact, not from it
        out = tmp_path / form
        manifest = arm(out, decontaminate_with="oracle", contamination_form=form)
        verify_corpus(out)
        record = manifest["decontamination"]
        assert record["method"] == "oracle" and record["flagged_base_documents"] == 0
        assert manifest["injected_ids"] == [] and len(manifest["intended_injected_ids"]) == 6
        assert record["removed_injected_ids"] == manifest["intended_injected_ids"]
        documents = list(read_corpus(out))
        assert len(documents) == 300 and not any(d["sample"] for d in documents)
        assert len(target_documents(out)) == 6


def test_the_recipe_field_keys_every_arm_only_when_set_and_is_checked():
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    recipe = ROOT / "recipes" / "mini" / "rq4-paired.yaml"
    plain = expand(load_recipe(recipe))
    unset = expand(load_recipe(recipe, ["injection.decontaminate_with=null"]))
    assert [s.key for s in unset] == [s.key for s in plain]
    assert all("decontaminate_with" not in s.keyed for s in plain if s.kind == "inject")
    exact = expand(load_recipe(recipe, ["injection.decontaminate_with=exact"]))
    injects = [s for s in exact if s.kind == "inject"]
    assert {s.labels["arm"] for s in injects} == {"control", "paired", "paired-placebo"}
    assert all(s.keyed["decontaminate_with"] == "exact" for s in injects)
    # placebo copies replace removed ones: a decontaminated arm made before re-runs
    assert all(s.keyed["decontaminate_replace"] == "placebo-copy" for s in injects)
    assert all(s.keyed["placebo_from"] for s in injects if s.labels["arm"] != "control")
    assert not {s.key for s in injects} & {s.key for s in plain}
    # a method whose flags changed since (winnow's revision) re-runs its arms only
    assert all("method_revision" not in s.keyed for s in injects)
    winnow = [s for s in expand(load_recipe(recipe, ["injection.decontaminate_with=winnow"]))
              if s.kind == "inject"]
    assert all(s.keyed["method_revision"] == "short-renamed-whole" for s in winnow)
    with pytest.raises(LabError) as refused:
        load_recipe(recipe, ["injection.decontaminate_with=nope"])
    message = str(refused.value)
    assert "\n" not in message and message.startswith(str(recipe))
    assert "injection.decontaminate_with" in message and "unknown method" in message


def test_a_sample_that_loses_some_copies_keeps_the_rest_and_verifies(tmp_path, monkeypatch):
    """Dose 4: a method that flags every second occurrence of a text (a stand-in for a method
    that tells copies apart) leaves each injected sample 2 of its 4 copies; the manifest says so
    and verify_corpus checks the copies against it."""
    needs_corpora()
    from lab.corpora.shards import verify_corpus
    from lab.decontam import DECONTAMINATORS, Decontaminator

    def flag(texts, reference, options):
        seen: dict[str, int] = {}
        flags = []
        for text in texts:
            seen[text] = seen.get(text, 0) + 1
            flags.append(seen[text] % 2 == 0)
        return flags

    monkeypatch.setitem(DECONTAMINATORS, "every-second", Decontaminator("every-second", flag, "t"))
    out = tmp_path / "dose4"
    manifest = arm(out, doses=(0, 4), decontaminate_with="every-second")
    record = manifest["decontamination"]
    assert record["removed_injected_ids"] == []
    assert manifest["injected_ids"] == manifest["intended_injected_ids"]
    assert record["surviving_copies"] == {i: 2 for i in manifest["injected_ids"]}
    assert manifest["counts"]["injected_documents"] == 2 * len(manifest["injected_ids"])
    assert manifest["counts"]["final_documents"] == 300
    verify_corpus(out)
    path = out / "manifest.json"
    edited = json.loads(path.read_text())
    edited["decontamination"]["surviving_copies"][manifest["injected_ids"][0]] = 3
    path.write_text(json.dumps(edited))
    with pytest.raises(LabError, match="surviving_copies"):
        verify_corpus(out)


def test_a_streamed_arm_is_refused():
    from lab.contamination.inject import InjectConfig

    with pytest.raises(LabError, match=r"^--decontaminate-with exact: only a format 1 arm"):
        InjectConfig(out=Path("unused"), corpus_format=2, decontaminate_with="exact", **SMALL)
