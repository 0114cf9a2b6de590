"""Issue 58, item 4: a placebo that shares nothing with fine-tuning.

By default a study's placebo draws from the splits no model fine-tunes on (CodeTrans: valid)
where they hold enough eligible samples; else from every non-test split, and every fine-tuning
of the seed leaves out the pairs its placebos injected. Each fine-tuning counts the training
pairs its seed's placebos injected (manifest data.placebo_overlap): 0 by default, positive and
recorded where a recipe names the train split itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.study.grid import expand
from lab.study.recipe import load_recipe, placebo_plan
from lab.study.stages import KINDS, bind
from lab.tasks import get_task
from lab.train.finetune import FinetuneConfig, _training_samples

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
ARMS = "arms=[control, paired, paired-placebo]"
# The micro recipe on the tiny corpora (conftest: CodeTrans train 40, valid 20, test 30): 5 test
# samples injected, so 5 placebo samples.
TINY = [ARMS, "injection.samples=5", "injection.fraction=null", "evaluation.max_samples=5",
        "corpus.limit=30"]


def _by(stages, kind, arm, seed=0):
    return [s for s in stages if s.kind == kind and s.labels.get("arm") == arm
            and s.labels.get("seed") == seed]


def test_the_default_pool_is_the_split_no_model_fine_tunes_on():
    """CodeTrans fine-tunes on train: the placebo draws from valid (481 eligible >= the
    placebo's count), its stages are re-keyed (another corpus), and no other arm's stage is but
    those that draw never-seen validation samples (probe, detect: the placebo's samples leave
    every arm's pool, lab.detect.probe.SHARED_POOL_RULE); fine-tunings read the seed's placebo
    corpus without it entering their key."""
    recipe = load_recipe(RECIPE, [ARMS])
    plan = placebo_plan(recipe)
    assert plan.splits == ("valid",) and plan.fine_tuned == ("train",) and not plan.exclude
    stages = expand(recipe)
    named = expand(load_recipe(RECIPE, [ARMS, "injection.placebo_from=[valid]"]))
    assert [s.key for s in stages] == [s.key for s in named]  # the default is valid, as named
    without = {s.key for s in expand(load_recipe(RECIPE))}  # no placebo arm
    others = {s.key for s in stages if s.labels.get("arm") != "paired-placebo"}
    assert others <= without | {s.key for s in stages if s.kind in ("detect", "probe")}
    for seed in (0, 1):
        placebo = _by(stages, "inject", "paired-placebo", seed)[0]
        assert placebo.keyed["placebo_from"] == ["valid"]
        for fine in (s for s in stages if s.kind == "finetune" and s.labels["seed"] == seed):
            assert fine.inputs[1:] == [placebo] and not fine.config.exclude_injected
            assert "exclude_injected" not in fine.keyed


def test_a_pool_too_small_apart_from_fine_tuning_leaves_the_pairs_out_of_every_arm():
    """1,000 placebo samples, valid holds 481: the pool is train + valid (placebo_from unset: the
    corpus and key of studies made before this default), and every arm's fine-tuning of the seed
    leaves out that seed's placebo pairs, its key naming the placebo corpus."""
    overrides = [ARMS, "injection.samples=1000", "injection.fraction=null", "corpus.limit=2000"]
    recipe = load_recipe(RECIPE, overrides)
    plan = placebo_plan(recipe)
    assert plan.exclude and plan.splits == ("train", "valid") and plan.needed == 1000
    stages = expand(recipe)
    placebo = _by(stages, "inject", "paired-placebo")[0]
    assert "placebo_from" not in placebo.keyed
    fines = [s for s in stages if s.kind == "finetune" and s.labels["seed"] == 0]
    assert {s.labels["arm"] for s in fines} == {"control", "paired", "paired-placebo"}
    for fine in fines:
        assert fine.config.exclude_injected and fine.keyed["exclude_injected"] is True
        assert fine.inputs[1:] == [placebo]
    # Named, lab inject's own pool (train, valid) is the same corpus under the same key, as
    # studies made before this default ran it; its fine-tunings leave nothing out, so their keys
    # differ from those that do: their data differ.
    named = expand(load_recipe(RECIPE, overrides + ["injection.placebo_from=[train, valid]"]))
    assert _by(named, "inject", "paired-placebo")[0].key == placebo.key
    assert not any(s.config.exclude_injected for s in named if s.kind == "finetune")
    control = {s.key for s in named if s.kind == "finetune" and s.labels["arm"] == "control"}
    assert control.isdisjoint(s.key for s in fines)


def test_an_impossible_pool_is_refused_naming_the_field(tmp_path):
    """A named pool too small for the placebo's count: one line naming injection.placebo_from,
    exit 2, nothing written."""
    with pytest.raises(LabError) as info:
        load_recipe(RECIPE, [ARMS, "injection.samples=1000", "injection.fraction=null",
                             "corpus.limit=2000", "injection.placebo_from=[valid]"])
    assert "injection.placebo_from: 'paired-placebo' needs 1000 placebo samples" in str(info.value)
    out = tmp_path / "study"
    result = subprocess.run(
        [sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--out", str(out), "--dry-run",
         "--set", ARMS, "--set", "injection.samples=1000", "--set", "injection.fraction=null",
         "--set", "corpus.limit=2000", "--set", "injection.placebo_from=[valid]"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "injection.placebo_from" in result.stderr and not out.exists()
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def _placebo_and_fine_tuning(tiny: Path, study: Path, overrides: list[str]):
    """Build seed 0's placebo corpus of the tiny study; the data of the control's fine-tuning
    (its training pairs and their note), as the study binds it."""
    stages = expand(load_recipe(RECIPE, TINY + overrides))
    placebo = _by(stages, "inject", "paired-placebo")[0]
    manifest = KINDS["inject"].run(bind(placebo, study, tiny))
    fine = next(s for s in _by(stages, "finetune", "control") if s.labels["epochs"] == 1)
    cfg = bind(fine, study, tiny)
    assert cfg.injected_corpora == (placebo.out(study),)
    train, _valid, note = _training_samples(get_task(cfg.task), cfg)
    return manifest, cfg, train, note


def test_the_default_placebo_shares_no_pair_with_fine_tuning(tiny_corpora, tmp_path):
    manifest, cfg, train, note = _placebo_and_fine_tuning(tiny_corpora, tmp_path, [])
    pool = manifest["placebo"]["pool"]
    assert pool["splits"] == ["valid"] and set(pool["eligible_by_split"]) == {"valid"}
    assert manifest["placebo"]["by_split"] == {"valid": 5}
    assert note["injected"]["pairs"] == 5 and not note["injected"]["excluded"]
    assert note["placebo_overlap"] == 0 and note["train_used"] == len(train) == 16


def test_a_placebo_named_from_train_overlaps_and_is_recorded(tiny_corpora, tmp_path):
    manifest, cfg, train, note = _placebo_and_fine_tuning(
        tiny_corpora, tmp_path, ["injection.placebo_from=[train]", "finetune.train_sizes=[null]"])
    assert manifest["placebo"]["by_split"] == {"train": 5}
    assert manifest["placebo"]["pool"]["eligible_by_split"]["train"] >= 5
    # Every training pair is used (train_sizes null), so all 5 placebo pairs are among them.
    assert note["placebo_overlap"] == 5 and len(train) == note["train_available"]
    assert note["injected"]["corpora"][0]["by_split"] == {"train": 5}
    # Told to leave them out, the same fine-tuning trains on 5 pairs fewer, none of them.
    left_out = FinetuneConfig(**{**cfg.__dict__, "exclude_injected": True})
    fewer, _valid, note = _training_samples(get_task(cfg.task), left_out)
    placebo = {s["id"] for s in manifest["placebo"]["samples"]}
    assert len(fewer) == len(train) - 5 and not placebo & {s.id for s in fewer}
    assert note["placebo_overlap"] == 0 and note["injected"]["excluded_train"] == 5


def test_fine_tuning_refuses_a_folder_that_is_not_a_corpus(tiny_corpora, tmp_path):
    with pytest.raises(LabError, match="--exclude-injected: name the corpora"):
        FinetuneConfig(pretrained=tmp_path, task="translation", epochs=1, out=tmp_path / "o",
                       exclude_injected=True)
    (tmp_path / "not-a-corpus").mkdir()
    (tmp_path / "not-a-corpus" / "manifest.json").write_text(json.dumps({"kind": "other"}))
    cfg = FinetuneConfig(pretrained=tmp_path, task="translation", epochs=1, out=tmp_path / "o",
                         injected_corpora=(tmp_path / "not-a-corpus",), corpora_dir=tiny_corpora)
    with pytest.raises(LabError, match="--injected-corpora .*not a lab corpus"):
        _training_samples(get_task("translation"), cfg)
