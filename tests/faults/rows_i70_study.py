"""Fault-table rows for issue 70 (study): built with the constructors of table.py.

Row 9: a study's tables are held to its stages whenever stages/ is there (a table edited and its
sha256 put into tables.json is still refused), and a score that is not a finite number is
refused in every table of scores, with or without stages. Row 10: a primary metric the
evaluations do not compute is refused before the first stage, the dry run included. Row 1: two
runners grow one finished study at once, the row's own and one started 3 s before it as a
process of its own; whichever finishes first, each stage is run and reported by one runner and
study.json keeps the grow (tests/test_concurrent_study.py forces the worst interleavings)."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from .rows_study import fake_study
from .table import STUDY, Case, error, ok, report_study, shards, table_study
from .world import ROOT, Result, lab_env, must

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

GROWN = "grown-study"  # row 1's study: one seed finished, grown to two by two runners at once
CONTROL_STUDY = ["study", str(ROOT / "recipes" / "mini" / "micro.yaml"), "--set", "arms=[control]",
                 "--out", GROWN]
GROW = [*CONTROL_STUDY, "--set", "seeds=[0,1]"]
OTHER_RUNNERS: dict[str, tuple[subprocess.Popen, Path]] = {}  # world -> the other runner, its log
DONE = re.compile(r"^done (\S.*?) in \S+ s$", re.MULTILINE)  # lab study's line for a stage it ran


def another_runner_growing(root: Path) -> None:
    """A finished one-seed control study, and a runner growing it to two seeds, started as a
    process of its own (its output in a file outside the world) 3 s before the row's runner."""
    must([*CONTROL_STUDY, "--set", "seeds=[0]"], root)
    handle, log = tempfile.mkstemp(prefix="other-runner-", suffix=".log")
    process = subprocess.Popen([sys.executable, "-m", "lab.cli", *GROW], cwd=root,
                               env={**os.environ, **lab_env(root)}, stdout=handle,
                               stderr=subprocess.STDOUT, text=True)
    os.close(handle)
    OTHER_RUNNERS[str(root)] = (process, Path(log))
    time.sleep(3)


def each_stage_run_once_and_the_grow_kept(root: Path, result: Result) -> str | None:
    process, log = OTHER_RUNNERS.pop(str(root))
    try:
        rc = process.wait(timeout=900)
        other = log.read_text(encoding="utf-8")
    finally:
        log.unlink()
    if rc:
        return f"the other runner: rc {rc}: {other.strip()[-300:]}"
    mine, theirs = set(DONE.findall(result.stdout + result.stderr)), set(DONE.findall(other))
    if twice := mine & theirs:
        return f"both runners say they ran {sorted(twice)[0]}"
    if len(mine | theirs) != 6 or any("seed=1" not in stage for stage in mine | theirs):
        return f"the runners ran {sorted(mine | theirs)}, not seed 1's 6 stages"
    grown = json.loads((root / GROWN / "study.json").read_text()).get("grown")
    if [record.get("differs_in") for record in grown or []] != [["seeds"]]:
        return f"study.json's grown record is {grown}, not one grow of the seeds"
    return None


ROWS: list[Case] = [
    # row 1: both rc 0, both said they ran seed 1's stages, and study.json lost its grown record
    ok("study: two runners grow one finished study at once", GROW, "per-sample",
       another_runner_growing, check=each_stage_run_once_and_the_grow_kept),
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
