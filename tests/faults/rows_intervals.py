"""Fault-table rows for issue 59 (intervals): an interval that cannot be estimated is printed as
its reason, never as a number (lab.stats.INTERVAL_RULE).

The study is tests/test_one_source.py's fake_study (a micro study's two seeds, written by hand),
whose arms differ by the same amount in both seeds: no spread over seeds. `lab stats` printed
`+4.00 [+4.00, +4.00]` there, a point as an interval (and with sparse per-sample differences the
2-seed bootstrap-t of row 7 printed -0.47 [-220938541681.45, +5.50]; tests/test_intervals.py
sweeps that one, which needs no CLI)."""
from __future__ import annotations

from .rows_study import fake_study
from .table import Case, ok

ROWS: list[Case] = [
    # row 7: two seeds whose effects are equal
    ok("stats: two seeds with equal effects print no interval", ["stats", "fs-equal"],
       "| paired vs control | +4.00 [n/a (zero spread)] | 2 (2+) |", fake_study("fs-equal"),
       writes="fs-equal"),
]
