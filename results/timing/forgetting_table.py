"""Re-renders timing.md and timing.csv, the report's forgetting table, from the committed
samples.csv and recipe.json, as `lab report` renders them (lab.analysis.timing) with the recipe's
alpha and convention. `lab report` itself needs the study's results.csv, which is not kept.

    python results/timing/forgetting_table.py results/timing
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from lab.stats import CONVENTIONS
from lab.analysis.report_data import read_csv
from lab.analysis.timing import timing_stats, timing_table


def main(study: Path) -> None:
    statistics = json.loads((study / "recipe.json").read_text(encoding="utf-8"))["statistics"]
    found = timing_stats(study, ["bleu"], statistics["alpha"], read_csv,
                         alternative=CONVENTIONS[statistics["convention"]][0])
    for suffix, text in timing_table(found, "bleu").items():
        (study / f"timing.{suffix}").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
