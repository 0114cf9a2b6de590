"""The questions a study can declare primary (recipe `statistics.primary`), derived from its arms,
and the family of tests they make: what `lab report` puts in its first table, with Holm over the
family, and what is asked of the seeds before any stage runs: whether the family can reach alpha
at all (a refusal when it cannot), and its simulated power at the recipe's declared effect (only
stated).

Every primary test takes the seed (one trained model per arm) as its unit: arms of one seed share
their base documents and removals, so they are paired by seed, and each test is an exact
sign-flip permutation test of the K per-seed effects (lab.stats.sign_flip_test), whose p cannot
go below 2/2^K two-sided (1/2^K one-sided). One exception: a split-half question asked of a single
seed. Its injected and held-out samples were assigned at random, sample by sample, so a rank test
of the two halves is a randomisation test, and its unit is the sample; it speaks of that one
trained model, not of training runs in general, and the table says so.

Nothing here reads data or imports the recipe module (which imports this table): the family is
derived from the arms, the split, the fine-tuning grid and the seeds, whether they come from a
recipe before compute or from a study's results table after it.

The recipe's `statistics` section (StatisticsSection) is declared here, beside the questions
and the power plan that read it: the recipe assembles it, and the reading room reads a study's
declarations through it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from lab.common import LabError, param
from lab.stats import (ALPHA, CONVENTIONS, DEFAULT_CONVENTION, DEFAULT_DOSE_TREND, DOSE_TREND_SIDES,
                       PLANNING_CORRELATION, PLANNING_SD, PLANNING_SHAPE, PLANNING_SHAPES,
                       SAMPLE_SCORE, SCORES, SENSITIVITY_CORRELATIONS, SMALLEST_EFFECT)

# question -> what it compares (the one statement of each; the report's note quotes it).
QUESTIONS: dict[str, str] = {
    "contamination": "each contaminated arm vs its placebo (same form, count and repeat, other "
                     "samples): what having seen the test samples adds",
    "format": "each placebo arm vs the control: what seeing the task's form and languages adds",
    "study": "each contaminated arm vs the control: the study's own contrast, both effects "
             "together",
    "split-half": "a split-half arm's injected vs held-out samples, net of its placebo's models "
                  "(else the control's) on the same halves of the same seed",
    "decay": "an arm's headline effect (contamination, else study, else split-half) at the "
             "fewest fine-tuning epochs minus at the most",
    "residual": "a decontaminated model's split-half lift minus its oracle model's (same form, "
                "arm and seed; the oracle replaced every injected copy): the inflation the "
                "decontaminator left",
}
SEED_UNIT = "seed"
# The variant labels a model's table name carries as key=value parts (lab.study.grid.model_name
# writes them, swept_labels reads them back): declared here, below the grid, because the
# residual question pairs each decontaminated model with its oracle model by them.
SWEPT_NAME_LABELS = ("form", "decontam")
NOT_DECONTAMINATED = "none"  # grid.variants' decontam label of the arm as built
ORACLE = "oracle"  # lab.decontam.ORACLE (lab inject --decontaminate-with oracle: every injected
#                    copy replaced by ground truth); a test holds the two names equal
SAMPLE_UNIT = "sample (one seed: about this model)"


@dataclass
class StatisticsSection:
    """The recipe's `statistics` section: how the study's results are read (conventions, the
    primary family, the power planned before compute). No stage reads it, so it is in no stage
    key, and a finished study may be read again under other declarations."""

    convention: str = param(DEFAULT_CONVENTION, "Mann-Whitney U convention: "
                            + ", ".join(CONVENTIONS) + " (lab.stats); its alternative (two-sided "
                            "or greater) is also the primary tests'.")
    alpha: float = param(ALPHA, "Significance level of the tests and power notes.")
    primary: list[str] | None = param(None, "The study's primary questions, the Holm family of "
                                      "the report's first table: " + ", ".join(QUESTIONS)
                                      + " (lab.study.contrasts); null: every one its arms allow.")
    primary_metric: str | None = param(None, "The metric of the primary contrasts (one of "
                                       "evaluation.metrics; null: the first of them).")
    descriptive: bool = param(False, "A descriptive study: its seeds need not reach alpha (no "
                              "power check before compute) and no primary p is starred.")
    score: str = param(SAMPLE_SCORE, "Which score of the primary metric the primary family "
                       "tests: " + " or ".join(f"{k} ({v})" for k, v in SCORES.items())
                       + "; the other is shown beside it as secondary, and where the two "
                       "disagree in sign or significance the report says so.")
    smallest_effect: float = param(SMALLEST_EFFECT, "The smallest effect of interest, in the "
                                   "primary metric's points (a mean per-seed effect): the "
                                   "effect at which the dry run states the family's power.")
    planning_sd: float = param(PLANNING_SD, "The planned spread (standard deviation) of the "
                               "per-seed effects, in the metric's points: with smallest_effect, "
                               "what the power simulation draws.")
    planning_shape: str = param(PLANNING_SHAPE, "The planned shape of the per-seed effects, "
                                "at smallest_effect's mean and planning_sd's spread. "
                                + "; ".join(f"{k}: {v}" for k, v in PLANNING_SHAPES.items())
                                + ". The dry run prints the power at each shape beside it.")
    planning_correlation: float = param(PLANNING_CORRELATION, "The planned correlation, 0 to 1, "
                                        "between two primary tests' effects of one seed (they "
                                        "share its models): 0, independent; the dry run prints "
                                        "the power at " + ", ".join(
                                            f"{c:g}" for c in SENSITIVITY_CORRELATIONS)
                                        + " beside it.")
    planned_seeds: int | None = param(None, "How many seeds the analysis was planned with (null: "
                                      "as many as `seeds` lists). A study merged from more "
                                      "seeds is reported as exploratory, not confirmatory.")
    dose_trend: str = param(DEFAULT_DOSE_TREND, "The sidedness of a dose ladder's trend test "
                            "(lab.analysis.dose): " + ", ".join(f"{k} ({v})" for k, v in
                                                              DOSE_TREND_SIDES.items())
                            + "; a ladder that rises then falls is reported non-monotone "
                              "whatever its trend p.")


@dataclass(frozen=True)
class Contrast:
    """One primary test: `arm` against `reference` (None: within the arm's own models) for one
    model, fine-tuning cell and question; decay spans `epochs` to `epochs_to`."""

    question: str
    model: str
    arm: str
    reference: str | None
    epochs: int
    train_size: Any
    epochs_to: int | None = None
    baseline: str | None = None  # residual: the oracle model whose split-half effect is subtracted

    @property
    def within_model(self) -> bool:
        """Whether the contrast compares one arm's injected and held-out halves (a split-half
        question, or the decay of a split-half effect) rather than two arms."""
        return self.question == "split-half" or (self.question == "decay"
                                                 and self.reference is None)

    def label(self) -> str:
        """'paired vs paired-placebo', 'paired: injected vs held-out (net of control)', ..."""
        if self.question == "split-half":
            net = f" (net of {self.reference})" if self.reference else ""
            return f"{self.arm}: injected vs held-out{net}"
        if self.question == "decay":
            against = f" vs {self.reference}" if self.reference else ": injected vs held-out"
            return f"{self.arm}{against}, E = {self.epochs} minus E = {self.epochs_to}"
        if self.question == "residual":
            net = f" (net of {self.reference})" if self.reference else ""
            return f"{self.arm}: injected vs held-out{net}, minus the same in {self.baseline}"
        return f"{self.arm} vs {self.reference}"


def swept_labels(model: str) -> tuple[str, dict[str, str]]:
    """The model name lab.study.grid.model_name writes, less its form and decontamination
    labels, and those labels: 'gpt2/form=renamed/decontam=ngram13' -> ('gpt2', {'form':
    'renamed', 'decontam': 'ngram13'})."""
    base, swept = [], {}
    for part in model.split("/"):
        key, _, value = part.partition("=")
        if key in SWEPT_NAME_LABELS and value:
            swept[key] = value
        else:
            base.append(part)
    return "/".join(base), swept


def oracle_of(model: str) -> str:
    """The name of a decontaminated model's oracle model: the same name, decontam=oracle."""
    return "/".join(f"decontam={ORACLE}" if part.partition("=")[0] == "decontam" else part
                    for part in model.split("/"))


def oracle_pairs(models: Iterable[str]) -> list[tuple[str, str]]:
    """(decontaminated model, its oracle model) for each model a decontaminator made (its
    decontam label neither the arm as built nor the oracle) whose oracle model is among
    `models`: the pairs the residual question compares, in the models' order."""
    models = list(models)
    pairs = []
    for model in models:
        method = swept_labels(model)[1].get("decontam")
        if method in (None, NOT_DECONTAMINATED, ORACLE):
            continue
        if oracle_of(model) in models:
            pairs.append((model, oracle_of(model)))
    return pairs


def _placebo_of(arm: str) -> str | None:
    from lab.contamination import settings as settings_table

    return settings_table.placebo_of(arm)


def _setting(arm: str) -> Any:
    from lab.contamination import settings as settings_table

    return settings_table.get(arm)


def headline(arm: str, arms: Iterable[str], split: bool) -> tuple[str, str | None] | None:
    """(question, reference) of an arm's headline effect: against its placebo, else the
    control, else its own held-out half; None when the arms allow none of them."""
    arms = set(arms)
    placebo = _placebo_of(arm)
    if placebo in arms:
        return "contamination", placebo
    if "control" in arms:
        return "study", "control"
    if split:
        return "split-half", None
    return None


def allowed(arms: Iterable[str], split: bool, epochs: Iterable[int],
            models: Iterable[str] = ()) -> dict[str, list[tuple[str, str | None]]]:
    """Per question, the (arm, reference) pairs the study's arms allow (empty when none).
    `split`: the contaminated arms inject part of the samples (fraction or a dose ladder).
    `models`: the study's models as its tables name them (lab.study.grid.evaluated_models);
    the residual question needs a decontaminated model and its oracle model among them, and
    asks it of the split-half question's pairs."""
    arms = list(arms)
    decontaminated = bool(oracle_pairs(models))
    contaminated = [a for a in arms if _setting(a).injects_test]
    placebos = [a for a in arms if _setting(a).placebo]
    control = "control" in arms
    found: dict[str, list[tuple[str, str | None]]] = {q: [] for q in QUESTIONS}
    for arm in contaminated:
        placebo = _placebo_of(arm)
        if placebo in arms:
            found["contamination"].append((arm, placebo))
        if control:
            found["study"].append((arm, "control"))
        if split:
            found["split-half"].append((arm, placebo if placebo in arms else
                                        "control" if control else None))
            if decontaminated:
                found["residual"].append(found["split-half"][-1])
        top = headline(arm, arms, split)
        if len(set(epochs)) > 1 and top:
            found["decay"].append((arm, top[1]))
    if control:
        found["format"] = [(p, "control") for p in placebos]
    return found


def declared(primary: list[str] | None, arms: Iterable[str], split: bool,
             epochs: Iterable[int], where: str = "statistics.primary",
             models: Iterable[str] = ()) -> list[str]:
    """The primary questions: as declared (each must be one the arms allow), else every one
    they allow (the residual question among them wherever the models hold a decontaminated
    model and its oracle). Errors name `where`."""
    arms, epochs = list(arms), list(epochs)
    possible = allowed(arms, split, epochs, models)
    if primary is None:
        return [q for q in QUESTIONS if possible[q]]
    if len(set(primary)) != len(primary):
        raise LabError(f"{where}: values repeat")
    for i, question in enumerate(primary):
        if question not in QUESTIONS:
            raise LabError(f"{where}[{i}]: unknown question '{question}' (choose from "
                           f"{', '.join(QUESTIONS)})")
        if not possible[question]:
            raise LabError(f"{where}[{i}]: '{question}' is not a question these arms can ask "
                           f"({', '.join(arms)}; {_needs(question)})")
    return list(primary)


def _needs(question: str) -> str:
    return {"contamination": "it needs an arm and its placebo",
            "format": "it needs a placebo arm and the control",
            "study": "it needs a contaminated arm and the control",
            "split-half": "it needs injection.fraction or injection.doses",
            "decay": "it needs two or more fine-tuning epoch counts and a reference",
            "residual": "it needs injection.fraction or injection.doses and "
                        "injection.decontaminate_with sweeping a decontaminator and oracle"
            }[question]


def family(questions: list[str], arms: Iterable[str], models: Iterable[str], split: bool,
           epochs: Iterable[int], train_sizes: Iterable[Any]) -> list[Contrast]:
    """Every primary test of a study: per question, model, (arm, reference) and fine-tuning
    cell; decay per model, arm and train size, from the fewest epochs to the most; residual
    per decontaminated model (oracle_pairs), its oracle model the baseline."""
    arms, epochs, train_sizes, models = (list(arms), sorted(set(epochs)), list(train_sizes),
                                         list(models))
    possible = allowed(arms, split, epochs, models)
    oracles = dict(oracle_pairs(models))
    tests = []
    for model in models:
        for question in questions:
            if question == "residual" and model not in oracles:
                continue
            for arm, reference in possible[question]:
                for size in train_sizes:
                    if question == "decay":
                        tests.append(Contrast(question, model, arm, reference, epochs[0], size,
                                              epochs[-1]))
                        continue
                    tests += [Contrast(question, model, arm, reference, e, size,
                                       baseline=oracles.get(model) if question == "residual"
                                       else None) for e in epochs]
    return tests


def unit(contrast: Contrast, seeds: int) -> str:
    """What a contrast's test counts: seeds, or (a split-half question of one seed) samples. A
    residual compares two models' split-half effects, so its unit is always the seed."""
    return SAMPLE_UNIT if seeds == 1 and contrast.within_model else SEED_UNIT


def sides(alternative: str) -> int:
    return 1 if alternative in ("greater", "less") else 2


def sign_flip_floor(seeds: int, alternative: str) -> float:
    """The smallest p an exact sign-flip test over `seeds` per-seed effects can give: every
    effect of one sign (and, two-sided, its mirror image) is 1 of the 2^K flips."""
    if seeds < 2:
        return 1.0
    return min(1.0, sides(alternative) / 2 ** seeds)


def rank_floor(first: int, second: int, alternative: str) -> float:
    """The smallest p of an exact rank test of two groups of samples: 1 (2 two-sided) of the
    C(n1 + n2, n1) splits."""
    if first < 1 or second < 1:
        return 1.0
    log_splits = math.lgamma(first + second + 1) - math.lgamma(first + 1) - math.lgamma(second + 1)
    return min(1.0, sides(alternative) * math.exp(-log_splits))


def holm_floors(floors: list[float]) -> list[float]:
    """Holm-adjusted p of each test when every test of the family sits at its own floor: the
    smallest adjusted p the family's design can give."""
    from lab.stats import holm

    return holm(floors)


def seeds_for_family(tests: int, alpha: float, alternative: str) -> int:
    """The fewest seeds with which `tests` sign-flip tests, all at their floor, pass Holm at
    alpha: tests x sides / 2^K <= alpha."""
    seeds = 2
    while tests * sign_flip_floor(seeds, alternative) > alpha:
        seeds += 1
    return seeds


def recipe_split(recipe: Any) -> bool:
    return recipe.injection.fraction is not None or bool(recipe.injection.doses)


def split_sizes(recipe: Any) -> tuple[int, int]:
    """About how many evaluated samples a split-half arm injects and holds out (for a one-seed
    rank test's floor): the evaluated samples split by injection.fraction (a dose ladder: its
    held-out level against the rest)."""
    from lab.corpora import dataset_manifest

    total = recipe.evaluation.max_samples or recipe.injection.samples or ((
        (dataset_manifest(recipe.benchmark) or {}).get("expected_records") or {}).get("test") or 0)
    if recipe.injection.doses:
        held = total // len(recipe.injection.doses)
        return total - held, held
    injected = math.ceil(total * (recipe.injection.fraction or 0))
    return injected, total - injected


def power_plan(recipe: Any, simulate: bool = True, models: list[str] | None = None
               ) -> dict[str, Any]:
    """Before compute: the recipe's primary family, each test's smallest reachable p and that
    p after Holm over the family (every test at its floor), and the tests that can never reach
    alpha. Keys: questions, tests (one dict per test), unreachable (those tests), seeds_needed
    (the seeds with which the seed-level tests could all reach alpha), alpha, alternative, and
    (`simulate`) power: planned_power's simulation at the recipe's declared effect."""
    from lab.stats import CONVENTIONS

    stats = recipe.statistics
    alternative = CONVENTIONS[stats.convention][0]
    split = recipe_split(recipe)
    # Each swept size is a model of its own, as the study's tables name it (gpt2/micro); so are
    # swept weight decays, forms, decontaminators and continued models, which only the grid
    # names (lab.study.grid.evaluated_models gives `models`; without them no residual question).
    if models is None:
        models = ([f"{m}/{size}" for m in recipe.models for size in recipe.preset]
                  if len(recipe.preset) > 1 else list(recipe.models))
    questions = declared(stats.primary, recipe.arms, split, recipe.finetune.epochs,
                         models=models)
    tests = family(questions, recipe.arms, models, split, recipe.finetune.epochs,
                   recipe.finetune.train_sizes)
    seeds = len(recipe.seeds)
    first, second = split_sizes(recipe) if split else (0, 0)
    rows = []
    for test in tests:
        counted = unit(test, seeds)
        floor = (rank_floor(first, second, alternative) if counted == SAMPLE_UNIT
                 else sign_flip_floor(seeds, alternative))
        rows.append({"contrast": test, "unit": counted, "floor": floor})
    for row, adjusted in zip(rows, holm_floors([r["floor"] for r in rows])):
        row["holm_floor"] = adjusted
    unreachable = [r for r in rows if r["holm_floor"] > stats.alpha]
    seed_level = sum(1 for r in rows if r["unit"] == SEED_UNIT)
    plan = {"questions": questions, "tests": rows, "unreachable": unreachable,
            "seeds": seeds, "alpha": stats.alpha, "alternative": alternative,
            "seeds_needed": seeds_for_family(seed_level, stats.alpha, alternative)
            if seed_level else None}
    if simulate and rows:
        plan["power"] = planned_power(len(rows), seeds, stats.smallest_effect, stats.planning_sd,
                                      stats.alpha, alternative, stats.planning_shape,
                                      stats.planning_correlation)
    return plan


def planned_power(tests: int, seeds: int, effect: float, sd: float, alpha: float,
                  alternative: str, shape: str = PLANNING_SHAPE,
                  correlation: float = PLANNING_CORRELATION) -> dict[str, Any]:
    """The power of a family of `tests` sign-flip tests over `seeds` seeds, Holm at alpha over
    the family, every test's true effect `effect` with per-seed spread `sd` of `shape`, the
    tests' effects of one seed correlated `correlation` (lab.stats.simulated_powers): per test
    ("power"), the whole family confirmed ("family_power"), the fewest seeds that give 80% per
    test (lab.stats.POWER; None: more than lab.stats.POWER_SEARCH_SEEDS), and "sensitivity":
    per test and family at every shape (lab.stats.PLANNING_SHAPES) and correlation
    (lab.stats.SENSITIVITY_CORRELATIONS), the same seeds and effect. Every number the statement
    needs is a key, so a printed plan names what it assumed."""
    from lab.stats import (PLANNING_SHAPES, POWER, POWER_ASSUMPTIONS, POWER_RNG_SEED,
                           POWER_SEARCH_SEEDS, POWER_SIMULATIONS, SENSITIVITY_CORRELATIONS,
                           seeds_for_planned_power, simulated_powers)

    def powers(at_shape: str, at_correlation: float) -> dict[str, float]:
        return simulated_powers(seeds, effect, sd, tests, alpha, alternative, shape=at_shape,
                                correlation=at_correlation)

    declared = powers(shape, correlation)
    return {"effect": effect, "sd": sd, "d": effect / sd, "alpha": alpha,
            "alternative": alternative, "tests": tests, "seeds": seeds,
            "shape": shape, "correlation": correlation,
            "power": declared["per_test"], "family_power": declared["family"],
            "target": POWER,
            "seeds_for_target": seeds_for_planned_power(effect, sd, tests, alpha, alternative,
                                                        shape=shape, correlation=correlation),
            "searched_to": POWER_SEARCH_SEEDS, "simulations": POWER_SIMULATIONS,
            "rng_seed": POWER_RNG_SEED, "test": "exact sign-flip test", "assumes": POWER_ASSUMPTIONS,
            "sensitivity": [{"shape": other, "correlation": rho,
                             **{k: v for k, v in powers(other, rho).items() if k != "any"}}
                            for other in PLANNING_SHAPES for rho in SENSITIVITY_CORRELATIONS]}


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def power_line(power: dict[str, Any]) -> str:
    """planned_power as one line: the power per test and of the whole family, the seeds for the
    target, and what was assumed."""
    needed = (f"{power['target']:.0%} power per test takes {power['seeds_for_target']} seeds"
              if power["seeds_for_target"] else
              f"{power['target']:.0%} power per test takes more than {power['searched_to']} seeds")
    return (f"power (simulated: {power['test']}, {power['simulations']} studies): "
            f"{power['power']:.2f} per test with {_plural(power['seeds'], 'seed')}, Holm over "
            f"{_plural(power['tests'], 'test')}, {power['alternative']} alpha {power['alpha']:g}, "
            f"at statistics.smallest_effect {power['effect']:g} and planning_sd {power['sd']:g} "
            f"(d = {power['d']:.3g}), planning_shape {power['shape']}, planning_correlation "
            f"{power['correlation']:g}; the whole family confirmed (all {power['tests']} tests "
            f"rejected): {power['family_power']:.2f}; {needed}. Assumes {power['assumes']}")


def sensitivity_line(power: dict[str, Any]) -> str:
    """planned_power's sensitivity as one line: per test / whole family at each shape, at each
    correlation between the tests, with the plan's seeds, tests and effect."""
    from lab.stats import PLANNING_SHAPES

    by_shape = []
    for shape in PLANNING_SHAPES:
        cells = [c for c in power["sensitivity"] if c["shape"] == shape]
        by_shape.append(f"{shape} " + ", ".join(
            f"{c['per_test']:.2f}/{c['family']:.2f}" for c in cells))
    correlations = ", ".join(f"{c['correlation']:g}" for c in power["sensitivity"]
                             if c["shape"] == power["sensitivity"][0]["shape"])
    return (f"power sensitivity (per test/whole family, {_plural(power['seeds'], 'seed')}, "
            f"{_plural(power['tests'], 'test')}, d = {power['d']:.3g}; at planning_correlation "
            f"{correlations}): " + "; ".join(by_shape)
            + ". Shapes (same mean and SD): " + "; ".join(
                f"{name}: {text}" for name, text in PLANNING_SHAPES.items()))


def power_problem(recipe: Any, models: list[str] | None = None) -> str | None:
    """One line when the recipe's primary tests can never reach alpha (and the study does not
    call itself descriptive); None when they can. `models`: as power_plan takes them."""
    if recipe.statistics.descriptive:
        return None
    plan = power_plan(recipe, simulate=False, models=models)  # reachability: no simulation
    if not plan["unreachable"]:
        return None
    worst = plan["unreachable"]
    floors = sorted({r["holm_floor"] for r in worst})
    shown = ", ".join(f"{r['contrast'].question} {r['contrast'].model} {r['contrast'].label()}"
                      + (f" E={r['contrast'].epochs}" if r["contrast"].question != "decay" else "")
                      for r in worst[:3])
    more = f" and {len(worst) - 3} more" if len(worst) > 3 else ""
    need = (f"; {plan['seeds_needed']} seeds would let all {sum(1 for r in plan['tests'] if r['unit'] == SEED_UNIT)} "
            f"seed-level tests reach it" if plan["seeds_needed"] else "")
    return (f"underpowered: {len(worst)} of the {len(plan['tests'])} primary tests "
            f"({', '.join(plan['questions'])}) can never reach alpha {plan['alpha']:g} with "
            f"{plan['seeds']} seed{'s' if plan['seeds'] != 1 else ''} (smallest p after Holm "
            f"{floors[0]:.3g}{'' if len(floors) == 1 else f'-{floors[-1]:.3g}'}; {plan['alternative']} "
            f"sign-flip floor {sign_flip_floor(plan['seeds'], plan['alternative']):.3g}): {shown}{more}"
            f"{need}; add seeds, declare fewer questions (statistics.primary), call the study "
            "descriptive (statistics.descriptive: true) or pass --allow-underpowered")
