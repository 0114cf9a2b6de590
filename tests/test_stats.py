"""Statistics conventions: the study's p-values reproduced on known inputs."""
from __future__ import annotations

import pytest

from lab.common import LabError
from lab.study.stats import (compare, holm, mann_whitney, min_seeds, samples_needed,
                             seeds_needed)

SEPARATED = ([5.0, 6.0, 7.0, 8.0, 9.0], [1.0, 2.0, 3.0, 4.0, 4.5])  # five runs a side, no overlap


@pytest.mark.parametrize("convention, expected", [
    ("replication-package", 0.003968),  # the replication package's README: greater, exact (1/252)
    ("study-tables", 0.01219),          # the published tables: two-sided, normal approximation
    ("exact-two-sided", 0.007937),      # the lab's default (2/252)
])
def test_known_p_values_under_complete_separation(convention, expected):
    _u, p, _alt, _method = mann_whitney(*SEPARATED, convention)
    assert p == pytest.approx(expected, rel=1e-3)


def test_ties_fall_back_to_the_normal_approximation_and_say_so():
    _u, p, alternative, method = mann_whitney([1, 2, 2, 3], [2, 3, 3, 4], "exact-two-sided")
    assert method == "asymptotic" and alternative == "two-sided" and 0 < p <= 1


def test_effect_size_interval_and_corrections():
    result = compare(*SEPARATED)
    assert result.cliffs_delta == 1.0 and result.a12 == 1.0
    assert result.lift_ci[0] > 0 and result.lift_ci[0] <= result.lift <= result.lift_ci[1]
    assert "two-sided, exact" in result.convention()
    reversed_result = compare(SEPARATED[1], SEPARATED[0], "replication-package")
    assert reversed_result.p > 0.99 and reversed_result.cliffs_delta == -1.0
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert seeds_needed(1.0, 1.0) > seeds_needed(2.0, 1.0) >= 2
    with pytest.raises(LabError, match="convention"):
        mann_whitney(*SEPARATED, "bayesian")


def test_power_notes_match_a_hand_computation():
    # z(0.975) + z(0.8) = 1.959964 + 0.841621 = 2.801585; two arms with spread 1 and lift 2:
    # 2.801585^2 * 2 * 1^2 / 2^2 / 0.955 = 4.11 -> 5 seeds per arm.
    assert seeds_needed(2.0, 1.0) == 5
    # One-sided: z(0.95) + z(0.8) = 1.644854 + 0.841621 = 2.486475; 6.18256 / 2 / 0.955 = 3.24
    # -> 4 seeds.
    assert seeds_needed(2.0, 1.0, alternative="greater") == 4
    assert seeds_needed(-2.0, 1.0) == 5 and seeds_needed(-2.0, 1.0, alternative="greater") is None
    # Exact Mann-Whitney cannot reach 0.05 below 4 seeds (two-sided: 2/70) or 3 (greater: 1/20).
    assert min_seeds() == 4 and min_seeds(alternative="greater") == 3
    assert seeds_needed(10.0, 0.1) == 4 and seeds_needed(1.0, 0.0, alternative="greater") == 3
    assert seeds_needed(0.0, 1.0) is None


def test_samples_needed_matches_a_hand_computation():
    # Within-model test, one-sided: 2.486475^2 * (10^2 + 10^2) / 5^2 / 0.955 = 51.79 -> 52.
    assert samples_needed(5.0, 10.0, 10.0) == 52
    # Unequal spreads add: 6.18256 * (3^2 + 4^2) / 1 / 0.955 = 161.85 -> 162.
    assert samples_needed(1.0, 3.0, 4.0) == 162
    assert samples_needed(0.0, 1.0, 1.0) is None and samples_needed(-1.0, 1.0, 1.0) is None
    assert samples_needed(1.0, 0.0, 0.0) == 2
