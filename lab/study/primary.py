"""The report's first table: each primary question a study declares (lab.study.questions) as an
effect over seeds, with its interval, its exact test and Holm over the declared family.

The effect is on the study's evaluated samples (the benchmark as evaluated), in the primary
metric's per-sample score, and the seed is the unit: per seed, the mean per-sample difference
between two arms of that seed (same samples), or the split-half gap, or the change of an arm's
headline effect between the fewest and the most fine-tuning epochs. The test is the exact
sign-flip test of those per-seed effects; the interval a cluster bootstrap-t (seeds, then
samples within seed; lab.stats.effect_interval). A split-half question of one seed is tested
over its samples, which the split assigned at random (a rank test of the halves), and is
labelled as being about that one model. Pooled per-sample tests are not here: the secondary
table shows them as descriptions.
"""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any

from lab.common import LabError
from lab.eval.generate import EXCLUDED_FROM_CLEAN
from lab.stats import (CLUSTER_BOOTSTRAP, SAMPLE_BOOTSTRAP, SIGN_FLIP_TEST, effect_interval, holm,
                       sample_interval, seed_effect, seeds_for_power, sign_flip_test, starred_p)
from lab.study.questions import (QUESTIONS, SAMPLE_UNIT, SEED_UNIT, Contrast, allowed, family,
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
    if contrast.question == "split-half" or (contrast.question == "decay"
                                             and contrast.reference is None):
        return _split(clean, halves, where, contrast.arm, contrast.reference)
    return _between(clean, where, contrast.arm, contrast.reference)


def _contrast_parts(contrast: Contrast, clean: dict, halves: dict, task: str) -> dict:
    """Per seed, the parts whose signed means make the contrast's effect; decay: the effect at
    the fewest epochs minus the effect at the most (the same seeds only)."""
    first = _parts(contrast, contrast.epochs, clean, halves, task)
    if contrast.question != "decay":
        return first
    last = _parts(contrast, contrast.epochs_to, clean, halves, task)
    return {seed: list(first[seed]) + [(-sign, values) for sign, values in last[seed]]
            for seed in first if seed in last}


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


def _test_row(test: Contrast, task: str, metric: str, clean: dict, halves: dict, alpha: float,
              alternative: str) -> dict[str, Any]:
    """One test: the per-seed effects, their mean, interval and p, and the smallest p the
    design can give."""
    per_seed = _contrast_parts(test, clean, halves, task)
    effects = {s: seed_effect(p) for s, p in per_seed.items()}
    effects = {s: e for s, e in effects.items() if e is not None}
    seeds = len(effects)
    counted = unit(test, seeds)
    level = 1 - alpha
    row: dict[str, Any] = {
        "question": test.question, "model": test.model, "task": task, "metric": metric,
        "epochs": test.epochs, "epochs_to": test.epochs_to, "train_size": test.train_size,
        "arm": test.arm, "reference": test.reference, "contrast": test.label(), "unit": counted,
        "seeds": seeds, "seed_effects": effects,
        "seeds_positive": sum(1 for e in effects.values() if e > 0),
        "estimate": sum(effects.values()) / seeds if seeds else None,
        "samples": (round(sum(len(v) for p in per_seed.values() for _s, v in p) / len(per_seed), 1)
                    if per_seed else 0)}
    if counted == SAMPLE_UNIT and seeds == 1:
        (parts,) = per_seed.values()
        interval = sample_interval(parts, level)
        row.update(p=_rank_test(parts, alternative), test=RANK_TEST,
                   floor=rank_floor(len(parts[0][1]), len(parts[1][1]), alternative),
                   interval_method=SAMPLE_BOOTSTRAP)
    else:
        p, name = sign_flip_test(list(effects.values()), alternative)
        interval = effect_interval(per_seed, level) if seeds >= 2 else None
        row.update(p=p, test=name, floor=sign_flip_floor(seeds, alternative),
                   interval_method=CLUSTER_BOOTSTRAP if interval else None)
    if interval:
        row.update(ci_low=interval[0], ci_high=interval[1])
    return row


def primary_table(samples: list[dict[str, Any]], runs: list[dict[str, Any]], metric: str,
                  primary: list[str] | None, alpha: float, alternative: str,
                  descriptive: bool) -> dict[str, Any]:
    """Every declared primary test of a study on its `metric`: effect, interval, p, the smallest
    p its design can give, and Holm over the family; and, as `exploratory`, the same for the
    questions its arms allow that it did not declare (outside the family: no Holm, never
    starred). `samples`: samples.csv rows (with seed and id columns); `runs`: results.csv rows
    of the compared group (arms, models, epochs)."""
    if samples and any(s.get("seed") in (None, "") or s.get("id") in (None, "") for s in samples):
        raise LabError("samples.csv lacks the seed or id column: no primary table (rerun lab study)")
    arms = sorted({r["arm"] for r in runs})
    models = sorted({r["model"] for r in runs})
    tasks = sorted({r["task"] for r in runs})
    epochs = sorted({int(r["epochs"]) for r in runs})
    sizes = sorted({r["train_size"] for r in runs}, key=str)
    clean, halves = _scores(samples, metric)
    split = any(groups.get("injected") and groups.get("held_out") for groups in halves.values())
    possible = allowed(arms, split, epochs)
    asked = [q for q in QUESTIONS if possible[q]] if primary is None else \
        [q for q in primary if q in QUESTIONS]
    questions = [q for q in asked if possible[q]]
    others = [q for q in QUESTIONS if possible[q] and q not in questions]
    rows, exploratory = ([_test_row(test, task, metric, clean, halves, alpha, alternative)
                          for task in tasks
                          for test in family(chosen, arms, models, split, epochs, sizes)]
                         for chosen in (questions, others))
    # Holm over the whole declared family: a test that could not be run counts as p = 1. Power
    # is asked at alpha / family, what Holm asks of the family's smallest p.
    for row in rows:
        if row["unit"] == SEED_UNIT:
            row["seeds_for_power"] = seeds_for_power(list(row["seed_effects"].values()),
                                                     alpha / max(1, len(rows)),
                                                     alternative=alternative)
    for row, adjusted in zip(rows, holm([r["p"] if r.get("p") is not None else 1.0 for r in rows])):
        row["p_holm"] = adjusted if row.get("p") is not None else None
        row["significant"] = (not descriptive and row["p_holm"] is not None
                              and row["p_holm"] <= alpha)
    return {"metric": metric, "questions": questions,
            "not_available": [q for q in asked if q not in questions],
            "alpha": alpha, "alternative": alternative, "level": 1 - alpha,
            "descriptive": descriptive, "family": len(rows), "rows": rows,
            "exploratory_questions": others, "exploratory": exploratory}


# ---- rendering -------------------------------------------------------------------------------

def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _effect(row: dict[str, Any]) -> str:
    if row.get("estimate") is None:
        return "-"
    text = f"{row['estimate']:+.2f}"
    if row.get("ci_low") is not None:
        text += f" [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]"
    return text


def _p_holm(row: dict[str, Any], table: dict[str, Any]) -> str:
    if row.get("p_holm") is None:
        return "-"
    if table["descriptive"]:
        return format(row["p_holm"], ".3g")
    return starred_p(row["p_holm"], row["estimate"], table["alpha"], ".3g")


def _seeds(row: dict[str, Any]) -> str:
    if row["unit"] == SAMPLE_UNIT:
        return "1 (samples)"
    return f"{row['seeds']} ({row['seeds_positive']}+)" if row["seeds"] else "0"


PRIMARY_COLUMNS = [
    ("question", lambda r, t: r["question"]), ("model", lambda r, t: r["model"]),
    ("E", lambda r, t: str(r["epochs"]) if r["epochs_to"] is None
     else f"{r['epochs']} -> {r['epochs_to']}"),
    ("train size", lambda r, t: r["train_size"] or "all"),
    ("contrast", lambda r, t: r["contrast"]),
    ("effect [CI]", lambda r, t: _effect(r)),
    ("seeds (+)", lambda r, t: _seeds(r)),
    ("p", lambda r, t: _fmt(r.get("p"), ".3g")),
    ("smallest p", lambda r, t: _fmt(r.get("floor"), ".3g")),
    ("p (Holm)", _p_holm),
    ("seeds for 80% power", lambda r, t: _fmt(r.get("seeds_for_power"), "d")),
]


def primary_note(table: dict[str, Any]) -> str:
    rows = table["rows"]
    alternative = table["alternative"]
    parts = [
        f"Primary contrasts: the declared questions ({', '.join(table['questions']) or 'none'}), "
        f"{table['family']} tests, Holm over all of them. Effect: mean per-sample "
        f"{table['metric']} difference on the evaluated clean samples, per seed, then averaged "
        "over seeds (the seed is the unit); "
        + "; ".join(f"{q}: {QUESTIONS[q]}" for q in table["questions"]) + "."]
    if any(r["unit"] == SEED_UNIT for r in rows):
        parts.append(
            f"p: {SIGN_FLIP_TEST}, {alternative}, over the seeds' effects (arms of one seed "
            f"share their base documents: paired); with K seeds it cannot go below "
            f"{'1' if alternative != 'two-sided' else '2'}/2^K (smallest p). "
            f"[CI]: {int(round(100 * table['level']))}% {CLUSTER_BOOTSTRAP}; it speaks of "
            "these samples over training seeds. A p above alpha is not 'no effect': the "
            "interval bounds what the data cannot exclude.")
    if any(r["unit"] == SAMPLE_UNIT for r in rows):
        parts.append(
            f"One seed (seeds '1 (samples)'): p is {RANK_TEST}, {alternative}, [CI] a "
            f"{SAMPLE_BOOTSTRAP}: about this trained model, not about training runs.")
    if any(r.get("seeds_for_power") for r in rows):
        parts.append("Seeds for 80% power: the seeds at which the observed mean effect would "
                     f"be detected at alpha {table['alpha']:g} / {table['family']} (what Holm asks "
                     "of the family's smallest p) given the spread of the per-seed effects "
                     "(normal approximation; never below what the sign-flip test needs to reach "
                     "that level).")
    if table["not_available"]:
        parts.append(f"Declared but not in these results: {', '.join(table['not_available'])}.")
    if table["descriptive"]:
        parts.append("The study is descriptive (statistics.descriptive): nothing is starred.")
    else:
        parts.append(f"* Holm p <= alpha = {table['alpha']:g}; '(lower)': significant with the "
                     "effect below zero.")
    return " ".join(parts)


def _markdown(rows: list[dict[str, Any]], table: dict[str, Any], columns: list) -> str:
    header = [h for h, _ in columns]
    lines = [[fmt(r, table) for _, fmt in columns] for r in rows]
    if all(r["train_size"] in ("", None) for r in rows):
        drop = header.index("train size")
        header = header[:drop] + header[drop + 1:]
        lines = [line[:drop] + line[drop + 1:] for line in lines]
    return ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
            + "".join("| " + " | ".join(line) + " |\n" for line in lines))


def table_markdown(table: dict[str, Any]) -> str:
    """The primary table alone, without its note: what the console shows."""
    return _markdown(table["rows"], table, PRIMARY_COLUMNS)


# The exploratory table: the same effects, outside the family (no Holm, no power, no star).
EXPLORATORY_COLUMNS = [c for c in PRIMARY_COLUMNS if c[0] not in ("p (Holm)", "seeds for 80% power")]


def exploratory_markdown(table: dict[str, Any]) -> str:
    """The questions the arms allow that the study did not declare, computed as the primary
    ones are; '' when there are none."""
    if not table.get("exploratory"):
        return ""
    note = (f"Exploratory: the questions these arms allow that the study did not declare "
            f"({', '.join(table['exploratory_questions'])}), computed as the primary ones are "
            "(effect over seeds, its interval, its own p) but outside the family: no Holm, "
            "never starred, a lead for a study that declares them, not a finding.")
    return _markdown(table["exploratory"], table, EXPLORATORY_COLUMNS) + f"\n{note}\n"


def render(table: dict[str, Any]) -> dict[str, str]:
    """The primary table as Markdown (with its note) and CSV (every field, the exploratory rows
    after the family's, marked by `declared`)."""
    markdown = table_markdown(table) + f"\n{primary_note(table)}\n"
    fields = ["question", "model", "task", "metric", "epochs", "epochs_to", "train_size", "arm",
              "reference", "contrast", "unit", "seeds", "seeds_positive", "estimate", "ci_low",
              "ci_high", "p", "test", "floor", "p_holm", "significant", "seeds_for_power",
              "samples", "interval_method"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields + ["declared", "seed_effects"])
    for declared, rows in ((True, table["rows"]), (False, table.get("exploratory", []))):
        for r in rows:
            writer.writerow(["" if r.get(f) is None else r[f] for f in fields] + [declared]
                            + [";".join(f"{s}:{e:.6g}" for s, e in r["seed_effects"].items())])
    return {"md": markdown, "csv": out.getvalue()}
