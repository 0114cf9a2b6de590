"""lab probe: memorisation probes on micro models (mechanics, both families, bad inputs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lab.common import LabError
from lab.stats import membership_auc as auc_and_p
from lab.detect.context import DetectContext
from lab.detect.probe import (_causal_name_hits, _encode, _name_positions, load_probed_model,
                            min_k_score, name_spans, run_probe)
from lab.train.pretrain import PretrainConfig, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


@pytest.fixture(scope="module")
def models(micro_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    for model, arm in (("gpt2", "paired"), ("roberta", "paired"), ("gpt2", "control")):
        run_pretrain(PretrainConfig(
            model=model, corpus=micro_world / arm, tokenizer=micro_world / "tok",
            out=root / f"{model}-{arm}", preset="micro", max_steps=12, lr=3e-3, batch_size=8,
            block_size=128, seed=0, save_steps=100, cache_dir=root / "cache"))
    return root


def test_small_pieces():
    assert min_k_score([-1.0, -5.0, -2.0, -9.0, -0.5], 0.2) == -9.0  # ceil(0.2 * 5) = 1 token
    assert min_k_score([-1.0, -5.0, -2.0, -9.0], 0.5) == -7.0
    auc, p = auc_and_p([1.0, 2.0], [3.0, 4.0], higher_is_member=False)  # lower loss = seen
    assert auc == 1.0 and p < 0.2
    assert auc_and_p([1.0, 2.0], [3.0, 4.0], higher_is_member=True)[0] == 0.0
    assert auc_and_p([2.0, 2.0], [2.0, 2.0], True) == (0.5, 1.0)
    text = 'int count = name.size("a b"); // note'
    spans = [text[a:b] for a, b in name_spans(text, 10)]
    assert spans == ["count", "name", "size", '"a b"']  # no keyword, number or comment
    assert [text[a:b] for a, b in name_spans(text, 2)] == ["count", "name"]


def test_greedy_infill_equals_generation_from_the_prefix(models):
    """The one-pass infill (every token of a name is the top prediction given the true prefix)
    must agree with actually generating the name greedily from its prefix."""
    import torch

    model, tokenizer, _manifest, _family = load_probed_model(models / "gpt2-paired")
    text = "public int getCount() { return count; } <SEP> public int GetCount() { return count; }"
    ids, offsets = _encode(tokenizer, text, 128)
    names = _name_positions(offsets, name_spans(text, 32))
    ctx = DetectContext(model=model, tokenizer=tokenizer, family="gpt2", form="paired",
                        max_tokens=128, batch_size=4)
    assert ctx.encode(text) == ids
    [stats] = ctx.text_stats([text])
    hits = _causal_name_hits(stats, names)
    assert len(names) > 3 and len(stats.logprob) == len(stats.greedy) == len(ids) - 1
    brute = 0
    for positions in names:
        start, length = positions[0], len(positions)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids[:start]]), max_new_tokens=length, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        brute += out[0, start:].tolist() == ids[start:start + length]
    assert hits == brute


@pytest.mark.parametrize("name", ["gpt2-paired", "roberta-paired"])
def test_probe_each_family(models, tmp_path, name):
    result = run_probe(models / name, tmp_path / "p", max_samples=30, max_names=8)
    probes = result["probes"]
    expected = {"loss", "min_k", "infill"} | ({"extraction_em", "extraction_bleu"}
                                              if name.startswith("gpt2") else set())
    assert set(probes) == expected and result["form"] == "paired"
    for summary in probes.values():
        assert 0.0 <= summary["auc"] <= 1.0 and 0.0 <= summary["p"] <= 1.0
        assert summary["samples"]["injected"] + summary["samples"]["held_out"] == 30
    rows = [json.loads(line) for line in (tmp_path / "p" / "probes.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and all(r["loss"] > 0 and r["min_k"] < 0 for r in rows)
    assert all(r["names"] <= 8 for r in rows)
    # The loss is the mean negative log-likelihood, so the perplexity is its exponential.
    assert all(abs(r["perplexity"] - 2.718281828 ** r["loss"]) < 1e-6 * r["perplexity"] for r in rows)
    means = {g: sum(r["loss"] for r in rows if r["group"] == g) / sum(r["group"] == g for r in rows)
             for g in ("injected", "held_out")}
    assert probes["loss"]["gap"] == pytest.approx(means["injected"] - means["held_out"])
    # A split-half arm is judged against its held-out half: no reference samples.
    assert {r["group"] for r in rows} == {"injected", "held_out"}
    assert result["baseline"] == "held_out" and result["reference"] is None
    assert all(s["baseline"] == "held_out" and s["reference"] is None for s in probes.values())


@pytest.mark.parametrize("setting, form, texts", [
    ("input-only", "input", ["int a;"]), ("output-only", "output", ["int b;"]),
    ("unpaired", "unpaired", ["int a;", "int b;"]), ("paired", "paired", ["int a; <SEP> int b;"]),
])
def test_each_setting_is_probed_in_the_form_it_was_injected(setting, form, texts):
    from lab.corpora import Sample
    from lab.detect.probe import SETTING_FORMS

    assert SETTING_FORMS[setting] == form
    sample = Sample(id="x:test:0", split="test", index=0, input="int a;", output="int b;")
    ctx = DetectContext(model=None, tokenizer=None, family="gpt2", form=form)
    assert ctx.documents(sample) == texts


def test_control_model_needs_and_takes_the_groups_of_an_arm(models, micro_world, tmp_path):
    with pytest.raises(LabError, match="injected no test samples"):
        run_probe(models / "gpt2-control", tmp_path / "a")
    result = run_probe(models / "gpt2-control", tmp_path / "b", groups=micro_world / "paired",
                       max_samples=20, max_names=4)
    assert result["groups"] == str(micro_world / "paired") and result["form"] == "paired"
    # The form can be chosen: the input side alone.
    assert run_probe(models / "gpt2-control", tmp_path / "c", groups=micro_world / "paired",
                     form="input", max_samples=10)["form"] == "input"
    # Groups from an output-only arm: probed on the output side, as it was injected.
    from lab.contamination.inject import InjectConfig, run_inject

    run_inject(InjectConfig(benchmark="codetrans", setting="output-only", seed=3, fraction=0.1,
                            base_splits=("valid",), limit=700, out=tmp_path / "output-only"))
    result = run_probe(models / "gpt2-control", tmp_path / "d", groups=tmp_path / "output-only",
                       max_samples=10, max_names=4)
    assert result["form"] == "output" and result["probes"]["loss"]["samples"]["injected"] > 0


@pytest.mark.parametrize("args, fragment", [
    (["--form", "sideways"], "--form sideways"),
    (["--min-k", "0"], "--min-k 0.0"),
    (["--max-samples", "0"], "--max-samples 0"),
    (["--groups", "MISSING"], "no such directory"),
])
def test_bad_inputs(models, tmp_path, args, fragment):
    args = [str(tmp_path / "missing") if a == "MISSING" else a for a in args]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-m", "lab.cli", "probe", "--model",
                             str(models / "gpt2-paired"), "--out", str(tmp_path / "o"), *args],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr, result.stderr
    assert not (tmp_path / "o").exists()


def test_not_a_model_and_existing_output(models, tmp_path, micro_world):
    with pytest.raises(LabError, match="no manifest.json"):
        run_probe(tmp_path, tmp_path / "x")
    (tmp_path / "out").mkdir()
    with pytest.raises(LabError, match="output directory exists"):
        run_probe(models / "gpt2-paired", tmp_path / "out")


def test_a_placebo_corpus_has_no_test_samples_to_probe(tiny_corpora, tmp_path):
    """A placebo injected train/valid samples only: its models are probed on the samples its
    base arm injected (lab study passes that arm's corpus as --groups), in that arm's form."""
    from lab.contamination import settings
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.detect.probe import SETTING_FORMS, probe_groups

    common = dict(benchmark="codetrans", seed=2, fraction=0.5, corpora_dir=tiny_corpora)
    run_inject(InjectConfig(setting="unpaired-placebo", out=tmp_path / "placebo", **common))
    run_inject(InjectConfig(setting="unpaired", out=tmp_path / "arm", **common))
    with pytest.raises(LabError, match=r"injected no test samples.*for a placebo model, pass "
                                       r"--groups its base arm's \('unpaired'\) corpus"):
        probe_groups({}, tmp_path / "placebo")
    chosen = probe_groups({}, tmp_path / "arm")
    assert chosen["setting"] == "unpaired" and len(chosen["injected"]) == 15
    assert "unpaired-placebo" not in SETTING_FORMS
    assert SETTING_FORMS["unpaired"] == settings.get("unpaired-placebo").form == "unpaired"


# --- arms without a held-out half: never-seen valid samples as the baseline --------------------

@pytest.fixture(scope="module")
def full_arm(micro_world, tmp_path_factory):
    """A paired arm that injected every one of the first 40 CodeTrans test samples (no held-out
    half) and a micro GPT-2 pre-trained on it."""
    from lab.contamination.inject import InjectConfig, run_inject

    root = tmp_path_factory.mktemp("full-arm")
    run_inject(InjectConfig(benchmark="codetrans", setting="paired", seed=3, samples=40,
                            base_splits=("valid",), limit=700, out=root / "corpus"))
    run_pretrain(PretrainConfig(
        model="gpt2", corpus=root / "corpus", tokenizer=micro_world / "tok", out=root / "gpt2",
        preset="micro", max_steps=12, lr=3e-3, batch_size=8, block_size=128, seed=0,
        save_steps=100, cache_dir=root / "cache"))
    return root


def _rows(folder):
    return [json.loads(line) for line in (folder / "probes.jsonl").read_text().splitlines()]


def test_fully_injected_arm_is_judged_against_never_seen_valid_samples(full_arm, tmp_path):
    from lab.codetokens import normalized_hash, whitespace_hash
    from lab.contamination.audit import run_audit
    from lab.corpora import load_samples

    result = run_probe(full_arm / "gpt2", tmp_path / "p", max_samples=25, max_names=8)
    rows = _rows(tmp_path / "p")
    injected = [r for r in rows if r["group"] == "injected"]
    reference = [r for r in rows if r["group"] == "reference"]
    assert len(injected) == 25 and len(reference) == 25 and len(rows) == result["samples"] == 50
    # Every probe column, extraction included, for the reference samples too.
    assert all(set(r) == set(injected[0]) for r in rows)
    assert all(r["loss"] > 0 and r["extraction"] is not None for r in reference)

    tests = load_samples("codetrans", "test").records
    valid = {s.id: s for s in load_samples("codetrans", "valid").records}
    assert all(r["id"] in valid for r in reference)
    assert {r["id"] for r in reference}.isdisjoint(s.id for s in tests)
    # No reference sample equals a test sample on either side (after whitespace or comment
    # normalisation), nor does `lab audit` find it near-duplicated in the test split.
    for key in (whitespace_hash, normalized_hash):
        test_sides = {key(text) for s in tests for text in (s.input, s.output)}
        assert not any(key(text) in test_sides for r in reference
                       for text in (valid[r["id"]].input, valid[r["id"]].output))
    audit = run_audit("codetrans", ["valid"], against="codetrans:test")
    leaked = {row["id"] for row in audit["rows"] if row["leaked"]}
    assert leaked and leaked.isdisjoint(r["id"] for r in reference)

    record = result["reference"]
    assert result["baseline"] == "reference" and record["split"] == "valid"
    assert record["seed"] == "reference" and record["requested"] == record["count"] == 25
    found = record["eligibility"]
    assert found["candidates"] == len(valid) and found["overlapping_test"] == len(leaked)
    assert found["eligible"] == (found["candidates"] - found["overlapping_test"]
                                 - found["duplicates_dropped"]) > 25
    # The AUC, p and gap are injected against reference.
    for probe, summary in result["probes"].items():
        higher = summary["higher_means_seen"]
        values = {g: [r[probe] for r in rows if r["group"] == g and r[probe] is not None]
                  for g in ("injected", "reference")}
        assert summary["baseline"] == "reference" and summary["held_out"] is None
        assert summary["samples"] == {"injected": len(values["injected"]), "held_out": 0,
                                      "reference": len(values["reference"])}
        assert (summary["auc"], summary["p"]) == auc_and_p(values["injected"],
                                                           values["reference"], higher)
        means = {g: sum(v) / len(v) for g, v in values.items()}
        assert summary["gap"] == pytest.approx(means["injected"] - means["reference"])


def test_reference_samples_are_deterministic_and_shared_by_the_control(models, full_arm, tmp_path):
    """Same inputs, same bytes; a control model probed with the arm's groups gets the same
    reference samples (its injected-vs-reference AUC measures the test/valid shift alone)."""
    for name in ("a", "b"):
        run_probe(full_arm / "gpt2", tmp_path / name, max_samples=12, max_names=4)
    first = (tmp_path / "a" / "probes.jsonl").read_bytes()
    assert first == (tmp_path / "b" / "probes.jsonl").read_bytes()
    ids = {g: [r["id"] for r in _rows(tmp_path / "a") if r["group"] == g]
           for g in ("injected", "reference")}
    assert len(ids["reference"]) == 12
    control = run_probe(models / "gpt2-control", tmp_path / "c", groups=full_arm / "corpus",
                        max_samples=12, max_names=4)
    assert control["baseline"] == "reference" and control["probes"]["loss"]["auc"] is not None
    assert {g: [r["id"] for r in _rows(tmp_path / "c") if r["group"] == g]
            for g in ("injected", "reference")} == ids


def test_without_a_validation_split_the_probe_runs_with_no_baseline(models, full_arm, tmp_path,
                                                                    tiny_corpora, monkeypatch):
    for split_file in (tiny_corpora / "codetrans").glob("valid.*"):
        split_file.unlink()
    monkeypatch.delenv("LAB_CORPORA")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_probe(models / "gpt2-control", tmp_path / "p", groups=full_arm / "corpus",
                       max_names=4, corpora_dir=tiny_corpora)
    assert result["baseline"] is None and result["reference"]["split"] == "valid"
    assert "codetrans split 'valid' not found" in result["reference"]["missing"]
    loss = result["probes"]["loss"]
    assert loss["samples"]["injected"] == 30 and loss["auc"] is None and loss["gap"] is None
    assert {r["group"] for r in _rows(tmp_path / "p")} == {"injected"}


def test_reference_samples_leave_out_what_the_model_trained_on(tiny_corpora, tmp_path):
    """A placebo model trained on valid samples: none of them (nor a sample sharing a side
    with one verbatim) is a reference sample. A fine-tuned model that trained on the validation
    split has none. A split-level rule: the placebo pool's."""
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.corpora import load_samples
    from lab.detect.probe import reference_samples

    placebo = run_inject(InjectConfig(benchmark="codetrans", setting="paired-placebo", seed=2,
                                      fraction=0.5, corpora_dir=tiny_corpora,
                                      out=tmp_path / "placebo"))
    trained_valid = {i for i in placebo["placebo_ids"] if ":valid:" in i}
    assert trained_valid
    chosen = {"benchmark": "codetrans", "split": "test"}
    tests = load_samples("codetrans", "test", tiny_corpora).records
    corpus = {"setting": "paired-placebo", "path": str(tmp_path / "placebo"),
              "sha256": placebo["corpus_sha256"]}
    own, own_record = reference_samples(chosen, tests, 100, True, {"kind": "lab-pretrained",
                                                                 "corpus": corpus}, tiny_corpora)
    control, control_record = reference_samples(chosen, tests, 100, True,
                                                {"kind": "lab-pretrained"}, tiny_corpora)
    assert own_record["fewer_eligible"] and own_record["count"] == len(own) > 0
    assert own_record["eligibility"]["placebo_trained"] == len(trained_valid)
    assert {s.id for s in own} == {s.id for s in control} - trained_valid
    assert len(control) == control_record["eligibility"]["eligible"] <= 20
    # A placebo corpus other than the one recorded: its samples are unknown, so no reference.
    wrong = {"kind": "lab-pretrained", "corpus": {**corpus, "sha256": "0" * 64}}
    assert reference_samples(chosen, tests, 5, True, wrong, tiny_corpora)[0] == []
    assert "sha256 differs" in reference_samples(chosen, tests, 5, True, wrong,
                                                 tiny_corpora)[1]["missing"]
    tuned = {"kind": "lab-finetuned", "data": {"train_split": "dev"}}
    assert reference_samples({"benchmark": "concode", "split": "test"}, [], 5, True, tuned,
                             tiny_corpora) == ([], {"split": "dev", "missing":
                                                    "the model was fine-tuned on the dev split"})
