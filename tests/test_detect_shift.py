"""The distribution-shift check (issue 58): a two-sided test that finds a shift in either
direction, a length-matched validation draw made afresh per seed, the check read as a bound, and
the leaderboard's wording where the AUCs over seeds have no spread."""
from __future__ import annotations

import random
import statistics

import pytest

from lab.corpora.base import Sample
from lab.detect.leaderboard import leaderboard, leaderboard_markdown, two_sided_p
from lab.detect.run import detection_metrics
from lab.detect.shift import (MATCH_CANDIDATES, bound, length_matched_draw, scored_length,
                              shift_metrics)
from lab.stats import membership_auc


def _sample(split: str, index: int, length: int) -> Sample:
    return Sample(id=f"codetrans:{split}:{index}", split=split, index=index,
                  input="x" * length, output="")


def test_the_shift_test_is_two_sided_and_finds_valid_samples_that_read_as_more_member_like():
    rng = random.Random(0)
    test = [rng.gauss(0.0, 1.0) for _ in range(40)]
    valid = [rng.gauss(1.0, 1.0) for _ in range(40)]  # valid more member-like (higher scores)
    metrics = shift_metrics(detection_metrics(test, valid), test, valid)
    assert metrics["auc"] < 0.3 and metrics["direction"] == "valid more member-like"
    assert metrics["alternative"] == "two-sided" and metrics["p"] < 0.05
    # the one-sided membership p (test more member-like) cannot see this direction
    assert detection_metrics(test, valid)["p"] > 0.95
    # the same shift the other way round is just as significant
    mirrored = shift_metrics(detection_metrics(valid, test), valid, test)
    assert mirrored["direction"] == "test more member-like"
    assert mirrored["p"] == pytest.approx(metrics["p"])
    same = [rng.gauss(0.0, 1.0) for _ in range(40)]
    assert shift_metrics(detection_metrics(test, same), test, same)["p"] > 0.05


def test_the_check_is_read_as_a_bound_with_its_interval_and_what_it_could_have_seen():
    text = bound(0.46, 0.33, 0.59, 0.52, 0.18, (40, 40))
    assert text.startswith("shift AUC 0.46 [0.33, 0.59] (two-sided p 0.52; valid more "
                           "member-like)")
    assert ("not significant; a shift below |AUC - 0.5| = 0.18 (AUC 0.32-0.68) is not excluded"
            in text and "80% power" in text and "40 vs 40 samples" in text)
    assert "no shift" not in text
    found = bound(0.71, 0.60, 0.82, 0.001, 0.18, (40, 40))
    assert found.endswith(": a shift (p <= 0.05)") and "not excluded" not in found


def test_the_detectable_shift_shrinks_with_the_samples_and_is_in_every_shift_row():
    """The rank test's detectable shift: (1.96 + 0.84) x sqrt((n1 + n2 + 1) / (12 n1 n2)):
    0.18 for 40 vs 40, 0.08 for 200 vs 200; shift_metrics states it and quotes it."""
    from lab.detect.shift import detectable_shift, rank_null_sd

    assert detectable_shift(rank_null_sd(40, 40)) == pytest.approx(0.182, abs=0.001)
    assert detectable_shift(rank_null_sd(200, 200)) == pytest.approx(0.081, abs=0.001)
    rng = random.Random(2)
    test = [rng.gauss(0.0, 1.0) for _ in range(40)]
    valid = [rng.gauss(0.0, 1.0) for _ in range(30)]
    metrics = shift_metrics(detection_metrics(test, valid), test, valid)
    assert metrics["detectable_shift"] == detectable_shift(rank_null_sd(40, 30))
    assert f"{metrics['detectable_shift']:.2f}" in metrics["bound"]
    # a detector with its own test: its p and its null spread are the ones used
    own = shift_metrics(detection_metrics(test, valid), test, valid, 0.5, 0.1)
    assert own["p"] == 0.5 and own["detectable_shift"] == detectable_shift(0.1)


def test_the_draw_is_made_afresh_per_seed_and_is_the_same_for_one_seed():
    pool = [_sample("valid", i, 100 + 3 * i) for i in range(300)]
    targets = [_sample("test", i, 150 + 11 * i) for i in range(40)]
    first, record = length_matched_draw(pool, targets, 0, "input")
    again, _ = length_matched_draw(pool, targets, 0, "input")
    other, other_record = length_matched_draw(pool, targets, 1, "input")
    assert [s.id for s in first] == [s.id for s in again]
    assert {s.id for s in first} != {s.id for s in other}
    assert (record["seed"], other_record["seed"]) == (0, 1)
    assert len(first) == len({s.id for s in first}) == len(targets)  # without replacement
    assert record["pool"] == len(pool) and record["count"] == len(targets)
    # a pool no larger than the targets is used whole
    small, small_record = length_matched_draw(pool[:30], targets, 0, "input")
    assert len(small) == 30 and small_record["fewer_eligible"]


def test_length_matching_brings_the_groups_lengths_close():
    # the pool is mostly long, as the valid split is against the test split
    pool = ([_sample("valid", i, 400 + i) for i in range(400)]
            + [_sample("valid", 400 + i, 100 + 5 * i) for i in range(60)])
    targets = [_sample("test", i, 100 + 7 * i) for i in range(40)]
    drawn, record = length_matched_draw(pool, targets, 3, "input")
    target_median = statistics.median(len(s.input) for s in targets)
    lengths = record["lengths"]
    assert lengths["targets"]["median"] == target_median
    gap_before = abs(lengths["pool_before_matching"]["median"] - target_median)
    gap_after = abs(lengths["drawn_after_matching"]["median"] - target_median)
    assert gap_before > 200 and gap_after < 20
    assert lengths["drawn_after_matching"]["median"] == statistics.median(
        len(s.input) for s in drawn)
    # each drawn sample is near some target: within the spacing of MATCH_CANDIDATES neighbours
    target_lengths = sorted(len(s.input) for s in targets)
    assert all(min(abs(len(s.input) - t) for t in target_lengths) <= 5 * MATCH_CANDIDATES * 2
               for s in drawn)


def test_the_length_is_that_of_the_scored_form():
    sample = Sample(id="codetrans:test:0", split="test", index=0, input="abc", output="defgh")
    assert scored_length(sample, "input") == 3
    assert scored_length(sample, "output") == 5
    assert scored_length(sample, "unpaired") == 8
    assert scored_length(sample, "paired") > 8  # the separator joins them


def test_an_older_one_sided_shift_row_gives_its_two_sided_p():
    rng = random.Random(1)
    for shift in (-0.6, -0.2, 0.1, 0.5):
        test = [round(rng.gauss(shift, 1.0), 1) for _ in range(40)]  # ties, as scores round
        valid = [round(rng.gauss(0.0, 1.0), 1) for _ in range(40)]
        auc, one_sided = membership_auc(test, valid, True)
        older = {"auc": auc, "p": one_sided, "members": 40, "nonmembers": 40}
        wanted = shift_metrics(detection_metrics(test, valid), test, valid)["p"]
        assert two_sided_p(older) == pytest.approx(wanted, rel=1e-3)
    assert two_sided_p({"p": 0.3, "alternative": "two-sided"}) == 0.3


def _rows(aucs, comparison="membership", **more):
    return [{"model": "gpt2", "arm": "paired", "groups": "paired", "epochs": None,
             "comparison": comparison, "dose": "all", "detector": "min_k", "seed": seed,
             "auc": auc, "members": 40, "nonmembers": 40, **more}
            for seed, auc in enumerate(aucs)]


def test_aucs_at_the_ceiling_are_not_printed_as_a_point_interval():
    board = leaderboard(_rows([1.0, 0.997, 1.0]))
    assert (board[0]["auc_min"], board[0]["auc_max"]) == (0.997, 1.0)
    cell = leaderboard_markdown(board).splitlines()[2]
    assert "each of 3 models >= 0.997 (40 vs 40)" in cell and "[" not in cell
    every_one = leaderboard_markdown(leaderboard(_rows([1.0, 1.0, 1.0]))).splitlines()[2]
    assert "each of 3 models = 1.000 (40 vs 40)" in every_one and "[1.00, 1.00]" not in every_one
    floor = leaderboard_markdown(leaderboard(_rows([0.0, 0.002, 0.0]))).splitlines()[2]
    assert "each of 3 models <= 0.002 (40 vs 40)" in floor
    # equal AUCs away from the ceiling: said to have no spread, with no point interval
    equal = leaderboard(_rows([0.51, 0.51, 0.51]))
    assert equal[0]["auc_low"] is None
    assert "0.51 in each of 3 models (spread 0)" in leaderboard_markdown(equal).splitlines()[2]
    # below the ceiling the t-interval stays
    spread = leaderboard_markdown(leaderboard(_rows([0.9, 0.95, 1.0]))).splitlines()[2]
    assert "0.95 [" in spread and "each of" not in spread


def test_a_shift_cell_carries_the_per_model_two_sided_ps():
    rows = _rows([0.40, 0.45, 0.42], "shift", alternative="two-sided")
    for row, p in zip(rows, (0.04, 0.5, 0.2)):
        row["p"] = p
    board = leaderboard(rows)
    assert (board[0]["p_two_sided_min"], board[0]["p_two_sided_max"]) == (0.04, 0.5)
    cell = leaderboard_markdown(board).splitlines()[2]
    assert cell.endswith(", p 0.04-0.50 |")  # one model found a shift: no 'not excluded'
    assert "'a shift below x is not excluded'" in leaderboard_markdown(board)
    # no model's p reaches 0.05: the cell says what the least sensitive one could have seen
    for row, p, smallest in zip(rows, (0.3, 0.5, 0.2), (0.18, 0.20, 0.17)):
        row["p"], row["detectable_shift"] = p, smallest
    cell = leaderboard_markdown(leaderboard(rows)).splitlines()[2]
    assert cell.endswith(", p 0.20-0.50; a shift below 0.20 is not excluded |")


def test_the_draw_is_in_every_detect_stage_key_and_another_is_refused(tmp_path):
    """A study's detect stage scored with the earlier draw (one fixed validation set, one-sided
    shift test) had no draw in its key: every stage now names it, so such a stage is scored
    again, not read as this one's."""
    from lab.common import LabError
    from lab.detect.run import run_detect
    from lab.detect.shift import DRAW
    from lab.study.stages import key_fields, unbound

    assert key_fields("detect", unbound("detect"))["draw"] == DRAW
    with pytest.raises(LabError, match="draw"):
        run_detect(tmp_path / "model", draw="fixed")
