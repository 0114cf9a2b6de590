"""The report's first table as text: the primary table (lab.analysis.primary computes it) in
Markdown and CSV, with its note (the test, the interval, the family and what a row cannot test),
each finding in one sentence above it, and the exploratory contrasts below it (never starred).

The rows come from primary_table; here nothing is computed, only shown: what a reader of
report/primary.md and primary.csv sees, and what `lab stats` prints.
"""
from __future__ import annotations

import csv
import io
from typing import Any

from lab.stats import (CLIPPED_LEGEND, CORPUS_SCORE, INTERVAL_RULE, SAMPLE_BOOTSTRAP, SAMPLE_SCORE,
                       SCORES, SIGN_FLIP_TEST, STUDENT_T_SEEDS, starred_p)
from lab.analysis.primary import CORPUS_EFFECT, CORPUS_NOT_NET, RANK_TEST, dash_or, effect_cell
from lab.analysis.questions import QUESTIONS, SAMPLE_UNIT, SEED_UNIT

def _p_holm(row: dict[str, Any], table: dict[str, Any]) -> str:
    if row.get("p_holm") is None:
        return "-"
    if not row.get("significant") and (table["descriptive"] or table.get("beyond_plan")):
        return format(row["p_holm"], ".3g")
    return starred_p(row["p_holm"], row["estimate"], table["alpha"], ".3g") if row.get(
        "significant") else format(row["p_holm"], ".3g")


def _seeds(row: dict[str, Any]) -> str:
    if row["unit"] == SAMPLE_UNIT:
        return "1 (samples)"
    return f"{row['seeds']} ({row['seeds_positive']}+)" if row["seeds"] else "0"


def _other(row: dict[str, Any], table: dict[str, Any]) -> str:
    """The same test in the other score: effect [CI], Holm p over its own family."""
    other = row.get("other") or {}
    if other.get("missing"):
        return "n/a"
    if other.get("estimate") is None:
        return "-"
    return f"{effect_cell(other)}, p (Holm) {dash_or(other.get('p_holm'), '.3g')}"


PRIMARY_COLUMNS = [
    ("question", lambda r, t: r["question"]), ("model", lambda r, t: r["model"]),
    ("E", lambda r, t: str(r["epochs"]) if r["epochs_to"] is None
     else f"{r['epochs']} -> {r['epochs_to']}"),
    ("train size", lambda r, t: r["train_size"] or "all"),
    ("contrast", lambda r, t: r["contrast"]),
    ("effect [CI]", lambda r, t: effect_cell(r)),
    ("seeds (+)", lambda r, t: _seeds(r)),
    ("p", lambda r, t: dash_or(r.get("p"), ".3g")),
    ("smallest p", lambda r, t: dash_or(r.get("floor"), ".3g")),
    ("p (Holm)", _p_holm),
    ("secondary score [CI]", _other),
]


def _interval_note(rows: list[dict[str, Any]], level: float) -> str:
    methods = sorted({r["interval_method"] for r in rows if r.get("interval_method")
                      and r["unit"] == SEED_UNIT})
    if not methods:
        return ""
    return (f"[CI]: {int(round(100 * level))}% " + "; ".join(methods)
            + f" (Student t with {STUDENT_T_SEEDS} seeds or fewer, where a bootstrap over so few "
              "seeds is Monte Carlo noise), cut to what the effect can be")


def primary_note(table: dict[str, Any]) -> str:
    rows = table["rows"]
    alternative = table["alternative"]
    score, other = table.get("score", SAMPLE_SCORE), table.get("secondary_score", CORPUS_SCORE)
    effect = (f"mean per-sample {table['metric']} difference on the evaluated clean samples, "
              "per seed, then averaged over seeds (the seed is the unit)"
              if score == SAMPLE_SCORE else
              f"corpus-level {table['metric']}: {CORPUS_EFFECT}, then averaged over seeds")
    parts = [
        f"Primary contrasts: the declared questions ({', '.join(table['questions']) or 'none'}), "
        f"in the declared score ({SCORES[score]}; statistics.score), {table['family']} tests, "
        f"Holm over all of them. Effect: {effect}; "
        + "; ".join(f"{q}: {QUESTIONS[q]}" for q in table["questions"]) + ". "
        "A contrast between two arms averages every evaluated sample: where the arm injected only "
        "part of them (a split-half arm), it mixes its injected and held-out samples, and the "
        "split-half question gives the effect per contaminated sample. A decay is measured on the "
        "samples clean at both epoch counts (corpus-level: on each count's clean group)."]
    if any(r["unit"] == SEED_UNIT for r in rows):
        parts.append(
            f"p: {SIGN_FLIP_TEST}, {alternative}, over the seeds' effects (arms of one seed "
            f"share their base documents: paired); with K seeds it cannot go below "
            f"{'1' if alternative != 'two-sided' else '2'}/2^K (smallest p). "
            + _interval_note(rows, table["level"]) + "; it speaks of these samples over "
            "training seeds. A p above alpha is not 'no effect': the interval bounds what the "
            "data cannot exclude.")
    if any(r["unit"] == SAMPLE_UNIT for r in rows):
        parts.append(
            f"One seed (seeds '1 (samples)'): p is {RANK_TEST}, {alternative}, [CI] a "
            f"{SAMPLE_BOOTSTRAP}: about this trained model, not about training runs.")
    parts.append(
        f"Secondary score [CI]: the same tests in the {SCORES[other]}"
        + (f" ({CORPUS_EFFECT}; Student t over seeds; n/a where {CORPUS_NOT_NET})"
           if other == CORPUS_SCORE else " (tested as the primary table's note says)")
        + ", Holm over its own family, never starred: a secondary analysis.")
    shown = rows + [r["other"] for r in rows if r.get("other")]
    if any(r.get("estimate") is not None and r.get("ci_low") is None for r in shown):
        parts.append(f"[n/a (reason)]: {INTERVAL_RULE}.")
    if any(r.get("ci_clipped") for r in shown):
        parts.append(f"{CLIPPED_LEGEND}.")
    if table["not_available"]:
        parts.append(f"Declared but not in these results: {', '.join(table['not_available'])}.")
    if table.get("beyond_plan"):
        parts.append(
            f"Exploratory, not confirmatory: these results hold more seeds than the "
            f"{table['planned_seeds']} the analysis was planned with (statistics.planned_seeds); "
            "seeds added after seeing results can be added until a test passes, so nothing is "
            "starred.")
    elif table["descriptive"]:
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


METRIC_LABELS = {"bleu": "BLEU", "bleu_sentence": "sentence BLEU", "meteor": "METEOR",
                 "em": "EM", "codebleu": "CodeBLEU"}


def finding(row: dict[str, Any], table: dict[str, Any]) -> str:
    """One primary test as a sentence: where, the contrast, the effect and its interval in the
    score's unit, the test and over what, Holm's p. 'contamination, gpt2, E = 0: paired vs
    paired-placebo +3.20 mean per-sample BLEU [+1.00, +5.40], exact sign-flip test over 5
    seeds, Holm p 0.031.'"""
    where = [row["question"], row["model"]]
    if len({r["task"] for r in table["rows"]}) > 1:
        where.append(row["task"])
    if row["train_size"] not in ("", None):
        where.append(f"train size {row['train_size']}")
    if row["epochs_to"] is None:  # a decay's contrast names both epoch counts
        where.append(f"E = {row['epochs']}")
    head = f"{', '.join(map(str, where))}: {row['contrast']}"
    if row.get("missing"):
        return f"{head}: {row['missing']}."
    estimate, _, interval = effect_cell(row).partition(" [")
    score = ("mean per-sample" if row["score"] == SAMPLE_SCORE else "corpus") + " " + \
        METRIC_LABELS.get(row["metric"], row["metric"])
    text = f"{head} {estimate} {score}" + (f" [{interval}" if interval else "")
    if row.get("p") is None:
        return f"{text}, no test ({row['seeds']} seed{'' if row['seeds'] == 1 else 's'})."
    if row["unit"] == SAMPLE_UNIT:
        test = "Mann-Whitney U test of one model's injected vs held-out samples"
    else:
        exact = "exact" in (row.get("test") or "")
        test = (f"{'exact' if exact else 'asymptotic'} sign-flip test over {row['seeds']} "
                "seeds")
    return f"{text}, {test}, Holm p {dash_or(row.get('p_holm'), '.3g')}."


def findings_markdown(table: dict[str, Any]) -> str:
    """Each primary test's finding in a sentence, a list to stand above the table."""
    return "".join(f"- {finding(r, table)}\n" for r in table["rows"])


# The exploratory table: the same effects, outside the family (no Holm, no power, no star).
EXPLORATORY_COLUMNS = [c for c in PRIMARY_COLUMNS if c[0] not in ("p (Holm)", "secondary score [CI]")]


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
    """The primary table as Markdown (each finding in a sentence above it, its note and the
    lines where the two scores disagree below) and CSV (every field; `role`: primary, secondary (the same tests in the other
    score) or exploratory)."""
    lines = table.get("disagreements") or []
    markdown = (findings_markdown(table) + "\n" + table_markdown(table)
                + f"\n{primary_note(table)}\n"
                + ("".join(f"\n{line}\n" for line in lines)))
    fields = ["question", "model", "task", "metric", "score", "epochs", "epochs_to", "train_size",
              "arm", "reference", "contrast", "unit", "seeds", "seeds_positive", "estimate",
              "ci_low", "ci_high", "ci_clipped", "p", "test", "floor", "p_holm", "significant",
              "samples",
              "interval_method", "missing"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields + ["role", "seed_effects"])
    for role in ("rows", "secondary", "exploratory"):
        for r in table.get(role, []):
            writer.writerow(["" if r.get(f) is None else r[f] for f in fields]
                            + [{"rows": "primary"}.get(role, role)]
                            + [";".join(f"{s}:{e:.6g}" for s, e in r["seed_effects"].items())])
    return {"md": markdown, "csv": out.getvalue()}
