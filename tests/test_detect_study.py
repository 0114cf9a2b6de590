"""A study's detect stages: which models are scored on which samples with which reference, that
studies without them keep their stages, and the leaderboard over seeds."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from lab.common import LabError
from lab.detect.leaderboard import leaderboard
from lab.study.grid import expand
from lab.study.recipe import load_recipe
from lab.stats import seed_mean_interval

MICRO = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"


def test_detect_stages_score_every_model_with_the_controls_as_reference():
    plain = expand(load_recipe(MICRO))
    planned = expand(load_recipe(MICRO, ["detect.enabled=true", "detect.epochs=[1]"]))
    assert {s.key for s in plain} == {s.key for s in planned if s.kind != "detect"}
    assert not [s for s in plain if s.kind == "detect"]
    detects = [s for s in planned if s.kind == "detect"]
    # per seed: the paired model and the control, pre-trained and fine-tuned at E = 1
    assert len(detects) == 2 * 2 * 2
    for stage in detects:
        model, groups = stage.inputs[0], stage.inputs[1]
        assert stage.labels["groups"] == "paired" and groups.labels["arm"] == "paired"
        assert groups.kind == "pretrain" and groups.labels["seed"] == stage.labels["seed"]
        assert model.labels.get("epochs") in (None, 1)
        if stage.labels["arm"] == "paired":
            reference = stage.inputs[2]
            assert reference.labels["arm"] == "control"
            assert reference.labels["seed"] == stage.labels["seed"]
            assert reference.kind == model.kind and reference.labels.get("epochs") == \
                model.labels.get("epochs")
        else:
            assert len(stage.inputs) == 2  # the control has no reference but itself
    assert len({s.key for s in detects}) == len(detects)


def test_detect_epochs_must_be_fine_tuned():
    with pytest.raises(LabError, match=r"detect.epochs: 3 is not one of finetune.epochs \(0, 1\)"):
        load_recipe(MICRO, ["detect.enabled=true", "detect.epochs=[3]"])
    with pytest.raises(LabError, match="unknown detector"):
        load_recipe(MICRO, ["detect.detectors=[loss, bleu]"])


def test_the_leaderboard_averages_auc_over_seeds_with_a_t_interval():
    rows = [{"model": "gpt2", "arm": "paired", "groups": "paired", "epochs": None,
             "dose": "all", "detector": "loss", "seed": seed, "auc": auc,
             "tpr_at_1pct_fpr": 0.1 * seed, "tpr_at_5pct_fpr": 0.5}
            for seed, auc in enumerate([0.8, 0.9, 1.0])]
    rows.append({**rows[0], "detector": "zlib", "auc": 0.7, "auc_sample_low": 0.6,
                 "auc_sample_high": 0.8})
    board = {r["detector"]: r for r in leaderboard(rows)}
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, 2 df) x sd / sqrt(k)
    assert board["loss"]["auc"] == pytest.approx(0.9)
    assert (board["loss"]["auc_low"], board["loss"]["auc_high"]) == pytest.approx(
        (0.9 - half, 1.0))  # 0.9 + half is past 1: cut
    assert board["loss"]["seeds"] == 3 and board["loss"]["tpr_at_1pct_fpr_mean"] == \
        pytest.approx(0.1)
    wide = leaderboard([{**rows[0], "auc": 0.2}, {**rows[1], "auc": 1.0}])[0]
    assert (wide["auc_low"], wide["auc_high"]) == (0.0, 1.0)  # cut to where an AUC can be
    # one seed: a mean, no interval
    assert (board["zlib"]["auc"], board["zlib"]["auc_low"]) == (0.7, None)
    assert (board["zlib"]["auc_sample_low"], board["zlib"]["auc_sample_high"]) == (0.6, 0.8)
    assert board["loss"]["auc_sample_low"] is None  # three seeds: the interval is over seeds
    assert seed_mean_interval([]) == (None, None, None)


def test_the_leaderboard_table_has_detectors_as_rows_and_conditions_as_columns():
    from lab.detect.leaderboard import leaderboard_markdown

    base = {"model": "gpt2", "groups": "paired", "dose": "all", "seeds": 3,
            "auc_low": 0.7, "auc_high": 0.9}
    rows = [{**base, "arm": "paired", "epochs": None, "detector": "loss", "auc": 0.8},
            {**base, "arm": "paired", "epochs": None, "detector": "zlib", "auc": 0.7,
             "seeds": 1, "auc_low": None, "auc_sample_low": 0.6, "auc_sample_high": 0.8},
            {**base, "arm": "paired", "epochs": 5, "detector": "loss", "auc": 0.6,
             "auc_low": 0.5, "auc_high": 0.7},
            {**base, "arm": "control", "epochs": None, "detector": "min_k", "auc": 0.5,
             "auc_low": None}]
    table = leaderboard_markdown(rows).splitlines()
    assert table[0] == ("| detector | gpt2 paired, pre-trained | gpt2 paired, E=5 | "
                        "gpt2 control on paired, pre-trained |")
    assert table[2] == "| loss | 0.80 [0.70, 0.90] | 0.60 [0.50, 0.70] | - |"
    assert table[3] == "| zlib | 0.70 (0.60-0.80) | - | - |"
    assert table[4] == "| min_k | - | - | 0.50 [n/a (zero spread)] |"  # 3 seeds, no interval
    assert "averaged over 1/3 seeds" in table[-1]


def test_a_study_with_no_contaminated_arm_cannot_ask_for_detectors():
    with pytest.raises(LabError, match=r"detect.enabled: no arm injects test samples "
                                       r"\(arms: control\)"):
        load_recipe(MICRO, ["detect.enabled=true", "arms=[control]"])


def test_detection_rows_carry_the_shift_check_as_its_own_comparison(tmp_path):
    """collect's rows: the membership AUCs (every member, then each dose) and the shift check
    (held-out test against never-seen valid) apart, so the leaderboard never averages them."""
    import json

    from lab.detect.leaderboard import leaderboard_markdown
    from lab.analysis.collect import detection_rows

    recipe = load_recipe(MICRO, ["detect.enabled=true"])
    stage = next(s for s in expand(recipe) if s.kind == "detect" and s.labels["arm"] == "paired")
    folder = stage.out(tmp_path)
    folder.mkdir(parents=True)
    metrics = {"auc": 0.9, "members": 10, "nonmembers": 10}
    (folder / "summary.json").write_text(json.dumps({
        "form": "paired", "baseline": "held_out", "detectors": {"loss": metrics},
        "by_dose": {"2": {"loss": {**metrics, "auc": 0.95}}},
        "shift": {"samples": {"split": "valid"}, "detectors": {"loss": {**metrics, "auc": 0.55}}},
    }))
    assert stage.done(tmp_path)
    rows = detection_rows(recipe, [stage], tmp_path)
    assert [(r["comparison"], r["dose"], r["auc"]) for r in rows] == [
        ("membership", "all", 0.9), ("membership", "2", 0.95), ("shift", "all", 0.55)]
    board = leaderboard(rows)
    assert len(board) == 3
    header = leaderboard_markdown(board).splitlines()[0]
    assert "gpt2 paired, pre-trained: held-out test vs valid" in header
    assert "gpt2 paired, pre-trained, dose 2" in header


def test_the_detect_figure_draws_auc_against_dose_and_stage(tmp_path):
    from lab.analysis.figure import detect_figure

    base = {"model": "gpt2/tiny", "arm": "paired", "groups": "paired", "comparison": "membership",
            "seeds": 3}
    rows = [{**base, "epochs": epochs, "dose": dose, "detector": detector, "auc": auc,
             "auc_low": auc - 0.05, "auc_high": min(1.0, auc + 0.05)}
            for detector, lift in (("loss", 0.1), ("min_k", 0.15))
            for epochs in (None, 1, 5)
            for dose, auc in (("all", 0.8), ("1", 0.6 + lift), ("4", 0.7 + lift))
            if epochs is None or dose == "all"]
    paths = detect_figure(rows, tmp_path / "detect-auc")
    assert [p.name for p in paths] == ["detect-auc.png", "detect-auc.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)
    again = detect_figure(rows, tmp_path / "again")
    assert again[1].read_bytes() == paths[1].read_bytes()  # the same rows, the same SVG
    # neither a ladder nor a fine-tuned model: nothing to draw beyond the table
    assert detect_figure([r for r in rows if r["epochs"] is None and r["dose"] == "all"],
                         tmp_path / "none") == []
    assert not (tmp_path / "none.png").exists()


def test_detectors_can_be_added_to_a_finished_study():
    """`lab study RECIPE --out STUDY --set detect.enabled=true` on a study run without them is
    the same study: its folder is reused, and only detect stages are added."""
    from lab.study.recipe import study_differences

    plain = load_recipe(MICRO)
    with_detect = load_recipe(MICRO, ["detect.enabled=true", "detect.epochs=[1]", "detect.k=0.1"])
    assert study_differences(plain, with_detect) == []
    assert study_differences(plain, load_recipe(MICRO, ["seeds=[0]"])) == ["seeds"]
    before = {s.key for s in expand(plain)}
    assert before < {s.key for s in expand(with_detect)}
