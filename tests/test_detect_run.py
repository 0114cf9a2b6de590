"""`lab detect` on micro models of the real corpora: a model that memorised its injected samples,
a control model that never saw them, and what is refused."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from lab.common import LabError
from lab.detect.run import run_detect
from lab.stats import roc_auc

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

FAST = ("loss", "zlib", "min_k", "min_k_plus_plus", "reference")


@pytest.fixture(scope="module")
def models(micro_world, tmp_path_factory):
    """Micro GPT-2s on the paired arm (each injected sample 4 times over, several epochs: it
    memorises) and on the control corpus, same steps; a micro RoBERTa of the control."""
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.train.pretrain import PretrainConfig, run_pretrain

    root = tmp_path_factory.mktemp("detect")
    run_inject(InjectConfig(setting="paired", fraction=0.1, repeat=4, benchmark="codetrans",
                            seed=3, base_splits=("valid",), limit=700, out=root / "paired"))
    common = dict(tokenizer=micro_world / "tok", preset="micro", max_steps=240, lr=3e-3,
                  batch_size=16, block_size=128, seed=0, report_to="none",
                  cache_dir=root / "cache", save_steps=1000)
    for name, corpus, family in (("arm", root / "paired", "gpt2"),
                                 ("control", micro_world / "control", "gpt2"),
                                 ("roberta", micro_world / "control", "roberta")):
        run_pretrain(PretrainConfig(model=family, corpus=corpus, out=root / name,
                                    **{**common, **({"max_steps": 4} if family == "roberta"
                                                    else {})}))
    return root


def test_a_model_that_memorised_is_found_and_a_control_is_not(models, tmp_path):
    # every member (100) and as many held-out and valid samples as there are eligible ones
    arm = run_detect(models / "arm", tmp_path / "arm", detectors=FAST,
                     reference=models / "control", max_samples=150)
    assert arm["baseline"] == "held_out"
    assert arm["detectors"]["loss"]["auc"] >= 0.9
    # the micro control is a weak reference, but the ratio still finds the members
    assert arm["detectors"]["reference"]["auc"] > 0.7
    control = run_detect(models / "control", tmp_path / "control", detectors=FAST,
                         groups=models / "arm", max_samples=150)
    assert 0.4 <= control["detectors"]["loss"]["auc"] <= 0.6
    assert "reference" in control["skipped"]  # no reference model given
    # the summary is the scores' own AUC, per sample
    rows = [json.loads(line) for line in (tmp_path / "arm" / "scores.jsonl").open()]
    members = [r["loss"] for r in rows if r["role"] == "member"]
    others = [r["loss"] for r in rows if r["role"] == "nonmember"]
    assert len(members) == arm["detectors"]["loss"]["members"] > 0
    assert arm["detectors"]["loss"]["auc"] == pytest.approx(roc_auc(members, others))
    assert set(arm["detector_seconds"]) == set(FAST)
    # the distribution-shift check: never-seen test (the held-out half) against never-seen
    # valid samples, as many, for the same model; neither was trained on
    valid = [r["loss"] for r in rows if r["role"] == "shift"]
    assert len(valid) == arm["shift"]["samples"]["count"] == len(others)
    assert {r["group"] for r in rows if r["role"] == "shift"} == {"valid"}
    shift = arm["shift"]["detectors"]["loss"]
    assert shift["auc"] == pytest.approx(roc_auc(others, valid))
    assert arm["shift"]["samples"]["split"] == "valid"
    assert 0.3 <= control["shift"]["detectors"]["loss"]["auc"] <= 0.7


def test_what_is_refused_gets_one_line(models, tmp_path):
    with pytest.raises(LabError, match="--reference .*roberta model; the detected model is gpt2"):
        run_detect(models / "arm", tmp_path / "a", detectors=FAST, reference=models / "roberta")
    with pytest.raises(LabError, match="injected no test samples"):
        run_detect(models / "control", tmp_path / "b", detectors=FAST)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for args, fragment in ((["--detectors", "loss,bleu"], "--detectors bleu: unknown detector"),
                           (["--k", "0"], "--k 0.0: expected a fraction"),
                           (["--model", str(tmp_path / "none")], "none")):
        command = [sys.executable, "-m", "lab.cli", "detect", "--model", str(models / "arm"),
                   "--out", str(tmp_path / "c"), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in done.stderr


def test_an_outside_causal_lm_is_audited_on_a_benchmark_split(models, tmp_path):
    """`lab detect --model HF_DIR --benchmark B`: a Hugging Face folder without a lab manifest
    (here a lab GPT-2's weights copied out) scores B's test samples against never-seen-assumed
    valid ones, with the likelihood detectors; its membership is unknown and said so."""
    import shutil

    outside = tmp_path / "hf-gpt2"
    shutil.copytree(models / "arm" / "model", outside)
    assert not (outside / "manifest.json").exists()
    result = run_detect(outside, tmp_path / "audit", benchmark="codetrans", max_samples=24,
                        detectors=("loss", "min_k", "extraction"))
    assert result["membership"] == "unknown" and result["baseline"] == "reference"
    assert result["form"] == "unpaired" and "outside model" in result["described"]
    assert list(result["detectors"]) == ["loss", "min_k"] and result["skipped"] == ["extraction"]
    assert "shift" not in result  # the audit is itself test against valid
    rows = [json.loads(line) for line in (tmp_path / "audit" / "scores.jsonl").open()]
    audited = [r["loss"] for r in rows if r["group"] == "audited"]
    valid = [r["loss"] for r in rows if r["group"] == "reference"]
    assert len(audited) == 24 and len(valid) == 24
    assert all(r["id"].split(":")[1] == "valid" for r in rows if r["group"] == "reference")
    assert result["detectors"]["loss"]["auc"] == pytest.approx(roc_auc(audited, valid))


def test_what_an_outside_model_is_refused(models, tmp_path):
    import shutil

    outside = tmp_path / "hf-gpt2"
    shutil.copytree(models / "arm" / "model", outside)
    masked = tmp_path / "hf-roberta"
    shutil.copytree(models / "roberta" / "model", masked)
    for model, options, fragment in (
            (outside, {}, "not a lab model (no manifest.json): name the audited samples with "
                          "--benchmark"),
            (outside, {"benchmark": "codetrans", "split": "dev"}, "--split dev: the validation "
                                                                  "split is the audit's comparison"),
            (outside, {"benchmark": "codetrans", "split": "eval"}, "--split eval: codetrans: "
                                                                   "unknown split 'eval'"),
            (outside, {"benchmark": "codetrans", "groups": models / "arm"}, "--groups"),
            (masked, {"benchmark": "codetrans"}, "a masked LM (roberta)"),
            (models / "arm", {"benchmark": "codetrans"}, "--benchmark codetrans: only for a model "
                                                         "that is not a lab model")):
        with pytest.raises(LabError, match=re.escape(fragment)):
            run_detect(model, tmp_path / "out", **options)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reference, refused", [
    ({"final_weights_sha256": "a"}, "the same weights as --model"),
    ({"corpus": {"membership": "unknown"}}, "its membership is unknown"),
    ({"corpus": {"injected_ids": ["codetrans:test:7", "codetrans:test:9"]}},
     r"it pre-trained on 1 of the scored samples \(codetrans:test:7\)"),
])
def test_a_reference_that_saw_or_may_have_seen_the_samples_is_refused(reference, refused):
    from pathlib import Path

    from lab.detect.run import DetectConfig, _check_reference_unseen

    cfg = DetectConfig(model=Path("m"), reference=Path("r"))
    model = {"kind": "lab-pretrained", "final_weights_sha256": "a"}
    theirs = {"kind": "lab-pretrained", "final_weights_sha256": "b", **reference}
    with pytest.raises(LabError, match=f"--reference r: {refused}"):
        _check_reference_unseen(cfg, model, theirs, {"codetrans:test:7", "codetrans:test:8"})
    # a control model's reference: it never saw them
    _check_reference_unseen(cfg, model, {"kind": "lab-pretrained", "final_weights_sha256": "b",
                                         "corpus": {"injected_ids": []}}, {"codetrans:test:7"})


def _design_examples(title: str) -> list[str]:
    """The python blocks of docs/design.md's Extending section that follow `title`, up to the
    next bold title."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    part = text.split("\n## Extending", 1)[1].split("\n## ", 1)[0]
    part = part.split(f"**{title}**", 1)[1].split("\n**", 1)[0]
    return [block.split("\n", 1)[1] for block in part.split("```")[1::2]
            if block.startswith("python\n")]


def test_the_documented_new_detector_runs_as_written(models, tmp_path, monkeypatch):
    """docs/design.md's example detector: its module and its DETECTORS line as the page shows
    them, run by lab detect on the memorising model; it finds the members as the loss does."""
    import types

    from lab import detect

    module, line = _design_examples("A detector")
    example = types.ModuleType("median_logprob")
    exec(compile(module, "median_logprob.py", "exec"), example.__dict__)
    detector = eval(line, {"Detector": detect.Detector, "BOTH": detect.BOTH,
                           "median_logprob": example})
    monkeypatch.setitem(detect.DETECTORS, detector.name, detector)
    found = run_detect(models / "arm", tmp_path / "arm", detectors=("loss", detector.name),
                       max_samples=150)
    assert found["detectors"][detector.name]["auc"] >= 0.8, found["detectors"]
