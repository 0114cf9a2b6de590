"""The report's text: the secondary table (Markdown, LaTeX, CSV) with its legend, the report's
Markdown sections, and what the console prints at the end of `lab study` and `lab report`.

Each column is a header and a formatter of a Cell (lab.analysis.cells); the primary and
dose tables are rendered by lab.analysis.primary_text and lab.analysis.dose_text.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lab.stats import (ALPHA, ASYMPTOTIC_TIES, CONVENTIONS, CROSSOVER_TEST, DEFAULT_CONVENTION,
                       EXACT_SPLITS, PAIRED_SAMPLES_TEST, PERMUTATION_TIES, SEEDS_TEST)
from lab.analysis.primary_text import exploratory_markdown, render as render_primary, table_markdown
from lab.analysis.cells import (CLEAN, MEMORISED_BY, SCORE_FLOOR, VS_PLACEBO, WITHIN_TEST, Cell,
                                Memorised, NetGap, PerSample, Versus)

SECONDARY = "Secondary table (descriptive)"
EXPLORATORY = "Exploratory contrasts (not declared: no Holm, never starred)"


# ---- one cell's columns ---------------------------------------------------------------------

def _num(value: float | None, spec: str = ".2f") -> str:
    """A number of the table; a p-value too: the secondary table describes, so it is never
    starred (the primary table holds the tests)."""
    return "-" if value is None else format(value, spec)


def _mean_std(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")


def _versus(versus: Versus | None) -> str:
    return "-" if versus is None else _mean_std(versus.mean, versus.std)


def _lift(versus: Versus | None) -> str:
    return "-" if versus is None else f"{versus.lift:+.2f}"


def _tested(versus: Versus | None, field: str) -> float | None:
    """A statistic of the study's own test over seeds (None where it could not be run)."""
    return getattr(versus.tested, field) if versus and versus.tested else None


def _memorised(verdict: Memorised | None) -> str:
    """'yes (0.97, vs held-out) p 0.001, Holm 0.008': the verdict (from the Holm p), its AUC,
    what the injected samples were compared with (held-out samples, never-seen valid samples, or
    the placebo model) and both p's."""
    if verdict is None:
        return "-"
    against = {MEMORISED_BY["held_out"]: "vs held-out", MEMORISED_BY["reference"]: "vs valid",
               VS_PLACEBO: "vs placebo"}.get(verdict.by, "")
    return (f"{'yes' if verdict.verdict else 'no'} ({verdict.auc:.2f}"
            + (f", {against})" if against else ")")
            + f" p {verdict.p:.2g}, Holm {verdict.p_holm:.2g}")


def _memorised_family(cells: list[Cell]) -> int:
    return next(m.family for c in cells for m in (c.memorised, c.memorised_vs_placebo) if m)


def _baselines(cell: Cell) -> str:
    shown = " / ".join(f"{name} {value:.2f}" for name, value in cell.baselines.items())
    return (shown + (" ‡" if cell.below_baseline else "")) if shown else "-"


def _p(cell: Cell) -> str:
    p = _tested(cell.control, "p")
    return "-" if p is None else _num(p, ".4g") + (" †" if cell.control.below_floor else "")


def _paired(paired: PerSample | None) -> str:
    """The mean per-sample difference against a reference arm and its signed-rank p."""
    if paired is None or paired.p is None:
        return "-"
    return f"{paired.gap:+.2f}, p " + _num(paired.p, ".2g")


def _flag_within(cell: Cell) -> str:
    """† where both split-half halves score below the floor."""
    return " †" if cell.halves and cell.halves.below_floor else ""


def _p_within(cell: Cell) -> str:
    if cell.halves is None or cell.halves.p_within is None:
        return "-"
    return _num(cell.halves.p_within, ".2g") + _flag_within(cell)


def _net(cell: Cell, net: NetGap | None) -> str:
    """The split-half gap net of the control or the placebo on the same halves, its pooled
    per-sample p and, from two seeds, its p over seeds."""
    if net is None or net.gap is None:
        return "-"
    text = f"{net.gap:+.2f}, p " + _num(net.p, ".2g")
    if net.p_seeds is not None:
        text += "; seeds " + _num(net.p_seeds, ".2g")
    return text + _flag_within(cell)


def _seeds_of(cell: Cell) -> Any:
    return cell.halves.seeds if cell.halves else None


def _gap(cell: Cell) -> str:
    """The mean per-seed gap (injected minus held-out) and how many seeds had it above zero;
    '-' with a single seed, whose gap is the injected and held-out columns' difference."""
    seeds = _seeds_of(cell)
    if seeds is None or len(seeds.seed_gaps) < 2:
        return "-"
    return f"{seeds.gap_per_seed:+.2f} ({seeds.seeds_positive}/{len(seeds.seed_gaps)} positive)"


def _p_seeds(cell: Cell) -> str:
    seeds = _seeds_of(cell)
    if seeds is None or seeds.p_seeds is None:
        return "-"
    return _num(seeds.p_seeds, ".2g") + _flag_within(cell)


def _crossover(cell: Cell) -> str:
    seeds = _seeds_of(cell)
    if seeds is None or seeds.p_crossover is None:
        return "-"
    return (_num(seeds.p_crossover, ".2g") + f" (n = {seeds.crossover_samples})"
            + _flag_within(cell))


def _halves(cell: Cell, field: str) -> float | None:
    return getattr(cell.halves, field) if cell.halves else None


def _net_of(cell: Cell, role: str) -> NetGap | None:
    return getattr(cell.halves, f"net_of_{role}") if cell.halves else None


# (header, formatter) of the two tables: the paper-style one of lab report, the full one of
# lab stats.
Columns = list[tuple[str, Callable[[Cell], str]]]
PAPER_COLUMNS: Columns = [
    ("model", lambda c: c.model), ("task", lambda c: c.task), ("metric", lambda c: c.metric),
    ("epochs", lambda c: str(c.epochs)), ("train size", lambda c: c.train_size or "all"),
    ("arm", lambda c: c.arm),
    ("injected tokens", lambda c: _num(c.injected_token_fraction, ".1%")),
    ("memorised? (AUC)", lambda c: _memorised(c.memorised)),
    ("memorised vs placebo (AUC)", lambda c: _memorised(c.memorised_vs_placebo)),
    ("experimental", lambda c: _mean_std(c.mean, c.std)),
    ("control", lambda c: _versus(c.control)),
    ("baselines", _baselines),
    ("p", _p),
    ("placebo", lambda c: _versus(c.placebo)),
    ("p vs placebo", lambda c: _num(_tested(c.placebo, "p"), ".4g")),
    ("per sample vs control", lambda c: _paired(c.per_sample_vs_control)),
    ("per sample vs placebo", lambda c: _paired(c.per_sample_vs_placebo)),
    ("injected", lambda c: _num(_halves(c, "injected"))),
    ("held-out", lambda c: _num(_halves(c, "held_out"))),
    ("p (within)", _p_within),
    ("gap net of control", lambda c: _net(c, _net_of(c, "control"))),
    ("gap net of placebo", lambda c: _net(c, _net_of(c, "placebo"))),
    ("gap/seed", _gap), ("p (seeds)", _p_seeds), ("p (crossover)", _crossover),
]
TEXT_COLUMNS = {"model", "task", "metric", "train size", "arm"}  # left-aligned in LaTeX
STATS_COLUMNS: Columns = PAPER_COLUMNS[:7] + [
    ("pre-training loss", lambda c: _num(c.pretrain_loss)), ("seeds", lambda c: str(c.seeds)),
    ("mean ± std", lambda c: _mean_std(c.mean, c.std)),
    ("control", lambda c: _versus(c.control)), ("baselines", _baselines),
    ("lift", lambda c: _lift(c.control)),
    ("U", lambda c: _num(_tested(c.control, "u"), "g")), ("p", _p),
    ("Cliff's delta", lambda c: _num(_tested(c.control, "cliffs_delta"))),
    ("A12", lambda c: _num(_tested(c.control, "a12"))),
    ("placebo", lambda c: _versus(c.placebo)),
    ("lift vs placebo", lambda c: _lift(c.placebo)),
] + PAPER_COLUMNS[14:]
# The columns the HTML page shows at once, a laptop screen wide; the others open on request.
MAIN_COLUMNS = ("model", "task", "metric", "epochs", "train size", "arm", "experimental",
                "control", "placebo", "injected", "held-out")


# ---- the legend -----------------------------------------------------------------------------

def test_name(cells: list[Cell]) -> str:
    """The convention's test by name, and what ties made of an exact one: the exact permutation
    distribution, or (too many splits to count) the normal approximation."""
    convention = cells[0].convention if cells else DEFAULT_CONVENTION
    alternative, method = CONVENTIONS[convention]
    name = f"Mann-Whitney U, {alternative}, {method} (convention {convention})"
    tests = [_tested(c.control, "test") or "" for c in cells]
    if any(t.endswith(PERMUTATION_TIES) for t in tests):
        name += ("; exact permutation distribution (ties as midranks, every split counted) in "
                 "cells with tied scores")
    if any(t.endswith(ASYMPTOTIC_TIES) for t in tests):
        name += (f"; asymptotic in cells with tied scores and over {EXACT_SPLITS:,} splits to "
                 "enumerate")
    return name


def _methods(tests: list[str]) -> str:
    """'exact', 'asymptotic' or both: what the cells' tests of one kind used."""
    used = {"asymptotic" if "asymptotic" in t else "exact" for t in tests}
    return "exact" if used == {"exact"} else (
        "asymptotic" if used == {"asymptotic"} else "exact (asymptotic where too large)")


def _range(cells: list[Cell], group: str) -> str:
    """The samples left out for one reason per evaluation, over the cells: '0', '4' or '0-6'."""
    values = [c.left_out[group] for c in cells if group in c.left_out]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    text = lambda v: f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"  # noqa: E731
    return text(low) if low == high else f"{text(low)}-{text(high)}"


def legend(cells: list[Cell]) -> str:
    """What the table's columns and marks mean, for the parts this table has."""
    alpha = cells[0].alpha if cells else ALPHA
    seeds = [s for s in map(_seeds_of, cells) if s is not None]
    parts = ["Descriptive: no p-value of this table is starred or decides anything; the "
             "primary table holds the study's tests (over seeds, paired by seed, Holm over the "
             "declared family).",
             "Injected tokens: the share of pre-training tokens that were injected test data."]
    if any(c.memorised or c.memorised_vs_placebo for c in cells):
        parts.append(
            "Memorised?: whether the pre-trained models' loss (lab probe) tells the injected "
            "samples from never-seen ones within the same model, with the ROC AUC (0.5: no "
            "signal) and the comparison used: 'vs held-out' (the held-out half of a split-half "
            "arm), 'vs valid' (never-seen samples of the benchmark's valid split that the audit "
            "clears of test overlap); a control or placebo row: the same on a contaminated arm's "
            "samples, which it never saw. Memorised vs placebo: the arm model's loss on its "
            "injected samples against its placebo model's on the same samples (same seed). p: "
            "one-sided Mann-Whitney; Holm: adjusted over every memorised test of this table "
            f"({_memorised_family(cells)} tests, both columns, every arm), read together; yes "
            f"when the Holm p <= {alpha}.")
    if any(c.sample_set == CLEAN for c in cells):
        parts.append(
            "Experimental, control: the metric over each evaluation's clean samples, those "
            "neither in its fine-tuning data (input or output verbatim) nor pre-existing in the "
            f"arm's base corpus; left out per evaluation: {_range(cells, 'in_finetune_data')} in "
            f"the fine-tuning data, {_range(cells, 'pre_existing')} pre-existing. Injected "
            "samples whose document was cut at the pre-training block size "
            f"({_range(cells, 'injected_truncated')} per evaluation), held-out samples whose "
            f"document would have been ({_range(cells, 'held_out_truncated')}) and those left out "
            "above are in neither the injected nor the held-out group.")
    if any(_tested(c.control, "p") is not None for c in cells):
        parts.append(
            f"p: arm vs control over seeds by the study's own test, {test_name(cells)}, "
            "unpaired as the study ran it (kept to compare with its tables; arms of one seed "
            "share their base documents, so the primary table pairs them).")
    elif any(c.control for c in cells):
        parts.append("One seed per arm: no test over seeds (see the per-sample contrasts).")
    else:
        parts.append("No control arm: no arm-vs-control test.")
    if any((c.placebo and c.placebo.tested) or c.per_sample_vs_placebo for c in cells):
        parts.append(
            "Three contrasts: a contaminated arm vs its placebo (same form, count and repeat, "
            "from train/valid samples disjoint from the test split: the contamination effect); "
            "the placebo arm's own row vs the control (the format effect: the task's form and "
            "languages seen in pre-training); the arm vs the control (the study's contrast, "
            "both effects together). p vs placebo: the same test over seeds.")
    if any(c.per_sample_vs_control or c.per_sample_vs_placebo for c in cells):
        parts.append(
            "Per sample vs control / vs placebo: the mean difference of each clean test sample's "
            "score under the arm's model and under the other arm's model of the same seed, and "
            f"its p ({PAIRED_SAMPLES_TEST}; a sample counts once per seed: a description of "
            "these models, not a test over seeds).")
    if any(c.halves for c in cells):
        parts.append(
            "Injected, held-out: the metric on each half of a split-half arm's test samples (mean "
            f"over seeds). p (within): injected vs held-out per-sample scores of the same models, "
            f"{WITHIN_TEST}, pooled over seeds as if independent (a description).")
    if any(_net_of(c, "control") or _net_of(c, "placebo") for c in cells):
        parts.append(
            "Gap net of control / of placebo: the halves hold different samples, so injected vs "
            "held-out also compares how hard each half is; the control's (placebo's) model of "
            "the same seed saw neither half and scores both. Per seed, the arm's mean per-sample "
            "lift over that model on the injected half minus its lift on the held-out half; the "
            f"mean over seeds. p: the two halves' lifts pooled over seeds ({WITHIN_TEST}, a "
            f"description); seeds: the per-seed net gaps above zero ({SEEDS_TEST}).")
    if any(s.p_seeds is not None for s in seeds):
        parts.append(
            "Gap/seed: per seed, the injected minus the held-out per-sample mean of its model; "
            "their mean, and the seeds where it is positive. p (seeds): are the per-seed gaps "
            f"above zero, {SEEDS_TEST}, "
            f"{_methods([s.seeds_test for s in seeds if s.p_seeds is not None])} (with k "
            "seeds its p is at least 1/2^k: 2 seeds cannot go below 0.25, 5 reach 0.031).")
    elif seeds:
        parts.append("One seed: the gap between injected and held-out samples cannot be tested "
                     "over seeds.")
    if any(s.p_crossover is not None for s in seeds):
        parts.append(
            "p (crossover): the seeds drew different splits, so a sample injected by some seeds' "
            "models was held out by others': each such sample's mean score injected minus held "
            f"out, {CROSSOVER_TEST}, "
            f"{_methods([s.crossover_test for s in seeds if s.p_crossover is not None])}, over "
            "the n samples (zero differences dropped, ties as midranks).")
    if any((c.control and c.control.below_floor) or (c.halves and c.halves.below_floor)
           for c in cells):
        parts.append(f"† both means (arm and control, or injected and held-out) below "
                     f"{SCORE_FLOOR}: a difference there says little.")
    if any(c.baselines for c in cells):
        parts.append("baselines: what a program with no model scores on the same samples (copy: "
                     "the input unchanged; retrieval: the reference of the most similar "
                     "fine-tuning input, BM25), lab.eval.baselines.")
    if any(c.below_baseline for c in cells):
        parts.append("‡ the arm (and the control, if any) below the best trivial baseline: no "
                     "model of the cell is one anyone would use, whatever the lift.")
    return " ".join(parts)


# ---- the tables -----------------------------------------------------------------------------

def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A pipe table, no padding: the layout of every table.md the lab has written."""
    return ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
            + "".join("| " + " | ".join(row) + " |\n" for row in rows))


def _frame(header: list[str], rows: list[list[str]]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows, columns=header, dtype=str)


def _csv(header: list[str], rows: list[list[str]], test: str) -> str:
    """Every column, and the convention riding along in every row."""
    return _frame(header + ["test"], [row + [test] for row in rows]).to_csv(
        index=False, lineterminator="\n")


def _latex(header: list[str], rows: list[list[str]], note: str) -> str:
    text = _frame(header, rows).to_latex(
        index=False, escape=True,
        column_format="".join("l" if h in TEXT_COLUMNS else "r" for h in header))
    return (text.replace("±", "$\\pm$").replace("†", "$^\\dagger$")
            .replace("‡", "$^\\ddagger$") + f"% {note}\n")


def _rows(cells: list[Cell], columns: Columns) -> tuple[list[str], list[list[str]]]:
    return [h for h, _ in columns], [[fmt(c) for _, fmt in columns] for c in cells]


def secondary_table(cells: list[Cell], chosen_after: str | None = None) -> dict[str, Any]:
    """The paper-style table of the contaminated arms (of the control alone if that is all):
    `header` and `rows` as a reader sees them, without the columns the study cannot fill (no
    control arm: no p; no split-half arm: no injected/held-out), its `note` (the legend), and
    the files' text: `md`, `tex` and `csv` (which keeps every column, so that its schema never
    changes). `chosen_after`: the line saying its convention or alpha is not the recipe's."""
    cells = [c for c in cells if c.arm != "control"] or cells
    columns = PAPER_COLUMNS
    if len({c.train_size for c in cells}) <= 1:  # one train size: the column says nothing
        columns = [c for c in columns if c[0] != "train size"]
    header, lines = _rows(cells, columns)
    note = (f"{chosen_after} " if chosen_after else "") + legend(cells)
    keep = [i for i in range(len(header)) if any(row[i] != "-" for row in lines)]
    shown, shown_lines = [header[i] for i in keep], [[row[i] for i in keep] for row in lines]
    return {"header": shown, "rows": shown_lines, "note": note,
            "md": markdown_table(shown, shown_lines) + f"\n{note}\n",
            "tex": _latex(shown, shown_lines, note),
            "csv": _csv(header, lines, test_name(cells))}


def stats_table(cells: list[Cell], study: Path, chosen_after: str | None = None
                ) -> dict[str, Any]:
    """`lab stats`'s table: every arm and every column, as rows, Markdown and CSV."""
    header, rows = _rows(cells, STATS_COLUMNS)
    note = (f"{chosen_after} " if chosen_after else "") + legend(cells)
    chosen = "; convention or alpha chosen after the data" if chosen_after else ""
    return {"title": f"{Path(study)}: secondary table (descriptive; {test_name(cells)}{chosen})",
            "header": header, "rows": rows, "note": note,
            "md": markdown_table(header, rows) + f"\n{note}\n",
            "csv": _csv(header, rows, test_name(cells))}


# ---- the report's Markdown and the console --------------------------------------------------

def primary_sections(primary: dict[str, Any]) -> list[dict[str, str]]:
    """The report's sections ({"heading", "markdown"}) of the primary table and, where the arms
    allow undeclared questions, the exploratory one."""
    body = (render_primary(primary)["md"] if primary["rows"] else
            f"No primary contrast: {primary.get('missing') or 'the study declares none'}.\n")
    exploratory = exploratory_markdown(primary) if primary.get("exploratory") else ""
    return [{"heading": "Primary contrasts", "markdown": body}] + (
        [{"heading": EXPLORATORY, "markdown": exploratory}] if exploratory else [])


def report_markdown(sections: list[dict[str, Any]]) -> str:
    return "\n".join(f"## {s['heading']}\n\n{s['markdown']}" for s in sections)


def console_text(primary: dict[str, Any], folder: Path, written: list[Path]) -> str:
    """What `lab study` (at its end) and `lab report` print: the primary table, and one line
    saying where its legend and the full tables are (the legends stay out of the terminal)."""
    table = (table_markdown(primary) if primary["rows"] else
             f"No primary contrast: {primary.get('missing') or 'the study declares none'}.\n")
    names = [p.name for p in written if p.suffix in (".md", ".html")]
    table += "".join(f"\n{line}\n" for line in primary.get("disagreements") or [])
    return (f"## Primary contrasts\n\n{table}\n"
            f"Legend and full tables: {folder}/{', '.join(names)}")
