"""Statistics conventions: the study's p-values reproduced on known inputs."""
from __future__ import annotations

import pytest

from lab.common import LabError
from lab.study.stats import compare, holm, mann_whitney, seeds_needed

SEPARATED = ([5.0, 6.0, 7.0, 8.0, 9.0], [1.0, 2.0, 3.0, 4.0, 4.5])  # five runs a side, no overlap


@pytest.mark.parametrize("convention, expected", [
    ("replication-package", 0.0040),  # the replication package's README: greater, exact
    ("study-tables", 0.0122),         # the published tables: two-sided, normal approximation
    ("exact-two-sided", 0.0079),      # the lab's default
])
def test_known_p_values_under_complete_separation(convention, expected):
    _u, p, _alt, _method = mann_whitney(*SEPARATED, convention)
    assert round(p, 4) == expected


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
