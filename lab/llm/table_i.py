"""The study's Table I (LLM control sets: tokens of the contaminated and the perturbed sets, and
how many were perturbed), which `lab perturb` reproduces and compares with."""
from __future__ import annotations

from pathlib import Path
from typing import Any

# Table I of the study: model, RQ, side; exp Avg Std Med; control Avg Std Med; count; ratio %.
_TABLE_I_TEXT = """
llama RQ1 Java 62.47 27.09 55.50 62.84 26.88 57.00 9.73 15.33
llama RQ1 C# 58.86 28.18 51.00 59.63 28.23 51.50 9.27 15.49
llama RQ1 NL 30.99 7.56 30.00 30.36 7.31 30.00 15.54 48.58
llama RQ2 NL 90.49 22.59 86.00 99.22 29.07 95.00 27.58 30.15
llama RQ3 Java 60.09 61.00 38.50 59.94 60.95 37.50 12.41 20.31
llama RQ3 C# 61.13 68.37 40.50 61.13 68.50 39.00 13.20 21.25
llama RQ4 Java 47.75 46.03 32.00 47.99 45.27 31.50 9.20 18.87
llama RQ4 NL 63.70 46.04 47.50 63.94 46.47 48.00 12.32 19.04
starcoder RQ1 Java 52.30 21.20 48.00 52.82 21.01 49.00 8.21 15.70
starcoder RQ1 C# 52.01 22.53 49.00 52.58 22.44 49.00 7.86 15.11
starcoder RQ1 NL 28.02 6.18 27.50 28.26 6.23 28.00 14.26 15.70
starcoder RQ2 NL 86.77 23.10 81.00 96.66 25.78 90.50 26.66 30.72
starcoder RQ3 Java 38.62 28.29 27.50 38.97 28.57 27.00 5.48 14.19
starcoder RQ3 C# 38.84 28.86 28.00 39.15 28.96 28.50 5.82 14.98
starcoder RQ4 Java 28.71 13.35 26.00 29.51 13.52 26.50 6.33 22.05
starcoder RQ4 NL 45.02 22.99 38.00 45.90 23.28 39.00 10.46 23.23
"""
_TABLE_I = {tuple(line.split()[:3]): [float(v) for v in line.split()[3:]]
            for line in _TABLE_I_TEXT.strip().splitlines()}
# paper-llm file (folder, stem, field) -> Table I row; C#->Java files are the swapped RQ1/RQ3 sets.
_TABLE_ROWS = {
    ("RQ1RQ2", "java2csharp", "question"): "RQ1 Java", ("RQ1RQ2", "java2csharp", "answer"): "RQ1 C#",
    ("RQ1RQ2", "csharp2java", "question"): "RQ1 C#", ("RQ1RQ2", "csharp2java", "answer"): "RQ1 Java",
    ("RQ1RQ2", "java_summaries", "answer"): "RQ1 NL", ("RQ1RQ2", "java_generate", "question"): "RQ2 NL",
    ("RQ3", "java2csharp", "question"): "RQ3 Java", ("RQ3", "java2csharp", "answer"): "RQ3 C#",
    ("RQ3", "csharp2java", "question"): "RQ3 C#", ("RQ3", "csharp2java", "answer"): "RQ3 Java",
    ("RQ4", "pair-genne", "code"): "RQ4 Java", ("RQ4", "pair-genne", "description"): "RQ4 NL",
}


def table_i_row(path: Path, field: str) -> dict[str, Any] | None:
    """The study's Table I row for a field of one of its paper-llm files, else None."""
    row = _TABLE_ROWS.get((Path(path).parent.name, Path(path).stem, field))
    models = [p.lower() for p in Path(path).resolve().parts if p.lower() in ("llama", "starcoder")]
    if not models or row is None:
        return None
    values = _TABLE_I[(models[-1], *row.split())]
    names = ("exp_avg", "exp_std", "exp_med", "ctl_avg", "ctl_std", "ctl_med", "count", "ratio")
    return {"row": f"{models[-1]} {row}", **dict(zip(names, values))}
