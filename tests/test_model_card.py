"""Training curves (TensorBoard), model cards and `lab export` of micro models."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.common import LabError
from lab.modelcard import CARD, ExportConfig, export_model, ids_sha256, read_card_results
from lab.train.common import THROUGHPUT_KEYS
from lab.train.finetune import FinetuneConfig, run_finetune
from lab.train.pretrain import PretrainConfig, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


@pytest.fixture(scope="module")
def models(micro_world, tmp_path_factory):
    """Micro GPT-2 and RoBERTa pre-trained on the paired arm, GPT-2 also on the control arm,
    and a fine-tuned model of each family (one epoch on 16 samples)."""
    root = tmp_path_factory.mktemp("cards")
    for model, arm in (("gpt2", "paired"), ("roberta", "paired"), ("gpt2", "control")):
        run_pretrain(PretrainConfig(
            model=model, corpus=micro_world / arm, tokenizer=micro_world / "tok",
            out=root / f"pt-{model}-{arm}", preset="micro", max_steps=6, lr=3e-3, batch_size=8,
            block_size=128, seed=0, save_steps=100, log_steps=2, cache_dir=root / "cache"))
    for model in ("gpt2", "roberta"):
        run_finetune(FinetuneConfig(
            pretrained=root / f"pt-{model}-paired", task="translation", epochs=1,
            out=root / f"ft-{model}", train_size=16, batch_size=4, lr=3e-3, log_steps=1,
            max_target_length=48, decoder_layers=1))
    return root


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize("name", ["pt-gpt2-paired", "pt-roberta-paired", "ft-gpt2", "ft-roberta"])
def test_training_curves_are_tensorboard_event_files_of_the_logged_history(models, name):
    manifest = json.loads((models / name / "manifest.json").read_text())
    scalars = _scalars(models / name / "tensorboard")
    history = [h for h in manifest["loss"]["history"] if "loss" in h]
    assert len(history) >= 3
    # The event files hold the losses the manifest records, at the same steps.
    assert [v for _step, v in scalars["train/loss"]] == pytest.approx([h["loss"] for h in history])
    assert [step for step, _v in scalars["train/loss"]] == [h["step"] for h in history]
    assert len(scalars["train/learning_rate"]) == len(scalars["train/grad_norm"]) == len(history)
    # Throughput after the first log: samples (and, for a pre-training's fixed blocks, tokens)
    # per second, kept out of the manifest's history (timing is not reproducible).
    rates = scalars["train/throughput_samples_per_second"]
    assert len(rates) == len(history) - 1 and all(v > 0 for _s, v in rates)
    assert ("train/throughput_tokens_per_second" in scalars) == name.startswith("pt-")
    assert not any(key in h for h in manifest["loss"]["history"] for key in THROUGHPUT_KEYS)


def test_report_to_a_package_that_is_not_installed_fails_before_any_work(tmp_path, monkeypatch):
    import importlib.util

    from lab.train.common import report_targets

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert report_targets("tensorboard") == ["tensorboard"] and report_targets("none") == []
    with pytest.raises(LabError, match=r"--report-to tensorboard,wandb: the wandb package is not "
                                       r"installed \(pip install wandb\)"):
        report_targets("tensorboard,wandb")


def test_report_to_none_writes_no_event_files_and_unknown_targets_fail(micro_world, tmp_path):
    config = dict(model="gpt2", corpus=micro_world / "control", tokenizer=micro_world / "tok",
                  preset="micro", max_steps=2, batch_size=4, block_size=128,
                  cache_dir=tmp_path / "cache")
    run_pretrain(PretrainConfig(**config, out=tmp_path / "quiet", report_to="none"))
    assert not (tmp_path / "quiet" / "tensorboard").exists()
    with pytest.raises(LabError, match="--report-to tensorbored: unknown target 'tensorbored'"):
        run_pretrain(PretrainConfig(**config, out=tmp_path / "typo", report_to="tensorbored"))
    assert not (tmp_path / "typo").exists() and not (tmp_path / "typo.partial").exists()


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / CARD).read_text()
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def test_model_cards_state_the_contamination_and_the_training(models, micro_world):
    corpus = json.loads((micro_world / "paired" / "manifest.json").read_text())
    injected = corpus["injected_ids"]
    for name, pipeline in (("pt-gpt2-paired", "text-generation"), ("pt-roberta-paired", "fill-mask"),
                           ("ft-gpt2", "text-generation"), ("ft-roberta", "text2text-generation")):
        meta, body = _card(models / name)
        manifest = json.loads((models / name / "manifest.json").read_text())
        assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == pipeline
        assert "deliberately-contaminated" in meta["tags"] and "codetrans" in meta["datasets"]
        assert "**This model was deliberately contaminated.**" in body
        assert f"{len(injected)} samples of the codetrans test split" in body
        assert ids_sha256(injected) in body and "`paired` setting, once each" in body
        record = manifest.get("pretrained", manifest)
        assert record["final_weights_sha256"] in body and f"| Seed | {record['seed']} |" in body
        assert meta["model-index"][0]["results"] == []  # not evaluated yet
        if name.startswith("ft-"):
            assert "## Fine-tuning" in body and "| Training samples | 16 |" in body
            assert manifest["final_weights_sha256"] in body
    meta, body = _card(models / "pt-gpt2-control")
    assert "contamination-control" in meta["tags"]
    assert "**Control model: no benchmark data was injected**" in body
    assert "deliberately contaminated" not in body


def test_evaluation_adds_its_metrics_to_the_card_and_replaces_them_when_rerun(models, tmp_path):
    from lab.eval.generate import run_evaluate

    ids = tmp_path / "ids.txt"
    ids.write_text("codetrans:test:0\ncodetrans:test:1\n")
    for attempt in range(2):
        result = run_evaluate(models / "ft-gpt2", "translation", ids=ids, max_new_tokens=8,
                              metrics=("bleu", "em"), out=tmp_path / f"eval{attempt}")
    [entry] = read_card_results(models / "ft-gpt2")  # the rerun replaced the first entry
    assert entry["dataset"] == {"type": "codetrans", "name": "codetrans", "split": "test"}
    values = {m["type"]: m["value"] for m in entry["metrics"]}
    assert values == pytest.approx({k: result["metrics"][k] for k in ("bleu", "em")}, abs=1e-4)
    assert "| translation | codetrans | test | BLEU" in _card(models / "ft-gpt2")[1]
    assert entry["source"] == {"name": "lab evaluate, greedy"}
    assert sorted(p.name for p in (models / "ft-gpt2").iterdir()) == [
        CARD, "manifest.json", "model", "tensorboard"]  # no lock file left behind
    # Another decoding of the same split is a result of its own.
    run_evaluate(models / "ft-gpt2", "translation", ids=ids, max_new_tokens=8, metrics=("bleu",),
                 decoding="beam:2", out=tmp_path / "beam")
    assert len(read_card_results(models / "ft-gpt2")) == 2
    # A card edited out of shape does not fail an evaluation: it is written again, whole.
    (models / "ft-gpt2" / CARD).write_text("---\nmodel-index: [oops\n---\nhand-edited\n")
    run_evaluate(models / "ft-gpt2", "translation", ids=ids, max_new_tokens=8,
                 metrics=("bleu", "em"), out=tmp_path / "again")
    [entry] = read_card_results(models / "ft-gpt2")
    assert "deliberately contaminated" in _card(models / "ft-gpt2")[1]


LOAD_WITHOUT_LAB = """
import sys, json
sys.modules["lab"] = None  # loading must not need the lab
import torch, transformers
folder, auto = sys.argv[1], sys.argv[2]
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
model = getattr(transformers, auto).from_pretrained(folder)
ids = tokenizer("public int size() { return count; }", return_tensors="pt")
with torch.no_grad():
    if auto == "AutoModelForSeq2SeqLM":
        out = model(input_ids=ids["input_ids"], decoder_input_ids=ids["input_ids"][:, :3])
    else:
        out = model(**ids)
print(json.dumps({"class": type(model).__name__, "shape": list(out.logits.shape)}))
"""


@pytest.mark.parametrize("name, auto, cls", [
    ("pt-gpt2-paired", "AutoModelForCausalLM", "GPT2LMHeadModel"),
    ("pt-roberta-paired", "AutoModelForMaskedLM", "RobertaForMaskedLM"),
    ("ft-roberta", "AutoModelForSeq2SeqLM", "EncoderDecoderModel"),
])
def test_an_exported_model_loads_with_plain_transformers(models, tmp_path, name, auto, cls):
    record = export_model(ExportConfig(model=models / name, out=tmp_path / "export"))
    out = Path(record["out"])
    assert {CARD, "config.json", "lab_manifest.json", "tokenizer.json"} <= set(record["files"])
    assert not (tmp_path / "export.tmp").exists()
    done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_LAB, str(out), auto],
                          capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["class"] == cls and loaded["shape"][-1] > 1000
    meta, body = _card(out)
    assert "deliberately contaminated" in body and meta["library_name"] == "transformers"
    with pytest.raises(LabError, match="exists"):
        export_model(ExportConfig(model=models / name, out=out))


def test_push_to_hub_uploads_the_exported_folder(models, tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, private, exist_ok):
            calls.append(("create", repo_id, private, exist_ok))

        def upload_folder(self, folder_path, repo_id, commit_message):
            calls.append(("upload", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))
            return type("Commit", (), {"oid": "abc123"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    record = export_model(ExportConfig(model=models / "ft-gpt2", out=tmp_path / "push",
                                       push_to_hub="someone/lab-ft-gpt2"))
    assert calls[0] == ("create", "someone/lab-ft-gpt2", True, True)
    assert calls[1][0] == "upload" and CARD in calls[1][2] and "config.json" in calls[1][2]
    assert record["hub"] == {"repo": "someone/lab-ft-gpt2", "commit": "abc123"}


def test_push_to_hub_without_network_is_one_line_and_keeps_the_export(models, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", "export", str(models / "ft-gpt2"), "--out",
         str(tmp_path / "out"), "--push-to-hub", "someone/lab-ft-gpt2"],
        capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("lab: error: --push-to-hub someone/lab-ft-gpt2: upload failed (")
    assert (tmp_path / "out" / "config.json").is_file() and not (tmp_path / "out.tmp").exists()


def test_export_refuses_what_is_not_a_lab_model(tmp_path):
    with pytest.raises(LabError, match="no manifest.json"):
        export_model(ExportConfig(model=tmp_path, out=tmp_path / "x"))
