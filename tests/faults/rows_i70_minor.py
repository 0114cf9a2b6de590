"""Fault-table rows for issue 70 (minor, rows 18-27): built with the constructors of table.py.

`partial:` ran as the default fraction but was recorded as `partial:`, and `partial:1e-9` wrote
one-character documents: both are refused, naming the option (lab.contamination.soft.parse_form).
"""
from __future__ import annotations

from .table import INJECT, Case, error

FORM = [*INJECT, "--setting", "paired", "--fraction", "0.1", "--contamination-form"]

ROWS: list[Case] = [
    error("i70 minor: partial: with nothing after the colon", [*FORM, "partial:"],
          "--contamination-form partial:: nothing after the colon"),
    error("i70 minor: partial:1e-9 keeps a character per document", [*FORM, "partial:1e-9"],
          "--contamination-form partial:1e-9: the fraction must be in [0.01, 1)"),
    error("i70 minor: renamed: takes no value", [*FORM, "renamed:"],
          "--contamination-form renamed:: only partial takes a value"),
]
