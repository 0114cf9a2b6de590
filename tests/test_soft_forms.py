"""Soft-contamination forms (lab.contamination.soft, `lab inject --contamination-form`): what
each form changes and keeps, determinism per seed, a real arm whose documents and manifest
record the form and pass verify_corpus, the placebo's own samples in the same form, the
refusals, and the study's stage keys (unchanged for verbatim)."""
from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from lab.codetokens import KEYWORDS, code_tokens
from lab.common import LabError
from lab.contamination import paired_document
from lab.contamination import settings as settings_table
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.soft import (CONCODE_CONTEXT, ContaminationForm, check_form,
                                    formed_documents, parse_form)
from lab.corpora import load_samples
from lab.corpora.shards import read_corpus, verify_corpus

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

N = 60  # test samples each form is checked on
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def codetrans():
    return load_samples("codetrans", "test").records[:N]


@pytest.fixture(scope="module")
def concode():
    return load_samples("concode", "test").records[:N]


def formed(name: str, setting: str, sample, benchmark: str, seed: int = 1):
    return formed_documents(parse_form(name), settings_table.get(setting), sample, seed,
                            benchmark)


def is_literal(tok: str) -> bool:
    return tok[:1] in "\"'@" or tok[:1].isdigit()


def test_renamed_changes_identifiers_consistently_and_keeps_keywords_and_literals(codetrans):
    altered = 0
    for sample in codetrans:
        (docs, reason) = formed("renamed", "unpaired", sample, "codetrans")
        (_, new_in), (_, new_out) = docs
        mapping: dict[str, str] = {}
        for old, new in ((sample.input, new_in), (sample.output, new_out)):
            before, after = code_tokens(old), code_tokens(new)
            assert len(before) == len(after)
            for a, b in zip(before, after):
                if a == b:
                    continue
                assert a not in KEYWORDS and b not in KEYWORDS, (a, b)
                assert not is_literal(a) and re.fullmatch(r"[A-Za-z_$][\w$]*", b), (a, b)
                assert mapping.setdefault(a, b) == b, f"{a} renamed to {mapping[a]} and {b}"
        # One map for both sides: a name renamed somewhere is renamed everywhere it is renamable.
        assert len(set(mapping.values())) == len(mapping)
        if reason is None:
            altered += 1
            assert mapping and (new_in != sample.input or new_out != sample.output)
        else:
            assert (new_in, new_out) == (sample.input, sample.output)
    assert altered >= 0.7 * len(codetrans)


def test_reformatted_keeps_the_code_tokens_and_changes_the_text(codetrans, concode):
    for benchmark, samples in (("codetrans", codetrans), ("concode", concode)):
        for sample in samples:
            docs, reason = formed("reformatted", "unpaired", sample, benchmark)
            assert reason is None, (sample.id, reason)
            (_, new_in), (_, new_out) = docs
            assert code_tokens(new_out) == code_tokens(sample.output)
            assert new_out != sample.output and "\n" in new_out
            assert re.search(r"//|/\*", new_out)  # a comment added (comments are not code tokens)
            if benchmark == "codetrans":
                assert code_tokens(new_in) == code_tokens(sample.input) and new_in != sample.input
            else:
                assert new_in == sample.input  # the NL side has no layout to change


@pytest.mark.parametrize("spec, fraction", [("partial", 0.5), ("partial:0.3", 0.3)])
def test_partial_is_a_contiguous_part_of_the_declared_fraction(codetrans, spec, fraction):
    starts = set()
    for sample in codetrans:
        docs, reason = formed(spec, "paired", sample, "codetrans")
        ((side, text),) = docs
        whole = paired_document(sample.input, sample.output)
        assert reason is None and side == "paired"
        assert text in whole and len(text) == max(1, round(fraction * len(whole)))
        starts.add(whole.index(text) / max(1, len(whole) - len(text)))
    assert len(starts) > len(codetrans) // 2  # seeded starts, not one fixed offset


def test_cross_language_keeps_only_the_other_language(codetrans):
    for sample in codetrans:
        docs, reason = formed("cross-language", "paired", sample, "codetrans")
        assert reason is None
        # Only the C# of the pair: the text output-only injects.
        assert docs == [("output", sample.output)]
        assert docs == settings_table.get("output-only").documents(sample)
        assert sample.input not in docs[0][1]


def test_nl_reworded_changes_description_words_and_leaves_the_code(concode):
    changed = 0
    for sample in concode:
        docs, reason = formed("nl-reworded", "paired", sample, "concode")
        ((_, text),) = docs
        nl, code = text.split(" <SEP> ", 1)
        assert code == sample.output
        head, marker, context = sample.input.partition(CONCODE_CONTEXT)
        new_head, new_marker, new_context = nl.partition(CONCODE_CONTEXT)
        assert (new_marker, new_context) == (marker, context)  # the class context is kept
        assert len(new_head.split()) == len(head.split())  # word for word
        if reason is None:
            changed += 1
            assert new_head != head
            assert sum(a != b for a, b in zip(head.split(), new_head.split())) >= 1
    assert changed >= 0.8 * len(concode)


@pytest.mark.parametrize("spec, benchmark", [("renamed", "codetrans"), ("reformatted", "codetrans"),
                                             ("partial", "codetrans"), ("nl-reworded", "concode")])
def test_each_form_is_deterministic_per_seed(codetrans, concode, spec, benchmark):
    samples = codetrans if benchmark == "codetrans" else concode
    formed_documents.cache_clear()  # computed again, not read back from the cache

    def texts(seed: int) -> list:
        return [formed(spec, "paired", s, benchmark, seed)[0] for s in samples]
    first = texts(1)
    formed_documents.cache_clear()
    assert texts(1) == first
    other = texts(2)
    assert sum(a != b for a, b in zip(first, other)) >= len(samples) // 4


def small_arm(tmp_path: Path, name: str, **overrides):
    options = dict(benchmark="codetrans", setting="paired", seed=5, out=tmp_path / name,
                   base_splits=("valid",), limit=300, samples=30)
    options.update(overrides)
    return run_inject(InjectConfig(**options))


def lines(folder: Path) -> list[dict]:
    return [orjson.loads(line) for shard in sorted((folder / "corpus").glob("*.jsonl.gz"))
            for line in gzip.decompress(shard.read_bytes()).splitlines()]


def test_same_seed_same_bytes_another_seed_other_documents(tmp_path):
    one = small_arm(tmp_path, "one", contamination_form="reformatted")
    again = small_arm(tmp_path, "again", contamination_form="reformatted")
    assert one["corpus_sha256"] == again["corpus_sha256"]
    assert [s["sha256"] for s in one["shards"]] == [s["sha256"] for s in again["shards"]]
    other = small_arm(tmp_path, "other", contamination_form="reformatted", seed=6)
    injected = {seed: {r["sample"]: r["text"] for r in lines(tmp_path / name) if r["sample"]}
                for seed, name in ((5, "one"), (6, "other"))}
    assert injected[5].keys() == injected[6].keys()
    assert sum(injected[5][k] != injected[6][k] for k in injected[5]) >= 10


def test_verbatim_writes_the_arm_as_before(tmp_path):
    default = small_arm(tmp_path, "default")
    verbatim = small_arm(tmp_path, "verbatim", contamination_form="verbatim")
    assert default["corpus_sha256"] == verbatim["corpus_sha256"]
    assert "contamination_form" not in verbatim and "contamination_form" not in verbatim["options"]
    assert all("form" not in record for record in lines(tmp_path / "verbatim"))


def test_a_streamed_arm_gives_every_line_the_form_field(tmp_path):
    """Format 2 writes its base documents in other processes: they carry form "" too."""
    manifest = small_arm(tmp_path, "streamed", contamination_form="cross-language",
                         corpus_format=2, shard_size=100)
    verify_corpus(tmp_path / "streamed")
    records = lines(tmp_path / "streamed")
    assert len(records) == 300 and len(manifest["shards"]) > 1
    assert {r["form"] for r in records if not r["sample"]} == {""}
    injected = [r for r in records if r["sample"]]
    assert len(injected) == 30 and {(r["form"], r["side"]) for r in injected} == {
        ("cross-language", "output")}


def run_lab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_lab_inject_renamed_records_the_form_and_verifies(tmp_path, codetrans):
    out = tmp_path / "renamed"
    result = run_lab(["inject", "--benchmark", "codetrans", "--setting", "paired",
                      "--contamination-form", "renamed", "--samples", 30, "--limit", 300,
                      "--base-splits", "valid", "--seed", 5, "--out", out], tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = verify_corpus(out)  # shard hashes and membership (the documents' sample fields)
    assert manifest["options"]["contamination_form"] == "renamed"
    form = manifest["contamination_form"]
    assert form["name"] == "renamed" and form["seed"] == 5 and form["tolerance"] == 0.1
    assert form["altered_samples"] + len(form["unchanged"]) == 30
    assert form["altered_samples"] >= 20
    unchanged = {u["id"] for u in form["unchanged"]}
    records = list(read_corpus(out))
    injected = [r for r in records if r["sample"]]
    assert len(injected) == 30 and all(r["form"] == "renamed" for r in injected)
    assert all(r["form"] == "" for r in records if not r["sample"])  # one schema in every line
    by_id = {s.id: s for s in codetrans}
    for record in injected:
        sample = by_id[record["sample"]]
        verbatim = paired_document(sample.input, sample.output)
        assert (record["text"] == verbatim) == (sample.id in unchanged)
        assert len(code_tokens(record["text"])) == len(code_tokens(verbatim))


def test_a_placebo_gets_the_same_form_of_its_own_samples(tmp_path):
    manifest = small_arm(tmp_path, "placebo", setting="paired-placebo", placebo_from=("valid",),
                         contamination_form="partial:0.4", samples=40)
    assert manifest["contamination_form"]["name"] == "partial"
    assert manifest["contamination_form"]["fraction"] == 0.4
    verify_corpus(tmp_path / "placebo")
    valid = {s.id: s for s in load_samples("codetrans", "valid").records}
    injected = [r for r in lines(tmp_path / "placebo") if r["sample"]]
    assert {r["sample"] for r in injected} == set(manifest["placebo_ids"])
    for record in injected:
        sample = valid[record["sample"]]
        whole = paired_document(sample.input, sample.output)
        assert record["form"] == "partial" and record["text"] in whole
        assert len(record["text"]) == round(0.4 * len(whole))
    # Its share of characters is measured on what it injects (partial documents).
    share = manifest["placebo"]["length_match"]["share_of_characters"]
    assert abs(share["relative_difference"]) <= share["tolerance"]


@pytest.mark.parametrize("spec, benchmark, setting, message", [
    ("cross-language", "concode", "paired", "concode does not have two code languages"),
    ("nl-reworded", "codetrans", "paired", "codetrans has no NL side"),
    ("nl-reworded", "concode", "output-only", "output-only injects no NL side"),
    ("renamed", "concode", "input-only", "input-only injects no code side"),
    ("cross-language", "codetrans", "unpaired", "keeps one side of a paired document"),
    ("renamed", "codetrans", "control", "the control setting injects nothing"),
])
def test_impossible_combinations_are_refused(spec, benchmark, setting, message):
    with pytest.raises(LabError, match=message):
        check_form(parse_form(spec), benchmark, settings_table.get(setting))


@pytest.mark.parametrize("spec", ["partial:1", "partial:0", "partial:1.5", "partial:x",
                                  "renamed:2", "shuffled"])
def test_bad_form_specs_are_refused(spec):
    with pytest.raises(LabError, match=r"^--contamination-form "):
        InjectConfig(benchmark="codetrans", setting="paired", seed=0, out=Path("x"),
                     contamination_form=spec)
    assert parse_form("partial") == ContaminationForm("partial", 0.5)


@pytest.mark.parametrize("args, fragment", [
    (["--benchmark", "concode", "--contamination-form", "cross-language"],
     "--contamination-form cross-language: concode does not have two code languages"),
    (["--benchmark", "codetrans", "--contamination-form", "partial:1.5"],
     "--contamination-form partial:1.5: the fraction must be in [0.01, 1)"),
])
def test_lab_inject_refuses_bad_input_in_one_line(tmp_path, args, fragment):
    out = tmp_path / "arm"
    result = run_lab(["inject", "--setting", "paired", "--seed", 0, "--out", out, *args], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("lab: error: ")
    assert fragment in result.stderr and not out.exists()


def test_the_recipe_field_keys_only_the_injecting_arms_and_is_checked():
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    recipe = ROOT / "recipes" / "mini" / "rq4-paired.yaml"
    plain = expand(load_recipe(recipe))
    verbatim = expand(load_recipe(recipe, ["injection.contamination_form=verbatim"]))
    assert {s.key for s in verbatim} == {s.key for s in plain}
    assert all("contamination_form" not in s.keyed for s in plain if s.kind == "inject")
    renamed = expand(load_recipe(recipe, ["injection.contamination_form=renamed"]))
    injects = {s.labels["arm"]: s for s in renamed if s.kind == "inject"}
    assert "contamination_form" not in injects["control"].keyed
    assert injects["paired"].keyed["contamination_form"] == "renamed"
    assert injects["paired-placebo"].config.contamination_form == "renamed"
    old = {s.key for s in plain}
    assert injects["control"].key in old and injects["paired"].key not in old
    with pytest.raises(LabError, match=r"injection\.contamination_form: arms\[1\] paired: "
                                       "codetrans has no NL side"):
        load_recipe(recipe, ["injection.contamination_form=nl-reworded"])
    with pytest.raises(LabError, match=r"injection\.contamination_form: .*must be in \[0\.01, 1\)"):
        load_recipe(recipe, ["injection.contamination_form=partial:2"])
