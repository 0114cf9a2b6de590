"""Every row of the fault table: table.py's, then each area's rows_*.py (kept apart so that
work on one area does not edit another's list)."""
from __future__ import annotations

from . import (rows_dryrun, rows_firstday, rows_i70_corpus, rows_i70_minor, rows_i70_models,
               rows_i70_study, rows_i70_unclear, rows_i72_clean,
               rows_i72_embedded, rows_intervals, rows_membership,
               rows_provenance, rows_study, rows_writes)
from .table import CASES as BASE

CASES = [*BASE, *rows_provenance.ROWS, *rows_membership.ROWS, *rows_study.ROWS, *rows_intervals.ROWS,
         *rows_dryrun.ROWS, *rows_writes.ROWS, *rows_firstday.ROWS, *rows_i70_models.ROWS,
         *rows_i70_corpus.ROWS, *rows_i70_study.ROWS, *rows_i70_unclear.ROWS, *rows_i70_minor.ROWS,
         *rows_i72_clean.ROWS, *rows_i72_embedded.ROWS]

assert len({case.name for case in CASES}) == len(CASES), "row names must be unique"
