"""The plain pre-training loop (lab.train.loop) against the HF Trainer it replaces on one GPU."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from lab.common import LabError
from lab.train.pretrain import PretrainConfig, resolve_for_device, run_pretrain

BLOCK = 128
needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


def config(world: Path, out: Path, **more) -> PretrainConfig:
    options = dict(model="gpt2", corpus=world / "paired", tokenizer=world / "tok", out=out,
                   preset="micro", max_steps=12, lr=3e-3, batch_size=8, block_size=BLOCK,
                   save_steps=4, log_steps=3, report_to="none", cache_dir=out.parent / "cache")
    options.update(more)
    return PretrainConfig(**options)


def without_dropout(monkeypatch) -> None:
    """Dropout draws from the global RNG, which the Trainer's loader also draws from: with it
    off, the two loops must compute the same thing."""
    import lab.train.pretrain as pretrain

    build = pretrain.build_config

    def build_without_dropout(*args, **kwargs):
        built = build(*args, **kwargs)
        for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob",
                     "attention_probs_dropout_prob"):
            if hasattr(built, name):
                setattr(built, name, 0.0)
        return built

    monkeypatch.setattr(pretrain, "build_config", build_without_dropout)


def weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "model" / "model.safetensors"))


@needs_corpora
@pytest.mark.parametrize("family, grad_accum", [("gpt2", 1), ("gpt2", 2), ("roberta", 2)])
def test_the_plain_loop_trains_what_the_trainer_trains(micro_world, tmp_path, monkeypatch,
                                                       family, grad_accum, capsys):
    """Same data order (first batch), masks, optimizer, schedule and loss scaling: with dropout
    off, the weights after 12 steps across an epoch boundary agree to float rounding, and the
    logged losses to their 4 digits; both show their logs alike, on stderr, none on stdout."""
    import torch

    without_dropout(monkeypatch)
    capsys.readouterr()
    more = dict(model=family, grad_accum=grad_accum, warmup_steps=2, lr_scheduler="cosine",
                batch_size=64 // grad_accum)
    runs = {loop: run_pretrain(config(micro_world, tmp_path / loop, loop=loop, **more))
            for loop in ("trainer", "plain")}
    trainer, plain = runs["trainer"], runs["plain"]
    assert plain["speed"]["loop"] == "plain" and trainer["speed"]["loop"] == "trainer"
    assert plain["init_weights_sha256"] == trainer["init_weights_sha256"]
    assert plain["first_batch_sha256"] == trainer["first_batch_sha256"]
    assert plain["steps"] == trainer["steps"] == 12
    per_epoch = -(-plain["packing"]["sequences"] // more["batch_size"]) // grad_accum
    assert per_epoch < 12, "the run must cross an epoch boundary"
    history = [(h["step"], h["loss"]) for h in plain["loss"]["history"]]
    assert [step for step, _ in history] == [h["step"] for h in trainer["loss"]["history"]]
    printed = capsys.readouterr()
    assert "{'loss'" not in printed.out and printed.err.count("{'loss'") == 2 * len(history)
    for (_, mine), theirs in zip(history, trainer["loss"]["history"]):
        assert mine == pytest.approx(theirs["loss"], abs=2e-4)
    assert plain["loss"]["train_loss"] == pytest.approx(trainer["loss"]["train_loss"], rel=1e-4)
    a, b = weights(tmp_path / "plain"), weights(tmp_path / "trainer")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=2e-5, rtol=1e-4, msg=name)


@needs_corpora
@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_a_plain_run_stopped_after_a_checkpoint_resumes_to_the_same_weights(
        micro_world, tmp_path, monkeypatch, family):
    """Dropout on: the RNG state, the optimizer, the schedule, the data position (in the second
    epoch) and the loss window all come back from the checkpoint."""
    import lab.train.loop as loop

    more = dict(model=family, loop="plain", max_steps=20, save_steps=5, batch_size=64)
    reference = run_pretrain(config(micro_world, tmp_path / "ref", **more))

    save = loop._save_checkpoint

    def save_then_stop(checkpoint, *args, **kwargs):
        save(checkpoint, *args, **kwargs)
        if checkpoint.name == "checkpoint-15":
            raise KeyboardInterrupt

    monkeypatch.setattr(loop, "_save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_pretrain(config(micro_world, tmp_path / "cut", **more))
    monkeypatch.setattr(loop, "_save_checkpoint", save)
    checkpoints = sorted(p.name for p in (tmp_path / "cut.partial" / "checkpoints").glob(
        "checkpoint-*"))  # beside them: the run's record of their weights
    assert checkpoints == ["checkpoint-10", "checkpoint-15"]  # the newest two
    assert resumed_epoch(tmp_path / "cut.partial" / "checkpoints" / "checkpoint-15") > 1
    resumed = run_pretrain(config(micro_world, tmp_path / "cut", resume=True, **more))
    assert resumed["resumed_from"] == "checkpoint-15" and resumed["steps_this_run"] == 5
    assert resumed["final_weights_sha256"] == reference["final_weights_sha256"]
    assert resumed["loss"]["history"] == reference["loss"]["history"]
    assert resumed["loss"]["train_loss"] == reference["loss"]["train_loss"]
    assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-15", "checkpoint-20"]


def resumed_epoch(checkpoint: Path) -> float:
    return json.loads((checkpoint / "trainer_state.json").read_text())["epoch"]


@needs_corpora
def test_a_resume_keeps_the_loop(micro_world, tmp_path):
    run_pretrain(config(micro_world, tmp_path / "done", loop="plain", max_steps=4))
    shutil.copytree(tmp_path / "done", tmp_path / "other.partial")
    with pytest.raises(LabError, match="another config.*loop"):
        run_pretrain(config(micro_world, tmp_path / "other", loop="trainer", max_steps=4,
                            resume=True))


@needs_corpora
def test_a_non_finite_loss_stops_the_plain_loop_naming_its_step(micro_world, tmp_path):
    with pytest.raises(LabError, match=r"non-finite loss .* at step \d+"):
        run_pretrain(config(micro_world, tmp_path / "nan", loop="plain", lr=1e6, max_steps=30,
                            save_steps=100))
    assert not (tmp_path / "nan").exists() and not (tmp_path / "nan.partial").exists()


def test_adamw_decays_what_the_trainer_decays():
    import torch
    from transformers import Trainer

    from lab.models import build_config, build_model
    from lab.train.loop import decay_groups

    class Tok:  # what build_config reads of a tokenizer
        pad_token_id, bos_token_id, eos_token_id, mask_token_id = 1, 0, 2, 4

        def __len__(self):
            return 300

    for family in ("gpt2", "roberta"):
        with torch.device("meta"):
            model = build_model(family, build_config(family, "micro", Tok(), BLOCK))
        by_name = dict(model.named_parameters(remove_duplicate=False))  # tied ones under each name
        decayed = {id(p) for p in decay_groups(model, 0.1)[0]["params"]}
        theirs = {id(by_name[n]) for n in Trainer.get_decay_parameter_names(None, model)}
        assert decayed == theirs and len(decayed) > 4, family


@pytest.mark.parametrize("device, processes, more, expected", [
    ("cuda", 1, {}, "plain"),
    ("cpu", 1, {}, "trainer"),
    ("cuda", 2, {}, "trainer"),
    ("cuda", 1, {"deepspeed": Path("zero2.json")}, "trainer"),
    ("cuda", 1, {"report_to": "tensorboard,wandb"}, "trainer"),
    ("cuda", 1, {"report_to": "none"}, "plain"),
    ("cpu", 1, {"loop": "plain"}, "plain"),
])
def test_one_process_on_a_gpu_gets_the_plain_loop(device, processes, more, expected):
    cfg = PretrainConfig(model="gpt2", corpus=Path("c"), tokenizer=Path("t"), out=Path("o"),
                         preset="tiny", **more)
    assert resolve_for_device(cfg, device, processes).loop == expected


def test_the_plain_loop_refuses_what_it_does_not_do(micro_world, tmp_path, monkeypatch):
    with pytest.raises(LabError, match="--loop sideways: choose from trainer, plain"):
        config(micro_world, tmp_path / "x", loop="sideways")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(LabError, match="--loop plain: the plain loop runs one process"):
        run_pretrain(config(micro_world, tmp_path / "y", loop="plain"))


def test_a_recipe_cannot_ask_the_plain_loop_for_ranks():
    from lab.study.recipe import load_recipe

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "quickstart.yaml"
    with pytest.raises(LabError, match="pretrain.loop: plain runs one process"):
        load_recipe(recipe, ["pretrain.loop=plain", "resources.pretrain.processes=2"])
    assert load_recipe(recipe, ["pretrain.loop=plain"]).pretrain.loop == "plain"
