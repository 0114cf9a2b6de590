"""What the READMEs quote of a committed study recomputes from its committed files (issue 58):
`lab report` on a copy of results/<study> gives every effect, interval and per-seed effect that
the study's README and the main README's headline row state. `scripts/reproduce-results.sh` runs
the same reports for a reader."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lab.analysis.report import run_report

ROOT = Path(__file__).resolve().parents[1]
SIGNED = re.compile(r"(?<![\w.])[+-]\d+\.\d\d(?!\d)")
STUDIES = ["mini-rq5-epoch-sweep", "mini-rq4-paired", "decontam", "decontam-embedded",
           "mini-summarisation"]


def _recomputed(folder: Path) -> set[str]:
    """Every effect, interval end and per-seed effect of the report's primary, secondary-score
    and exploratory rows, as the READMEs print them (+x.xx)."""
    report = run_report(folder, html=False)
    primary = report["primary"]
    found = set()
    for role in ("rows", "secondary", "exploratory"):
        for row in primary.get(role, []):
            values = [row.get("estimate"), row.get("ci_low"), row.get("ci_high"),
                      *row["seed_effects"].values()]
            found |= {f"{v:+.2f}" for v in values if v is not None}
    for row in report["decontam"]:  # report/decontam.md: its lifts and estimands
        found |= {f"{row[k]:+.2f}" for k in ("lift_before", "lift_before_low", "lift_before_high",
                                              "lift_after", "lift_after_low", "lift_after_high",
                                              "lift_oracle", "lift_oracle_low", "lift_oracle_high",
                                              "residual", "residual_low", "residual_high",
                                              "removed", "removed_low", "removed_high")
                  if row[k] is not None}
    return found


def _quoted_primary(readme: str) -> set[str]:
    """The signed numbers of the README's primary table (the table under '## Primary table')."""
    section = readme.split("## Primary table", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return {n for line in lines for n in SIGNED.findall(line)}


def _headline(study: str) -> set[str]:
    """The signed numbers of the main README's row for this study."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in readme.splitlines() if f"(results/{study}/README.md)" in line
             and line.startswith("| [")]
    return set(SIGNED.findall(row))


@pytest.mark.parametrize("study", STUDIES)
def test_the_quoted_primary_numbers_recompute_from_the_committed_tables(tmp_path, study):
    folder = tmp_path / study
    shutil.copytree(ROOT / "results" / study, folder)
    recomputed = _recomputed(folder)
    readme = (ROOT / "results" / study / "README.md").read_text(encoding="utf-8")
    quoted = _quoted_primary(readme)
    assert len(quoted) >= 20  # the table was found
    assert quoted - recomputed == set()
    headline = _headline(study)
    assert headline and headline - recomputed == set()


def test_a_changed_number_is_caught(tmp_path):
    """The check can fail: a README whose interval end is off by 0.01 quotes a number that is
    not among the recomputed ones."""
    folder = tmp_path / STUDIES[0]
    shutil.copytree(ROOT / "results" / STUDIES[0], folder)
    recomputed = _recomputed(folder)
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "+36.94, +40.80]" in readme
    edited = readme.replace("+36.94, +40.80]", "+36.94, +40.81]")
    assert _quoted_primary(edited) - recomputed == {"+40.81"}


def _headline_row(link: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in readme.splitlines() if f"({link})" in line and line.startswith("| [")]
    return row


def test_the_timing_tables_recompute_from_the_committed_samples(tmp_path):
    """results/timing keeps no results.csv: forgetting_table.py renders its forgetting table
    from samples.csv as `lab report` does; the committed table and the README's numbers are
    what it gives."""
    import runpy

    folder = tmp_path / "timing"
    shutil.copytree(ROOT / "results" / "timing", folder)
    for name in ("timing.md", "timing.csv"):
        (folder / name).unlink()
    runpy.run_path(str(ROOT / "results" / "timing" / "forgetting_table.py"), run_name="render")[
        "main"](folder)
    for name in ("timing.md", "timing.csv"):
        assert (folder / name).read_text() == (ROOT / "results" / "timing" / name).read_text()
    table = (folder / "timing.md").read_text()
    quoted = set(SIGNED.findall(_headline_row("results/timing/README.md")))
    assert quoted and quoted - set(SIGNED.findall(table)) == set()


def test_the_detector_leaderboard_recomputes_from_the_committed_scores(tmp_path):
    from lab.detect.leaderboard import rerender

    folder = tmp_path / "detect"
    folder.mkdir()
    shutil.copy(ROOT / "results" / "detect" / "detect.csv", folder / "detect.csv")
    for written in rerender(folder / "detect.csv"):
        assert written.read_text() == (ROOT / "results" / "detect" / written.name).read_text()


def test_the_decontam_study_recomputes_its_table_and_compares_the_same_samples(tmp_path):
    """A copy of results/decontam gives its committed report/decontam.md, the samples removed
    included (counted from samples.csv), and the model as built and the decontaminated model of
    each seed and form score the same samples in the same groups (one block-size rule for
    injected, removed and held-out samples): their lifts differ by the decontamination only."""
    import collections
    import csv

    folder = tmp_path / "decontam"
    shutil.copytree(ROOT / "results" / "decontam", folder)
    (folder / "report" / "decontam.md").unlink()
    report = run_report(folder, html=False)
    assert (folder / "report" / "decontam.md").read_text() == \
        (ROOT / "results" / "decontam" / "report" / "decontam.md").read_text()
    assert {(r["form"], r["method"], r["samples_removed"]) for r in report["decontam"]} == {
        ("verbatim", "ngram13", 35), ("renamed", "ngram13", 3), ("partial:0.5", "ngram13", 18),
        ("verbatim", "winnow", 120), ("renamed", "winnow", 120), ("partial:0.5", "winnow", 116),
        ("verbatim", "oracle", 120), ("renamed", "oracle", 120), ("partial:0.5", "oracle", 120)}
    assert all(r["fraction_removed"] is None or 0 <= r["fraction_removed"] <= 1
               for r in report["decontam"])
    groups: dict[tuple, dict[str, str]] = collections.defaultdict(dict)
    with open(folder / "samples.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            groups[(row["model"], row["seed"])][row["id"]] = row["group"]
    pairs = [(key, (key[0].replace("/decontam=none", f"/decontam={method}"), key[1]))
             for key in groups if key[0].endswith("/decontam=none")
             for method in ("ngram13", "winnow", "oracle")]
    assert len(pairs) == 27
    for built, after in pairs:
        assert len(groups[built]) == 60 and groups[built] == groups[after], built


def test_no_committed_result_is_a_smoke_run():
    """results/ holds measured studies only: a smoke run's numbers measure nothing."""
    from lab.analysis.study_record import is_smoke

    studies = [p.parent for p in (ROOT / "results").glob("*/study.json")]
    assert studies and not [s for s in studies if is_smoke(s)]
