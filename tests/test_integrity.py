"""Recorded hashes are checked, checkpoints are complete, training stops when it diverges
(issue 14): micro models on the shared micro world."""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.corpora.shards import read_manifest
from lab.tokenizer import load_tokenizer, tokenizer_hash
from lab import common as common_module
from lab.train.packing import tokenize_corpus
from lab.train.pretrain import PretrainConfig, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

BLOCK = 128


@pytest.fixture(scope="module")
def world(micro_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    for name in ("control", "tok", "paired"):
        (root / name).symlink_to(micro_world / name)
    return root


def pretrain(world: Path, name: str, **overrides) -> dict:
    options = dict(model="gpt2", corpus=world / "paired", tokenizer=world / "tok",
                   out=world / name, preset="micro", max_steps=6, lr=3e-3, batch_size=8,
                   block_size=BLOCK, seed=0, save_steps=2, log_steps=5,
                   cache_dir=world / "cache")
    options.update(overrides)
    return run_pretrain(PretrainConfig(**options))


def _cli_error(*args: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if not l.startswith("lab: warning:")]
    assert len(lines) == 1 and lines[0].startswith("lab: error:"), proc.stderr
    return lines[0]


def _copy_corpus(world: Path, source: str, name: str) -> Path:
    target = world / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(world / source, target)
    return target


def _write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _digest(shards: list[dict]) -> str:
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(shard["sha256"].encode())
    return digest.hexdigest()


# --- 1a: a corpus is what its manifest says ----------------------------------------------------

def test_manifest_carrying_another_arms_hash_is_refused(world):
    # Warm the cache with the control arm's tokens: the forged arm would hit that entry.
    tok = load_tokenizer(world / "tok")
    tokenize_corpus(world / "control", tok, tokenizer_hash(world / "tok"), world / "cache")
    forged = _copy_corpus(world, "paired", "forged")
    manifest = read_manifest(forged)
    manifest["corpus_sha256"] = read_manifest(world / "control")["corpus_sha256"]
    _write_manifest(forged, manifest)
    with pytest.raises(LabError, match="corpus_sha256 does not match"):
        pretrain(world, "forged-out", corpus=forged)
    assert not (world / "forged-out").exists() and not (world / "forged-out.partial").exists()
    # The whole manifest of the other arm over this arm's shards: the first shard is named.
    _write_manifest(forged, read_manifest(world / "control"))
    line = _cli_error("pretrain", "--model", "gpt2", "--corpus", str(forged), "--tokenizer",
                      str(world / "tok"), "--out", str(world / "forged-cli"), "--preset", "micro",
                      "--max-steps", "2", "--cache-dir", str(world / "cache"))
    assert "part-00000.jsonl.gz" in line and "sha256 differs" in line


def test_changed_shard_is_refused(world):
    changed = _copy_corpus(world, "paired", "changed")
    shard = changed / read_manifest(changed)["shards"][0]["file"]
    lines = gzip.decompress(shard.read_bytes()).splitlines(keepends=True)
    shard.write_bytes(gzip.compress(b"".join(reversed(lines)), mtime=0))
    tok = load_tokenizer(world / "tok")
    with pytest.raises(LabError, match=f"{shard.name}: sha256 differs"):
        tokenize_corpus(changed, tok, tokenizer_hash(world / "tok"), world / "cache")


@pytest.mark.parametrize("where", ["../control/corpus/part-00000.jsonl.gz", "absolute"])
def test_shard_paths_stay_inside_the_corpus_folder(world, where):
    escaping = _copy_corpus(world, "paired", "escaping")
    manifest = read_manifest(escaping)
    if where == "absolute":
        where = str((world / "control" / manifest["shards"][0]["file"]).resolve())
    manifest["shards"][0]["file"] = where
    _write_manifest(escaping, manifest)
    with pytest.raises(LabError, match="leaves the corpus folder"):
        read_manifest(escaping)


def test_empty_corpus_and_empty_shard_are_refused(world):
    from lab.corpora.shards import write_shards

    empty = world / "empty"
    shutil.rmtree(empty, ignore_errors=True)
    empty.mkdir()
    shards = write_shards(empty / "corpus", [], 10)
    _write_manifest(empty, {"shards": shards, "corpus_sha256": _digest(shards)})
    with pytest.raises(LabError, match="empty corpus"):
        pretrain(world, "empty-out", corpus=empty)
    line = _cli_error("corpora", "verify", str(empty))
    assert "empty corpus" in line
    # A 0-byte shard among real ones, consistently listed, would silently drop nothing but
    # still be a broken arm.
    padded = _copy_corpus(world, "paired", "padded")
    manifest = read_manifest(padded)
    (padded / "corpus" / "part-99999.jsonl.gz").write_bytes(b"")
    manifest["shards"].append({"file": "corpus/part-99999.jsonl.gz", "documents": 0,
                               "sha256": hashlib.sha256(b"").hexdigest()})
    manifest["corpus_sha256"] = _digest(manifest["shards"])
    _write_manifest(padded, manifest)
    with pytest.raises(LabError, match="part-99999.jsonl.gz: empty shard"):
        pretrain(world, "padded-out", corpus=padded)


def _edit(manifest: dict, field: str) -> None:
    """One membership field of a corpus manifest changed, its shards left as they are."""
    if field == "held_out_ids":  # an injected sample also called held out
        manifest["held_out_ids"].append(manifest["injected_ids"][0])
    elif field == "injected_ids":  # one injected sample dropped from the list
        manifest["injected_ids"].pop()
    elif field == "options.repeat":
        manifest["options"]["repeat"] = 2
    elif field == "counts.injected_documents":
        manifest["counts"]["injected_documents"] += 1
    elif field == "counts.final_documents":
        manifest["counts"]["final_documents"] -= 1


@pytest.mark.parametrize("field", ["held_out_ids", "injected_ids", "options.repeat",
                                   "counts.injected_documents", "counts.final_documents"])
def test_corpus_membership_is_checked_against_the_shards(world, field):
    from lab.corpora.shards import verify_corpus

    edited = _copy_corpus(world, "paired", "edited")
    manifest = read_manifest(edited)
    verify_corpus(edited)  # as injected: the documents say what the manifest says
    _edit(manifest, field)
    _write_manifest(edited, manifest)
    with pytest.raises(LabError, match=rf"edited/manifest.json: field '{re.escape(field)}'"):
        verify_corpus(edited)


def test_corpora_verify_refuses_an_empty_dataset_file(tiny_corpora):
    shard = next((tiny_corpora / "codesearchnet-java").rglob("java_valid_0.jsonl.gz"))
    shard.write_bytes(gzip.compress(b""))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "corpora", "verify", "csn-java",
                           "--corpora", str(tiny_corpora)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode != 0
    assert "java_valid_0.jsonl.gz: empty file" in proc.stderr


# --- 1b: the token cache holds the bytes it was written with -----------------------------------

def test_token_cache_overwritten_with_same_size_garbage_is_rebuilt(world, capsys):
    tok = load_tokenizer(world / "tok")
    first = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    expected = np.array(first.tokens)
    tokens = first.entries[0] / "tokens.npy"  # the first shard's entry
    part_size = first.parts[0].size
    del first
    raw = bytearray(tokens.read_bytes())
    header = len(raw) - 4 * part_size
    raw[header:] = np.random.default_rng(0).integers(0, 1000, part_size,
                                                      dtype=np.uint32).tobytes()
    tokens.write_bytes(bytes(raw))
    common_module._FILES_VERIFIED.clear()  # as a new process would
    capsys.readouterr()
    again = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    assert np.array_equal(np.asarray(again.tokens), expected)
    assert "tokens.npy differs" in capsys.readouterr().err
    # A cut file is caught by its size, with no hashing.
    tokens.write_bytes(tokens.read_bytes()[:-4])
    again = tokenize_corpus(world / "paired", tok, tokenizer_hash(world / "tok"), world / "cache")
    assert np.array_equal(np.asarray(again.tokens), expected)


# --- 2 and 4: complete checkpoints only; throughput of the resumed part ---------------------------

@pytest.fixture(scope="module")
def reference(world):
    """A finished 6-step run with checkpoints 4 and 6 (its folder is copied as a .partial)."""
    return pretrain(world, "ck-ref")


def _partial_copy(world: Path, name: str) -> Path:
    partial = world / f"{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(world / "ck-ref", partial)
    return partial / "checkpoints"


def test_damaged_newest_checkpoint_falls_back_to_the_previous_complete_one(world, reference):
    checkpoints = _partial_copy(world, "ck-cut")
    weights = checkpoints / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    resumed = pretrain(world, "ck-cut", resume=True)
    assert resumed["resumed_from"] == "checkpoint-4"
    assert resumed["final_weights_sha256"] == reference["final_weights_sha256"]
    assert (world / "ck-cut" / "checkpoints" / "incomplete-checkpoint-6").is_dir()
    # Throughput counts the two steps trained after the resume, not the checkpoint's four.
    assert resumed["steps_this_run"] == 2
    per_sequence = resumed["packing"]["useful_tokens"] / resumed["packing"]["sequences"]
    expected = 2 * 8 * per_sequence / resumed["train_seconds"]
    assert resumed["useful_tokens_per_second"] == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("damage", ["optimizer-deleted", "optimizer-truncated"])
def test_resume_refuses_when_no_checkpoint_is_complete(world, reference, damage):
    name = f"ck-{damage}"
    checkpoints = _partial_copy(world, name)
    shutil.rmtree(checkpoints / "checkpoint-6")
    optimizer = checkpoints / "checkpoint-4" / "optimizer.pt"
    if damage == "optimizer-deleted":
        optimizer.unlink()
    else:
        optimizer.write_bytes(optimizer.read_bytes()[:1000])
    line = _cli_error("pretrain", "--model", "gpt2", "--corpus", str(world / "paired"),
                      "--tokenizer", str(world / "tok"), "--out", str(world / name),
                      "--preset", "micro", "--max-steps", "6", "--save-steps", "2", "--lr", "3e-3",
                      "--batch-size", "8", "--block-size", str(BLOCK), "--seed", "0",
                      "--log-steps", "5", "--cache-dir", str(world / "cache"), "--resume")
    assert "no complete checkpoint" in line and "optimizer.pt" in line
    assert not (world / name).exists()


def test_checkpoints_without_a_record_are_accepted_when_whole(world, reference):
    checkpoints = _partial_copy(world, "ck-legacy")
    for record in checkpoints.glob("checkpoint-*/lab_checkpoint.json"):
        record.unlink()
    resumed = pretrain(world, "ck-legacy", resume=True)
    assert resumed["resumed_from"] == "checkpoint-6"
    assert resumed["final_weights_sha256"] == reference["final_weights_sha256"]


def test_a_resumed_mlm_run_ends_with_the_same_weights_and_reports_no_missing_key(world, caplog):
    # RoBERTa's MLM decoder is tied to the word embeddings: a checkpoint stores it once.
    mlm = dict(model="roberta", max_steps=4)
    reference_mlm = pretrain(world, "mlm-ref", **mlm)
    partial = world / "mlm-cut.partial"
    shutil.copytree(world / "mlm-ref", partial)
    shutil.rmtree(partial / "checkpoints" / "checkpoint-4")
    caplog.clear()
    with caplog.at_level("WARNING"):
        # The trainer's warnings reach caplog (else the last assertion could not fail).
        logging.getLogger("transformers.trainer").warning("captured")
        resumed = pretrain(world, "mlm-cut", resume=True, **mlm)
    assert resumed["resumed_from"] == "checkpoint-2"
    assert resumed["final_weights_sha256"] == reference_mlm["final_weights_sha256"]
    logged = [record.getMessage() for record in caplog.records]
    assert "captured" in logged
    assert not any("missing keys" in message for message in logged)


def test_resume_with_nothing_to_resume_is_refused(world):
    # Silently starting afresh would hide a mistyped --out from a user who meant to continue.
    with pytest.raises(LabError, match="--resume: no interrupted run"):
        pretrain(world, "never-started", resume=True)
    assert not (world / "never-started").exists()
    assert not (world / "never-started.partial").exists()


# --- 3: a diverged run stops, naming the step, and leaves nothing ------------------------------

def test_infinite_lr_is_refused_and_a_diverging_run_stops(world):
    line = _cli_error("pretrain", "--model", "gpt2", "--corpus", str(world / "paired"),
                      "--tokenizer", str(world / "tok"), "--out", str(world / "lr-inf"),
                      "--preset", "micro", "--max-steps", "2", "--lr", "inf",
                      "--cache-dir", str(world / "cache"))
    assert "--lr inf" in line
    with pytest.raises(LabError, match=r"non-finite (loss|weights) .* at step \d+"):
        pretrain(world, "diverged", lr=1e30, save_steps=100)
    assert not (world / "diverged").exists() and not (world / "diverged.partial").exists()


def test_a_diverging_finetune_stops_and_leaves_nothing(world, reference, tmp_path):
    from lab.train.finetune import FinetuneConfig, run_finetune

    out = tmp_path / "ft"
    with pytest.raises(LabError, match=r"non-finite (loss|weights) .* at step \d+"):
        run_finetune(FinetuneConfig(pretrained=world / "ck-ref", task="translation", epochs=1,
                                    out=out, train_size=16, batch_size=4, lr=1e30, log_steps=1))
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_corpora_verify_with_no_file_found_is_an_error(tmp_path):
    # A table of "missing" rows with exit 0 reads as a pass to a script checking the data.
    (tmp_path / "empty").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LAB_CORPORA"}
    proc = subprocess.run([sys.executable, "-m", "lab.cli", "corpora", "verify", "codetrans",
                           "--corpora", "empty"], capture_output=True, text=True,
                          env=dict(env, HF_HUB_OFFLINE="1"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("lab: error: codetrans: no file of it found (under empty)")
    assert len(proc.stderr.splitlines()) == 1


# --- issue 45 (4, 6): weights and tokenizer are the files training saved ------------------------

def _model_copy(world: Path, source: str, name: str) -> Path:
    target = world / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(world / source, target)
    return target


def _overwrite_in_place(path: Path) -> None:
    """Same size, other bytes at the end (the last tensor's values), mtime kept as it was."""
    stat = path.stat()
    raw = bytearray(path.read_bytes())
    raw[-16:] = bytes((b + 1) % 256 for b in raw[-16:])
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.fixture(scope="module")
def direct(world, reference):
    """The reference model's E0 (GPT-2, no fine-tuning): a lab-finetuned folder."""
    from lab.train.finetune import FinetuneConfig, run_finetune

    manifest = run_finetune(FinetuneConfig(pretrained=world / "ck-ref", task="translation",
                                           epochs=0, out=world / "e0"))
    assert set(manifest["model_files"]) >= {"model.safetensors", "config.json", "tokenizer.json"}
    return world / "e0"


@pytest.mark.parametrize("damage", ["overwritten", "truncated"])
def test_changed_weights_are_refused_by_every_loader(world, reference, direct, tmp_path, damage):
    from lab.eval.generate import EvaluateConfig, run_evaluate
    from lab.modelcard import ExportConfig, export_model
    from lab.train.finetune import FinetuneConfig, run_finetune

    pretrained = _model_copy(world, "ck-ref", f"pt-{damage}")
    tuned = _model_copy(world, "e0", f"e0-{damage}")
    for folder in (pretrained, tuned):
        weights = folder / "model" / "model.safetensors"
        if damage == "overwritten":
            _overwrite_in_place(weights)
        else:
            weights.write_bytes(weights.read_bytes()[:-1000])
    ids = world / "two-ids.txt"
    ids.write_text("codetrans:test:0\ncodetrans:test:1\n")
    expected = ("differs from the sha256 recorded" if damage == "overwritten"
                else r"has \d+ bytes, \d+ recorded")
    calls = {
        "finetune": lambda: run_finetune(FinetuneConfig(
            pretrained=pretrained, task="translation", epochs=0, out=tmp_path / "ft")),
        "evaluate": lambda: run_evaluate(EvaluateConfig(
            model=tuned, task="translation", ids=ids, max_new_tokens=4, out=tmp_path / "ev")),
        "export pre-trained": lambda: export_model(ExportConfig(model=pretrained,
                                                                out=tmp_path / "x1")),
        "export fine-tuned": lambda: export_model(ExportConfig(model=tuned, out=tmp_path / "x2")),
    }
    for name, call in calls.items():
        with pytest.raises(LabError, match=rf"model/model\.safetensors {expected}") as caught:
            call()
        assert str(pretrained if "pre" in name or name == "finetune" else tuned) in str(
            caught.value), (name, caught.value)
    assert list(tmp_path.iterdir()) == []


def test_models_saved_before_the_record_are_checked_for_truncation(world, direct, tmp_path):
    from lab.modelcard import ExportConfig, export_model

    legacy = _model_copy(world, "e0", "e0-legacy")
    manifest = json.loads((legacy / "manifest.json").read_text())
    del manifest["model_files"], manifest["pretrained"]["membership_sha256"]  # legacy: neither
    (legacy / "manifest.json").write_text(json.dumps(manifest))
    assert export_model(ExportConfig(model=legacy, out=tmp_path / "whole"))["out"]
    weights = legacy / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(LabError, match=r"e0-legacy: model/model\.safetensors is truncated"):
        export_model(ExportConfig(model=legacy, out=tmp_path / "cut"))


def test_a_changed_tokenizer_is_refused(world, tmp_path):
    tok = tmp_path / "tok"
    shutil.copytree(world / "tok", tok)
    text = (tok / "tokenizer.json").read_text(encoding="utf-8")
    # Same size: two vocabulary ids swapped would tokenize every document differently.
    (tok / "tokenizer.json").write_text(text.replace('"<pad>":1', '"<pad>":2', 1)
                                        if '"<pad>":1' in text else text[:-2] + " }",
                                        encoding="utf-8")
    assert (tok / "tokenizer.json").stat().st_size == (world / "tok" / "tokenizer.json").stat().st_size
    with pytest.raises(LabError, match=r"--tokenizer .*tok: tokenizer.json differs from the sha256"):
        pretrain(world, "tok-changed", tokenizer=tok)
    assert not (world / "tok-changed").exists()


# --- issue 45 (5): a resumed run logs what an uninterrupted one does ------------------------------

@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_resume_between_two_logs_logs_the_uninterrupted_losses(world, grad_accum):
    # Checkpoints every 2 steps, a log every 5: the resume at step 4 lands inside the window of
    # steps 1-5, which the Trainer would otherwise log over step 5 alone.
    options = dict(max_steps=6, save_steps=2, log_steps=5, grad_accum=grad_accum, batch_size=4)
    uninterrupted = pretrain(world, f"log-ref-{grad_accum}", **options)
    partial = world / f"log-cut-{grad_accum}.partial"
    shutil.copytree(world / f"log-ref-{grad_accum}", partial)
    shutil.rmtree(partial / "checkpoints" / "checkpoint-6")
    resumed = pretrain(world, f"log-cut-{grad_accum}", resume=True, **options)
    assert resumed["resumed_from"] == "checkpoint-4"
    assert resumed["final_weights_sha256"] == uninterrupted["final_weights_sha256"]
    assert [h["step"] for h in resumed["loss"]["history"]] == [1, 5]
    assert resumed["loss"] == uninterrupted["loss"]
    # What a checkpoint of the old kind (no window) gives: the window of step 5 alone.
    partial = world / f"log-old-{grad_accum}.partial"
    shutil.copytree(world / f"log-ref-{grad_accum}", partial)
    shutil.rmtree(partial / "checkpoints" / "checkpoint-6")
    (partial / "checkpoints" / "checkpoint-4" / "lab_logging.json").unlink()
    (partial / "checkpoints" / "checkpoint-4" / "lab_checkpoint.json").unlink()
    old = pretrain(world, f"log-old-{grad_accum}", resume=True, **options)
    assert old["final_weights_sha256"] == uninterrupted["final_weights_sha256"]
    assert old["loss"]["history"][-1]["loss"] != uninterrupted["loss"]["history"][-1]["loss"]
