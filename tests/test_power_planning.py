"""Power as a planner needs it (issue 69, item 5): per test, the whole family, and how both move
with the shape of the per-seed effects and the correlation between the family's tests.

The lab's numbers (lab.stats.simulated_powers) are checked against a plain simulation written
here, independently: its own draws of each shape, every sign pattern enumerated, Holm as a loop.
Two simulations of `n` studies each differ by Monte Carlo error alone with SD
sqrt(2 p (1 - p) / n); AGREE allows four of them. The null simulations (effect 0) are the
calibration: the rejection rate of one test is the test's size, the share of families with any
rejection Holm's family-wise error."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.stats import (ALPHA, BIMODAL_OFFSET, HEAVY_TAIL_DF, PLANNING_SHAPES, POWER_SIMULATIONS,
                       SENSITIVITY_CORRELATIONS, simulated_power, simulated_powers,
                       standardised_effects)

ROOT = Path(__file__).resolve().parents[1]
PLAIN_STUDIES = 4000
D = 1.0  # the dry run's default: statistics.smallest_effect 2 over planning_sd 2


def agree(p: float) -> float:
    """Four SDs of the difference between the lab's and the plain simulation at a power p."""
    return 4 * math.sqrt(p * (1 - p) * (1 / POWER_SIMULATIONS + 1 / PLAIN_STUDIES))


def plain_draws(shape: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Per-seed noise of mean 0 and SD 1, drawn another way than the lab draws it."""
    if shape == "normal":
        return rng.normal(size=size)
    if shape == "heavy-tailed":  # a t variate as a normal over the root of a scaled chi-square
        df = HEAVY_TAIL_DF
        t = rng.normal(size=size) / np.sqrt(rng.chisquare(df, size) / df)
        return t / math.sqrt(df / (df - 2))
    memorises = rng.integers(0, 2, size) == 1  # bimodal: which half the seed is in
    centre = np.where(memorises, BIMODAL_OFFSET, -BIMODAL_OFFSET)
    return centre + rng.normal(0.0, math.sqrt(1 - BIMODAL_OFFSET ** 2), size)


def plain_p_values(effects: np.ndarray) -> np.ndarray:
    """Two-sided exact sign-flip p of each row: the share of all 2^K sign patterns whose sum is
    at least as far from 0 as the observed sum."""
    k = effects.shape[1]
    patterns = np.array([[1.0 if (i >> j) & 1 else -1.0 for j in range(k)] for i in range(2 ** k)])
    p = np.empty(len(effects))
    for start in range(0, len(effects), 1000):
        rows = effects[start:start + 1000]
        sums = np.abs(rows @ patterns.T)
        observed = np.abs(rows.sum(axis=1, keepdims=True))
        p[start:start + 1000] = (sums >= observed - 1e-9).mean(axis=1)
    return p


def plain_holm(p_values: list[float]) -> list[bool]:
    """Holm at ALPHA: walk the p values from the smallest, stop at the first that fails."""
    m = len(p_values)
    rejected = [False] * m
    for step, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        if p_values[index] > ALPHA / (m - step):
            break
        rejected[index] = True
    return rejected


def plain_power(seeds: int, tests: int, shape: str, correlation: float, seed: int
                ) -> tuple[float, float]:
    """(per test, whole family) over PLAIN_STUDIES studies: each seed's effect on each test is
    D + sqrt(correlation) x the seed's shared noise + sqrt(1 - correlation) x the test's own."""
    rng = np.random.default_rng(seed)
    shared = plain_draws(shape, rng, (PLAIN_STUDIES, 1, seeds))
    own = plain_draws(shape, rng, (PLAIN_STUDIES, tests, seeds))
    effects = D + math.sqrt(correlation) * shared + math.sqrt(1 - correlation) * own
    p = plain_p_values(effects.reshape(-1, seeds)).reshape(PLAIN_STUDIES, tests)
    decisions = np.array([plain_holm(list(row)) for row in p])
    return float(decisions.mean()), float(decisions.all(axis=1).mean())


CASES = [  # (seeds, tests, shape, correlation): the row, then each way it can move
    (12, 4, "normal", 0.0), (12, 4, "normal", 0.9), (12, 4, "bimodal", 0.5),
    (8, 1, "normal", 0.0), (8, 1, "heavy-tailed", 0.0), (8, 1, "bimodal", 0.0)]


@pytest.fixture(scope="module")
def plain() -> dict[tuple, tuple[float, float]]:
    return {case: plain_power(*case, seed=1000 + i) for i, case in enumerate(CASES)}


@pytest.mark.parametrize("case", CASES)
def test_the_labs_power_is_a_plain_simulations(case, plain):
    seeds, tests, shape, correlation = case
    lab = simulated_powers(seeds, effect=D, sd=1.0, tests=tests, shape=shape,
                           correlation=correlation)
    per_test, family = plain[case]
    assert lab["per_test"] == pytest.approx(per_test, abs=agree(per_test))
    assert lab["family"] == pytest.approx(family, abs=agree(family))


def test_shape_and_correlation_move_the_power_beyond_the_simulations_error(plain):
    """The checks above could not tell the cells apart if they did not differ: they do, in the
    plain simulation as in the lab's (which would fail the check above otherwise)."""
    normal, heavy, bimodal = (plain[(8, 1, s, 0.0)][0] for s in ("normal", "heavy-tailed",
                                                                  "bimodal"))
    assert heavy - normal > agree(normal) and normal - bimodal > agree(normal)
    independent, shared = plain[(12, 4, "normal", 0.0)], plain[(12, 4, "normal", 0.9)]
    assert independent[0] - shared[0] > agree(independent[0])  # per test falls ...
    assert shared[1] - independent[1] > agree(independent[1])  # ... the whole family rises
    assert independent[1] < independent[0]  # the family needs every test: less than one test


@pytest.mark.parametrize("shape", list(PLANNING_SHAPES))
def test_every_shape_has_the_declared_mean_and_sd(shape):
    draws = standardised_effects(shape, np.random.default_rng(5), (1_000_000,))
    assert abs(draws.mean()) < 0.01 and draws.std() == pytest.approx(1.0, abs=0.03)
    near_centre = np.mean(np.abs(draws) < 0.2)
    near_modes = np.mean(np.abs(np.abs(draws) - BIMODAL_OFFSET) < 0.2) / 2
    assert (near_centre < near_modes) == (shape == "bimodal")  # only bimodal dips at its mean


def _dry_run(recipe: Path, *settings: str) -> str:
    command = [sys.executable, "-m", "lab.cli", "study", str(recipe), "--dry-run",
               "--out", "unused-study"]
    for setting in settings:
        command += ["--set", setting]
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


def test_the_dry_run_at_12_seeds_and_4_tests_states_per_test_family_and_sensitivity(plain):
    """The issue's row 8: the mini rq5 recipe (4 primary tests) at 12 seeds and d = 1."""
    printed = _dry_run(ROOT / "recipes/mini/rq5-epoch-sweep.yaml",
                       f"seeds={list(range(12))}")
    per_test, family = plain[(12, 4, "normal", 0.0)]
    stated = re.search(r"([\d.]+) per test with 12 seeds, Holm over 4 tests.*?planning_shape "
                       r"normal, planning_correlation 0; the whole family confirmed \(all 4 tests "
                       r"rejected\): ([\d.]+);", printed)
    assert stated, printed
    assert float(stated[1]) == pytest.approx(per_test, abs=agree(per_test) + 0.005)  # 2 places
    assert float(stated[2]) == pytest.approx(family, abs=agree(family) + 0.005)
    sensitivity = re.search(r"power sensitivity \(per test/whole family, 12 seeds, 4 tests, "
                            r"d = 1; at planning_correlation ([^)]*)\): (.*?)\. Shapes", printed)
    assert sensitivity, printed
    assert sensitivity[1] == ", ".join(f"{c:g}" for c in SENSITIVITY_CORRELATIONS)
    cells = dict(re.findall(r"([a-z-]+) ((?:[\d.]+/[\d.]+(?:, )?)+)", sensitivity[2]))
    assert list(cells) == list(PLANNING_SHAPES)
    for shape, pairs in cells.items():
        assert len(pairs.split(", ")) == len(SENSITIVITY_CORRELATIONS)
    shared = plain[(12, 4, "normal", 0.9)]
    last = [float(x) for x in cells["normal"].split(", ")[-1].split("/")]
    assert last[0] == pytest.approx(shared[0], abs=agree(shared[0]) + 0.005)
    assert last[1] == pytest.approx(shared[1], abs=agree(shared[1]) + 0.005)


def test_the_recipe_declares_the_shape_and_correlation_the_plan_uses():
    from lab.analysis.questions import power_plan
    from lab.study.recipe import load_recipe

    recipe = load_recipe("recipes/paper/rq4-paired.yaml", ["statistics.planning_shape=bimodal",
                                                          "statistics.planning_correlation=0.5"])
    power = power_plan(recipe)["power"]
    assert (power["shape"], power["correlation"]) == ("bimodal", 0.5)
    assert power["power"] == simulated_power(7, 2.0, 2.0, tests=2, shape="bimodal",
                                             correlation=0.5)
    for field, value in (("planning_shape", "skewed"), ("planning_correlation", "1.5"),
                         ("planning_correlation", "-0.1")):
        with pytest.raises(LabError, match=f"statistics\\.{field}"):
            load_recipe("recipes/paper/rq4-paired.yaml", [f"statistics.{field}={value}"])


# ---- calibration: the simulation at effect 0 ---------------------------------------------------
NULL_SE = math.sqrt(ALPHA * (1 - ALPHA) / POWER_SIMULATIONS)  # 0.0034


@pytest.mark.parametrize("seeds", [8, 12, 20])  # 20: the normal approximation beyond 16 seeds
@pytest.mark.parametrize("shape", list(PLANNING_SHAPES))
def test_at_effect_0_one_tests_rejection_rate_is_its_size(seeds, shape):
    size = simulated_powers(seeds, effect=0.0, sd=1.0, shape=shape)["per_test"]
    assert 0.02 <= size <= 0.08


@pytest.mark.parametrize("correlation", SENSITIVITY_CORRELATIONS)
@pytest.mark.parametrize("shape", list(PLANNING_SHAPES))
def test_at_effect_0_holm_keeps_the_family_wise_error(shape, correlation):
    null = simulated_powers(12, effect=0.0, sd=1.0, tests=4, shape=shape,
                            correlation=correlation)
    assert null["any"] <= ALPHA + 3 * NULL_SE
    assert 0 < null["per_test"] <= null["any"]  # not vacuous: tests are rejected, and counted
