"""The primary question `residual` (issue 72, item 2): per form and decontaminator, the
seed-paired residual lift(decontaminated) - lift(oracle), an exact sign-flip test over seeds with
Holm over the family. Derived from the models (a decontaminated model and its oracle model) like
the other questions from the arms; its p stands in the primary table and beside the residual in
report/decontam.md. And the null simulations that calibrate what that report prints about it:
the test's size and family-wise error, the residual's seed-mean interval, the fraction removed's
Fieller interval (docs/calibration.md lists the rates; `-s` prints them)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lab.common import LabError
from tests.test_calibration import COVERAGE_BOUNDS, LEVEL, _check, _heavy, _rng

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "decontam.yaml"
ALPHA = 0.05
FORMS = ("verbatim", "renamed", "reformatted", "partial:0.5")
METHODS = ("ngram13", "exact")


def _models(methods=("none", "oracle", *METHODS), forms=FORMS):
    return [f"gpt2/form={f}/decontam={m}" for f in forms for m in methods]


# ---- the question, derived from the arms and models ------------------------------------------

def test_residual_is_asked_of_each_decontaminated_model_that_has_its_oracle():
    from lab.analysis.questions import (QUESTIONS, allowed, declared, family, oracle_pairs,
                                        swept_labels)
    from lab.decontam import ORACLE
    import lab.analysis.questions as questions

    assert questions.ORACLE == ORACLE and "residual" in QUESTIONS
    with_oracle = _models()
    assert declared(None, ["paired"], True, [0], models=with_oracle) == ["split-half",
                                                                         "residual"]
    tests = [t for t in family(["residual"], ["paired"], with_oracle, True, [0], [100])]
    assert len(tests) == len(FORMS) * len(METHODS)
    assert {(swept_labels(t.model)[1]["decontam"], t.baseline) for t in tests if "=renamed/" in
            t.model} == {(m, "gpt2/form=renamed/decontam=oracle") for m in METHODS}
    assert all(t.reference is None and not t.within_model for t in tests)
    assert tests[0].label() == ("paired: injected vs held-out, minus the same in "
                                "gpt2/form=verbatim/decontam=oracle")
    # without the oracle arm (or without a split of the samples) there is no residual to test
    without = _models(("none", *METHODS))
    assert oracle_pairs(without) == [] and not allowed(["paired"], True, [0], without)["residual"]
    assert declared(None, ["paired"], True, [0], models=without) == ["split-half"]
    assert not allowed(["paired"], False, [0], with_oracle)["residual"]
    with pytest.raises(LabError, match="'residual' is not a question these arms can ask"):
        declared(["residual"], ["paired"], True, [0], models=without)
    # net of a placebo where the split-half question is
    pairs = allowed(["paired", "paired-placebo"], True, [0], with_oracle)
    assert pairs["residual"] == pairs["split-half"] == [("paired", "paired-placebo")]


def test_the_decontam_recipes_power_plan_declares_the_residual_family():
    """recipes/decontam.yaml declares `residual`: 6 tests (3 forms x ngram13, winnow), none can
    reach alpha with its 3 seeds (descriptive), 8 seeds could; without the oracle in its sweep
    the question is refused."""
    from lab.analysis.questions import power_plan, power_problem
    from lab.study.grid import evaluated_models, expand
    from lab.study.recipe import load_recipe

    recipe = load_recipe(RECIPE)
    plan = power_plan(recipe, simulate=False, models=evaluated_models(expand(recipe)))
    assert plan["questions"] == ["residual"] and len(plan["tests"]) == 6
    assert len(plan["unreachable"]) == 6 and plan["seeds_needed"] == 8
    assert all(r["floor"] == 0.25 and r["unit"] == "seed" for r in plan["tests"])
    assert recipe.statistics.descriptive and power_problem(
        recipe, evaluated_models(expand(recipe))) is None
    other = load_recipe(RECIPE, ["injection.decontaminate_with=[null, ngram13]"])
    with pytest.raises(LabError, match="residual"):
        power_plan(other, simulate=False, models=evaluated_models(expand(other)))


# ---- the test in the primary table and report/decontam.md -----------------------------------

def _study(lifts: dict[str, list[float]]):
    """samples.csv and results.csv rows of one arm ('paired') with 5 injected and 5 held-out
    samples per model and seed: held-out scores 10, injected 10 + that seed's lift."""
    samples, runs = [], []
    for method, per_seed in lifts.items():
        model = f"gpt2/form=verbatim/decontam={method}"
        for seed, lift in enumerate(per_seed):
            for i in range(10):
                group = "injected" if i < 5 else "held_out"
                samples.append({"model": model, "task": "codetrans", "epochs": 0,
                                "train_size": "100", "arm": "paired", "seed": seed,
                                "id": f"codetrans:test:{i}", "group": group,
                                "score_bleu": 10.0 + (lift + 0.1 * i if i < 5 else 0.1 * i)})
            for group, score in (("all", 10 + lift / 2), ("injected", 10 + lift),
                                 ("held_out", 10.0)):
                runs.append({"model": model, "task": "codetrans", "epochs": 0,
                             "train_size": "100", "arm": "paired", "seed": seed, "group": group,
                             "bleu": score})
    return samples, runs


def test_the_residual_rows_p_is_the_sign_flip_test_of_the_per_seed_residuals():
    """Seven seeds: as built lifts 10, oracle about 0, ngram13 leaves 3 (+/- by seed), exact 0:
    the residual row's per-seed effects are after - oracle seed by seed, its p the exact
    sign-flip test of them, Holm over the family of two; report/decontam.md prints both p
    beside the residual (descriptive: with the planned power)."""
    from lab.analysis.decontam_lift import decontam_lifts, decontam_table
    from lab.analysis.primary import primary_table
    from lab.analysis.primary_text import render
    from lab.stats import sign_flip_test

    oracle = [0.5, -0.5, 0.2, 0.0, -0.3, 0.4, 0.1]
    ngram = [3.0, 2.0, 4.0, 2.5, 3.5, 1.0, 2.2]
    exact = [0.6, -0.9, 0.1, 0.3, -0.1, 0.2, -0.4]
    samples, runs = _study({"none": [10.0] * 7, "oracle": oracle, "ngram13": ngram,
                            "exact": exact})
    table = primary_table(samples, runs, "bleu", ["residual"], ALPHA, "two-sided",
                          descriptive=False, split=True)
    assert table["questions"] == ["residual"] and table["family"] == 2
    by_method = {r["model"].rsplit("=", 1)[1]: r for r in table["rows"]}
    residuals = [a - b for a, b in zip(ngram, oracle)]
    row = by_method["ngram13"]
    assert [row["seed_effects"][str(s)] for s in range(7)] == pytest.approx(residuals)
    assert row["estimate"] == pytest.approx(sum(residuals) / 7)
    assert row["p"] == pytest.approx(sign_flip_test(residuals)[0]) == pytest.approx(2 / 128)
    assert row["p_holm"] == pytest.approx(2 / 128 * 2) and row["significant"]
    assert by_method["exact"]["p"] > 0.5 and not by_method["exact"]["significant"]
    assert row["other"]["estimate"] == pytest.approx(sum(residuals) / 7)  # corpus score
    assert "residual: a decontaminated model's split-half lift minus" in render(table)["md"]
    assert [r["question"] for r in table["exploratory"]] == ["split-half"] * 4

    rows = decontam_lifts(table, {})
    ngram_row = next(r for r in rows if r["method"] == "ngram13")
    assert ngram_row["residual"] == pytest.approx(row["estimate"])  # one residual, two views
    assert ngram_row["residual_p"] == row["p"] and ngram_row["residual_p_holm"] == row["p_holm"]
    md = decontam_table(rows, descriptive=False)["md"]
    assert "| residual test |" in md and "| p 0.0156, Holm 0.0312* |" in md
    power = {"power": 0.0, "seeds": 3, "seeds_for_target": 14, "target": 0.8, "tests": 8,
             "alternative": "two-sided", "alpha": 0.05, "effect": 2.0, "sd": 2.0}
    described = decontam_table(rows, descriptive=True, power=power)
    assert "; descriptive: power 0.00 at 3 seeds; 14 seeds for 0.8 |" in described["md"]
    assert "residual_power" in described["csv"].splitlines()[0]
    oracle_line = next(t for t in md.splitlines() if "| oracle |" in t)
    assert "| - | - |" in oracle_line  # neither a residual nor a test of its own


# ---- null simulations: the residual test, its interval, the fraction's interval --------------

def _null_residuals(rng, shape: str, studies: int, seeds: int) -> np.ndarray:
    """(studies, forms, methods, seeds) residuals with true mean 0: each model's split-half
    lift (the as-built lift has no part in it) drawn alike for the oracle and the methods, so
    a form's residuals share its oracle's lift (correlation 0.5 within a form)."""
    draw = (lambda size: rng.standard_normal(size)) if shape == "normal" else \
        (lambda size: _heavy(rng, size))
    oracle = draw((studies, len(FORMS), 1, seeds))
    after = draw((studies, len(FORMS), len(METHODS), seeds))
    return after - oracle


@pytest.mark.parametrize("seeds", [3, 8, 10])
@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
@pytest.mark.parametrize("shape", ["normal", "heavy"])
def test_the_residual_test_keeps_its_size_and_holm_its_family_wise_error(seeds, alternative,
                                                                         shape):
    """2,000 null studies of the decontam design's family (4 forms x 2 methods, each residual
    against its form's shared oracle): one test rejects at most alpha of the time (Monte Carlo
    error 2 SE), Holm over the 8 rejects anything at most alpha of the time; at 3 seeds (the
    recipe's) nothing can be rejected at all."""
    from lab.stats import holm_rejections, sign_flip_p_values, sign_flip_test

    studies = 2000
    residuals = _null_residuals(_rng(72, seeds, alternative == "greater", shape == "heavy"),
                                shape, studies, seeds)
    p = sign_flip_p_values(residuals.reshape(-1, seeds), alternative).reshape(studies, -1)
    size = float(np.mean(p <= ALPHA))
    rejected = np.array([any(holm_rejections(row.tolist(), ALPHA)) for row in p])
    family_error = float(np.mean(rejected))
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / p.size)
    print(f"\ncalibration residual sign-flip {seeds} seeds {alternative} {shape}: size "
          f"{size:.4f}, Holm family-wise error over 8 {family_error:.4f}")
    if seeds == 3:
        assert size == 0.0 and family_error == 0.0
    assert size <= bound
    assert family_error <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / studies)
    # the primary table's own function gives the same decisions (a sample of the studies)
    some = residuals.reshape(-1, seeds)[:200]
    assert np.array_equal([sign_flip_test(r.tolist(), alternative)[0] <= ALPHA for r in some],
                          sign_flip_p_values(some, alternative) <= ALPHA)


@pytest.mark.parametrize("seeds", [3, 6])
@pytest.mark.parametrize("shape", ["normal", "heavy"])
def test_the_residuals_seed_mean_interval_covers_zero(seeds, shape):
    """report/decontam.md's residual interval (lab.stats.seed_mean_interval over the per-seed
    residuals) holds the true residual 0 at its 95% within COVERAGE_BOUNDS: 2,000 null studies
    of one form and method."""
    from lab.stats import seed_mean_interval

    residuals = _null_residuals(_rng(73, seeds, shape == "heavy"), shape, 2000, seeds)[:, 0, 0]
    intervals = np.array([seed_mean_interval(r.tolist(), LEVEL)[1:] for r in residuals])
    _check(f"residual seed_mean_interval {seeds} seeds {shape}",
           (intervals[:, 0] <= 0) & (0 <= intervals[:, 1]), COVERAGE_BOUNDS)


@pytest.mark.parametrize("seeds", [3, 6])
@pytest.mark.parametrize("ratio", [0.6, 1.0])
@pytest.mark.parametrize("shape", ["normal", "heavy"])
def test_the_fraction_removeds_fieller_interval_covers_the_true_fraction(seeds, ratio, shape):
    """The fraction removed (decontam_lift.ratio_of_means: removed / (as built - oracle), the
    ratio of seed means, Fieller's interval with Student t on K - 1 df): per seed, lifts as
    built 10, oracle 0, after 10 x (1 - ratio), each model's own noise SD 2 (so removed and
    the leak share the as-built model's). Where the interval is given (the leak's own interval
    excludes 0) it holds the true fraction within COVERAGE_BOUNDS; how often it is withheld
    is printed (about 15% at 3 seeds, none at 6). 2,000 studies."""
    from lab.analysis.decontam_lift import ratio_of_means

    rng = _rng(74, seeds, ratio, shape == "heavy")
    noise = (rng.standard_normal((2000, 3, seeds)) if shape == "normal"
             else _heavy(rng, (2000, 3, seeds)) / math.sqrt(3))  # t3 scaled to SD 1
    built, oracle, after = 10.0 + 2 * noise[:, 0], 2 * noise[:, 1], \
        10.0 * (1 - ratio) + 2 * noise[:, 2]
    found = [ratio_of_means((b - a).tolist(), (b - o).tolist())
             for b, o, a in zip(built, oracle, after)]
    given = np.array([(low, high) for _r, low, high, _note in found if low is not None])
    withheld = 1 - len(given) / len(found)
    print(f"\ncalibration fraction removed Fieller {seeds} seeds ratio {ratio} {shape}: "
          f"withheld {withheld:.4f}")
    assert withheld < (0.25 if seeds == 3 else 0.02)
    _check(f"fraction removed Fieller {seeds} seeds ratio {ratio} {shape} (given)",
           (given[:, 0] <= ratio) & (ratio <= given[:, 1]), COVERAGE_BOUNDS)
