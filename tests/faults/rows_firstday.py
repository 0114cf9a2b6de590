"""Fault-table rows for issue 59 (firstday): built with the constructors of table.py."""
from __future__ import annotations

import lab

from .table import Case, error, ok

ROWS: list[Case] = [
    # `lab completion` knows bash, zsh, fish and powershell; another shell is one line.
    error("completion-unknown-shell", ["completion", "tcsh"], "tcsh"),
    error("completion-no-shell", ["completion"], "shell"),
    ok("version", ["--version"], f"lab {lab.__version__}"),
]
