"""Fault-table rows for issue 70 (study): built with the constructors of table.py.

Row 9: a study's tables are held to its stages whenever stages/ is there (a table edited and its
sha256 put into tables.json is still refused), and a score that is not a finite number is
refused in every table of scores, with or without stages. Row 10: a primary metric the
evaluations do not compute is refused before the first stage, the dry run included. (Row 1, two
runners of one study, is tests/test_concurrent_study.py: it needs two runs at once.)"""
from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Callable

from .rows_study import fake_study
from .table import STUDY, Case, error, report_study, shards, table_study

Damage = Callable[[Path], None]


def _rewrite_csv(path: Path, edit: Callable[[list[dict]], None]) -> None:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    edit(rows)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def first_injected_score(value: str) -> Damage:
    """samples.csv's first injected sample's score_bleu set to `value`."""
    def damage(folder: Path) -> None:
        def edit(rows: list[dict]) -> None:
            next(row for row in rows if row["group"] == "injected")["score_bleu"] = value
        _rewrite_csv(folder / "samples.csv", edit)
    return damage


def parquet_as_csv(folder: Path) -> None:
    """samples.parquet rewritten to the edited samples.csv's scores (the copies agree)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "samples.parquet")
    with open(folder / "samples.csv", newline="", encoding="utf-8") as handle:
        scores = [float(row["score_bleu"]) for row in csv.DictReader(handle)]
    column = table.schema.get_field_index("score_bleu")
    pq.write_table(table.set_column(column, "score_bleu", pa.array(scores)),
                   folder / "samples.parquet")


def sha256_recorded(folder: Path) -> None:
    """tables.json given the edited files' sha256: the record agrees with the edit."""
    record = json.loads((folder / "tables.json").read_text())
    for name in record["files"]:
        record["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "tables.json").write_text(json.dumps(record))


def in_study(name: str, *damages: Damage):
    def setup(root: Path) -> None:
        for damage in damages:
            damage(root / name)
    return setup


SCORE_100 = (first_injected_score("100.0"), parquet_as_csv, sha256_recorded)
NAN_SCORE = (first_injected_score("nan"), parquet_as_csv, sha256_recorded)
PRIMARY_BOGUS = ["--set", "statistics.primary_metric=bogus"]
NOT_A_METRIC = "statistics.primary_metric bogus: not one of evaluation.metrics (bleu"

ROWS: list[Case] = [
    # row 9: the edit agrees with tables.json, and the check against the stages was skipped
    error("report: samples.csv and .parquet edited, their sha256 put into tables.json",
          ["report", "fs-score100"],
          "fs-score100/samples.csv: line 2 (stage evaluate-",
          fake_study("fs-score100", *SCORE_100), writes="fs-score100/report"),
    error("stats: samples.csv and .parquet edited, their sha256 put into tables.json",
          ["stats", "fs-score100-stats"], "column score_bleu: '100.0' where the stages give",
          fake_study("fs-score100-stats", *SCORE_100)),
    error("report: a NaN score in samples.csv, tables.json updated", ["report", "fs-nan"],
          "fs-nan/samples.csv: line 2, column score_bleu: 'nan' is not a finite number",
          fake_study("fs-nan", *NAN_SCORE), writes="fs-nan/report"),
    error("report: a NaN score in the samples.csv of tables without stages",
          ["report", "rs-nan"], "rs-nan/samples.csv: line 2, column score_bleu: 'nan' is not a "
          "finite number", shards(report_study("rs-nan"),
                                  in_study("rs-nan", first_injected_score("nan"))),
          writes="rs-nan/report"),
    error("merge: a tables-only copy with a NaN score in results.csv",
          ["merge", "ts-nan", "--out", "out-merge"],
          "ts-nan/results.csv: line 3, column bleu: 'nan' is not a finite number",
          table_study("ts-nan", "evaluate-2,all,gpt2,codetrans,paired,0,0,16,nan\n")),
    # row 10: the dry run said yes, the real run failed after every stage
    error("study: statistics.primary_metric not an evaluation metric (dry run)",
          [*STUDY, "recipe.yaml", *PRIMARY_BOGUS], NOT_A_METRIC),
    error("study: statistics.primary_metric not an evaluation metric",
          ["study", "recipe.yaml", "--out", "out-study", *PRIMARY_BOGUS], NOT_A_METRIC),
]
