"""Inference over seeds (issue 43): the exact sign-flip test against brute force, the cluster
bootstrap-t's coverage and the primary test's false-positive rate on simulated nulls with seed
noise like rq4's, the pooled per-sample test's failure there, and the power check's refusal."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.stats import (PAIRED_SAMPLES_TEST, RQ4_NOISE, effect_interval, sample_interval,
                       seed_effect, sign_flip_test, signed_rank_test, simulated_null)

ROOT = Path(__file__).resolve().parents[1]


def _brute_force(effects, alternative):
    """The share of all 2^k sign patterns whose mean reaches the observed one."""
    observed = sum(effects)
    sums = [sum(s * e for s, e in zip(signs, effects))
            for signs in itertools.product((1, -1), repeat=len(effects))]
    hit = {"two-sided": lambda x: abs(x) >= abs(observed) - 1e-9,
           "greater": lambda x: x >= observed - 1e-9,
           "less": lambda x: x <= observed + 1e-9}[alternative]
    return sum(1 for x in sums if hit(x)) / len(sums)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_the_paired_sign_flip_equals_brute_force_enumeration(alternative):
    rng = np.random.default_rng(0)
    cases = [[0.55, 2.61, -0.86, 1.02], [3.27, 2.52, 3.87, 3.24], [1.0, -1.0, 2.0, 0.0, -2.0],
             [1.0, 1.0, 1.0], [0.0, 0.0]]
    cases += [list(rng.normal(0.3, 1.0, k).round(2)) for k in (2, 5, 7, 9) for _ in range(3)]
    for effects in cases:
        p, test = sign_flip_test(effects, alternative)
        assert p == pytest.approx(_brute_force(effects, alternative)), effects
        assert alternative in test and f"exact (2^{len(effects)}" in test
    # The issue's numbers: rq4's four placebo-vs-control gaps, and the floors of K seeds.
    assert sign_flip_test([0.55, 2.61, -0.86, 1.02], "greater")[0] == pytest.approx(0.1875)
    assert sign_flip_test([3.27, 2.52, 3.87, 3.24])[0] == pytest.approx(2 / 16)
    assert sign_flip_test([1.0] * 6)[0] == pytest.approx(2 / 64)  # below 0.05
    assert sign_flip_test([2.0])[0] is None


def _coverage(seeds: int, simulations: int, samples: int) -> float:
    rng = np.random.default_rng(1000 + seeds)
    covered = 0
    for i in range(simulations):
        low, high = effect_interval(simulated_null(seeds, rng, samples=samples), resamples=999,
                                    seed=i)
        covered += low <= 0.0 <= high
    return covered / simulations


@pytest.mark.long
@pytest.mark.parametrize("seeds", [4, 6])
def test_the_cluster_bootstrap_covers_95_percent_of_simulated_nulls_with_seed_noise(seeds):
    """1,000 simulated studies of two arms that do not differ, each seed's models offset by a
    seed effect (rq4's spread) and each sample by its own; the interval must hold zero in 93-97%
    of them. A percentile interval of the same resamples holds it far less often with 4 seeds
    (benchmarks/inference_calibration.py)."""
    assert abs(_coverage(seeds, 1000, samples=50) - 0.95) <= 0.02


def test_the_seed_level_test_keeps_its_level_where_the_pooled_per_sample_test_does_not():
    """Under the null with rq4's seed noise: the exact sign-flip over 6 seeds rejects at most
    alpha of the time (its attainable level is 2/64), while the pooled Wilcoxon over (sample,
    seed) pairs, which counts a seed's shared offset once per sample, rejects 3-4 times as
    often as alpha says."""
    rng = np.random.default_rng(7)
    trials, flips, pooled = 600, 0, 0
    for _ in range(trials):
        study = simulated_null(6, rng, RQ4_NOISE, samples=100)
        effects = [seed_effect(parts) for parts in study.values()]
        flips += sign_flip_test(effects)[0] <= 0.05
        differences = [v for parts in study.values() for v in parts[0][1].values()]
        pooled += signed_rank_test(differences, PAIRED_SAMPLES_TEST, "two-sided")[0] <= 0.05
    assert flips / trials <= 0.05 + 0.015  # 2/64 expected; 0.015 is 2 Monte Carlo errors
    assert pooled / trials > 2.5 * 0.05


def test_one_seed_gets_a_sample_interval_and_no_seed_interval():
    rng = np.random.default_rng(3)
    injected = {i: float(v) for i, v in enumerate(rng.normal(10, 3, 60))}
    held = {i + 100: float(v) for i, v in enumerate(rng.normal(4, 3, 60))}
    parts = [(1.0, injected), (-1.0, held)]
    low, high = sample_interval(parts)
    assert low < seed_effect(parts) < high and low > 4
    assert effect_interval({"0": parts}) is None


def _lab(args, cwd):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_an_underpowered_recipe_is_refused_before_any_stage(tmp_path):
    """The micro recipe with 2 seeds, declared confirmatory: no sign-flip over 2 seeds can go
    below 0.5, so lab study refuses in one line (exit 2) and writes nothing; the dry run says
    the same and shows each test's floor; --allow-underpowered and statistics.descriptive let
    it through the check."""
    recipe = ROOT / "recipes" / "mini" / "micro.yaml"
    out = tmp_path / "study"
    refused = _lab(["study", recipe, "--out", out, "--set", "statistics.descriptive=false"],
                   tmp_path)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "underpowered" in line and "with 2 seeds" in line and "--allow-underpowered" in line
    assert "Traceback" not in refused.stderr and not out.exists()
    dry = _lab(["study", recipe, "--out", out, "--dry-run", "--set",
                "statistics.descriptive=false"], tmp_path)
    assert dry.returncode == 2 and dry.stderr.strip().splitlines() == [line]  # the real run's
    assert "primary tests (two-sided, 2 seeds, Holm over 5): none can reach alpha" in dry.stdout
    allowed = _lab(["study", recipe, "--out", out, "--dry-run", "--set",
                    "statistics.descriptive=false", "--allow-underpowered"], tmp_path)
    assert allowed.returncode == 0 and "underpowered" in allowed.stdout  # a warning
    from lab.study.preflight import check_ready
    from lab.analysis.questions import power_problem
    from lab.study.recipe import load_recipe

    confirmatory = load_recipe(recipe, ["statistics.descriptive=false"])
    assert "smallest p after Holm 1" in power_problem(confirmatory)
    assert power_problem(load_recipe(recipe)) is None  # declared descriptive
    enough = load_recipe(recipe, ["statistics.descriptive=false", "seeds=[0,1,2,3,4,5,6,7]",
                                  "statistics.primary=[split-half]"])
    assert power_problem(enough) is None  # 2 tests x 2/2^8 = 0.016
    warnings = check_ready(confirmatory, out, allow_underpowered=True)
    assert any("underpowered" in w for w in warnings) and not out.exists()
