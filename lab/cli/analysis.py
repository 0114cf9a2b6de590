"""`lab`'s commands that read a finished (or merged) study: its statistics (lab stats) and its
report (lab report: tables, figures, the HTML page)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from lab.analysis.report import run_report
from lab.cli.shared import console, declared_default, rich_table
from lab.common import LabError
from lab.stats import CONVENTIONS

ConventionOption = typer.Option(
    None, help=", ".join(CONVENTIONS) + " for the secondary tables (default: the study's recipe; "
               "the primary table always keeps the recipe's).")
AlphaOption = typer.Option(None, help="Significance level of the secondary tables (default: the "
                                      "study's recipe; the primary table always keeps the recipe's).")
StudyArgument = typer.Argument(..., help="A study directory made by lab study or lab merge; tables "
                                         "that are not what its stages give (tables.json) are "
                                         "refused, not rebuilt.")


def stats(
    study: Path = StudyArgument,
    convention: Optional[str] = ConventionOption,
    alpha: Optional[float] = AlphaOption,
    fmt: str = typer.Option("table", "--format", help="table (rich), md, csv or json."),
) -> None:
    """Per cell: every arm over seeds, each arm vs the control, power, injected vs held-out."""
    from lab.analysis.report import run_stats

    if fmt not in ("table", "md", "csv", "json"):
        raise LabError(f"--format {fmt}: choose from table, md, csv, json")
    result = run_stats(study, convention, alpha)
    if fmt in ("table", "md"):  # the study's tests first
        console.print(result["primary_md"], markup=False, highlight=False, soft_wrap=True)
    if fmt == "table":
        rows = [dict(zip(result["header"], row)) for row in result["rows"]]
        console.print(rich_table(result["title"], rows, result["header"]))
        console.print(result["note"], markup=False, highlight=False)
    elif fmt == "json" and result["unwritten"]:
        raise LabError(f"{result['unwritten']} (--format json prints the stats.json it writes)")
    else:  # plain text for files and pipes: never wrapped or coloured
        sys.stdout.write(result["json"].read_text(encoding="utf-8") if fmt == "json"
                         else result[fmt])
    if fmt in ("table", "md"):  # a dose ladder's levels, per metric
        for metric, rendered in result["dose_tables"].items():
            console.print(f"\ndose-response, {metric}:\n{rendered['md']}", markup=False,
                          highlight=False, soft_wrap=True)
        for metric, rendered in result["timing_tables"].items():  # timing levels
            console.print(f"\ninjection timing, {metric}:\n{rendered}", markup=False,
                          highlight=False, soft_wrap=True)
    if fmt != "json":  # json stays parseable; stats.json is in the same place every time
        console.print(f"stats: {result['json']}" if result["json"] else
                      f"stats.json not written, the tables above are whole: {result['unwritten']}",
                      markup=False, highlight=False, soft_wrap=True)


def report(
    study: Path = StudyArgument,
    convention: Optional[str] = ConventionOption,
    alpha: Optional[float] = AlphaOption,
    metric: Optional[str] = typer.Option(declared_default(run_report, "metric"),
                                         help="Metric of the decay figure (default: the "
                                              "study's primary metric)."),
    html: bool = typer.Option(declared_default(run_report, "html"),
                              help="Also write report/report.html: one self-contained page with "
                                   "the tables, figures, loss curves, probes and a sample browser."),
) -> None:
    """Paper-style tables (Markdown, LaTeX, CSV), stats.json, the contamination-decay figure and
    the HTML report."""
    folder = Path(study) / "report"
    made_here = not folder.exists()
    try:
        result = run_report(study, convention, metric, alpha, html)
    except BaseException:  # a full disk: no empty report/ left behind (its files are each whole)
        if made_here and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise
    # The primary table and where its legend and the full tables are (soft_wrap: Markdown rows
    # and paths wider than the terminal stay one line each), the figure last: what to open next.
    console.print(result["console"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"figure: {', '.join(str(p) for p in result['figure'])}", markup=False,
                  highlight=False, soft_wrap=True)

