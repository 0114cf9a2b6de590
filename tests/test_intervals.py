"""No nonsense intervals (issue 59, row 7): every interval the reports print is either a finite
interval holding its estimate, inside what the effect can be, or 'n/a (reason)' in its place
(lab.stats.INTERVAL_RULE), never a number where none can be estimated. `lab study micro.yaml
--report` (2 seeds) printed -0.47 [-220938541681.45, +5.50]: a bootstrap-t dividing by the ~0
spread of a resample that drew one seed twice. Fast: no training, made-up scores."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy.stats import t as t_distribution

from lab.detect.leaderboard import leaderboard, leaderboard_markdown
from lab.stats import (INTERVAL_RULE, NOT_FINITE, ZERO_SPREAD, effect_interval, effect_text,
                       sample_interval, seed_effect, seed_mean_interval)
from lab.analysis.dose_text import _with_interval
from lab.analysis.primary import primary_table
from lab.analysis.primary_text import table_markdown

BOUNDS = (-100.0, 100.0)  # a difference of two 0-100 scores
SAMPLES = 40
REASONS = {"1 seed", "0 seeds", ZERO_SPREAD, NOT_FINITE}
# An interval over k seeds is at most Student t's widest (1 degree of freedom) around the
# seeds' range: wider is a division by a spread of about zero, not data.
WIDEST = 2 * float(t_distribution.ppf(0.975, 1))


def _seeds(effects: list[float], kind: str, rng) -> dict:
    """Per seed one between-arm part: SAMPLES per-sample differences whose mean is the seed's
    effect; `kind` the degenerate data to make."""
    per_seed = {}
    for seed, effect in enumerate(effects):
        if kind == "identical samples":
            values = np.full(SAMPLES, effect)
        elif kind.startswith("sparse"):  # row 7: most per-sample differences 0 (arms agree)
            values = np.zeros(SAMPLES)
            values[seed % SAMPLES] = effect * SAMPLES
        elif kind == "one sample":
            values = np.array([effect])
        else:
            noise = rng.normal(0, 30 if kind != "huge values" else 3e11, SAMPLES)
            values = noise - noise.mean() + effect
        if kind == "nan":
            values[0] = math.nan
        per_seed[str(seed)] = [(1.0, dict(enumerate(values.tolist())))]
    return per_seed


KINDS = {  # the seeds' effects per kind (cut to k seeds)
    "varied": [-0.5, -0.44, 3.0, -2.0, 1.0, 0.3],  # row 7: two close seeds, noisy samples
    "sparse": [-0.5, -0.44, -0.3, -0.6, -0.45, -0.5],
    # most seeds' arms agree on every sample: many bootstrap resamples draw only those seeds
    "sparse, most seeds 0": [0.0, 0.0, 0.0, -0.5, -0.44, 0.0],
    "zero spread": [2.5] * 6,
    "identical samples": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    "one sample": [10.0, 12.0, 9.0, 14.0, 11.0, 8.0],
    "huge values": [4e11, -3e11, 1e11, 2e11, -1e11, 5e11],
    "nan": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
}


def _check_printed(text: str, estimate: float | None, bounds: tuple[float, float] | None) -> None:
    """A printed effect: '+1.23 [+0.40, +2.06]' holding its estimate (inside `bounds`), or
    '+1.23 [n/a (reason)]', or 'n/a (not finite)'; never nan, inf or a huge number."""
    assert not re.search(r"nan|inf", text, re.I), text
    if text == f"n/a ({NOT_FINITE})":
        assert estimate is None or not math.isfinite(estimate)
        return
    shown = re.fullmatch(r"([+-]\d+\.\d\d) \[(?:([+-]\d+\.\d\d), ([+-]\d+\.\d\d)|n/a \((.+)\))\]",
                         text)
    assert shown, text
    if shown[4] is not None:
        assert shown[4] in REASONS, text
        return
    point, low, high = (float(shown[i]) for i in (1, 2, 3))
    assert low <= point <= high and low < high, text
    if bounds:
        assert bounds[0] <= low and high <= bounds[1], text


def _check_interval(interval, estimate: float, effects: list[float] | None, bounds) -> None:
    if interval is None:
        return
    low, high = interval
    assert all(map(math.isfinite, (low, high))) and low <= estimate <= high and low < high
    if bounds:
        assert bounds[0] <= low and high <= bounds[1]
    if effects:  # over seeds
        assert high - low <= WIDEST * (max(effects) - min(effects)) * (1 + 1e-9), (interval,
                                                                                  effects)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_every_interval_over_seeds_is_an_interval_or_a_reason(k, kind):
    per_seed = _seeds(KINDS[kind][:k], kind, np.random.default_rng(k))
    effects = [seed_effect(parts) for parts in per_seed.values()]
    estimate = float(np.mean(effects))
    bounds = None if kind == "huge values" else BOUNDS
    interval = effect_interval(per_seed, bounds=bounds, resamples=500)
    _check_interval(interval, estimate, effects, bounds)
    mean, low, high = seed_mean_interval(effects)
    _check_interval(None if low is None else (low, high), mean, effects, None)
    if k == 1 or not all(map(math.isfinite, effects)) or max(effects) - min(effects) < 1e-9:
        assert interval is None and low is None  # nothing to estimate: no number
    else:
        assert interval is not None and low is not None
    _check_printed(effect_text(estimate, *(interval or (None, None)), k), estimate, bounds)
    _check_printed(_with_interval(estimate, *(interval or (None, None)), k), estimate, bounds)
    if k == 1:  # one seed: the interval over its samples
        (parts,) = per_seed.values()
        over_samples = sample_interval(parts, resamples=500)
        if kind in ("identical samples", "one sample", "nan"):
            assert over_samples is None  # no resample moves the effect, or a NaN
        _check_interval(over_samples, estimate, None, None)
        _check_printed(effect_text(estimate, *(over_samples or (None, None)), 1, True),
                       estimate, bounds)


def test_the_reasons_are_stated():
    assert effect_text(-0.47, None, None, 1) == "-0.47 [n/a (1 seed)]"
    assert effect_text(-0.47, None, None, 2) == "-0.47 [n/a (zero spread)]"
    assert effect_text(-0.47, -0.47, -0.47, 3) == "-0.47 [n/a (zero spread)]"
    assert effect_text(-0.47, -math.inf, 5.5, 2) == "-0.47 [n/a (not finite)]"
    assert effect_text(math.nan, None, None, 2) == "n/a (not finite)"
    assert effect_text(None, None, None, 0) == "-"
    assert effect_text(-0.47, -1.0, 0.1, 2) == "-0.47 [-1.00, +0.10]"
    assert "n/a (reason)" in INTERVAL_RULE


def _study_rows(effects_by_seed: dict[str, float], rng) -> tuple[list[dict], list[dict]]:
    """samples.csv and results.csv rows of a control and a paired arm whose models agree on
    every sample but one (as micro's do), where the arm's scores the seed's effect x SAMPLES
    more."""
    samples, runs = [], []
    for seed, effect in effects_by_seed.items():
        base = rng.uniform(20, 60, SAMPLES)
        lifted = base.copy()
        lifted[int(seed)] += effect * SAMPLES
        for arm, shift in (("control", base), ("paired", lifted)):
            for i, value in enumerate(shift):
                samples.append({"model": "gpt2", "task": "codetrans", "epochs": 1,
                                "train_size": "", "arm": arm, "seed": seed, "id": str(i),
                                "group": "clean", "score_bleu": float(value)})
            runs.append({"model": "gpt2", "task": "codetrans", "epochs": 1, "train_size": "",
                         "arm": arm, "seed": seed, "group": "clean",
                         "bleu": float(np.mean(shift))})
    return samples, runs


@pytest.mark.parametrize("effects", [{"0": -0.47}, {"0": -0.5, "1": -0.44},
                                     {"0": 2.0, "1": 2.0}, {"0": 1.0, "1": 2.0, "2": 4.0},
                                     {"0": 1.0, "1": 1.0, "2": 1.0, "3": 1.0}])
def test_the_primary_table_prints_an_interval_or_its_reason(effects):
    """Through the primary table (effect [CI] and the corpus-score column)."""
    samples, runs = _study_rows(effects, np.random.default_rng(0))
    table = primary_table(samples, runs, "bleu", None, 0.05, "two-sided", False)
    assert table["rows"]
    text = table_markdown(table)
    for row in table["rows"] + table["secondary"]:
        _check_printed(effect_text(row["estimate"], row.get("ci_low"), row.get("ci_high"),
                                   row["seeds"]), row["estimate"], BOUNDS)
        interval = None if row.get("ci_low") is None else (row["ci_low"], row["ci_high"])
        _check_interval(interval, row["estimate"], list(row["seed_effects"].values()), BOUNDS)
    cells = [c.strip() for line in text.splitlines()[2:] for c in line.split("|")]
    printed = [c for c in cells if re.match(r"[+-]\d+\.\d\d \[", c)]
    assert printed, text
    for cell in printed:  # effect [CI], and the corpus score's: 'effect [CI], p (Holm) ...'
        _check_printed(cell.split(", p (Holm)")[0], None, BOUNDS)
    if len(set(effects.values())) < 2:
        assert "[n/a (" in text  # one seed, or seeds that agree exactly: a reason, no number


@pytest.mark.parametrize("aucs", [[0.7], [0.7, 0.7], [0.6, 0.8], [0.6, math.nan]])
def test_the_leaderboard_prints_an_interval_or_its_reason(aucs):
    rows = [{"model": "gpt2", "arm": "paired", "groups": "paired", "epochs": "", "comparison": "",
             "dose": "all", "detector": "loss", "auc": a, "members": 40, "nonmembers": 40,
             "auc_sample_low": 0.6, "auc_sample_high": 0.8} for a in aucs]
    text = leaderboard_markdown(leaderboard(rows))
    cell = text.splitlines()[2].split("|")[2].strip()
    assert not re.search(r"nan|inf", cell), cell
    numbers = [float(x) for x in re.findall(r"\d+\.\d+", cell)]
    if re.search(r"\[\d", cell):
        assert numbers[1] <= numbers[0] <= numbers[2] and 0 <= numbers[1] < numbers[2] <= 1
    assert cell.startswith(("n/a (", "0.", "each of")) or "spread 0" in cell, cell


def test_the_shift_check_prints_an_interval_or_its_reason():
    from lab.detect.shift import bound

    assert bound(0.55, 0.45, 0.65, 0.3).startswith("shift AUC 0.55 [0.45, 0.65] (")
    collapsed = bound(1.0, 1.0, 1.0, 0.001)  # every resample separates perfectly
    assert "[n/a (zero spread)]" in collapsed and "excluded" not in collapsed


@pytest.mark.parametrize("experimental,control", [([5.0], [3.0]), ([2.0, 2.0], [1.0, 1.0])])
def test_the_lift_interval_of_two_groups_is_none_where_it_cannot_be_estimated(experimental,
                                                                              control):
    """The secondary comparison's lift_ci (stats.json, the LLM evaluation's JSON)."""
    from lab.stats import compare, lift_interval

    assert compare(experimental, control).lift_ci is None
    assert lift_interval([1.0, math.nan], control) is None
    low, high = compare([1.0, 3.0, 2.0], [0.0, 1.0, 0.5]).lift_ci
    assert low <= 1.5 <= high and low < high
