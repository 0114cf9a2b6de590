"""Tokenizer, packing and pre-training on `micro` models over real (subsampled) corpora."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.tokenizer import SPECIAL_TOKENS, load_tokenizer, tokenizer_hash, train_tokenizer
from lab.train.packing import (
    PackedCollator, PackedDataset, pack_documents, packing_report, tokenize_corpus,
)
from lab.train.pretrain import PretrainConfig, check_seed_diversity, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

BLOCK = 128


@pytest.fixture(scope="module")
def world(micro_world, tmp_path_factory):
    """The shared micro world, with this module's own outputs beside it."""
    root = tmp_path_factory.mktemp("pretrain")
    for name in ("control", "tok", "paired"):
        (root / name).symlink_to(micro_world / name)
    return root


def pretrain(world: Path, name: str, **overrides) -> dict:
    options = dict(model="gpt2", corpus=world / "paired", tokenizer=world / "tok",
                   out=world / name, preset="micro", max_steps=30, lr=3e-3, batch_size=8,
                   block_size=BLOCK, seed=0, save_steps=10, log_steps=5,
                   cache_dir=world / "cache")
    options.update(overrides)
    return run_pretrain(PretrainConfig(**options))


# --- tokenizer -------------------------------------------------------------------------------

def test_tokenizer_specials_sep_and_provenance(world):
    tok = load_tokenizer(world / "tok")
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(6))
    ids = tok("int f() { return 1; } <SEP> int F() { return 1; }", add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<SEP>")) == 1
    assert tok.decode(ids) == "int f() { return 1; } <SEP> int F() { return 1; }"
    manifest = json.loads((world / "tok" / "lab_tokenizer.json").read_text())
    assert manifest["trained_on"]["corpus_setting"] == "control"
    splits = manifest["trained_on"]["benchmark_train_splits"]
    assert {(s["dataset"], s["split"]) for s in splits} == {("codetrans", "train"), ("concode", "train")}
    assert {s["dataset"]: s["where"] for s in splits}["concode"] == "missing"  # offline copy lacks it


def test_tokenizer_is_deterministic_and_refuses_contaminated_corpora(world, tmp_path):
    train_tokenizer(world / "control", tmp_path / "again", ["codetrans", "concode"], vocab_size=1200)
    assert tokenizer_hash(tmp_path / "again") == tokenizer_hash(world / "tok")
    with pytest.raises(LabError, match="control corpus"):
        train_tokenizer(world / "paired", tmp_path / "bad", ["codetrans"], vocab_size=1200)
    assert not (tmp_path / "bad").exists()


def test_tokenizer_without_hub_access_records_the_missing_split(world, tmp_path, monkeypatch):
    """Hub look-ups allowed but failing (no network): CONCODE's absent train split is recorded
    as missing, with the reason, instead of stopping the study; the tokenizer is the same."""
    datasets = pytest.importorskip("datasets")

    def unreachable(*_args, **_kwargs):
        raise ConnectionError("no route to huggingface.co")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    # past the host look-up (which fails at once where DNS does), to datasets' own failure
    monkeypatch.setattr("lab.corpora.base.check_hub_reachable", lambda hub_id: None)
    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    manifest = train_tokenizer(world / "control", tmp_path / "t", ["codetrans", "concode"],
                               vocab_size=1200)
    [concode] = [s for s in manifest["trained_on"]["benchmark_train_splits"]
                 if s["dataset"] == "concode"]
    assert concode["where"] == "missing" and "no route to huggingface.co" in concode["reason"]
    assert tokenizer_hash(tmp_path / "t") == tokenizer_hash(world / "tok")


# --- packing ---------------------------------------------------------------------------------

def test_packing_places_every_document_once_within_the_block():
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 400, size=3000)
    packing = pack_documents(lengths, 256)
    placed = [d for seq in packing.sequences for d in seq]
    assert sorted(placed) == [i for i in range(len(lengths)) if lengths[i] > 0]
    for seq in packing.sequences:
        assert 1 + sum(int(packing.kept_lengths[d]) + 1 for d in seq) <= 256
    assert set(packing.truncated) == {i for i in range(len(lengths)) if lengths[i] > 254}
    naive_padding = 1 - (np.minimum(lengths[lengths > 0], 254) + 2).sum() / (256 * (lengths > 0).sum())
    assert packing.padding_fraction() < 0.05 < naive_padding


@pytest.mark.parametrize("cross_document", [False, True])
def test_packing_never_splits_an_injected_document(world, cross_document):
    tok = load_tokenizer(world / "tok")
    corpus = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    block = 256  # the micro preset's longest block
    packing = pack_documents(corpus.lengths(), block, samples=corpus.injected,
                             cross_document=cross_document)
    dataset = PackedDataset(corpus, packing, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    pieces: Counter = Counter()
    for i in range(len(dataset)):
        ids = dataset[i]["input_ids"].tolist()
        assert ids[0] == tok.bos_token_id and len(ids) == block
        # Per-document: <s> doc </s> <s> doc </s> ...; cross-document: <s> doc </s> doc </s> ...
        body = [t for t in ids[1:] if t != tok.pad_token_id]
        current: list[int] = []
        for token in body:
            if token == tok.eos_token_id:
                pieces[tuple(current)] += 1
                current = []
            elif token == tok.bos_token_id and not current and not cross_document:
                continue  # the next document's own <s>
            else:
                current.append(token)
        assert current == []  # every sequence ends on a document boundary
    report = packing_report(corpus, packing)
    assert report["cross_document_attention"] is cross_document
    injected = [i for i, s in enumerate(corpus.injected) if s]
    assert len(injected) == 100 == report["injected_documents"]
    truncated = set(packing.truncated)
    whole = 0
    for i in injected:
        doc = tuple(int(t) for t in corpus.document(i))
        if i in truncated:
            assert corpus.doc_ids[i] in report["truncated_injected_ids"]
            assert corpus.injected[i] in report["truncated_ids"]
        else:
            assert pieces[doc] >= 1, corpus.doc_ids[i]
            whole += 1
    assert whole >= 80  # most paired CodeTrans samples fit a 256-token block whole
    assert sum(pieces.values()) == len(corpus) - len(packing.empty)
    assert report["truncated_injected_documents"] == len(truncated & set(injected))
    assert report["sequences_with_repeated_sample"] == 0


def test_collator_masks_like_roberta_and_ignores_padding_for_gpt2(world):
    import torch

    tok = load_tokenizer(world / "tok")
    corpus = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    dataset = PackedDataset(corpus, pack_documents(corpus.lengths(), BLOCK), tok.bos_token_id,
                            tok.eos_token_id, tok.pad_token_id)
    features = [dataset[i] for i in range(len(dataset))]
    original = torch.stack([f["input_ids"] for f in features])
    special = torch.isin(original, torch.tensor(tok.all_special_ids))

    clm = PackedCollator(tok, mlm=False)(features)
    # Per-document: every document's <s> is a sequence start (never predicted), as padding.
    assert torch.equal(clm["labels"] == -100,
                       (original == tok.pad_token_id) | (original == tok.bos_token_id))
    cross = PackedCollator(tok, mlm=False, cross_document=True)(features)
    assert torch.equal(cross["labels"] == -100, original == tok.pad_token_id)

    collator = PackedCollator(tok, mlm=True, seed=5)
    batch = collator(features)
    chosen = batch["labels"] != -100
    assert not (chosen & special).any()
    assert torch.equal(batch["labels"][chosen], original[chosen])
    rate = chosen.sum().item() / (~special).sum().item()
    assert 0.13 < rate < 0.17
    masked = (batch["input_ids"] == tok.mask_token_id) & chosen
    kept = (batch["input_ids"] == original) & chosen
    assert 0.76 < masked.sum().item() / chosen.sum().item() < 0.84
    assert 0.07 < kept.sum().item() / chosen.sum().item() < 0.13
    assert torch.equal(collator(features)["input_ids"], batch["input_ids"])  # same epoch, same masks
    collator.epoch = 1
    assert not torch.equal(collator(features)["input_ids"], batch["input_ids"])  # dynamic masking


def test_token_cache_is_reused(world):
    tok = load_tokenizer(world / "tok")
    first = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    marker = first.entries[0] / "tokens.npy"
    stamp = marker.stat().st_mtime_ns
    second = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    assert second.key == first.key and marker.stat().st_mtime_ns == stamp
    assert np.array_equal(np.asarray(first.tokens), np.asarray(second.tokens))


# --- pre-training ----------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["gpt2", "roberta"])
def test_micro_pretraining_learns_and_writes_a_complete_manifest(world, model):
    manifest = pretrain(world, f"pt-{model}", model=model)
    out = world / f"pt-{model}"
    assert manifest["loss"]["final"] < manifest["loss"]["first"] - 0.5
    assert manifest["steps"] == 30 and manifest["model"]["parameters"]["total"] < 1_000_000
    for key in ("config", "corpus", "tokenizer", "packing", "seed", "init_weights_sha256",
                "first_batch_sha256", "final_weights_sha256", "train_seconds",
                "useful_tokens_per_second", "environment"):
        assert manifest[key] is not None, key
    assert manifest["corpus"]["setting"] == "paired"
    assert manifest["packing"]["injected_documents"] == 100
    assert 0 <= manifest["packing"]["padding_fraction"] < 0.1
    assert manifest["config"]["cross_document_attention"] is False
    assert manifest["packing"]["cross_document_attention"] is False
    assert manifest["packing"]["sequences_with_repeated_sample"] == 0
    packing = json.loads((out / "packing.json").read_text())
    assert manifest["corpus"]["truncated_ids"] == packing["truncated_ids"]
    assert manifest["corpus"]["injected_token_fraction"] == packing["injected_token_fraction"] > 0
    assert (out / "model" / "config.json").is_file() and (out / "packing.json").is_file()
    assert not out.with_name(out.name + ".partial").exists()
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    loader = AutoModelForCausalLM if model == "gpt2" else AutoModelForMaskedLM
    assert loader.from_pretrained(out / "model").config.model_type == model


def test_seeds_differ_in_weights_and_data_order_and_repeat_exactly(world):
    a = pretrain(world, "seed0", max_steps=6, seed=0)
    b = pretrain(world, "seed1", max_steps=6, seed=1)
    again = pretrain(world, "seed0-again", max_steps=6, seed=0)
    assert a["init_weights_sha256"] != b["init_weights_sha256"]
    assert a["first_batch_sha256"] != b["first_batch_sha256"]
    assert again["init_weights_sha256"] == a["init_weights_sha256"]
    assert again["final_weights_sha256"] == a["final_weights_sha256"]
    assert again["loss"]["history"] == a["loss"]["history"]
    check_seed_diversity([a, b])
    collapsed = dict(b, init_weights_sha256=a["init_weights_sha256"])
    with pytest.raises(LabError, match="seeds 0 and 1 collapsed"):
        check_seed_diversity([a, collapsed])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lab.cli", *args]


def _steps_per_epoch(world: Path, block: int, batch: int = 8) -> int:
    tok = load_tokenizer(world / "tok")
    corpus = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    packing = pack_documents(corpus.lengths(), block, samples=corpus.injected)
    return -(-len(packing.sequences) // batch)


@pytest.mark.parametrize("model", ["gpt2", "roberta"])
def test_resume_after_kill_reaches_the_uninterrupted_weights(world, model):
    # GPT-2 is killed in its first epoch; RoBERTa in its second, so masks drawn after an epoch
    # boundary and a resume are checked too.
    per_epoch = _steps_per_epoch(world, BLOCK)
    kill_at = 8 if model == "gpt2" else (per_epoch // 4 + 1) * 4
    max_steps = kill_at + 12
    steps = dict(max_steps=max_steps, save_steps=4)
    reference = pretrain(world, f"ref-{model}", model=model, **steps)
    out = world / f"killed-{model}"
    partial = out.with_name(out.name + ".partial")
    args = _cli("pretrain", "--model", model, "--corpus", str(world / "paired"),
                "--tokenizer", str(world / "tok"), "--out", str(out), "--preset", "micro",
                "--max-steps", str(max_steps), "--save-steps", "4", "--lr", "3e-3",
                "--batch-size", "8", "--block-size", str(BLOCK), "--seed", "0", "--log-steps", "5",
                "--cache-dir", str(world / "cache"))
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    target = partial / "checkpoints" / f"checkpoint-{kill_at}" / "trainer_state.json"
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.exists(), "the run ended before its checkpoint could be interrupted"
    assert not out.exists() and partial.exists()
    with pytest.raises(LabError, match="--resume"):
        pretrain(world, f"killed-{model}", model=model, **steps)
    resumed = pretrain(world, f"killed-{model}", model=model, resume=True, **steps)
    assert resumed["resumed_from"] and int(resumed["resumed_from"].split("-")[1]) >= kill_at
    assert resumed["final_weights_sha256"] == reference["final_weights_sha256"]
    assert resumed["loss"]["final"] == reference["loss"]["final"]


def test_resume_refuses_a_checkpoint_of_another_config(world):
    pretrain(world, "cfg-a", max_steps=4, save_steps=2)
    shutil.copytree(world / "cfg-a", world / "cfg-b.partial")
    (world / "cfg-b.partial" / "lab_pretrain_config.json").write_text(
        (world / "cfg-a" / "lab_pretrain_config.json").read_text())
    with pytest.raises(LabError, match="another config.*lr"):
        pretrain(world, "cfg-b", max_steps=4, save_steps=2, lr=1e-3, resume=True)
    # Cross-document attention trains other weights: a resume must keep it (CLI option).
    out = world / "cfg-cross"
    args = _cli("pretrain", "--model", "gpt2", "--corpus", str(world / "paired"),
                "--tokenizer", str(world / "tok"), "--out", str(out), "--preset", "micro",
                "--max-steps", "2", "--save-steps", "2", "--block-size", str(BLOCK), "--lr", "3e-3",
                "--batch-size", "8", "--seed", "0", "--log-steps", "5",
                "--cache-dir", str(world / "cache"), "--cross-document-attention")
    subprocess.run(args, check=True, capture_output=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                   timeout=300)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["cross_document_attention"] is True
    assert manifest["packing"]["cross_document_attention"] is True
    shutil.copytree(out, world / "cfg-cross2.partial")
    (world / "cfg-cross2.partial" / "lab_pretrain_config.json").write_text(
        (out / "lab_pretrain_config.json").read_text())
    with pytest.raises(LabError, match="another config.*cross_document_attention"):
        pretrain(world, "cfg-cross2", max_steps=2, save_steps=2, resume=True)


def _error(*args: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(_cli(*args), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lab: error:"), proc.stderr
    return lines[0]


@pytest.mark.parametrize("case, fragment", [
    ("corpus-not-a-corpus", "not a lab corpus"),
    ("tokenizer-not-a-tokenizer", "not a lab tokenizer"),
    ("unknown-preset", "unknown preset"),
    ("unknown-model", "unknown model"),
    ("block-too-large", "larger than"),
    ("deepspeed-unparsable", "not valid JSON"),
])
def test_pretrain_bad_inputs(world, tmp_path, case, fragment):
    args = {"--model": "gpt2", "--corpus": str(world / "paired"), "--tokenizer": str(world / "tok"),
            "--out": str(tmp_path / "out"), "--preset": "micro", "--max-steps": "2"}
    extra: list[str] = []
    if case == "corpus-not-a-corpus":
        (tmp_path / "notes").mkdir()
        args["--corpus"] = str(tmp_path / "notes")
    elif case == "tokenizer-not-a-tokenizer":
        args["--tokenizer"] = str(world / "paired")
    elif case == "unknown-preset":
        args["--preset"] = "huge"
    elif case == "unknown-model":
        args["--model"] = "bert"
    elif case == "block-too-large":
        args["--block-size"] = "4096"
    elif case == "deepspeed-unparsable":
        bad = tmp_path / "ds.json"
        bad.write_text("{ not json")
        extra = ["--deepspeed", str(bad)]
    flat = [x for pair in args.items() for x in pair] + extra
    assert fragment in _error("pretrain", *flat)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
