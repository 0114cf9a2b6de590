"""`lab pretrain --init-from`: continued pre-training from a lab model or a Hugging Face folder."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.tokenizer import load_tokenizer, train_tokenizer
from lab.train.pretrain import PretrainConfig, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

BLOCK = 128


@pytest.fixture(scope="module")
def world(micro_world, tmp_path_factory):
    """The shared micro world, with this module's own outputs beside it."""
    root = tmp_path_factory.mktemp("init-from")
    for name in ("control", "tok", "paired"):
        (root / name).symlink_to(micro_world / name)
    return root


def pretrain(world: Path, name: str, **overrides) -> dict:
    options = dict(model="gpt2", corpus=world / "paired", tokenizer=world / "tok",
                   out=world / name, preset="micro", max_steps=6, lr=3e-3, batch_size=8,
                   block_size=BLOCK, seed=0, save_steps=100, log_steps=1,
                   cache_dir=world / "cache")
    options.update(overrides)
    return run_pretrain(PretrainConfig(**options))


@pytest.fixture(scope="module")
def source(world) -> dict:
    """A micro GPT-2 pre-trained 10 steps (lab OUT `A`), and its weights saved again as a plain
    Hugging Face folder without a manifest or tokenizer files (`A-hf`)."""
    from transformers import AutoModelForCausalLM

    manifest = pretrain(world, "A", max_steps=10)
    AutoModelForCausalLM.from_pretrained(world / "A" / "model").save_pretrained(world / "A-hf")
    return manifest


@pytest.fixture
def no_dropout(monkeypatch):
    """Runs train without dropout, so their first step's loss is the starting weights' own."""
    import lab.train.pretrain as module

    build = module.build_config

    def without_dropout(*args, **kwargs):
        config = build(*args, **kwargs)
        config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
        return config

    monkeypatch.setattr(module, "build_config", without_dropout)


@pytest.fixture
def first_batch(monkeypatch) -> list:
    """The first batch a run collates (the one it trains on first), once cleared per run."""
    from lab.train.packing import PackedCollator

    seen: list = []
    collate = PackedCollator.__call__

    def recording(self, features):
        batch = collate(self, features)
        if not seen:
            seen.append({k: v.clone() if hasattr(v, "clone") else v for k, v in batch.items()})
        return batch

    monkeypatch.setattr(PackedCollator, "__call__", recording)
    return seen


def _loss_of(model_dir: Path, batch: dict) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return float(model(**batch).loss)


def _sha(batch: dict) -> str:
    return hashlib.sha256(batch["input_ids"].numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("loop", ["trainer", "plain"])
def test_first_step_loss_is_the_lab_models_own(world, source, no_dropout, first_batch, loop):
    run = pretrain(world, f"from-A-{loop}", init_from=world / "A", max_steps=1, loop=loop)
    [batch] = first_batch
    assert _sha(batch) == run["first_batch_sha256"]
    expected = _loss_of(world / "A" / "model", batch)
    assert run["loss"]["train_loss"] == pytest.approx(expected, abs=1e-5)
    assert run["init_weights_sha256"] == source["final_weights_sha256"]
    weights_sha = source["model_files"]["model.safetensors"]["sha256"]
    assert run["init_from"] == {"path": str((world / "A").resolve()), "kind": "lab",
                                "weights_sha256": weights_sha, "steps": 10}
    assert run["config"]["init_weights_from_sha256"] == weights_sha
    # From random weights, the same first batch scores far worse: the weights were loaded.
    first_batch.clear()
    scratch = pretrain(world, f"scratch-{loop}", max_steps=1, loop=loop)
    assert scratch["first_batch_sha256"] == run["first_batch_sha256"]
    assert scratch["init_from"] is None and "init_weights_from_sha256" not in scratch["config"]
    assert scratch["loss"]["train_loss"] > expected + 0.2


def test_a_hugging_face_folder_is_accepted(world, source, no_dropout, first_batch):
    run = pretrain(world, "from-A-hf", init_from=world / "A-hf", max_steps=1)
    [batch] = first_batch
    assert run["loss"]["train_loss"] == pytest.approx(_loss_of(world / "A" / "model", batch),
                                                      abs=1e-5)
    assert run["init_weights_sha256"] == source["final_weights_sha256"]
    assert run["init_from"]["kind"] == "huggingface" and run["init_from"]["steps"] is None


def test_hugging_face_tokenizer_files_must_match(world, source, tmp_path):
    """With tokenizer files beside the weights, their vocabulary must be the run's (a dry run
    checks it too); without, the vocabulary size must (test_refusals)."""
    same = tmp_path / "same-tok"
    shutil.copytree(world / "A-hf", same)
    load_tokenizer(world / "tok").save_pretrained(str(same))
    plan = pretrain(world, "unused", init_from=same, dry_run=True)
    assert plan["parameters"]["total"] > 0
    other = tmp_path / "other-tok"
    shutil.copytree(world / "A-hf", other)
    train_tokenizer(world / "control", tmp_path / "tok3", ["codetrans", "concode"],
                    vocab_size=1100)
    load_tokenizer(tmp_path / "tok3").save_pretrained(str(other))
    with pytest.raises(LabError, match=r"--init-from .*other-tok: .*another vocabulary"):
        pretrain(world, "unused", init_from=other, dry_run=True)


@pytest.fixture(scope="module")
def misfits(world, source) -> Path:
    """Folders a micro GPT-2 run on `tok` cannot start from."""
    from lab.models import build_config, build_model

    root = world / "misfits"
    root.mkdir()
    tok = load_tokenizer(world / "tok")
    build_model("roberta", build_config("roberta", "micro", tok, BLOCK)).save_pretrained(
        root / "roberta")
    build_model("gpt2", build_config("gpt2", "tiny", tok, BLOCK)).save_pretrained(root / "tiny")
    train_tokenizer(world / "control", world / "tok2", ["codetrans", "concode"], vocab_size=1000)
    pretrain(world, "on-tok2", tokenizer=world / "tok2", max_steps=1)
    (root / "pickle").mkdir()
    shutil.copy(world / "A-hf" / "config.json", root / "pickle")
    (root / "pickle" / "pytorch_model.bin").write_bytes(b"not loaded")
    (root / "empty").mkdir()
    return root


@pytest.mark.parametrize("case, fragment", [
    ("roberta", "a roberta model, not gpt2"),
    ("tiny", r"another shape than the gpt2 micro preset.*layers 4 \(this run 2\)"),
    ("on-tok2", "trained with another tokenizer"),
    ("missing", "no such directory"),
    ("pickle", "no safetensors weights, only pytorch_model.bin"),
    ("empty", "no config.json"),
])
def test_refusals_before_any_work(world, misfits, tmp_path, case, fragment):
    folder = world / case if case in ("on-tok2", "missing") else misfits / case
    out = tmp_path / "out"
    with pytest.raises(LabError, match=f"--init-from {folder}: .*{fragment}"):
        pretrain(world, "unused", out=out, init_from=folder)
    assert not out.exists() and not out.with_name("out.partial").exists()


def test_the_output_never_replaces_the_weights_it_starts_from(world, source):
    before = (world / "A" / "manifest.json").read_bytes()
    with pytest.raises(LabError, match="is an input of this command"):
        pretrain(world, "A", init_from=world / "A", force=True)
    assert (world / "A" / "manifest.json").read_bytes() == before


def test_resume_refuses_another_init(world, source):
    pretrain(world, "init-r", init_from=world / "A", max_steps=1)
    shutil.copytree(world / "init-r", world / "init-r2.partial")
    with pytest.raises(LabError, match="another config.*init_from"):
        pretrain(world, "init-r2", max_steps=1, resume=True)


def test_cli_refusal_is_one_line_and_exit_code_2(world, tmp_path):
    out = tmp_path / "out"
    args = [sys.executable, "-m", "lab.cli", "pretrain", "--model", "gpt2",
            "--corpus", str(world / "paired"), "--tokenizer", str(world / "tok"),
            "--out", str(out), "--preset", "micro", "--max-steps", "2",
            "--block-size", str(BLOCK), "--init-from", str(tmp_path / "nowhere")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lab: error: --init-from "), proc.stderr
    assert "no such directory" in lines[0]
    assert not out.exists() and not out.with_name("out.partial").exists()
