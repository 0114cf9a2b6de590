"""The report's first table: each primary question a study declares (lab.analysis.questions) as an
effect over seeds, with its interval, its exact test and Holm over the declared family.

The effect is on the study's evaluated samples (the benchmark as evaluated), in the primary
metric's per-sample score, and the seed is the unit: per seed, the mean per-sample difference
between two arms of that seed (same samples), or the split-half gap, or the change of an arm's
headline effect between the fewest and the most fine-tuning epochs. The test is the exact
sign-flip test of those per-seed effects; the interval a cluster bootstrap-t (seeds, then
samples within seed; lab.stats.effect_interval). A split-half question of one seed is tested
over its samples, which the split assigned at random (a rank test of the halves), and is
labelled as being about that one model. Pooled per-sample tests are not here: the secondary
table shows them as descriptions. The table as text (Markdown, CSV, its note and findings) is
lab.analysis.primary_text.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from lab.common import LabError
from lab.eval.generate import EXCLUDED_FROM_CLEAN
from lab.stats import (CLUSTER_BOOTSTRAP, CORPUS_SCORE, SAMPLE_BOOTSTRAP, SAMPLE_SCORE, STUDENT_T,
                       checked_interval, clipped, clipped_side, effect_interval, effect_text, holm,
                       interval_method, sample_interval, seed_effect, seed_mean_interval,
                       sign_flip_test)
from lab.analysis.questions import (QUESTIONS, SAMPLE_UNIT, SEED_UNIT, Contrast, allowed, family,
                                    rank_floor, sign_flip_floor, unit)

RANK_TEST = "Mann-Whitney U of the injected vs held-out samples' values (the split's randomisation)"
HALVES = ("injected", "held_out")


def _scores(samples: list[dict[str, Any]], metric: str) -> tuple[dict, dict]:
    """(clean, halves): per (model, task, epochs, train size, arm, seed), the clean samples'
    scores by id, and the split-half groups' scores by group and id."""
    column = f"score_{metric}"
    clean: dict[tuple, dict[str, float]] = defaultdict(dict)
    halves: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for s in samples:
        value = s.get(column)
        if value is None:
            continue
        key = (s["model"], s["task"], int(s["epochs"]), s["train_size"], s["arm"], str(s["seed"]))
        if s["group"] not in EXCLUDED_FROM_CLEAN:
            clean[key][s["id"]] = value
        if s["group"] in HALVES:
            halves[key][s["group"]][s["id"]] = value
    return clean, halves


def _between(clean: dict, where: tuple, arm: str, reference: str) -> dict[str, list]:
    """Per seed of both arms: one part, each shared clean sample's score under the arm's model
    minus under the reference's model of the same seed."""
    mine = {k[-1]: v for k, v in clean.items() if k[:-2] == where and k[-2] == arm}
    theirs = {k[-1]: v for k, v in clean.items() if k[:-2] == where and k[-2] == reference}
    parts = {}
    for seed in sorted(set(mine) & set(theirs), key=_seed_order):
        shared = {i: mine[seed][i] - theirs[seed][i] for i in mine[seed] if i in theirs[seed]}
        if shared:
            parts[seed] = [(1.0, shared)]
    return parts


def _split(clean: dict, halves: dict, where: tuple, arm: str, reference: str | None
           ) -> dict[str, list]:
    """Per seed: the injected half and the held-out half (each sample's score, net of the
    reference's model of the same seed on the same sample where there is one), as two parts."""
    parts = {}
    for key, groups in halves.items():
        if key[:-2] != where or key[-2] != arm:
            continue
        seed = key[-1]
        ref = clean.get(where + (reference, seed), {}) if reference else None
        if reference and not ref:
            continue
        net = [{i: v - (ref[i] if ref is not None else 0.0) for i, v in groups.get(g, {}).items()
                if ref is None or i in ref} for g in HALVES]
        if all(net):
            parts[seed] = [(1.0, net[0]), (-1.0, net[1])]
    return dict(sorted(parts.items(), key=lambda item: _seed_order(item[0])))


def _seed_order(seed: str) -> tuple[int, float, str]:
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (1, 0.0, seed)


def _parts(contrast: Contrast, epochs: int, clean: dict, halves: dict, task: str) -> dict:
    """Per seed, the parts of the contrast at one epoch count: the split-half halves (also for
    the decay of a split-half effect), else the two arms' shared samples."""
    where = (contrast.model, task, epochs, contrast.train_size)
    if contrast.within_model:
        return _split(clean, halves, where, contrast.arm, contrast.reference)
    return _between(clean, where, contrast.arm, contrast.reference)


def _residual_parts(contrast: Contrast, clean: dict, halves: dict, task: str) -> dict:
    """Per seed, a decontaminated model's split-half parts and, sign reversed, its oracle
    model's (contrast.baseline) on the same arm and cell: the seed's residual is the
    difference of the two models' split-half effects, each over its own evaluated samples (as
    report/decontam.md's residual column takes it). The seeds both models have, only."""
    mine = _split(clean, halves, (contrast.model, task, contrast.epochs, contrast.train_size),
                  contrast.arm, contrast.reference)
    oracle = _split(clean, halves, (contrast.baseline, task, contrast.epochs,
                                    contrast.train_size), contrast.arm, contrast.reference)
    return {seed: list(parts) + [(-sign, values) for sign, values in oracle[seed]]
            for seed, parts in mine.items() if seed in oracle}


def _contrast_parts(contrast: Contrast, clean: dict, halves: dict, task: str) -> dict:
    """Per seed, the parts whose signed means make the contrast's effect; decay: the effect at
    the fewest epochs minus the effect at the most (the same seeds only); residual: the
    decontaminated model's split-half effect minus its oracle model's."""
    if contrast.question == "residual":
        return _residual_parts(contrast, clean, halves, task)
    first = _parts(contrast, contrast.epochs, clean, halves, task)
    if contrast.question != "decay":
        return first
    last = _parts(contrast, contrast.epochs_to, clean, halves, task)
    # The change is measured on the samples evaluated clean at both epoch counts (at E >= 1 the
    # test samples found in the fine-tuning pairs leave), so that it is a change of these
    # samples' scores and not of which samples are counted.
    decayed = {}
    for seed in first:
        if seed not in last:
            continue
        both = list(zip(first[seed], last[seed]))
        # In the first part's order, never a set's: a set of ids iterates in an order that
        # changes with the process's string hashing, and the means' last digits with it.
        decayed[seed] = ([(a[0], {i: v for i, v in a[1].items() if i in b[1]}) for a, b in both]
                         + [(-b[0], {i: b[1][i] for i in a[1] if i in b[1]}) for a, b in both])
    return decayed


def _rank_test(parts: list, alternative: str) -> float | None:
    """One seed's split-half contrast over its samples: the per-sample values of the injected
    half against the held-out half's (decay: each sample's change between the two epoch
    counts), by a rank test; the split assigned the samples at random."""
    from scipy.stats import mannwhitneyu

    if len(parts) == 2:
        injected, held = parts[0][1], parts[1][1]
    else:  # decay: injected and held-out halves at the first and at the last epoch count
        injected = {i: parts[0][1][i] - parts[2][1][i] for i in parts[0][1] if i in parts[2][1]}
        held = {i: parts[1][1][i] - parts[3][1][i] for i in parts[1][1] if i in parts[3][1]}
    a, b = list(injected.values()), list(held.values())
    if not a or not b or len(set(a + b)) == 1:
        return None
    return float(mannwhitneyu(a, b, alternative=alternative).pvalue)


def _group_counts(samples: list[dict[str, Any]]) -> dict[tuple, Counter]:
    """(model, task, epochs, train size, arm) -> how many evaluated samples fell in each group
    (lab.eval.generate.GROUPS, injected and held_out), over the seeds."""
    counts: dict[tuple, Counter] = defaultdict(Counter)
    for s in samples:
        counts[(s["model"], s["task"], int(s["epochs"]), s["train_size"], s["arm"])][s["group"]] += 1
    return counts


def untestable(test: Contrast, task: str, counts: dict[tuple, Counter],
               block_size: int | None) -> str:
    """Why a declared test has no per-seed effect, in words: which samples its sides lacked."""
    if test.question == "residual":
        for model in (test.model, test.baseline):
            why = untestable(Contrast("split-half", model, test.arm, test.reference, test.epochs,
                                      test.train_size), task, counts, block_size)
            if not why.startswith("not testable: no seed has"):
                return f"{why} ({model})"
        return (f"not testable: no seed has split-half effects of both {test.model} and "
                f"{test.baseline}")

    def cell(epochs: int, arm: str) -> Counter:
        return counts.get((test.model, task, epochs, test.train_size, arm), Counter())

    block = f"the {block_size}-token pre-training block" if block_size else \
        "the pre-training block"
    for epochs in [test.epochs] + ([test.epochs_to] if test.epochs_to is not None else []):
        mine = cell(epochs, test.arm)
        if not mine:
            return f"not testable: no evaluated samples of {test.arm} at E = {epochs}"
        if test.within_model:
            for half, name in (("injected", "injected"), ("held_out", "held-out")):
                usable, cut = mine[half], mine[f"{half}_truncated"]
                if not usable:
                    return (f"not testable: 0 of {usable + cut} {name} samples evaluated at "
                            f"E = {epochs} fit {block}" if cut else
                            f"not testable: no {name} sample evaluated at E = {epochs}")
        if test.reference and not cell(epochs, test.reference):
            return f"not testable: no evaluated samples of {test.reference} at E = {epochs}"
    if test.within_model and test.reference:
        return (f"not testable: no seed has scores of both {test.arm}'s halves and "
                f"{test.reference}'s models on them")
    return (f"not testable: no seed has models of both {test.arm} and {test.reference} scored "
            "on the same samples")


def _at_the_floor(test: Contrast, task: str, clean: dict) -> bool:
    """Every score of both sides is 0 (the metric's floor, where no difference can show): the
    arm's models' and the reference's, at each epoch count the test reads."""
    models = (test.model, test.baseline) if test.baseline else (test.model,)
    values = [v for epochs in (test.epochs, test.epochs_to) if epochs is not None
              for key, scores in clean.items()
              if key[0] in models and key[1:4] == (task, epochs, test.train_size)
              and key[4] in (test.arm, test.reference) for v in scores.values()]
    return bool(values) and not any(values)


def _test_row(test: Contrast, task: str, metric: str, clean: dict, halves: dict, alpha: float,
              alternative: str, why: Any = None) -> dict[str, Any]:
    """One test: the per-seed effects, their mean, interval and p, and the smallest p the
    design can give; `missing`, the reason in words, where the data cannot test it (`why`
    gives it for a test without any per-seed effect)."""
    per_seed = _contrast_parts(test, clean, halves, task)
    effects = {s: seed_effect(p) for s, p in per_seed.items()}
    effects = {s: e for s, e in effects.items() if e is not None}
    seeds = len(effects)
    counted = unit(test, seeds)
    level = 1 - alpha
    row: dict[str, Any] = {
        "question": test.question, "model": test.model, "task": task, "metric": metric,
        "score": SAMPLE_SCORE, "epochs": test.epochs, "epochs_to": test.epochs_to,
        "train_size": test.train_size,
        "arm": test.arm, "reference": test.reference, "contrast": test.label(), "unit": counted,
        "seeds": seeds, "seed_effects": effects,
        "seeds_positive": sum(1 for e in effects.values() if e > 0),
        "estimate": sum(effects.values()) / seeds if seeds else None,
        "samples": (round(sum(len(v) for p in per_seed.values() for _s, v in p) / len(per_seed), 1)
                    if per_seed else 0)}
    if not per_seed:
        row.update(p=None, floor=sign_flip_floor(0, alternative),
                   missing=why(test) if why else "not testable: no per-seed effect")
        return row
    if _at_the_floor(test, task, clean):
        row.update(p=None, floor=sign_flip_floor(seeds, alternative),
                   missing=f"not testable: every {metric} score of both sides is 0, the "
                           "metric's floor")
        return row
    if counted == SAMPLE_UNIT and seeds == 1:
        (parts,) = per_seed.values()
        interval = _cut(row, sample_interval(parts, level), test)  # expanded: can overreach
        row.update(p=_rank_test(parts, alternative), test=RANK_TEST,
                   floor=rank_floor(len(parts[0][1]), len(parts[1][1]), alternative),
                   interval_method=SAMPLE_BOOTSTRAP)
    else:
        p, name = sign_flip_test(list(effects.values()), alternative)
        interval = _cut(row, effect_interval(per_seed, level) if seeds >= 2 else None, test)
        row.update(p=p, test=name, floor=sign_flip_floor(seeds, alternative),
                   interval_method=interval_method(seeds) if interval else None)
    if interval:
        row.update(ci_low=interval[0], ci_high=interval[1])
    return row


def _cut(row: dict[str, Any], interval: tuple[float, float] | None, test: Contrast
         ) -> tuple[float, float] | None:
    """`interval` as estimated, cut to effect_bounds (lab.stats.clipped) and checked; the row's
    `ci_clipped` says which bound was cut (lab.stats.clipped_side), so that every table marks
    it and a CSV or JSON reader sees it."""
    if interval is None or row.get("estimate") is None:
        return None
    bounds = effect_bounds(test)
    row["ci_clipped"] = clipped_side(interval, bounds)
    return checked_interval(row["estimate"], *clipped(interval, bounds))


METRIC_SCALE = 100.0  # every metric of the lab scores 0-100 (BLEU, METEOR, EM, CodeBLEU)


def _net(test: Contrast) -> bool:
    """Whether the contrast's per-seed effect is a difference of differences (a split-half gap
    net of a reference's models)."""
    return (test.within_model or test.question == "residual") and test.reference is not None


def effect_bounds(test: Contrast) -> tuple[float, float]:
    """What the contrast's effect can be: one difference of 0-100 scores lies in [-100, 100], a
    difference net of a reference's in twice that, a decay (the change of an effect) and a
    residual (one model's split-half effect minus another's) in twice their effect's."""
    span = (METRIC_SCALE * (2 if _net(test) else 1)
            * (2 if test.question in ("decay", "residual") else 1))
    return -span, span


# ---- the corpus-level score: one number per arm, seed and group (results.csv) ----------------

CORPUS_EFFECT = ("per seed, the arm's corpus-level score minus the reference's of the same seed "
                 "(a split-half arm: its injected group's minus its held-out group's)")
CORPUS_NOT_NET = ("not computable: the reference model's corpus score on the arm's halves is not "
                  "kept (results.csv scores each model's own groups)")


def _corpus_scores(runs: list[dict[str, Any]], metric: str) -> dict[tuple, float]:
    """(model, task, epochs, train size, arm, seed, group) -> the corpus-level score."""
    found = {}
    for r in runs:
        value = r.get(metric)
        if isinstance(value, (int, float)):
            found[(r["model"], r["task"], int(r["epochs"]), r["train_size"], r["arm"],
                   str(r["seed"]), r["group"])] = float(value)
    return found


def _corpus_at(test: Contrast, epochs: int, corpus: dict, task: str, compared: str,
               model: str | None = None) -> dict[str, float]:
    """Per seed, the contrast's corpus-level effect at one epoch count (of `model`, else the
    contrast's own)."""
    where = (model or test.model, task, epochs, test.train_size)
    seeds = {k[5] for k in corpus if k[:4] == where and k[4] == test.arm}
    effects = {}
    for seed in seeds:
        if test.within_model or test.question == "residual":
            first, second = (corpus.get(where + (test.arm, seed, g)) for g in HALVES)
        else:
            first = corpus.get(where + (test.arm, seed, compared))
            second = corpus.get(where + (test.reference, seed, compared))
        if first is not None and second is not None:
            effects[seed] = first - second
    return effects


def _corpus_row(test: Contrast, task: str, metric: str, corpus: dict, compared: str,
                alpha: float, alternative: str) -> dict[str, Any]:
    """One test in the corpus-level score: the per-seed effects, their mean, Student's t
    interval over seeds (no samples to resample: a corpus score is one number per model), the
    exact sign-flip p."""
    row: dict[str, Any] = {
        "question": test.question, "model": test.model, "task": task, "metric": metric,
        "score": CORPUS_SCORE, "epochs": test.epochs, "epochs_to": test.epochs_to,
        "train_size": test.train_size, "arm": test.arm, "reference": test.reference,
        "contrast": test.label(), "unit": SEED_UNIT, "seed_effects": {}, "seeds": 0,
        "seeds_positive": 0, "estimate": None}
    if _net(test):
        row["missing"] = CORPUS_NOT_NET
        return row
    effects = _corpus_at(test, test.epochs, corpus, task, compared)
    if test.question == "decay":
        last = _corpus_at(test, test.epochs_to, corpus, task, compared)
        effects = {s: e - last[s] for s, e in effects.items() if s in last}
    if test.question == "residual":
        oracle = _corpus_at(test, test.epochs, corpus, task, compared, test.baseline)
        effects = {s: e - oracle[s] for s, e in effects.items() if s in oracle}
    effects = dict(sorted(effects.items(), key=lambda item: _seed_order(item[0])))
    seeds = len(effects)
    row.update(seed_effects=effects, seeds=seeds,
               seeds_positive=sum(1 for e in effects.values() if e > 0),
               estimate=sum(effects.values()) / seeds if seeds else None)
    p, name = sign_flip_test(list(effects.values()), alternative)
    row.update(p=p, test=name, floor=sign_flip_floor(seeds, alternative))
    _estimate, low, high = seed_mean_interval(list(effects.values()), 1 - alpha)
    interval = None if low is None else _cut(row, (low, high), test)
    if interval:
        row["ci_low"], row["ci_high"] = interval
        row["interval_method"] = STUDENT_T
    return row


def _holm_family(rows: list[dict[str, Any]], alpha: float, starred: bool) -> None:
    """Holm over the family: a test that could not be run counts as p = 1."""
    for row, adjusted in zip(rows, holm([r["p"] if r.get("p") is not None else 1.0 for r in rows])):
        row["p_holm"] = adjusted if row.get("p") is not None else None
        row["significant"] = starred and row["p_holm"] is not None and row["p_holm"] <= alpha


def dash_or(value: Any, spec: str) -> str:
    """A number as `spec` formats it; a missing one as '-' (the tables' empty cell)."""
    return "-" if value is None else format(value, spec)


def effect_cell(row: dict[str, Any]) -> str:
    """The estimate and its interval, or the reason it has none (lab.stats.INTERVAL_RULE), or
    why the data could not test it."""
    if row.get("missing"):
        return row["missing"]
    return effect_text(row.get("estimate"), row.get("ci_low"), row.get("ci_high"),
                       row.get("seeds", 0), over_samples=row.get("unit") == SAMPLE_UNIT,
                       cut=row.get("ci_clipped"))


def score_name(row: dict[str, Any]) -> str:
    """'mean per-sample bleu', 'corpus bleu'."""
    return f"{'mean per-sample' if row['score'] == SAMPLE_SCORE else 'corpus'} {row['metric']}"


def _excludes_zero(row: dict[str, Any]) -> bool | None:
    if row.get("ci_low") is None:
        return None
    return row["ci_low"] > 0 or row["ci_high"] < 0


def _sign(value: float | None) -> int | None:
    return None if value is None else (value > 0) - (value < 0)


def disagreements(rows: list[dict[str, Any]], others: list[dict[str, Any]], alpha: float
                  ) -> list[str]:
    """One line per test whose two scores disagree: in the sign of the effect, in whether the
    interval excludes zero, or in whether Holm's p reaches alpha."""
    lines = []
    for mine, theirs in zip(rows, others):
        if mine.get("estimate") is None or theirs.get("estimate") is None:
            continue
        # Only what both scores have is compared: a score without a test (one seed's corpus
        # score) or without an interval neither agrees nor disagrees there.
        tested = all(r.get("p_holm") is not None for r in (mine, theirs))
        reached = [tested and r["p_holm"] <= alpha for r in (mine, theirs)]
        bounded = all(_excludes_zero(r) is not None for r in (mine, theirs))
        if (_sign(mine["estimate"]) == _sign(theirs["estimate"])
                and (not bounded or _excludes_zero(mine) == _excludes_zero(theirs))
                and reached[0] == reached[1]):
            continue
        where = (f"{mine['question']} {mine['model']} {mine['contrast']}"
                 + (f" E = {mine['epochs']}" if mine["epochs_to"] is None else ""))
        lines.append(f"The scores disagree on {where}: " + "; ".join(
            f"{score_name(r)} {effect_cell(r)} ({r['seeds_positive']} of {r['seeds']} seeds "
            f"positive, Holm p {dash_or(r.get('p_holm'), '.3g')})" for r in (mine, theirs)) + ".")
    return lines


def primary_table(samples: list[dict[str, Any]], runs: list[dict[str, Any]], metric: str,
                  primary: list[str] | None, alpha: float, alternative: str,
                  descriptive: bool, score: str = SAMPLE_SCORE,
                  planned_seeds: int | None = None, split: bool | None = None,
                  block_size: int | None = None) -> dict[str, Any]:
    """Every declared primary test of a study on its `metric`, in the declared `score` (the
    mean per-sample score, or the corpus-level score): effect, interval, p, the smallest p its
    design can give, and Holm over the family; the same tests in the other score (`secondary`,
    their own Holm, never starred) and the lines where the two disagree; and, as `exploratory`,
    the questions its arms allow that it did not declare (outside the family: no Holm, never
    starred). `samples`: samples.csv rows (with seed and id columns); `runs`: results.csv rows
    of the compared group (arms, models, epochs) and of the split-half groups. With more seeds
    than `planned_seeds`, nothing is starred: the analysis is exploratory. `split`: whether the
    recipe's arms split the test samples (its design: split-half tests are then in the family
    even where the data left a half empty, with the reason); None: as the samples show.
    `block_size`: the pre-training block, for that reason."""
    if samples and any(s.get("seed") in (None, "") or s.get("id") in (None, "") for s in samples):
        raise LabError("samples.csv lacks the seed or id column: no primary table (rerun lab study)")
    compared = "clean" if any(r.get("group") == "clean" for r in runs) else "all"
    cells = [r for r in runs if r.get("group", compared) == compared] or runs
    arms = sorted({r["arm"] for r in cells})
    models = sorted({r["model"] for r in cells})
    tasks = sorted({r["task"] for r in cells})
    epochs = sorted({int(r["epochs"]) for r in cells})
    sizes = sorted({r["train_size"] for r in cells}, key=str)
    clean, halves = _scores(samples, metric)
    corpus = _corpus_scores(runs, metric)
    if split is None:
        split = any(groups.get("injected") and groups.get("held_out")
                    for groups in halves.values())
    counts = _group_counts(samples)
    possible = allowed(arms, split, epochs, models)
    asked = [q for q in QUESTIONS if possible[q]] if primary is None else \
        [q for q in primary if q in QUESTIONS]
    questions = [q for q in asked if possible[q]]
    others = [q for q in QUESTIONS if possible[q] and q not in questions]

    def rows_of(chosen: list[str], kind: str) -> list[dict[str, Any]]:
        return [_test_row(test, task, metric, clean, halves, alpha, alternative,
                          lambda t, task=task: untestable(t, task, counts, block_size))
                if kind == SAMPLE_SCORE else
                _corpus_row(test, task, metric, corpus, compared, alpha, alternative)
                for task in tasks for test in family(chosen, arms, models, split, epochs, sizes)]

    other = CORPUS_SCORE if score == SAMPLE_SCORE else SAMPLE_SCORE
    rows, secondary, exploratory = (rows_of(questions, score), rows_of(questions, other),
                                    rows_of(others, score))
    seeds = max((r["seeds"] for r in rows), default=0)
    beyond_plan = planned_seeds is not None and seeds > planned_seeds
    _holm_family(rows, alpha, starred=not descriptive and not beyond_plan)
    _holm_family(secondary, alpha, starred=False)
    for row, same_test in zip(rows, secondary):
        row["other"] = same_test
    return {"metric": metric, "score": score, "secondary_score": other, "questions": questions,
            "not_available": [q for q in asked if q not in questions],
            "alpha": alpha, "alternative": alternative, "level": 1 - alpha,
            "descriptive": descriptive, "planned_seeds": planned_seeds,
            "beyond_plan": beyond_plan, "family": len(rows), "rows": rows,
            "secondary": secondary, "disagreements": disagreements(rows, secondary, alpha),
            "exploratory_questions": others, "exploratory": exploratory}
