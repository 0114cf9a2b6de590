"""`lab decontam`: decontaminators run over an arm's corpus against the benchmark split its
manifest names, and judged on the arm's ground truth.

The ground truth is the documents' own `sample` field (lab.corpora.shards): a document whose
sample is one of the reference samples is an injected copy of it. Per method and dose level:
recall over the level's injected samples (a sample is found when any of its injected copies is
flagged) and over their copies; per method: the flagged documents split into injected copies,
base documents that naturally overlap the benchmark (the lab's audit matches them: exact or
near-duplicate, the documents behind the manifest's pre_existing_verbatim) and the rest, the
false positives; precision = injected copies / (flagged - natural overlap).

decontam.csv depends on the inputs and options alone (same inputs, same bytes); the time and
memory of each method are in decontam_timing.csv.

`lab decontam` runs in three steps, each its own module: the plan (lab.decontam.plan: the
arm's documents, their ground truth, the reference samples, levels, methods and options,
resolved once), the scan (lab.decontam.scan: every method's flags, time and memory) and the
record (lab.decontam.record: the rows, curves and summary). The options are
lab.decontam.config's. With --write-clean, a corpus without ground truth is cleaned instead
(lab.decontam.clean).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lab.common import atomic_output_dir, check_output
from lab.corpora import corpora_inputs
from lab.corpora.shards import verify_corpus
from lab.decontam.config import KIND, DecontamConfig
from lab.decontam.plan import plan_decontam, read_arm
from lab.decontam.record import containment_curve, record_decontam, write_record
from lab.decontam.scan import scan_arm


def run_decontam(cfg: DecontamConfig) -> dict[str, Any]:
    """Entry point of `lab decontam` (plan, scan, record)."""
    if cfg.write_clean is not None:  # a corpus without ground truth: cleaned, not judged
        from lab.decontam.clean import run_clean

        return run_clean(cfg)
    started = time.perf_counter()
    corpus = Path(cfg.corpus)
    manifest = verify_corpus(corpus)  # no manifest, a corrupt or edited one: one line, here
    inputs = [corpus, *corpora_inputs(cfg.corpora_dir)]
    check_output(Path(cfg.out), cfg.force, KIND, inputs)
    plan = plan_decontam(cfg, manifest, read_arm(cfg, manifest))
    scan = scan_arm(plan, cfg.curve_n, cfg.curve_min_count, cfg.ngram_short,
                    cfg.curve_containment)
    rows, curve, summary = record_decontam(cfg, plan, scan, started)
    winnow_curve = containment_curve(scan.containment_flags, plan.samples_of, scan.natural,
                                     plan.levels, plan.described, plan.options)
    if winnow_curve:
        summary["files"]["winnow_thresholds"] = "winnow_thresholds.csv"
        summary["options"].update(winnow_k=cfg.winnow_k, winnow_w=cfg.winnow_w,
                                  winnow_names=cfg.winnow_names, containment=cfg.containment,
                                  curve_containment=list(cfg.curve_containment))
    with atomic_output_dir(Path(cfg.out), force=cfg.force, kind=KIND, inputs=inputs) as tmp:
        write_record(tmp, rows, scan.timing, curve, summary, winnow_curve)
    summary["rows"], summary["thresholds"] = rows, curve
    if winnow_curve:
        summary["winnow_thresholds"] = winnow_curve
    return summary
