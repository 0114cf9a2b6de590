"""`lab stats` and `lab report`: the study's answer as tables and figures in STUDY/report/.

Each entry point reads the study first (lab.analysis.report_data: the primary table and the
page's samples; lab.analysis.cells: the secondary table's cells; the dose ladder), so that a
defect is refused before any file is written, then renders it (lab.analysis.tables,
lab.analysis.figure, lab.analysis.html) and writes the files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.common import LabError, write_json_atomic, write_text_atomic
from lab.analysis.collect import check_tables
from lab.stats import CONVENTIONS, CROSSOVER_TEST, PAIRED_SAMPLES_TEST, SEEDS_TEST
from lab.analysis.decontam_lift import decontam_lifts, decontam_table, study_removed
from lab.analysis.dose import dose_stats
from lab.analysis.dose_text import dose_table
from lab.analysis.figure import (decay_figure, detect_figure, dose_figure, plotted_cells,
                                 timing_figure)
from lab.analysis.timing import timing_stats, timing_table
from lab.analysis.html import write_html_report
from lab.analysis.study_record import BANNER, is_smoke, marked, read_summary
from lab.analysis.primary_text import render as render_primary
from lab.analysis.cells import WITHIN_TEST, Cell, below_baselines, study_cells, with_primary_p
from lab.analysis.report_data import read_csv, study_page_data, study_primary, chosen_after
from lab.analysis.tables import (SECONDARY, console_text, primary_sections, report_markdown,
                                 secondary_table, stats_table)


def study_stats(study: Path, convention: str | None = None, include_control: bool = False,
                alpha: float | None = None) -> list[dict[str, Any]]:
    """The secondary table's cells (cells.study_cells) as stats.json records them."""
    _check_study(study)
    return [cell.record() for cell in study_cells(study, convention, include_control, alpha)]


def _check_study(study: Path) -> None:
    """Refuse, before anything is read or written, a study whose tables are not what its stages
    give, or whose recipe.json is not theirs (lab.analysis.collect.check_tables): lab stats and
    lab report read one source or refuse, and rebuild nothing."""
    study = Path(study)
    if study.is_dir():  # else study_cells names what is missing
        check_tables(study)


def _report_folder(study: Path) -> Path:
    folder = Path(study) / "report"
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise LabError(f"{folder}: cannot create ({exc.strerror or exc})") from None
    return folder


def study_doses(study: Path, cells: list[Cell], band_metric: str | None = None,
                write: bool = True) -> dict[str, Any]:
    """The dose-response levels and cells of a study with a dose ladder (lab.analysis.dose), for
    the metrics of `cells`; written to STUDY/report/dose.json when there are any."""
    metrics = sorted({c.metric for c in cells})
    found = dose_stats(study, metrics, cells[0].alpha, read_csv, band_metric,
                       alternative=CONVENTIONS[cells[0].convention][0])
    if found["levels"] and write:
        write_json_atomic(_report_folder(study) / "dose.json", found)
    return found


def study_timing(study: Path, cells: list[Cell], write: bool = True) -> dict[str, Any]:
    """The forgetting levels of a study with timing levels (lab.analysis.timing), for the metrics
    of `cells`; written to STUDY/report/timing.json when there are any."""
    found = timing_stats(study, sorted({c.metric for c in cells}), cells[0].alpha, read_csv,
                         alternative=CONVENTIONS[cells[0].convention][0])
    if found["levels"] and write:
        write_json_atomic(_report_folder(study) / "timing.json", found)
    return found


def _write_stats(study: Path, cells: list[Cell], primary: dict[str, Any]) -> Path:
    """STUDY/report/stats.json, written whole or not at all: the primary table's rows, then the
    secondary table's cells."""
    path = _report_folder(study) / "stats.json"
    convention, alpha = cells[0].convention, cells[0].alpha
    alternative, method = CONVENTIONS[convention]
    write_json_atomic(path, {**({"smoke": BANNER} if is_smoke(study) else {}),
                             "convention": convention, "alpha": alpha, "primary": primary,
                             "test": f"Mann-Whitney U, {alternative}, {method}",
                             "within_test": WITHIN_TEST, "seeds_test": SEEDS_TEST,
                             "crossover_test": CROSSOVER_TEST,
                             "paired_samples_test": PAIRED_SAMPLES_TEST,
                             "cells": [cell.record() for cell in cells]})
    return path


def run_stats(study: Path, convention: str | None = None, alpha: float | None = None
              ) -> dict[str, Any]:
    """Entry point of `lab stats`: the primary table, then every arm per cell with the
    descriptive tests and effect sizes; writes STUDY/report/stats.json. Convention and alpha
    default to the study's recipe."""
    _check_study(study)
    cells = study_cells(study, convention, include_control=True, alpha=alpha)
    primary = study_primary(study)
    primary["chosen_after"] = chosen_after(study, convention, alpha)
    try:
        path, unwritten = _write_stats(study, cells, primary), None
    except (LabError, OSError) as exc:  # a read-only study: its tables still show
        path = None
        unwritten = str(exc) if isinstance(exc, LabError) else (
            f"{exc.filename or Path(study) / 'report'}: cannot write ({exc.strerror or exc})")
    doses = study_doses(study, cells, write=path is not None)
    timing = study_timing(study, cells, write=path is not None)
    result = {"cells": [cell.record() for cell in cells], "primary": primary, "json": path,
              "unwritten": unwritten,
              "doses": doses, "timing": timing,
              "timing_tables": {m: timing_table(timing, m)["md"]
                                for m in sorted({r["metric"] for r in timing["levels"]})},
              "primary_md": report_markdown(primary_sections(primary)),
              "dose_tables": {m: dose_table(doses, m) for m in sorted({r["metric"] for r in
                                                                        doses["levels"]})},
              **stats_table(cells, study, primary["chosen_after"])}
    if is_smoke(study):  # what lab stats prints of a smoke study says so first
        for name, suffix in (("primary_md", ".md"), ("md", ".md"), ("csv", ".csv")):
            result[name] = marked(suffix, result[name])
    return result


def _leaderboard_rows(study: Path) -> list[dict[str, Any]]:
    """The detectors' leaderboard of a study with detect stages (STUDY/detect_leaderboard.csv),
    else []."""
    from lab.analysis.collect import LEADERBOARD

    path = Path(study) / LEADERBOARD
    if not path.is_file():
        return []
    numeric = {"seeds", "auc", "auc_low", "auc_high", "auc_sample_low", "auc_sample_high",
               "tpr_at_1pct_fpr_mean", "tpr_at_5pct_fpr_mean"}
    return read_csv(path, ("model", "arm", "groups", "detector", "auc", "seeds"),
                    numeric.__contains__)


def run_report(study: Path, convention: str | None = None, metric: str | None = None,
               alpha: float | None = None, html: bool = True) -> dict[str, Any]:
    """Entry point of `lab report`: tables (md, tex, csv), stats.json, the decay figure and
    (html) the self-contained HTML page with the sample browser; `console` is what the
    terminal shows of it. Convention and alpha default to the study's recipe; the figures'
    metric to its primary metric (the recipe's first evaluation metric: smooth_bleu for
    summarisation, bleu for translation and generation)."""
    study = Path(study)
    _check_study(study)
    cells = study_cells(study, convention, include_control=True, alpha=alpha)
    primary = study_primary(study)
    metric = metric or primary.get("metric") or next(
        (c.metric for c in cells if c.mean is not None), "bleu")
    plotted_cells(cells, metric)  # an unknown --metric fails before anything is written
    page = study_page_data(study) if html else None  # so does a defect in what the page reads
    primary["chosen_after"] = chosen_after(study, convention, alpha)
    with_primary_p(cells, primary)
    path = _write_stats(study, cells, primary)
    secondary = secondary_table(cells, primary["chosen_after"])
    outputs = {f"table.{suffix}": secondary[suffix] for suffix in ("md", "tex", "csv")}
    if primary["rows"] or primary.get("exploratory"):
        outputs.update({f"primary.{suffix}": text
                        for suffix, text in render_primary(primary).items()})
    figure = decay_figure(cells, metric, study / "report" / f"decay-{metric}")
    doses = study_doses(study, cells, band_metric=metric)
    dose_markdown = ""
    if doses["levels"]:
        dose_tables = dose_table(doses, metric)
        outputs.update({f"dose.{suffix}": text for suffix, text in dose_tables.items()})
        dose_markdown = dose_tables["md"]
        figure += dose_figure(doses, metric, study / "report" / f"dose-{metric}")
    timing = study_timing(study, cells)
    timing_markdown = ""
    if timing["levels"]:
        timing_tables = timing_table(timing, metric)
        outputs.update({f"timing.{suffix}": text for suffix, text in timing_tables.items()})
        timing_markdown = timing_tables["md"]
        figure += timing_figure(timing, metric, study / "report" / f"timing-{metric}")
    decontam_rows = decontam_lifts(primary, study_removed(study))
    decontam_markdown = ""
    if decontam_rows:
        found = decontam_table(decontam_rows, bool(primary.get("descriptive")),
                               read_summary(study).get("planned_power"))
        outputs.update({f"decontam.{suffix}": text for suffix, text in found.items()})
        decontam_markdown = found["md"]
    from lab.detect.leaderboard import leaderboard_markdown

    leaderboard_rows = _leaderboard_rows(study)
    detectors_markdown = leaderboard_markdown(leaderboard_rows) if leaderboard_rows else ""
    if detectors_markdown:
        outputs["detect.md"] = detectors_markdown
        figure += detect_figure(leaderboard_rows, study / "report" / "detect-auc")
    smoke = is_smoke(study)
    written = []
    for name, text in outputs.items():
        written.append(study / "report" / name)
        write_text_atomic(written[-1], marked(name, text) if smoke else text)
    floor = below_baselines(cells)
    sections = ([{"heading": "Smoke run", "markdown": BANNER}] if smoke else []) + \
        ([{"heading": "At the floor", "markdown": floor}] if floor else []) + \
        primary_sections(primary) + [
        {"heading": SECONDARY, "markdown": secondary["md"], "table": secondary}] + (
        [{"heading": "Dose-response", "markdown": dose_markdown}] if dose_markdown else []) + (
        [{"heading": "What decontamination leaves of the lift", "markdown": decontam_markdown}]
        if decontam_markdown else []) + (
        [{"heading": "Injection timing: what is remembered", "markdown": timing_markdown}]
        if timing_markdown else []) + (
        [{"heading": "Contamination detectors", "markdown": detectors_markdown}]
        if detectors_markdown else [])
    # The returned cells are the compared arms (the control's own rows are in stats.json).
    result = {"cells": [c.record() for c in cells if c.arm != "control"], "tables": written,
              "stats": path, "figure": figure, "doses": doses, "timing": timing,
              "primary": primary, "decontam": decontam_rows,
              "sections": sections, "markdown": report_markdown(sections)}
    if html:
        result["html"] = write_html_report(study, result, page)
    above = [line for line in (BANNER if smoke else None, floor) if line]
    result["console"] = "".join(f"{line}\n\n" for line in above) + console_text(
        primary, study / "report", written + ([result["html"]] if html else []))
    return result
