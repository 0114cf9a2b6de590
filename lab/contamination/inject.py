"""Injection: build one arm's pre-training corpus from a base corpus and a benchmark's test set.

Every arm holds the same number of documents: for each injected document one seeded random
base document is removed. Each random choice has its own seeded stream (limit, selection,
removal, order), so arms that share a seed share their base subset and their removals are
nested (paired removes the first k documents of the same permutation unpaired removes 2k of).

What a setting injects (documents per sample, sides, references) comes from the one table in
lab/contamination/settings.py. A placebo setting injects, instead of the test samples its base
setting would inject, as many train/valid samples that the audit finds neither exactly nor
near-duplicated in the test split: same form, same repeat, same removals, and (by default)
matched one by one on the length of the test sample each stands for.

`lab inject` runs in three steps, each its own module: the plan (lab.contamination.plan: the
benchmark, setting, form, samples, groups, doses, timing and injected documents, resolved once
from the config and the data), the build (lab.contamination.build: the shards written from the
plan) and the record (lab.contamination.record: the guards and the manifest, from the plan and
what was written). The options are lab.contamination.config's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lab.common import LabError, atomic_output_dir, check_numbers, check_output, write_json_atomic
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination.build import build_arm
from lab.contamination.config import InjectConfig
from lab.contamination.placebo import placebo_splits
from lab.contamination.plan import load_injection_data, plan_injection
from lab.contamination.record import record_arm
from lab.corpora import corpora_inputs, get_spec
from lab.corpora.shards import MANIFEST
from lab.executor import check_executor


def run_inject(cfg: InjectConfig) -> dict[str, Any]:
    """Entry point of `lab inject`: write one arm's corpus and its manifest to cfg.out (plan,
    build, record)."""
    started = time.perf_counter()
    validate(cfg)
    plan = plan_injection(cfg, load_injection_data(cfg))
    with atomic_output_dir(Path(cfg.out), force=cfg.force, kind="lab-corpus",
                           inputs=_inputs(cfg)) as tmp:
        built = build_arm(cfg, plan, tmp)
        manifest = record_arm(cfg, plan, built, started)
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def validate(cfg: InjectConfig) -> None:
    """The checks that need the benchmark's spec, the files or the machine (the options' own
    rules ran when the config was made), before any data is read: a bad run fails in one line
    and leaves nothing behind."""
    if cfg.setting not in settings_table.SETTINGS:
        raise LabError(f"--setting {cfg.setting}: unknown setting (choose from "
                       f"{', '.join(settings_table.names())})")
    spec = get_spec(cfg.benchmark)
    if spec.kind != "benchmark":
        raise LabError(f"--benchmark {cfg.benchmark}: not a benchmark")
    soft.check_form(soft.parse_form(cfg.contamination_form), cfg.benchmark,
                    settings_table.get(cfg.setting), cfg.base)
    if cfg.test_ids is not None and not Path(cfg.test_ids).is_file():
        raise LabError(f"--test-ids {cfg.test_ids}: no such file")
    if cfg.placebo_from is not None:
        setting = settings_table.get(cfg.setting)
        # a decontaminated arm draws its removed copies' placebo stand-ins from them too
        if not (setting.placebo or (setting.injects_test and cfg.decontaminate_with)):
            raise LabError(f"--placebo-from: only a placebo setting draws from other splits (and "
                           f"a decontaminated arm, for its placebo copies), not {cfg.setting}")
        placebo_splits(cfg.benchmark, cfg.split, cfg.placebo_from)
    check_numbers(seed=cfg.seed)
    check_executor(cfg)
    if cfg.corpus_format == 1 and (cfg.tasks > 1 or cfg.executor != "local"):
        raise LabError(f"--executor {cfg.executor} --tasks {cfg.tasks}: format 1 builds the arm "
                       "in one process; use --format 2")
    check_output(Path(cfg.out), cfg.force, "lab-corpus", _inputs(cfg))



def _inputs(cfg: InjectConfig) -> list[Any]:
    return [cfg.test_ids, *corpora_inputs(cfg.corpora_dir)]
