"""Fault-table rows for issue 72 item 5 (`lab decontam --write-clean`, a corpus without ground
truth): a folder that is neither a lab corpus nor in CodeSearchNet's jsonl.gz layout is one
line, exit 2, and no output folder."""
from __future__ import annotations

from .table import error

ROWS = [
    error("i72 clean: decontam --write-clean a folder that is neither layout",
          ["decontam", "--corpus", "userdir", "--benchmark", "codetrans:test", "--methods",
           "exact", "--write-clean", "out-clean"],
          "--corpus userdir: neither a lab corpus (no manifest.json) nor a folder in "
          "CodeSearchNet's jsonl.gz layout", writes="out-clean"),
]
