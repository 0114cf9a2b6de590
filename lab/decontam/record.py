"""`lab decontam`'s third step: judge each method's flags against the arm's ground truth and
record the rows (decontam.csv), the time and memory (decontam_timing.csv), the threshold curves
(thresholds.csv) and the summary, from the plan (lab.decontam.plan) and the scan
(lab.decontam.scan)."""
from __future__ import annotations

import csv
import dataclasses
import io
import time
from pathlib import Path
from typing import Any

from lab.common import environment_record, table_cell, write_json_atomic, write_text_atomic
from lab.decontam import DECONTAMINATORS, Decontaminator
from lab.decontam.base import Options
from lab.decontam.config import KIND, DecontamConfig
from lab.decontam.plan import DecontamPlan
from lab.decontam.scan import Scan

COLUMNS = ["method", "parameters", "benchmark", "split", "setting", "form", "dose", "samples",
           "injected_samples", "samples_found", "recall", "injected_documents",
           "injected_documents_flagged", "document_recall", "documents", "flagged_documents",
           "flagged_injected", "flagged_natural_overlap", "flagged_other", "precision",
           "documents_removed"]
TIMING_COLUMNS = ["method", "documents", "seconds", "seconds_per_million_documents", "peak_mib",
                  "peak_mib_per_million_documents", "memory"]
# thresholds.csv: the word n-gram rule over a grid of n and min-count (ConTAM-style curves)
CURVE_COLUMNS = ["n", "min_count", "ngram_short", "setting", "form", "injected_samples",
                 "samples_found", "recall", "injected_documents", "document_recall",
                 "documents", "flagged_documents", "removed_share", "flagged_natural_overlap",
                 "flagged_other", "precision"]

# winnow_thresholds.csv (winnow among the methods): its containment threshold as the points
WINNOW_CURVE_COLUMNS = ["containment", "k", "w", "names", "setting", "form", "injected_samples",
                        "samples_found", "recall", "injected_documents", "document_recall",
                        "documents", "flagged_documents", "removed_share",
                        "flagged_natural_overlap", "flagged_other", "precision"]


def record_decontam(cfg: DecontamConfig, plan: DecontamPlan, scan: Scan, started: float
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """decontam.csv's rows, thresholds.csv's rows and summary.json, with the run's wall time
    (since `started`, a time.perf_counter())."""
    rows = []
    for name, method in plan.methods.items():
        rows += judge(name, method, plan.options, scan.flags_of[name], plan.samples_of,
                      scan.natural, plan.levels, plan.described)
    curve = threshold_curve(scan.curve_flags, plan.samples_of, scan.natural, plan.levels,
                            plan.described, cfg.ngram_short)
    summary = {
        "kind": KIND, "corpus": str(plan.corpus),
        "corpus_sha256": plan.manifest.get("corpus_sha256"),
        **plan.described, "reference_samples": len(plan.reference.samples),
        "documents": len(plan.texts),
        "injected_documents": sum(bool(s) for s in plan.samples_of),
        "levels": [{"dose": dose, "samples": len(ids)} for dose, ids in plan.levels],
        "natural_overlap_rule": "base documents the lab's audit matches (exact or near), among "
                                "the flagged ones; not counted as false positives",
        "options": {"ngram_n": cfg.ngram_n, "ngram_rule": cfg.ngram_rule,
                    "ngram_short": cfg.ngram_short,
                    "jaccard": cfg.jaccard, "num_perm": cfg.num_perm, "shingle": cfg.shingle},
        "methods": {name: {
            "source": method.source, "rule": method.summary,
            "parameters": method.parameters(plan.options),
            **{k: next(r for r in rows if r["method"] == name)[k]
               for k in ("flagged_documents", "flagged_injected", "flagged_natural_overlap",
                         "flagged_other", "precision")},
            "samples_found": sum(r["samples_found"] for r in rows if r["method"] == name),
            "injected_samples": sum(r["injected_samples"] for r in rows if r["method"] == name),
        } for name, method in plan.methods.items()},
        "timing": scan.timing,
        "files": {"rows": "decontam.csv", "timing": "decontam_timing.csv",
                  "thresholds": "thresholds.csv"},
        "thresholds_rule": "the word n-gram rule (lm-eval's normalisation, --ngram-short) at "
                           "each n, a document flagged when at least min_count of its word "
                           "positions start a reference n-gram; recall over the samples of the "
                           "dose > 0 levels pooled",
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    return rows, curve, summary


def write_record(folder: Path, rows: list[dict[str, Any]], timing: list[dict[str, Any]],
                 curve: list[dict[str, Any]], summary: dict[str, Any],
                 winnow_curve: list[dict[str, Any]] | None = None) -> None:
    """The run's four files, in the output's temporary folder (a fifth, the winnow curve, when
    winnow ran)."""
    if winnow_curve:
        write_text_atomic(folder / "winnow_thresholds.csv",
                          csv_text(winnow_curve, WINNOW_CURVE_COLUMNS))
    write_text_atomic(folder / "decontam.csv", csv_text(rows, COLUMNS))
    write_text_atomic(folder / "decontam_timing.csv", csv_text(timing, TIMING_COLUMNS))
    write_text_atomic(folder / "thresholds.csv", csv_text(curve, CURVE_COLUMNS))
    write_json_atomic(folder / "summary.json", summary)


def judge(name: str, method: Decontaminator, options: Options, flags: list[bool],
          samples_of: list[str], natural: set[int], levels: list[tuple[int, list[str]]],
          described: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per dose level of the method's flags against the ground truth."""
    flagged = [i for i, f in enumerate(flags) if f]
    injected = [i for i in flagged if samples_of[i]]
    natural_flagged = [i for i in flagged if i in natural]
    other = len(flagged) - len(injected) - len(natural_flagged)
    judged = len(flagged) - len(natural_flagged)
    copies: dict[str, list[int]] = {}
    for i, sample in enumerate(samples_of):
        if sample:
            copies.setdefault(sample, []).append(i)
    rows = []
    for dose, ids in levels:
        present = [s for s in ids if s in copies]
        found = [s for s in present if any(flags[i] for i in copies[s])]
        documents = [i for s in present for i in copies[s]]
        documents_flagged = sum(flags[i] for i in documents)
        rows.append({
            "method": name, "parameters": method.parameters(options), **described,
            "dose": dose, "samples": len(ids), "injected_samples": len(present),
            "samples_found": len(found),
            "recall": len(found) / len(present) if present else None,
            "injected_documents": len(documents),
            "injected_documents_flagged": documents_flagged,
            "document_recall": documents_flagged / len(documents) if documents else None,
            "documents": len(flags), "flagged_documents": len(flagged),
            "flagged_injected": len(injected), "flagged_natural_overlap": len(natural_flagged),
            "flagged_other": other,
            "precision": len(injected) / judged if judged else None,
            "documents_removed": len(flagged),
        })
    return rows


def csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: table_cell(row.get(c)) for c in columns} for row in rows)
    return text.getvalue()


def threshold_curve(curve_flags: dict[tuple[int, int], list[bool]], samples_of: list[str],
                    natural: set[int], levels: list[tuple[int, list[str]]],
                    described: dict[str, Any], short: str) -> list[dict[str, Any]]:
    """thresholds.csv: per (n, min-count), recall over the injected samples (every dose > 0
    level pooled) and the share of the corpus removed, judged as decontam.csv judges a method."""
    injected = [(1, [s for dose, ids in levels if dose > 0 for s in ids])]
    rows = []
    for (n, min_count), flags in curve_flags.items():
        judged = judge("ngram", DECONTAMINATORS["ngram"], Options(ngram_n=n, ngram_short=short),
                       flags, samples_of, natural, injected, described)[0]
        rows.append({**judged, "n": n, "min_count": min_count, "ngram_short": short,
                     "removed_share": (judged["flagged_documents"] / judged["documents"]
                                       if judged["documents"] else None)})
    return rows


def containment_curve(containment_flags: dict[float, list[bool]], samples_of: list[str],
                      natural: set[int], levels: list[tuple[int, list[str]]],
                      described: dict[str, Any], options: Options) -> list[dict[str, Any]]:
    """winnow_thresholds.csv: per containment threshold, judged as threshold_curve judges an
    n-gram point (recall over every dose > 0 level's samples pooled), so a user picks the
    threshold by measured recall and precision."""
    injected = [(1, [s for dose, ids in levels if dose > 0 for s in ids])]
    rows = []
    for threshold, flags in sorted(containment_flags.items()):
        point = dataclasses.replace(options, containment=threshold)
        judged = judge("winnow", DECONTAMINATORS["winnow"], point, flags, samples_of, natural,
                       injected, described)[0]
        rows.append({**judged, "containment": threshold, "k": options.winnow_k,
                     "w": options.winnow_w, "names": options.winnow_names,
                     "removed_share": (judged["flagged_documents"] / judged["documents"]
                                       if judged["documents"] else None)})
    return rows
