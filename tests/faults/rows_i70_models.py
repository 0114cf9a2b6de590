"""Fault-table rows for issue 70 (models): built with the constructors of table.py."""
from __future__ import annotations

from .table import Case

ROWS: list[Case] = [
]
