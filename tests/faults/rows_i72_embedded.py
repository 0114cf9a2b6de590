"""Fault-table rows for issue 72 (the `embedded` contamination form): what the form refuses, in
one line and before anything is written. Its hosts are base documents (CodeSearchNet Java), so
a setting that injects CodeTrans's C# side has no file of its language to sit in."""
from __future__ import annotations

from .table import INJECT, Case, error

EMBEDDED = [*INJECT, "--contamination-form", "embedded", "--setting"]

ROWS: list[Case] = [
    error("i72 embedded: inject paired codetrans (its C# side has no host)",
          [*EMBEDDED, "paired"],
          "--contamination-form embedded: paired injects codetrans's output side (cs), and the "
          "base corpus csn-java holds no cs file to host it (inject a java side: input-only)"),
    error("i72 embedded: inject output-only codetrans (C# alone)", [*EMBEDDED, "output-only"],
          "--contamination-form embedded: output-only injects codetrans's output side (cs)"),
]
