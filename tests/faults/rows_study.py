"""Fault-table rows for issue 59 (study): a study's tables come from one source, its stages.

The studies here are tests/test_one_source.py's fake_study (a micro study's evaluate stages and
the manifests they read, written by hand, and the tables lab.analysis.collect makes of them) and
tests/test_report.py's hand-written tables (table.report_study)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .table import Case, Setup, error, report_study, shards, truncate


def fake_study(name: str, *damages) -> Setup:
    def make(root: Path) -> None:
        from test_one_source import fake_study as build

        shutil.rmtree(root / name, ignore_errors=True)
        build(root / name)
        for damage in damages:
            damage(root / name)
    return make


def plus_fifty(folder: Path) -> None:
    from test_one_source import _plus_fifty

    _plus_fifty(folder / "results.csv")


def recipe_json(data: dict) -> "Setup":
    def damage(folder: Path) -> None:
        (folder / "recipe.json").write_text(json.dumps(data))
    return damage


def wrong_types(folder: Path) -> None:
    path = folder / "recipe.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "seeds": "0, 1"}))


ROWS: list[Case] = [
    # row 4: results.csv edited after lab wrote it; the primary table read samples.csv, the
    # secondary the edit, and results.parquet went stale
    error("stats: +50 on one arm's bleu in results.csv", ["stats", "fs-plus50"],
          "fs-plus50/results.csv: line 14 (stage evaluate-", fake_study("fs-plus50", plus_fifty)),
    error("report: +50 on one arm's bleu in results.csv", ["report", "fs-plus50-report"],
          "column bleu: '54.5' where the stages give '4.5'",
          fake_study("fs-plus50-report", plus_fifty), writes="fs-plus50-report/report"),
    # row 6: merged, the replaced recipe would differ from the stages' in many sections
    error("merge: a source's recipe.json replaced by {name: micro}",
          ["merge", "fs-recipe", "--out", "out-merge"],
          "fs-recipe/recipe.json: not the recipe fs-recipe's stages ran by (differs from the one "
          "tables.json recorded in", fake_study("fs-recipe", recipe_json({"name": "micro"}))),
    # row 17: lab stats read such a recipe; lab report and lab merge refused it
    error("stats: a recipe.json of wrong types", ["stats", "fs-types"],
          "fs-types/recipe.json: a recipe this lab cannot read (seeds: expected a list",
          fake_study("fs-types", wrong_types)),
    error("merge: a recipe.json of wrong types", ["merge", "fs-types-merge", "--out", "out-merge"],
          "fs-types-merge/recipe.json: a recipe this lab cannot read (seeds: expected a list",
          fake_study("fs-types-merge", wrong_types)),
    # row 16: "the study has no finished runs"
    error("stats: a truncated results.csv", ["stats", "rs-truncated"],
          "rs-truncated/results.csv: truncated (line 1 ends without a line break",
          shards(report_study("rs-truncated"),
                 lambda root: truncate("results.csv")(root / "rs-truncated"))),
]
