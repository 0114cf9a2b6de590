"""Power before compute (issue 58): the exact sign-flip test simulated at a declared effect, Holm
over the family, against the numbers that can be had by hand, and what the dry run says of it.

The Monte Carlo error of a simulated power p over n studies is sqrt(p (1 - p) / n), under 0.008
at lab.stats.POWER_SIMULATIONS = 4000: MONTE_CARLO allows four of them."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from lab.common import LabError
from lab.stats import (ALPHA, POWER, POWER_SIMULATIONS, holm, holm_rejections,
                       seeds_for_planned_power, sign_flip_p_values, sign_flip_test,
                       simulated_power)

MONTE_CARLO = 4 * math.sqrt(0.25 / POWER_SIMULATIONS)  # 0.032: four errors at the worst p (0.5)


def all_signs_agree(seeds: int, d: float) -> float:
    """P(every one of `seeds` Normal(d, 1) effects has the same sign): the power of an exact
    two-sided sign-flip test whose threshold only the most extreme pattern pair meets."""
    return norm.cdf(d) ** seeds + norm.cdf(-d) ** seeds


def normal_formula_seeds(d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """The seeds a one-sample z power formula claims, (z_{1-alpha/2} + z_power)^2 / d^2, never
    fewer than the exact two-sided test needs to reach alpha at all: what the lab said before."""
    floor = math.ceil(math.log2(2 / alpha))
    return max(floor, math.ceil(((norm.ppf(1 - alpha / 2) + norm.ppf(power)) / d) ** 2))


@pytest.mark.parametrize("seeds", [2, 3, 7, 8, 11, 17])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_vectorised_p_values_are_the_sign_flip_tests(seeds, alternative):
    """Each row's p is sign_flip_test's (exact to 16 seeds, its normal approximation at 17)."""
    effects = np.random.default_rng(seeds).normal(0.4, 1.0, (25, seeds))
    expected = [sign_flip_test(row, alternative)[0] for row in effects]
    assert sign_flip_p_values(effects, alternative) == pytest.approx(expected, abs=1e-12)


def test_a_set_reaching_the_floor_counts_its_own_pattern():
    """The observed pattern is one of the flips that reach it: p is 2/2^K, never 0."""
    same_sign = np.array([[0.1, 0.2, 0.3, 0.7, 1.1, 0.05]])
    assert sign_flip_p_values(same_sign)[0] == pytest.approx(2 / 2 ** 6)
    assert sign_flip_p_values(np.zeros((1, 5)))[0] == 1.0


def test_holm_rejections_are_holms_adjusted_p_at_alpha():
    p_values = np.random.default_rng(3).uniform(0, 0.08, (200, 5))
    expected = np.array([[q <= ALPHA for q in holm(list(row))] for row in p_values])
    assert (holm_rejections(p_values) == expected).all()


def test_eight_seeds_at_d_1_give_about_0_65_and_eleven_are_needed():
    """The reviewer's first case: the z formula's 8 seeds give 0.65, not 0.8."""
    assert simulated_power(8, effect=1.0, sd=1.0) == pytest.approx(0.65, abs=MONTE_CARLO)
    assert simulated_power(10, effect=1.0, sd=1.0) < POWER
    assert seeds_for_planned_power(effect=1.0, sd=1.0) == 11


def test_six_seeds_at_d_1_5_are_all_signs_agreeing():
    """Six seeds two-sided: only the 2 of 64 extreme flips are at or below 0.05, so the power is
    exactly the chance that all six effects share a sign, 0.660 at d = 1.5."""
    exact = all_signs_agree(6, 1.5)
    assert exact == pytest.approx(0.66, abs=0.005)
    assert simulated_power(6, effect=3.0, sd=2.0) == pytest.approx(exact, abs=MONTE_CARLO)


def test_holm_over_two_at_seven_seeds_steps_down_from_the_all_signs_bound():
    """Seven seeds, two tests: Holm's first step (0.025) needs all 7 signs to agree (the
    reviewer's 0.30); a test at 4 or 6 of 128 is rejected too when the other test's signs all
    agree. Under independence its power is a + (b - a) a, a = P(p <= 0.025), b = P(p <= 0.05)."""
    first_step = all_signs_agree(7, 1.0)
    assert first_step == pytest.approx(0.30, abs=0.005)
    assert simulated_power(7, effect=1.0, sd=1.0, alpha=ALPHA / 2) == pytest.approx(
        first_step, abs=MONTE_CARLO)
    alone = simulated_power(7, effect=1.0, sd=1.0)
    family = simulated_power(7, effect=1.0, sd=1.0, tests=2)
    assert family == pytest.approx(first_step + (alone - first_step) * first_step,
                                   abs=MONTE_CARLO)
    assert first_step < family < alone


def test_the_normal_formula_claims_fewer_seeds_than_the_test_needs():
    for d in (1.0, 1.5):
        claimed = normal_formula_seeds(d)
        assert claimed < seeds_for_planned_power(effect=d, sd=1.0)
        assert simulated_power(claimed, effect=d, sd=1.0) < POWER - MONTE_CARLO
    assert normal_formula_seeds(1.0) == 8 and normal_formula_seeds(1.5) == 6


def test_beyond_the_exact_test_the_search_uses_the_normal_approximation():
    """d = 0.5 needs more than SIGN_FLIP_EXACT seeds: the answer is the first to reach 80%."""
    needed = seeds_for_planned_power(effect=0.5, sd=1.0)
    assert 17 <= needed <= 40
    assert simulated_power(needed, effect=0.5, sd=1.0) >= POWER
    assert simulated_power(needed - 1, effect=0.5, sd=1.0) < POWER
    assert seeds_for_planned_power(effect=0.1, sd=1.0, simulations=500) is None  # not by 40


def test_the_power_is_zero_where_alpha_is_out_of_reach_and_reproducible_elsewhere():
    assert simulated_power(1, effect=5.0, sd=1.0) == 0.0  # one seed: no test over seeds
    assert simulated_power(4, effect=5.0, sd=1.0) == 0.0  # floor 2/16 > 0.05
    assert simulated_power(7, effect=5.0, sd=1.0, tests=3) == pytest.approx(
        all_signs_agree(7, 5.0), abs=0.01)  # Holm's 0.017 needs the floor, 2/128 = 0.016
    assert simulated_power(7, effect=5.0, sd=1.0, tests=4) == 0.0  # 4 x 2/128 > 0.05
    once = simulated_power(9, effect=1.0, sd=1.0, tests=3)
    assert simulated_power(9, effect=1.0, sd=1.0, tests=3) == once
    other = simulated_power(9, effect=1.0, sd=1.0, tests=3, rng_seed=1)
    assert other != once and other == pytest.approx(once, abs=MONTE_CARLO)


def test_a_one_sided_test_has_more_power_in_its_direction():
    greater = simulated_power(8, effect=1.0, sd=1.0, alternative="greater")
    less = simulated_power(8, effect=1.0, sd=1.0, alternative="less")  # effect drawn negative
    assert greater == pytest.approx(less, abs=MONTE_CARLO)
    assert greater > simulated_power(8, effect=1.0, sd=1.0) + MONTE_CARLO


@pytest.mark.parametrize("arguments, field", [
    ({"effect": -1.0}, "statistics.smallest_effect"), ({"sd": -1.0}, "statistics.planning_sd"),
    ({"alpha": 1.5}, "statistics.alpha"), ({"shape": "uniform"}, "statistics.planning_shape"),
    ({"correlation": 1.5}, "statistics.planning_correlation")])
def test_bad_power_arguments_name_their_field(arguments, field):
    with pytest.raises(LabError, match=field.replace(".", r"\.")):
        simulated_power(8, **arguments)


def test_the_plan_states_the_familys_power_at_the_declared_effect():
    """The paper's rq4 recipe: 7 seeds, 2 primary tests; at the default d = 1 the power is
    Holm's 0.37, 11 seeds give 80%, and the recipe is not refused for it (reachability only)."""
    from lab.analysis.questions import power_line, power_plan, power_problem
    from lab.study.recipe import load_recipe

    recipe = load_recipe("recipes/paper/rq4-paired.yaml")
    plan = power_plan(recipe)
    power = plan["power"]
    assert (power["tests"], power["seeds"], power["d"]) == (2, 7, 1.0)
    assert power["power"] == simulated_power(7, recipe.statistics.smallest_effect,
                                             recipe.statistics.planning_sd, tests=2)
    assert power["seeds_for_target"] == 11 and power_problem(recipe) is None
    line = power_line(power)
    for words in ("0.37 per test with 7 seeds", "Holm over 2 tests", "two-sided alpha 0.05",
                  "smallest_effect 2 and planning_sd 2 (d = 1)", "80% power per test takes 11 seeds",
                  f"{POWER_SIMULATIONS} studies", "planning_shape normal, planning_correlation 0",
                  "the whole family confirmed (all 2 tests rejected)"):
        assert words in line
    halved = load_recipe("recipes/paper/rq4-paired.yaml", ["statistics.planning_sd=1"])
    assert power_plan(halved)["power"]["seeds_for_target"] < 11  # d = 2 needs fewer
    assert "power" not in power_plan(recipe, simulate=False)
