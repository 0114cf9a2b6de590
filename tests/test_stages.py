"""The stage kinds' table (lab.study.stages) and what the runner does around every stage: its
config bound to the study folder, its lock, and the readable TensorBoard view of trained ones."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from lab.modelcard import write_model_card
from lab.study.execution import (TENSORBOARD, _run_stage_unlocked, finish, run_stage,
                                 show_in_tensorboard, stage_lock)
from lab.study.grid import expand
from lab.study.recipe import Recipe, load_recipe
from lab.study.stages import KINDS, UNBOUND, bind

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"


def test_trained_models_get_their_card_from_the_runner():
    assert KINDS["pretrain"].after is write_model_card is KINDS["finetune"].after
    assert all(KINDS[kind].after is None
               for kind in ("inject", "tokenizer", "probe", "evaluate", "detect"))


def test_every_kind_has_one_row_and_one_entry_shape():
    stages = expand(load_recipe(RECIPE, ["detect.enabled=true", "detect.epochs=[1]"]))
    assert {s.kind for s in stages} == set(KINDS)
    for stage in stages:
        spec = KINDS[stage.kind]
        assert isinstance(stage.config, spec.config)
        assert set(spec.key) <= {f.name for f in dataclasses.fields(spec.config)}
        assert len(stage.inputs) <= len(spec.inputs)


def test_every_field_a_recipe_sets_names_its_stage():
    """A recipe section's fields that are its stage config's enter the stage key (a field a
    study could set without changing the key would find another study's stages done)."""
    sections = {"corpus": "inject", "injection": "inject", "tokenizer": "tokenizer",
                "pretrain": "pretrain", "finetune": "finetune", "evaluation": "evaluate",
                "probe": "probe", "detect": "detect"}
    for section, kind in sections.items():
        fields = {f.name for f in dataclasses.fields(type(getattr(Recipe(), section)))}
        shared = fields & {f.name for f in dataclasses.fields(KINDS[kind].config)}
        assert shared and shared <= set(KINDS[kind].key), section


def test_a_stage_config_is_bound_to_the_study_folder_when_it_runs(tmp_path):
    stages = expand(load_recipe(RECIPE))
    by_kind = {s.kind: s for s in reversed(stages)}  # the first stage of each kind
    tokenizer = bind(by_kind["tokenizer"], tmp_path, tmp_path / "corpora")
    assert tokenizer.corpus == by_kind["tokenizer"].inputs[0].out(tmp_path)
    assert tokenizer.out == by_kind["tokenizer"].out(tmp_path) / "tokenizer" and tokenizer.force
    pretrain = by_kind["pretrain"]
    bound = bind(pretrain, tmp_path)
    assert bound.tokenizer == pretrain.inputs[1].out(tmp_path) / "tokenizer"
    assert bound.cache_dir == tmp_path / "cache" and not bound.force and not bound.resume
    pretrain.out(tmp_path).with_name(pretrain.key + ".partial").mkdir(parents=True)
    assert bind(pretrain, tmp_path).resume  # a killed pre-training goes on from its checkpoints
    evaluation = bind(by_kind["evaluate"], tmp_path, None)
    assert evaluation.model == by_kind["evaluate"].inputs[0].out(tmp_path)
    assert evaluation.benchmark == "codetrans" and evaluation.max_samples == 12
    for stage in stages:  # nothing of a config's paths is left to the placeholder
        assert UNBOUND not in dataclasses.asdict(bind(stage, tmp_path)).values(), stage.kind


def _trained(stage, study, run_number=0):
    """What a training stage leaves: its folder with event files and its last file."""
    out = stage.out(study)
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / f"events.out.tfevents.{run_number}.host").write_bytes(b"")
    (out / KINDS[stage.kind].done).write_text("{}")


def test_finish_gives_a_finished_stage_what_a_kill_left_out(tmp_path, monkeypatch):
    """The runner calls finish for every finished stage at the end of each run: a stage killed
    after its last file but before its card gets it then, and an unfinished one nothing."""
    pretrain = next(s for s in expand(load_recipe(RECIPE)) if s.kind == "pretrain")
    after = []
    monkeypatch.setitem(KINDS, "pretrain", dataclasses.replace(KINDS["pretrain"],
                                                               after=after.append))
    finish(pretrain, tmp_path)
    assert after == [] and not (tmp_path / TENSORBOARD).exists()
    _trained(pretrain, tmp_path)
    finish(pretrain, tmp_path)
    assert after == [pretrain.out(tmp_path)] and (tmp_path / TENSORBOARD).is_dir()


def test_a_finished_training_stage_is_linked_under_a_readable_tensorboard_name(tmp_path,
                                                                                monkeypatch):
    stages = expand(load_recipe(RECIPE))
    pretrain = next(s for s in stages if s.kind == "pretrain" and s.labels["arm"] == "paired")
    after = []  # the kind's hook (a model card), called once the stage is finished
    monkeypatch.setitem(KINDS, "pretrain", dataclasses.replace(
        KINDS["pretrain"], run=lambda cfg: _trained(pretrain, tmp_path),
        after=after.append))
    _run_stage_unlocked(pretrain, tmp_path, None)  # as the runner runs it
    assert after == [pretrain.out(tmp_path)]
    seed = pretrain.labels["seed"]
    link = tmp_path / TENSORBOARD / "gpt2" / "paired" / f"seed{seed}" / "pretrain"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == (pretrain.out(tmp_path) / "tensorboard").resolve()
    # A fine-tuning is named by its epochs and train size; stages without events get no link.
    finetune = next(s for s in stages if s.kind == "finetune" and s.labels["epochs"] == 1
                    and s.inputs[0] is pretrain)
    _trained(finetune, tmp_path)
    for stage in stages:
        show_in_tensorboard(stage, tmp_path)
    runs = sorted(str(p.relative_to(tmp_path / TENSORBOARD))
                  for p in (tmp_path / TENSORBOARD).rglob("*") if p.is_symlink())
    assert runs == [f"gpt2/paired/seed{seed}/finetune-epochs1-train_size{finetune.labels['train_size']}",
                    f"gpt2/paired/seed{seed}/pretrain"]
    show_in_tensorboard(pretrain, tmp_path)  # again: the same link, no temporary left
    assert [p.name for p in link.parent.iterdir() if p.name.startswith(".")] == []
    # TensorBoard itself finds the runs through the links, under those names.
    io_wrapper = pytest.importorskip("tensorboard.backend.event_processing.io_wrapper")
    found = {str(Path(d).relative_to(tmp_path / TENSORBOARD))
             for d in io_wrapper.GetLogdirSubdirectories(str(tmp_path / TENSORBOARD))}
    assert found == set(runs)


def test_a_second_runner_waits_for_a_stage_another_holds_and_finds_it_done(tmp_path,
                                                                          monkeypatch):
    stage = next(s for s in expand(load_recipe(RECIPE)) if s.kind == "inject")
    ran = []
    monkeypatch.setitem(KINDS, "inject", dataclasses.replace(KINDS["inject"], run=ran.append))
    held, finished = threading.Event(), []

    def other_runner():
        with stage_lock(stage, tmp_path):
            held.set()
            time.sleep(1.0)
            stage.out(tmp_path).mkdir(parents=True)
            (stage.out(tmp_path) / "manifest.json").write_text(json.dumps({}))

    thread = threading.Thread(target=other_runner)
    thread.start()
    held.wait()
    started = time.perf_counter()
    run_stage(stage, tmp_path, None, threads=1)
    finished.append(time.perf_counter() - started)
    thread.join()
    assert finished[0] >= 0.5 and ran == []  # it waited, then did not run the stage again
    assert stage.done(tmp_path)


def _python_blocks(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [block.split("\n", 1)[1] for block in text.split("```")[1::2]
            if block.startswith("python\n")]


@pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
def test_the_documented_new_kind_runs_as_written(tmp_path, monkeypatch):
    """docs/stages.md's example kind, its module, its row and its grid line as the page shows
    them, run by the runner after a real inject stage."""
    from lab.study.grid import Stage
    from lab.study.stages import StageKind, unbound

    module, row, grid = _python_blocks(Path(__file__).resolve().parents[1] / "docs" / "stages.md")
    corpus_stats = types.ModuleType("corpus_stats")
    monkeypatch.setitem(sys.modules, "corpus_stats", corpus_stats)
    exec(compile(module, "corpus_stats.py", "exec"), corpus_stats.__dict__)
    exec(row, {**corpus_stats.__dict__, "StageKind": StageKind}, table := {})
    monkeypatch.setitem(KINDS, "corpus-stats", table["KINDS"]["corpus-stats"])
    recipe = load_recipe(RECIPE, ["arms=[control]", "seeds=[0]"])
    inject = next(s for s in expand(recipe) if s.kind == "inject")
    made = {"stages": [], "Stage": Stage, "unbound": unbound, "recipe": recipe,
            "arm_stage": {("control", 0): inject}}
    exec(grid, made)
    (stats,) = made["stages"]
    for stage in (inject, stats):
        run_stage(stage, tmp_path, None, threads=1)
    assert stats.done(tmp_path) and stats.key.startswith("corpus-stats-")
    counted = json.loads((stats.out(tmp_path) / "stats.json").read_text())
    manifest = json.loads((inject.out(tmp_path) / "manifest.json").read_text())
    assert counted["documents"] == manifest["counts"]["final_documents"] > 0


def test_a_rank_that_refuses_its_run_is_quoted_by_the_stage(tmp_path):
    """A pre-training launched as ranks that refuses its run (here: no such tokenizer) fails the
    stage with the rank's own line, not a pointer to the log; an earlier attempt's line in the
    same log is not taken for this one's."""
    from lab.common import LabError
    from lab.study.execution import _output_to, launch_ranks
    from lab.train.pretrain import PretrainConfig

    log = tmp_path / "stage.log"
    log.write_text("lab: error: an earlier attempt's refusal\n")
    cfg = PretrainConfig(model="gpt2", corpus=tmp_path / "missing", tokenizer=tmp_path / "tok",
                         out=tmp_path / "out", preset="micro")
    with pytest.raises(LabError) as failed, _output_to(log):
        launch_ranks(cfg, {"processes": 1, "launcher": "torchrun", "deepspeed": "zero2"}, 1, log)
    message = str(failed.value)
    assert message.startswith("pre-training on 1 rank failed (exit 1): ")
    assert message.endswith(f"--tokenizer {tmp_path / 'tok'}: no such directory")
    assert "earlier attempt" not in message
