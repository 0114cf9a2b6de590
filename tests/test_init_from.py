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


# --- membership through every path (issue 59 rows 1, 2, 17): records only, no training --------

def _corpus(setting: str, injected: list[str], held_out: list[str], **more) -> dict:
    return {"setting": setting, "benchmark": "codetrans", "benchmark_split": "test",
            "injected_ids": injected, "held_out_ids": held_out, **more}


LAB_SOURCE = {"path": "/models/A", "kind": "lab"}


def test_two_contaminated_stages_are_joined_not_refused():
    """docs/commands.md (--init-from): a sample is injected if either stage injected it, held
    out only if both held it out."""
    from lab.train.continued import joined_membership

    source = {"corpus": _corpus("paired", ["a", "b"], ["c", "d", "e"])}
    mine = _corpus("paired", ["c"], ["a", "b", "d", "e"])
    joined = joined_membership(LAB_SOURCE, mine, source)
    assert joined["injected_ids"] == ["a", "b", "c"] and joined["held_out_ids"] == ["d", "e"]
    assert "membership" not in joined
    other = _corpus("paired", ["c"], ["a"], benchmark="concode")
    with pytest.raises(LabError, match="--init-from /models/A: it injected codetrans test "
                                       "samples and this corpus concode test"):
        joined_membership(LAB_SOURCE, other, source)


def test_a_contaminated_model_continued_on_a_control_corpus_stays_contaminated():
    from lab.train.continued import joined_membership

    source = {"corpus": _corpus("paired", ["a", "b"], ["c"])}
    joined = joined_membership(LAB_SOURCE, _corpus("control", [], []), source)
    assert (joined["setting"], joined["injected_ids"], joined["held_out_ids"]) == (
        "paired", ["a", "b"], ["c"])


def test_weights_without_a_lab_record_have_unknown_membership_never_control():
    from lab.train.continued import UNKNOWN, joined_membership

    plain = {"path": "/models/hf", "kind": "huggingface"}
    assert joined_membership(plain, _corpus("control", [], []))["membership"] == UNKNOWN
    # ... and so has every model continued from such a model
    source = {"corpus": _corpus("control", [], [], membership=UNKNOWN)}
    assert joined_membership(LAB_SOURCE, _corpus("control", [], []), source)["membership"] \
        == UNKNOWN


def test_a_checkpoint_carries_its_runs_membership_up_to_its_step():
    from lab.train.artefacts import at_step as _at_step

    run = {"kind": "lab-pretrained", "steps": 10, "final_weights_sha256": "f" * 64,
           "corpus": _corpus("paired", ["a", "b"], ["c"]),
           "exposures": {"order": "uniform", "steps": 10, "by_sample": {"a": [3, 8], "b": [9]}},
           "lineage": [{"setting": "paired", "steps": 6, "weights_sha256": "1" * 64},
                       {"setting": "control", "steps": 4, "weights_sha256": "f" * 64}]}
    at = _at_step(run, 7, "checkpoint-7")
    assert at["corpus"] == run["corpus"] and at["steps"] == 7
    assert at["final_weights_sha256"] is None
    assert at["exposures"]["by_sample"] == {"a": [3], "b": []}
    assert at["exposures"]["steps"] == 7 and "summary" in at["exposures"]
    assert [(s["setting"], s["steps"]) for s in at["lineage"]] == [("paired", 6), ("control", 1)]
    assert at["lineage"][-1]["checkpoint"] == "checkpoint-7"
    assert at["lineage"][-1]["weights_sha256"] is None


def _hashed_manifest(folder: Path) -> Path:
    import json

    from lab.train.common import MEMBERSHIP_HASH, membership_hashes

    record = {"kind": "lab-pretrained", "corpus": _corpus("paired", [f"i{n}" for n in range(8)],
                                                          [f"h{n}" for n in range(8)]),
              "exposures": {"order": "uniform", "steps": 4, "by_sample": {"i0": [1]}},
              "model_files": {}}  # a current-format record (its weights are not the point)
    record[MEMBERSHIP_HASH] = membership_hashes(record)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(record))
    return folder / "manifest.json"


def test_an_edited_membership_is_refused_naming_the_manifest_and_field(tmp_path):
    import json

    from lab.models import read_model_manifest, read_stage_manifest

    path = _hashed_manifest(tmp_path / "M")
    assert read_stage_manifest(tmp_path / "M", "--model")["corpus"]["injected_ids"][0] == "i0"
    manifest = json.loads(path.read_text())
    corpus = manifest["corpus"]
    corpus["injected_ids"][:5], corpus["held_out_ids"][:5] = (corpus["held_out_ids"][:5],
                                                              corpus["injected_ids"][:5])
    path.write_text(json.dumps(manifest))
    with pytest.raises(LabError, match=f"^{path}: field corpus.held_out_ids differs from its "
                                       "membership_sha256"):
        read_model_manifest(path)
    # a fine-tuned model's copy of its pre-training record is checked the same way
    tuned = tmp_path / "E" / "manifest.json"
    tuned.parent.mkdir()
    tuned.write_text(json.dumps({"kind": "lab-finetuned", "pretrained": manifest}))
    with pytest.raises(LabError, match="field pretrained.corpus.held_out_ids differs"):
        read_model_manifest(tuned)
    del manifest["corpus"]["held_out_ids"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(LabError, match="field corpus.held_out_ids is missing"):
        read_model_manifest(path)


def test_a_manifest_from_before_the_hash_is_read_with_a_warning(tmp_path, capsys):
    import json

    from lab.models import read_model_manifest
    from lab.train.common import MEMBERSHIP_HASH

    path = _hashed_manifest(tmp_path / "old")
    manifest = json.loads(path.read_text())
    del manifest[MEMBERSHIP_HASH], manifest["model_files"]  # both: a legacy record
    path.write_text(json.dumps(manifest))
    assert read_model_manifest(path)["corpus"] == manifest["corpus"]
    read_model_manifest(path)  # a command reads it several times: one warning
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lab: warning: {path}: no membership_sha256")


def test_a_model_of_unknown_membership_has_no_held_out_group_to_score():
    """lab evaluate splits scores by pretraining_membership: weights of unknown provenance
    may have seen any sample, so nothing is scored as held out (its injected ones still are)."""
    from lab.eval.generate import pretraining_membership

    corpus = {"injected_ids": ["codetrans:test:1"], "held_out_ids": ["codetrans:test:2"]}
    known = pretraining_membership({"kind": "lab-pretrained", "corpus": corpus})
    unknown = pretraining_membership({"kind": "lab-pretrained",
                                      "corpus": {**corpus, "membership": "unknown"}})
    assert known["held_out"] == {"codetrans:test:2"} and unknown["held_out"] == set()
    assert unknown["injected"] == known["injected"] == {"codetrans:test:1"}
