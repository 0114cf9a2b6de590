"""A study's evaluate stage: `lab evaluate` on the first N samples of a split.

`lab evaluate` takes the samples to evaluate as a file of ids; a recipe names a count
(`evaluation.max_samples`), so the stage writes the ids of the split's first N samples beside
its output (STUDY/stages/KEY.ids) and evaluates those.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from lab.eval.generate import EvaluateConfig, run_evaluate
from lab.recipe_sections import section


@dataclass
class EvaluateStageConfig(EvaluateConfig):
    """One evaluation of a study: EvaluateConfig, its max_samples also written as the stage's
    ids file."""


# A study's `evaluation` section: the study's metrics (Tables II-VII); CodeBLEU and sentence
# BLEU cost more and are optional.
EvaluationSection = section("EvaluationSection", EvaluateStageConfig,
                            ["split", "decoding", "metrics", "max_new_tokens", "max_samples"],
                            study_defaults={"metrics": ("bleu", "meteor", "em")})


def run_evaluate_stage(cfg: EvaluateStageConfig) -> dict[str, Any]:
    """Entry point of a study's evaluate stage: run_evaluate on the split's first max_samples
    samples (all of them when null)."""
    ids = None
    if cfg.max_samples:
        from lab.corpora import load_samples

        ids = cfg.out.with_name(cfg.out.name + ".ids")
        records = load_samples(cfg.benchmark, cfg.split, cfg.corpora_dir).records
        ids.write_text("\n".join(s.id for s in records[: cfg.max_samples]) + "\n")
    options = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(EvaluateConfig)}
    return run_evaluate(EvaluateConfig(**{**options, "ids": ids}))
