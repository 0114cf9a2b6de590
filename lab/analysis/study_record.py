"""A study folder's run record (study.json) as its readers see it, and the mark of a smoke study.

`lab study` writes study.json (lab.study.runner, under its records' lock); the report reads it
only to know whether the folder holds a smoke study (`lab study --smoke`, lab.study.smoke), whose
tables then carry BANNER at their top and whose numbers `lab merge` refuses. The reader and the
mark live here, in the reading room, so that a report never imports the runner.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.common import LabError, read_json_if_there

SUMMARY = "study.json"


def read_summary(study: Path) -> dict[str, Any]:
    """STUDY/study.json as a dict: empty for a new study, refused when unreadable."""
    path = study / SUMMARY
    summary = read_json_if_there(path)
    if summary is None:
        return {}
    if not isinstance(summary, dict):
        raise LabError(f"{path}: unreadable (not a JSON object)")
    return summary


BANNER = ("SMOKE RUN (lab study --smoke): the recipe's shape on toy sizes, to check that it "
          "runs; these numbers measure nothing.")


def is_smoke(study: Path) -> bool:
    """Whether a study folder holds a smoke study (study.json `smoke`)."""
    return bool(read_summary(Path(study)).get("smoke"))


def marked(name: str, text: str) -> str:
    """A report file of a smoke study with BANNER above its table, in the file's own comment or
    quote syntax (a CSV's first line is then a comment: `pandas.read_csv(comment='#')`)."""
    prefix = {".md": "> ", ".tex": "% ", ".csv": "# "}.get(Path(name).suffix)
    if prefix is None:
        return text
    return f"{prefix}{BANNER}\n" + ("\n" if prefix == "> " else "") + text
