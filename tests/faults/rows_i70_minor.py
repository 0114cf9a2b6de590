"""Fault-table rows for issue 70 (minor, rows 18-27): built with the constructors of table.py.

`partial:` ran as the default fraction but was recorded as `partial:`, and `partial:1e-9` wrote
one-character documents: both are refused, naming the option (lab.contamination.soft.parse_form).
An export's tokenizer said model_max_length 256 (the micro GPT-2's positions) where pre-training
trained 128 (--block-size): it now says the trained positions (lab.tokenizer.fit_to_model).
"""
from __future__ import annotations

import json
from pathlib import Path

from .table import EXPORT, INJECT, Case, error, ok
from .world import Result

FORM = [*INJECT, "--setting", "paired", "--fraction", "0.1", "--contamination-form"]



def max_length_is_trained_positions(root: Path, result: Result) -> str | None:
    """The export's tokenizer_config.json states the positions pre-training trained."""
    trained = json.loads((root / "pt" / "manifest.json").read_text())["config"]["block_size"]
    configs = sorted((root / "out-export").rglob("tokenizer_config.json"))
    if not configs:
        return "the export has no tokenizer_config.json"
    stated = json.loads(configs[0].read_text()).get("model_max_length")
    return None if stated == trained else \
        f"model_max_length {stated}, but pre-training trained {trained} positions"


ROWS: list[Case] = [
    error("i70 minor: partial: with nothing after the colon", [*FORM, "partial:"],
          "--contamination-form partial:: nothing after the colon"),
    error("i70 minor: partial:1e-9 keeps a character per document", [*FORM, "partial:1e-9"],
          "--contamination-form partial:1e-9: the fraction must be in [0.01, 1)"),
    error("i70 minor: renamed: takes no value", [*FORM, "renamed:"],
          "--contamination-form renamed:: only partial takes a value"),
    ok("i70 minor: an export's model_max_length is the trained positions", EXPORT,
       check=max_length_is_trained_positions),
]
