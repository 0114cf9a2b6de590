"""Statistics conventions: the study's p-values reproduced on known inputs."""
from __future__ import annotations

import itertools
import random

import pytest
from scipy.stats import mannwhitneyu, wilcoxon

from lab.common import LabError
from lab.stats import (compare, crossover_differences, crossover_test, holm, mann_whitney,
                             permutation_mann_whitney, seed_level_test,
                             signed_rank_test, starred_p, within_model_seeds)

SEPARATED = ([5.0, 6.0, 7.0, 8.0, 9.0], [1.0, 2.0, 3.0, 4.0, 4.5])  # five runs a side, no overlap


@pytest.mark.parametrize("convention, expected", [
    ("replication-package", 0.003968),  # the replication package's README: greater, exact (1/252)
    ("study-tables", 0.01219),          # the published tables: two-sided, normal approximation
    ("exact-two-sided", 0.007937),      # the lab's default (2/252)
])
def test_known_p_values_under_complete_separation(convention, expected):
    _u, p, _alt, _method = mann_whitney(*SEPARATED, convention)
    assert p == pytest.approx(expected, rel=1e-3)


def test_ties_keep_an_exact_convention_exact_and_say_so():
    # Formerly the normal approximation; now the exact permutation distribution (ties kept).
    _u, p, alternative, method = mann_whitney([1, 2, 2, 3], [2, 3, 3, 4], "exact-two-sided")
    assert method == "exact permutation (ties)" and alternative == "two-sided" and 0 < p <= 1
    assert p == pytest.approx(_brute_force_mann_whitney([1, 2, 2, 3], [2, 3, 3, 4], "two-sided"))
    # Beyond a million splits (C(30, 15) = 155 million) the normal approximation, named as such.
    many = ([float(i // 3) for i in range(15)], [float(i // 3) + 0.5 for i in range(15)])
    _u, p, _alt, method = mann_whitney(*many, "exact-two-sided")
    assert method.startswith("asymptotic") and "ties" in method
    assert p == pytest.approx(mannwhitneyu(*many, method="asymptotic").pvalue)


def _midranks(values):
    ordered = sorted(values)
    return [(ordered.index(v) + 1 + len(ordered) - ordered[::-1].index(v)) / 2 for v in values]


def _brute_force_mann_whitney(experimental, control, alternative):
    """Every split of the pooled scores into groups of the original sizes, one by one."""
    pooled = list(experimental) + list(control)
    ranks = _midranks(pooled)
    n1, n = len(experimental), len(pooled)
    mean = n1 * (n - n1) / 2

    def u(chosen):
        return sum(ranks[i] for i in chosen) - n1 * (n1 + 1) / 2

    observed = u(range(n1))
    splits = [u(chosen) for chosen in itertools.combinations(range(n), n1)]
    if alternative == "greater":
        hits = [s for s in splits if s >= observed - 1e-9]
    else:
        hits = [s for s in splits if abs(s - mean) >= abs(observed - mean) - 1e-9]
    return len(hits) / len(splits)


def test_tied_scores_get_the_exact_permutation_distribution():
    exp, ctrl = [1, 1, 2, 3], [0, 0, 0, 1]
    # The normal approximation said 0.049 here: significant; counting the 70 splits does not.
    assert mannwhitneyu(exp, ctrl, method="asymptotic").pvalue < 0.05
    u, p, alternative, method = mann_whitney(exp, ctrl, "exact-two-sided")
    assert p == pytest.approx(_brute_force_mann_whitney(exp, ctrl, "two-sided"))
    assert p == pytest.approx(6 / 70) and p > 0.05 and u == 15
    assert alternative == "two-sided" and "permutation" in method
    for convention in ("exact-greater", "replication-package"):
        _u, p, alternative, method = mann_whitney(exp, ctrl, convention)
        assert p == pytest.approx(_brute_force_mann_whitney(exp, ctrl, "greater"))
        assert alternative == "greater" and "permutation" in method
    # The study's tables stay asymptotic, ties or not.
    _u, p, _alt, method = mann_whitney(exp, ctrl, "study-tables")
    assert method == "asymptotic" and p == pytest.approx(0.0485, abs=1e-4)
    assert compare(exp, ctrl).convention() == "Mann-Whitney U, two-sided, exact permutation (ties)"


def test_exact_permutation_agrees_with_enumeration_on_random_ties():
    rng = random.Random(3)
    for _ in range(25):
        n1, n2 = rng.randint(1, 6), rng.randint(1, 6)
        exp = [rng.randint(0, 3) for _ in range(n1)]
        ctrl = [rng.randint(0, 3) for _ in range(n2)]
        if len(set(exp + ctrl)) == n1 + n2:
            continue
        for alternative in ("two-sided", "greater"):
            _u, p = permutation_mann_whitney(exp, ctrl, alternative)
            assert p == pytest.approx(_brute_force_mann_whitney(exp, ctrl, alternative))
    # Without ties it is scipy's exact distribution.
    for alternative in ("two-sided", "greater"):
        _u, p = permutation_mann_whitney(*SEPARATED, alternative)
        assert p == pytest.approx(mannwhitneyu(*SEPARATED, alternative=alternative,
                                               method="exact").pvalue)


def _brute_force_sign_flip(gaps):
    sums = [sum(s * g for s, g in zip(signs, gaps))
            for signs in itertools.product((1, -1), repeat=len(gaps))]
    return sum(1 for s in sums if s >= sum(gaps) - 1e-9) / len(sums)


def test_seed_level_test_is_an_exact_sign_flip():
    for gaps in ([2.0, 1.5, 3.0, 0.5, 2.5], [2.0, -1.0, 3.0, 0.5], [1.0, -1.0, 0.0], [4.0, 4.0]):
        p, test = seed_level_test(gaps)
        assert p == pytest.approx(_brute_force_sign_flip(gaps)) and "exact" in test
    assert seed_level_test([1.0] * 5)[0] == pytest.approx(1 / 32)  # five seeds: at best 1/32
    p, test = seed_level_test([3.0])
    assert p is None and "not testable with 1 seed" in test
    assert seed_level_test([])[0] is None


def _brute_force_signed_rank(differences):
    nonzero = [d for d in differences if d != 0]
    ranks = _midranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    sums = [sum(r for r, s in zip(ranks, signs) if s > 0)
            for signs in itertools.product((1, -1), repeat=len(nonzero))]
    return sum(1 for s in sums if s >= observed - 1e-9) / len(sums)


def test_crossover_pairs_and_signed_rank_test():
    # Sample a: injected in seed 0, held out in seed 1 -> one pair. b: injected in seeds 0 and 2,
    # held out in seed 1 -> one pair of means. c: always injected, d: always held out -> none.
    scores = [("a", "injected", 7.0), ("a", "held_out", 3.0),
              ("b", "injected", 6.0), ("b", "injected", 8.0), ("b", "held_out", 5.0),
              ("c", "injected", 9.0), ("c", "injected", 9.5), ("d", "held_out", 1.0)]
    assert crossover_differences(scores) == {"a": pytest.approx(4.0), "b": pytest.approx(2.0)}
    assert crossover_differences([("c", "injected", 9.0), ("d", "held_out", 1.0)]) == {}
    for diffs in ([4.0, 2.0], [3.0, -1.0, 2.0, 2.0, 0.0, 5.0, -0.5],
                  [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]):
        p, test = crossover_test(diffs)
        assert p == pytest.approx(_brute_force_signed_rank(diffs)) and "exact" in test
    assert crossover_test([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[0] == pytest.approx(wilcoxon(
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], alternative="greater", method="exact").pvalue)
    assert crossover_test([0.0, 0.0])[0] is None


def test_starred_p_marks_significance_and_its_direction():
    """The one p-value format of every table (lab report, lab llm-eval): a star at alpha, and
    '(lower)' when a two-sided test fires because the arm is behind."""
    assert starred_p(None, 3.0) == "-"
    assert starred_p(0.2, 3.0) == "0.2"
    assert starred_p(0.05, 3.0) == "0.05*"
    assert starred_p(0.01, -3.0, spec=".2g") == "0.01* (lower)"
    assert starred_p(0.2, -3.0) == "0.2"
    assert starred_p(0.04, 1.0, alpha=0.01) == "0.04"


def test_signed_rank_two_sided():
    """Both tails of the exact signed-rank distribution (lab llm-eval's paired test)."""
    for diffs in ([1.0, 2.0, 3.0, 4.0, 5.0], [-1.5, 2.0, 3.0, -4.0, 5.0, 6.0],
                  [-1.0, -2.0, -3.0, -4.0, -5.0, 0.5]):
        p, _test = signed_rank_test(diffs, "t", "two-sided")
        assert p == pytest.approx(wilcoxon(diffs, alternative="two-sided", method="exact").pvalue)
    # Five pairs all one way: the smallest p there is (2 * 2^-5), whatever the sizes.
    assert signed_rank_test([0.1, 0.2, 0.3, 0.4, 9.0], "t", "two-sided")[0] == pytest.approx(0.0625)
    assert signed_rank_test([0.1, 0.2, 0.3, 0.4, 9.0], "t")[0] == pytest.approx(0.03125)
    with pytest.raises(LabError, match="alternative 'less'"):
        signed_rank_test([1.0], "t", "less")


def test_within_model_seeds_gaps_per_seed():
    rows = [(seed, f"s{i}", group, score) for seed, shift in ((0, 4.0), (1, -1.0), (2, 2.0))
            for i, (group, score) in enumerate([("injected", 5.0 + shift),
                                                ("injected", 7.0 + shift),
                                                ("held_out", 5.0), ("held_out", 3.0)])]
    found = within_model_seeds(rows)
    assert found["seed_gaps"] == {"0": pytest.approx(6.0), "1": pytest.approx(1.0),
                                  "2": pytest.approx(4.0)}
    assert found["gap_per_seed"] == pytest.approx(11 / 3) and found["seeds_positive"] == 3
    assert found["p_seeds"] == pytest.approx(_brute_force_sign_flip([6.0, 1.0, 4.0]))
    assert found["crossover_samples"] == 0 and found["p_crossover"] is None


def test_effect_size_interval_and_corrections():
    result = compare(*SEPARATED)
    assert result.cliffs_delta == 1.0 and result.a12 == 1.0
    assert result.lift_ci[0] > 0 and result.lift_ci[0] <= result.lift <= result.lift_ci[1]
    assert "two-sided, exact" in result.convention()
    reversed_result = compare(SEPARATED[1], SEPARATED[0], "replication-package")
    assert reversed_result.p > 0.99 and reversed_result.cliffs_delta == -1.0
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    with pytest.raises(LabError, match="convention"):
        mann_whitney(*SEPARATED, "bayesian")


