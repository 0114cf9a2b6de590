"""Fault-table rows for issue 59 (membership): built with the constructors of table.py."""
from __future__ import annotations

from .table import Case  # noqa: F401  (rows use error/ok/same/... from .table)

ROWS: list[Case] = []
