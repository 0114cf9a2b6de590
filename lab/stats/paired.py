"""The paired designs: tests over the same samples or the same seeds' models.

Within a split-half model: the per-seed gap (injected minus held-out), tested over seeds by an
exact sign-flip test, and, where seeds drew different splits, each sample injected against itself
held out (Wilcoxon signed-rank).

Between two arms of one seed (arm vs placebo, placebo vs control, arm vs control): each test
sample's score under one model minus its score under the other (Wilcoxon signed-rank), beside the
Mann-Whitney test over seeds (lab.stats.significance).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from lab.common import LabError
from lab.stats.ranks import _doubled_midranks
from lab.stats.significance import SIGN_FLIP_TEST, sign_flip_test


def paired_within_model(injected: Sequence[float], held_out: Sequence[float]) -> tuple[float, float]:
    """Split-half design: per-sample scores of injected vs held-out samples, pooled over the
    seeds' models (Mann-Whitney U, one-sided 'greater'; asymptotic for large n). It takes every
    score as independent, which a sample scored by several seeds' models is not: a description
    of the pooled scores; seed_level_test and crossover_test are the tests over seeds."""
    from scipy.stats import mannwhitneyu

    result = mannwhitneyu(list(injected), list(held_out), alternative="greater", method="asymptotic")
    return float(result.statistic), float(result.pvalue)


SIGNED_RANK_EXACT = 200  # crossover samples with a nonzero difference: exact up to this many
SEEDS_TEST = "sign-flip permutation test of the mean per-seed gap"
CROSSOVER_TEST = "Wilcoxon signed-rank, greater"
# Two arms on the same test samples (same seed): a description of these models, since a sample
# scored under several seeds counts once per seed; the tests over seeds are Mann-Whitney's.
PAIRED_SAMPLES_TEST = "Wilcoxon signed-rank over per-sample differences (same sample, same seed), greater"


def _seed_order(seed: Any) -> tuple[int, float, str]:
    text = str(seed)
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def seed_gaps(scores: Iterable[tuple[Any, str, float]]) -> dict[str, float]:
    """(seed, group, per-sample score) -> per seed with both groups scored: the mean injected
    score minus the mean held-out score of that seed's model; other groups are ignored."""
    by_seed: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for seed, group, score in scores:
        by_seed[str(seed)][group].append(score)
    gaps = {}
    for seed in sorted(by_seed, key=_seed_order):
        injected, held = by_seed[seed]["injected"], by_seed[seed]["held_out"]
        if injected and held:
            gaps[seed] = sum(injected) / len(injected) - sum(held) / len(held)
    return gaps


def seed_level_test(gaps: Sequence[float]) -> tuple[float | None, str]:
    """(p, test) for 'the per-seed gaps are above zero': sign_flip_test, one-sided 'greater'."""
    p, test = sign_flip_test(gaps, "greater")
    return p, test.replace(SIGN_FLIP_TEST, SEEDS_TEST, 1)


def crossover_differences(scores: Iterable[tuple[str, str, float]]) -> dict[str, float]:
    """(sample id, group, per-sample score) over the seeds of one cell -> for each sample scored
    injected by some seeds' models and held out by others': its mean score when injected minus
    its mean score when held out. Empty when every seed used the same split."""
    by_id: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample, group, score in scores:
        by_id[sample][group].append(score)
    return {sample: (sum(g["injected"]) / len(g["injected"])
                     - sum(g["held_out"]) / len(g["held_out"]))
            for sample, g in sorted(by_id.items()) if g["injected"] and g["held_out"]}


def signed_rank_test(differences: Sequence[float], name: str = CROSSOVER_TEST,
                     alternative: str = "greater") -> tuple[float | None, str]:
    """(p, test): Wilcoxon signed-rank over paired differences, one-sided 'greater' or
    'two-sided'; zero differences dropped (Wilcoxon's rule), ties as midranks; exact (the
    signed-rank sum over all 2^n signs) up to SIGNED_RANK_EXACT nonzero differences, else
    asymptotic. p None without a nonzero difference. `name` names the pairing in the returned
    test. With n pairs the exact p is at least 2^-n one-sided, 2^(1-n) two-sided (5 pairs:
    0.031, 0.062)."""
    if alternative not in ("greater", "two-sided"):
        raise LabError(f"signed-rank alternative '{alternative}': choose greater or two-sided")
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return None, f"{name}: no nonzero difference"
    if n > SIGNED_RANK_EXACT:
        from scipy.stats import wilcoxon

        result = wilcoxon(nonzero, alternative=alternative, method="asymptotic")
        return float(result.pvalue), f"{name}, asymptotic ({n} nonzero differences)"
    import numpy as np

    ranks = _doubled_midranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    distribution = np.zeros(sum(ranks) + 1)  # P(doubled positive-rank sum = index)
    distribution[0] = 1.0
    for rank in ranks:  # each rank positive or negative with probability 1/2
        shifted = np.zeros_like(distribution)
        shifted[rank:] = distribution[:-rank]
        distribution = (distribution + shifted) / 2
    upper = float(distribution[observed:].sum())
    p = upper if alternative == "greater" else 2 * min(upper, float(distribution[:observed + 1].sum()))
    return min(1.0, p), f"{name}, exact ({n} nonzero differences, ties as midranks)"


def crossover_test(differences: Sequence[float]) -> tuple[float | None, str]:
    """signed_rank_test over the per-sample differences injected minus held out."""
    return signed_rank_test(differences, CROSSOVER_TEST)


def paired_sample_differences(experimental: dict[Any, float], reference: dict[Any, float]
                              ) -> list[float]:
    """Two arms' per-sample scores keyed by (seed, sample id) -> experimental minus reference
    for every key both scored: the same test sample, scored by two models of the same seed
    that differ only in their pre-training corpus."""
    return [experimental[key] - reference[key] for key in sorted(experimental, key=str)
            if key in reference]


def within_model_net_of(scores: Iterable[tuple[Any, str, str, float]],
                        reference: dict[tuple[Any, str], float]) -> dict[str, Any]:
    """The split-half gap net of a reference model that saw neither half. The two halves hold
    different samples, so the raw gap (injected minus held out) mixes what the model memorised
    with how hard each half happens to be; a reference model of the same seed (the control, the
    placebo) scores the same halves, and the difference of differences keeps the former.
    scores: (seed, sample id, group, per-sample score) of one split-half cell; reference: the
    reference arm's per-sample scores keyed by (seed, sample id). Per seed: the arm's mean lift
    over the reference on its injected samples minus its mean lift on its held-out samples.
    Keys: net_gap (the mean over seeds), net_seed_gaps, net_samples (differences used), p_net
    (injected vs held-out differences pooled over seeds, paired_within_model: a description),
    p_net_seeds (seed_level_test over the per-seed net gaps; None with one seed)."""
    differences = [(seed, group, score - reference[(seed, sample)])
                   for seed, sample, group, score in scores
                   if group in ("injected", "held_out") and (seed, sample) in reference]
    gaps = seed_gaps(differences)
    if not gaps:
        return {}
    differences = [d for d in differences if str(d[0]) in gaps]
    _u, p_net = paired_within_model([d for _s, g, d in differences if g == "injected"],
                                    [d for _s, g, d in differences if g == "held_out"])
    return {"net_gap": sum(gaps.values()) / len(gaps), "net_seed_gaps": gaps,
            "net_samples": len(differences), "p_net": p_net,
            "p_net_seeds": seed_level_test(list(gaps.values()))[0]}


def within_model_seeds(scores: Iterable[tuple[Any, str, str, float]]) -> dict[str, Any]:
    """(seed, sample id, group, per-sample score) of one split-half cell -> the per-seed gaps
    with their seed-level test and, where seeds drew different splits, the crossover
    comparison. Keys: seed_gaps, gap_per_seed (their mean), seeds_positive, p_seeds, seeds_test,
    crossover_samples, crossover_gap (the mean difference), p_crossover, crossover_test."""
    rows = list(scores)
    gaps = seed_gaps((seed, group, score) for seed, _id, group, score in rows)
    p_seeds, seeds_test = seed_level_test(list(gaps.values()))
    found: dict[str, Any] = {
        "seed_gaps": gaps, "gap_per_seed": sum(gaps.values()) / len(gaps) if gaps else None,
        "seeds_positive": sum(1 for g in gaps.values() if g > 0), "p_seeds": p_seeds,
        "seeds_test": seeds_test}
    differences = list(crossover_differences((sample, group, score)
                                             for _seed, sample, group, score in rows).values())
    p_crossover, test = (crossover_test(differences) if differences
                         else (None, f"{CROSSOVER_TEST}: no sample both injected and held out"))
    found.update(crossover_samples=len(differences), p_crossover=p_crossover, crossover_test=test,
                 crossover_gap=sum(differences) / len(differences) if differences else None)
    return found
