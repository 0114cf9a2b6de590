"""Fine-tuning and evaluation of `micro` GPT-2 and RoBERTa on both tasks."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.contamination import paired_document
from lab.corpora import load_samples
from lab.eval.generate import run_evaluate
from lab.train.finetune import (
    FinetuneConfig, PaddingCollator, causal_example, causal_prompt, run_finetune,
)
from lab.train.pretrain import PretrainConfig, run_pretrain
from lab.tokenizer import load_tokenizer

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

IDS = {"translation": ["codetrans:test:0", "codetrans:test:1", "codetrans:test:2", "codetrans:test:3"],
       "generation": ["concode:test:0", "concode:test:1", "concode:test:2"]}


@pytest.fixture(scope="module")
def pretrained(micro_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    for model in ("gpt2", "roberta"):
        run_pretrain(PretrainConfig(
            model=model, corpus=micro_world / "paired", tokenizer=micro_world / "tok",
            out=root / f"pt-{model}", preset="micro", max_steps=12, lr=3e-3, batch_size=8,
            block_size=128, seed=0, save_steps=100, cache_dir=root / "cache"))
    return root


def test_gpt2_sequence_matches_paired_injection_and_masks_the_source(micro_world):
    tok = load_tokenizer(micro_world / "tok")
    sample = load_samples("codetrans", "test").records[7]
    example = causal_example(tok, sample, 256, 256)
    prompt = causal_prompt(tok, sample.input, 256)
    document = tok(paired_document(sample.input, sample.output), add_special_tokens=False)["input_ids"]
    # The fine-tuning sequence is the injected paired document, between <s> and </s>.
    assert example["input_ids"] == [tok.bos_token_id, *document, tok.eos_token_id]
    assert example["labels"][: len(prompt)] == [-100] * len(prompt)
    assert example["labels"][len(prompt):] == example["input_ids"][len(prompt):]
    assert example["input_ids"][len(prompt) - 1] == tok.convert_tokens_to_ids("<SEP>")
    short = causal_example(tok, load_samples("codetrans", "test").records[0], 256, 256)
    batch = PaddingCollator(tok.pad_token_id)([example, short])
    padded = batch["attention_mask"] == 0
    assert padded.any() and (batch["labels"][padded] == -100).all()
    assert int((batch["labels"][1] != -100).sum()) == len(short["labels"]) - short["labels"].count(-100)


@pytest.mark.parametrize("model", ["gpt2", "roberta"])
@pytest.mark.parametrize("task", ["translation", "generation"])
def test_micro_finetune_and_evaluate(pretrained, tmp_path, model, task, capsys):
    out = tmp_path / "ft"
    capsys.readouterr()
    manifest = run_finetune(FinetuneConfig(
        pretrained=pretrained / f"pt-{model}", task=task, epochs=2, out=out, train_size=16,
        batch_size=4, lr=3e-3, max_target_length=48, decoder_layers=2, log_steps=1))
    # The Trainer's logs go to the log (stderr; a stage's log), none to stdout, which holds a
    # command's result; each logged loss, and the run's summary, once.
    printed = capsys.readouterr()
    assert "{'loss'" not in printed.out and "train_runtime" not in printed.out
    logged = [h for h in manifest["loss"]["history"] if "loss" in h]
    assert printed.err.count("{'loss'") == len(logged) == 8
    assert printed.err.count("'train_runtime'") == 1
    assert manifest["architecture"] == ("causal-lm" if model == "gpt2" else "encoder-decoder")
    assert manifest["data"]["train_used"] == 16
    assert manifest["loss"]["final"] < manifest["loss"]["first"]
    assert manifest["final_weights_sha256"] != manifest["init_weights_sha256"]
    if task == "generation":
        assert manifest["data"]["train_split"] == "dev"  # offline CONCODE has no train split
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(IDS[task]) + "\n")
    result = run_evaluate(out, task, ids=ids, max_new_tokens=24, batch_size=2,
                          metrics=("bleu", "em", "meteor", "bleu_sentence"))
    rows = [json.loads(line) for line in (Path(result["out"]) / "predictions.jsonl").open()]
    assert [r["id"] for r in rows] == IDS[task]
    assert all(set(r["scores"]) == {"bleu", "em", "meteor", "bleu_sentence"} for r in rows)
    saved = json.loads((Path(result["out"]) / "metrics.json").read_text())
    assert saved["metrics"]["bleu"] == result["metrics"]["bleu"] and saved["samples"] == len(IDS[task])
    if task == "translation":  # the paired arm injected CodeTrans samples: groups are known
        # (injected documents longer than the 128-token block are a group of their own)
        assert {r["group"] for r in rows} <= {"injected", "injected_truncated", "held_out",
                                              "held_out_truncated"}
        assert sum(v["samples"] for g, v in saved["by_group"].items() if g != "clean") == len(IDS[task])
        assert saved["by_group"]["clean"]["samples"] == len(IDS[task])  # nothing seen elsewhere
    # The trivial baselines on the very samples evaluated, retrieving from the 16 fine-tuning
    # samples this model saw.
    from lab.corpora import Sample
    from lab.eval.baselines import baseline_predictions
    from lab.eval.generate import finetuning_samples
    from lab.eval.metrics import bleu

    baselines = saved["baselines"]
    assert set(baselines) == ({"copy", "retrieval"} if task == "translation" else {"retrieval"}) | {
        "retrieval_pool"}
    assert baselines["retrieval_pool"]["samples"] == 16
    seen, _ = finetuning_samples(json.loads((out / "manifest.json").read_text()), out)
    evaluated = {r["id"]: r for r in rows}
    tests = [Sample(id=r["id"], split="test", index=0, input=r["source"], output=r["reference"])
             for r in rows]
    retrieved = baseline_predictions("retrieval", task, tests, seen)
    assert baselines["retrieval"]["metrics"]["bleu"] == pytest.approx(
        bleu([evaluated[s.id]["reference"] for s in tests], retrieved))
    if task == "translation":
        assert baselines["copy"]["metrics"]["bleu"] == pytest.approx(
            bleu([r["reference"] for r in rows], [r["source"] for r in rows]))
        assert baselines["copy"]["by_group"]["clean"]["samples"] == len(IDS[task])
    again = run_evaluate(out, task, ids=ids, max_new_tokens=24, batch_size=3,
                         metrics=("bleu", "em"), out=tmp_path / "again")
    assert again["metrics"]["bleu"] == result["metrics"]["bleu"]  # batching does not change outputs


def test_direct_inference_and_best_checkpoint_selection(pretrained, tmp_path):
    zero = run_finetune(FinetuneConfig(pretrained=pretrained / "pt-gpt2", task="translation",
                                       epochs=0, out=tmp_path / "e0"))
    source = json.loads((pretrained / "pt-gpt2" / "manifest.json").read_text())
    assert zero["final_weights_sha256"] == source["final_weights_sha256"]
    direct = run_evaluate(pretrained / "pt-gpt2", "translation", ids=None, max_new_tokens=8,
                          batch_size=32, metrics=("bleu", "em"), out=tmp_path / "direct")
    assert direct["samples"] == 1000
    # Direct inference saw no fine-tuning data: retrieval draws from the whole train split, and
    # naive copy scores CodeXGLUE's 18.69 on the 1,000 test samples.
    assert direct["baselines"]["retrieval_pool"]["samples"] == 10300
    assert round(direct["baselines"]["copy"]["metrics"]["bleu"], 2) == 18.69
    injected = direct["by_group"]["injected"]["samples"]
    assert injected + direct["by_group"].get("injected_truncated", {"samples": 0})["samples"] == 100
    held_out = direct["by_group"]["held_out"]["samples"]
    assert held_out + direct["by_group"].get("held_out_truncated", {"samples": 0})["samples"] == 900
    best = run_finetune(FinetuneConfig(pretrained=pretrained / "pt-gpt2", task="translation",
                                       epochs=2, out=tmp_path / "best", train_size=16,
                                       select="best", batch_size=8))
    evals = [h for h in best["loss"]["history"] if "eval_loss" in h]
    assert len(evals) == 2 and best["best_checkpoint_selected"] == "best"
    with pytest.raises(LabError, match="no validation split"):
        run_finetune(FinetuneConfig(pretrained=pretrained / "pt-gpt2", task="generation",
                                    epochs=1, out=tmp_path / "nobest", select="best"))


def test_evaluate_takes_bare_ids_and_the_first_max_samples(pretrained, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("17, 3  # bare indices, as lab inject --test-ids takes them\ncodetrans:test:0\n")
    result = run_evaluate(pretrained / "pt-gpt2", "translation", ids=ids, max_samples=2,
                          max_new_tokens=2, metrics=("em",), out=tmp_path / "ev")
    rows = [json.loads(line) for line in (Path(result["out"]) / "predictions.jsonl").open()]
    assert [r["id"] for r in rows] == ["codetrans:test:0", "codetrans:test:3"] == [
        s.id for s in load_samples("codetrans", "test").records[:4:3]]
    assert result["samples"] == 2


def _error(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lab: error:"), proc.stderr
    return lines[0]


def test_bad_inputs(pretrained, tmp_path):
    rob, gpt = str(pretrained / "pt-roberta"), str(pretrained / "pt-gpt2")
    assert "cannot generate" in _error("evaluate", "--model", rob, "--task", "translation")
    assert "--epochs 0 with RoBERTa" in _error("finetune", "--pretrained", rob, "--task",
                                               "translation", "--epochs", "0", "--out",
                                               str(tmp_path / "x"))
    assert "unknown task" in _error("finetune", "--pretrained", gpt, "--task", "summaries",
                                    "--epochs", "1", "--out", str(tmp_path / "x"))
    assert "--train-size" in _error("finetune", "--pretrained", gpt, "--task", "translation",
                                    "--epochs", "1", "--train-size", "999999", "--out",
                                    str(tmp_path / "x"))
    assert "not a lab model" in _error("evaluate", "--model", str(tmp_path), "--task", "translation")
    assert "--decoding" in _error("evaluate", "--model", gpt, "--task", "translation",
                                  "--decoding", "beam:0")
    assert not (tmp_path / "x").exists()


def test_roberta_decoder_warm_started_from_the_encoder(pretrained, tmp_path):
    """--decoder-init encoder (BERT2BERT): the decoder's layers, embeddings and LM head are the
    pre-trained model's, cross-attention is new (quietly: no report of the weights that are new
    or left out by design); the default stays a random decoder."""
    from types import SimpleNamespace

    import torch
    from transformers import RobertaForMaskedLM

    from lab.models import WEIGHTS_SUBDIR
    from lab.train.finetune import build_seq2seq

    source = pretrained / "pt-roberta"
    tokenizer = SimpleNamespace(bos_token_id=0, pad_token_id=1, eos_token_id=2)  # all it reads
    weights = source / WEIGHTS_SUBDIR
    mlm = RobertaForMaskedLM.from_pretrained(str(weights))
    layers = mlm.config.num_hidden_layers
    warm = build_seq2seq(weights, tokenizer, layers, "encoder")
    cold = build_seq2seq(weights, tokenizer, layers)
    for i in range(layers):
        original = mlm.roberta.encoder.layer[i].attention.self.query.weight
        assert torch.equal(warm.decoder.roberta.encoder.layer[i].attention.self.query.weight, original)
        assert not torch.equal(cold.decoder.roberta.encoder.layer[i].attention.self.query.weight,
                               original)
        assert hasattr(warm.decoder.roberta.encoder.layer[i], "crossattention")
    assert torch.equal(warm.decoder.lm_head.dense.weight, mlm.lm_head.dense.weight)
    assert torch.equal(warm.encoder.encoder.layer[0].output.dense.weight,
                       mlm.roberta.encoder.layer[0].output.dense.weight)
    with pytest.raises(LabError, match="--decoder-init encoder copies layers of the encoder"):
        build_seq2seq(weights, tokenizer, layers + 1, "encoder")
    reports: list[logging.LogRecord] = []
    listener = logging.Handler()
    listener.emit = reports.append
    logging.getLogger("transformers").addHandler(listener)  # it does not propagate to caplog
    try:
        shallow = build_seq2seq(weights, tokenizer, layers - 1 or layers, "encoder")
    finally:
        logging.getLogger("transformers").removeHandler(listener)
    assert not [r for r in reports if "LOAD REPORT" in r.getMessage()]
    assert len(shallow.decoder.roberta.encoder.layer) == (layers - 1 or layers)
    manifest = run_finetune(FinetuneConfig(
        pretrained=source, task="translation", epochs=2, out=tmp_path / "ft", train_size=16,
        log_steps=1, batch_size=4, lr=3e-3, max_target_length=48, decoder_layers=layers, decoder_init="encoder"))
    assert manifest["config"]["decoder_init"] == "encoder"
    assert manifest["loss"]["final"] < manifest["loss"]["first"]
    with pytest.raises(LabError, match="--decoder-init bert: choose random or encoder"):
        run_finetune(FinetuneConfig(pretrained=source, task="translation", epochs=1,
                                    out=tmp_path / "bad", decoder_init="bert"))


def test_group_by_length_batches_samples_of_similar_length(pretrained, tmp_path, monkeypatch):
    """--group-by-length: the same samples, with less padding in each batch (the data order,
    hence the weights, differ); the default keeps the random order."""
    import lab.train.finetune as finetune

    padded: dict[bool, list[int]] = {}  # pad tokens of each batch

    class Counting(PaddingCollator):
        def __call__(self, features):
            lengths = [len(f["input_ids"]) for f in features]
            padded[grouped].append(len(lengths) * max(lengths) - sum(lengths))
            return super().__call__(features)

    monkeypatch.setattr(finetune, "PaddingCollator", Counting)
    weights = {}
    for grouped in (False, True):
        padded[grouped] = []
        manifest = run_finetune(FinetuneConfig(
            # Batches of 2: the sampler sorts megabatches of min(64 // 8, 50) x 2 = 16 samples.
            pretrained=pretrained / "pt-gpt2", task="translation", epochs=1, train_size=64,
            batch_size=2, lr=3e-3, max_source_length=48, max_target_length=48,
            group_by_length=grouped, out=tmp_path / f"ft-{grouped}"))
        weights[grouped] = manifest["final_weights_sha256"]
        assert manifest["config"]["group_by_length"] is grouped
    assert len(padded[True]) == len(padded[False]) == 32
    assert sum(padded[True]) < 0.5 * sum(padded[False])
    assert weights[True] != weights[False]


# Library warnings that every training or inference stage used to print, none about the run.
LIBRARY_NOISE = {
    "DeepSpeed imported without a DeepSpeed config": "Setting accelerator to CPU",
    "GPT2LMHeadModel's loss left unnamed": "loss_type=None",
    "EncoderDecoderModel's warning on labels": "no need to pass them yourself",
    "a padded batch scored without its mask": "strongly recommend passing in an `attention_mask`",
    "weights the lab leaves out of a checkpoint by design": "LOAD REPORT",
}


def test_training_and_inference_print_no_library_warnings(micro_world, tmp_path):
    """Pre-training, fine-tuning (both families), inference and a probe in a fresh interpreter,
    as a stage runs in a worker: none of the known library warnings; DeepSpeed, installed or
    not, is never imported without a DeepSpeed config."""
    script = f"""
import sys
from pathlib import Path
from lab.eval.generate import run_evaluate
from lab.detect.probe import run_probe
from lab.train.finetune import FinetuneConfig, run_finetune
from lab.train.pretrain import PretrainConfig, run_pretrain
world, root = Path({str(micro_world)!r}), Path({str(tmp_path)!r})
ids = root / "ids.txt"
ids.write_text("".join(f"codetrans:test:{{i}}\\n" for i in range(8)))
for model in ("gpt2", "roberta"):
    run_pretrain(PretrainConfig(model=model, corpus=world / "paired", tokenizer=world / "tok",
                 out=root / model, preset="micro", max_steps=3, batch_size=8, block_size=128,
                 cache_dir=root / "cache"))
    run_finetune(FinetuneConfig(pretrained=root / model, task="translation", epochs=1,
                 out=root / (model + "-ft"), train_size=8, batch_size=4, decoder_layers=1))
    run_evaluate(root / (model + "-ft"), "translation", ids=ids, max_new_tokens=4,
                 batch_size=4, metrics=("bleu",), out=root / (model + "-eval"))
run_probe(root / "gpt2", max_samples=8, max_names=2)
print("deepspeed imported:", "deepspeed" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "deepspeed imported: False" in output
    printed = {what: line for what, fragment in LIBRARY_NOISE.items()
               for line in output.splitlines() if fragment in line}
    assert printed == {}
