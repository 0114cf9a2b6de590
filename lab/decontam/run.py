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
"""
from __future__ import annotations

import csv
import io
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lab.common import (LabError, atomic_output_dir, check_output, corpora_param,
                        refuse_unused_options,
                        environment_record, param, table_cell, write_json_atomic,
                        write_text_atomic)
from lab.contamination.soft import recorded_form
from lab.corpora import corpora_inputs, get_spec, load_samples
from lab.corpora.shards import read_corpus, verify_corpus
from lab.decontam import DECONTAMINATORS, Decontaminator, check_methods
from lab.decontam.audit import flag as audit_flag
from lab.decontam.base import NGRAM_RULES, NGRAM_SHORT, Options, Reference
from lab.decontam.ngram import match_counts

KIND = "lab-decontam"
DEFAULT_METHODS = ("exact", "ngram8", "ngram13", "ngram50", "datatrove", "minhash", "audit")
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
# The options only some methods read (lab.decontam's flag functions; --ngram-short is read by
# thresholds.csv too, so always used): one given with none of its methods chosen is refused.
OPTION_USERS = {"ngram_n": ("ngram", "datatrove"),
                "ngram_rule": ("ngram8", "ngram13", "ngram50", "ngram"),
                **{name: ("minhash",) for name in ("jaccard", "num_perm", "shingle")}}

# --num-perm's ceiling. A MinHash estimates Jaccard with standard error sqrt(J(1-J)/num_perm),
# at most 0.5/sqrt(4096) = 0.008 here, finer than any --jaccard threshold is set; time and
# memory grow linearly with it (measured on a 700-document arm: 1.4 s at 128, 14 s and 0.4 GiB
# at 8192); issue 70's 10^8 ran 10 minutes at full CPU without a word.
MAX_NUM_PERM = 4096


@dataclass
class DecontamConfig:
    """The options of `lab decontam`, declared once."""
    corpus: Path = param(help="An arm's corpus folder (made by lab inject; its manifest.json "
                              "names the benchmark split and the dose levels).")
    out: Path = param(help="Output folder: decontam.csv, decontam_timing.csv, summary.json.")
    methods: tuple[str, ...] = param(DEFAULT_METHODS, "Decontaminators to run: "
                                     + ", ".join(DECONTAMINATORS) + ".")
    ngram_n: int = param(13, "Words per n-gram of the `ngram` and `datatrove` methods.")
    ngram_rule: str = param("any", "n-gram methods: any (a shared n-gram removes the document) "
                                   "or janitor (lm-eval's Janitor: 200-character windows cut, "
                                   "a document removed when nothing is left or > 10 matches).")
    ngram_short: str = param("skip", "n-gram methods, a sample side of fewer than n words: "
                                     "skip (lm-eval: never matched) or whole (matched when all "
                                     "its words occur in a row; the lab's departure).")
    jaccard: float = param(0.8, "minhash: Jaccard threshold, in (0, 1].")
    num_perm: int = param(128, f"minhash: permutations per MinHash (1 to {MAX_NUM_PERM}).")
    shingle: int = param(5, "minhash: code tokens per shingle.")
    curve_n: tuple[int, ...] = param((5, 8, 13, 20, 50), "thresholds.csv: the n of each point "
                                     "of the word n-gram threshold curves.")
    curve_min_count: tuple[int, ...] = param((1, 2, 5, 10), "thresholds.csv: the min-counts "
                                             "(matching n-grams a document needs to be flagged).")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        self.methods = tuple(self.methods)
        check_methods(self.methods)
        refuse_unused_options(self, OPTION_USERS, self.methods, "--methods")
        if self.ngram_n <= 0:
            raise LabError(f"--ngram-n {self.ngram_n}: must be >= 1")
        if self.ngram_rule not in NGRAM_RULES:
            raise LabError(f"--ngram-rule {self.ngram_rule}: choose from "
                           f"{', '.join(NGRAM_RULES)}")
        if self.ngram_short not in NGRAM_SHORT:
            raise LabError(f"--ngram-short {self.ngram_short}: choose from "
                           f"{', '.join(NGRAM_SHORT)}")
        if not 0 < self.jaccard <= 1:
            raise LabError(f"--jaccard {self.jaccard}: must be in (0, 1]")
        if not 1 <= self.num_perm <= MAX_NUM_PERM:
            raise LabError(f"--num-perm {self.num_perm}: must be from 1 to {MAX_NUM_PERM} (the "
                           "Jaccard estimate's error is below 0.01 there; time and memory grow "
                           "with it)")
        if self.shingle < 1:
            raise LabError(f"--shingle {self.shingle}: must be >= 1")
        self.curve_n, self.curve_min_count = tuple(self.curve_n), tuple(self.curve_min_count)
        for option, values in (("--curve-n", self.curve_n),
                               ("--curve-min-count", self.curve_min_count)):
            if not values or min(values) < 1 or len(set(values)) != len(values):
                raise LabError(f"{option} {','.join(map(str, values))}: give distinct values "
                               ">= 1")

    def options(self) -> Options:
        return Options(ngram_n=self.ngram_n, ngram_rule=self.ngram_rule,
                       ngram_short=self.ngram_short, jaccard=self.jaccard,
                       num_perm=self.num_perm, shingle=self.shingle)


def dose_levels(manifest: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """(dose, sample ids) of the arm's levels, ascending: its dose ladder, else its injected
    samples at options.repeat and its held-out ones at 0."""
    levels = manifest.get("dose_levels")
    if levels:
        return sorted(((int(level.get("dose") or 0), list(level.get("ids") or []))
                       for level in levels), key=lambda level: level[0])
    repeat = (manifest.get("options") or {}).get("repeat") or 1
    found = [(0, list(manifest.get("held_out_ids") or []))]
    if manifest.get("injected_ids"):
        found.append((int(repeat), list(manifest["injected_ids"])))
    return [level for level in found if level[1]] or [(0, [])]


def reference_of(manifest: dict[str, Any], path: Path, corpora_dir: Path | None
                 ) -> tuple[str, str, Reference]:
    benchmark = manifest.get("benchmark")
    split = manifest.get("benchmark_split", manifest.get("split"))
    if not isinstance(benchmark, str) or not benchmark:
        raise LabError(f"{path}: field 'benchmark' missing")
    if not isinstance(split, str) or not split:
        raise LabError(f"{path}: field 'benchmark_split' missing")
    spec = get_spec(benchmark)
    samples = load_samples(benchmark, split, corpora_dir).records
    first = (manifest.get("options") or {}).get("samples")
    if isinstance(first, int):  # the arm's benchmark subset (lab inject --samples)
        samples = samples[:first]
    return benchmark, split, Reference(samples, spec.input_language, spec.output_language)


def measured(run: Callable[[], list[bool]]) -> tuple[list[bool], dict[str, Any]]:
    """The method's flags, seconds and peak memory: the rise of the process's resident set
    above its size at the start (Linux: the peak reset through /proc/self/clear_refs), else
    the process's peak resident set (getrusage)."""
    def status(field: str) -> int | None:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    try:
        Path("/proc/self/clear_refs").write_text("5")
        start = status("VmRSS")
    except OSError:
        start = None
    began = time.perf_counter()
    flags = run()
    seconds = time.perf_counter() - began
    peak = status("VmHWM") if start is not None else None
    if start is not None and peak is not None:
        memory, size = "rss rise (VmHWM after clear_refs - VmRSS before)", max(0, peak - start)
    else:
        memory = "process peak rss (getrusage)"
        size = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return flags, {"seconds": seconds, "peak_bytes": size, "memory": memory}


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


def run_decontam(cfg: DecontamConfig) -> dict[str, Any]:
    """Entry point of `lab decontam`."""
    started = time.perf_counter()
    corpus = Path(cfg.corpus)
    manifest = verify_corpus(corpus)  # no manifest, a corrupt or edited one: one line, here
    inputs = [corpus, *corpora_inputs(cfg.corpora_dir)]
    check_output(Path(cfg.out), cfg.force, KIND, inputs)
    manifest_path = corpus / "manifest.json"
    benchmark, split, reference = reference_of(manifest, manifest_path, cfg.corpora_dir)
    reference_ids = {s.id for s in reference.samples}
    texts, samples_of = [], []
    for record in read_corpus(corpus):
        texts.append(str(record["text"]))
        sample = str(record.get("sample") or "")
        samples_of.append(sample if sample in reference_ids else "")
    levels = dose_levels(manifest)
    options = cfg.options()
    described = {"benchmark": benchmark, "split": split,
                 "setting": manifest.get("setting", ""),
                 "form": recorded_form(manifest)}
    flags_of: dict[str, list[bool]] = {}
    timing = []
    for name in cfg.methods:
        method = DECONTAMINATORS[name]
        flags, cost = measured(lambda: method.flag(texts, reference, options))
        flags_of[name] = flags
        per_million = 1e6 / len(texts)
        timing.append({"method": name, "documents": len(texts),
                       "seconds": round(cost["seconds"], 3),
                       "seconds_per_million_documents": round(cost["seconds"] * per_million, 1),
                       "peak_mib": round(cost["peak_bytes"] / 2**20, 1),
                       "peak_mib_per_million_documents":
                           round(cost["peak_bytes"] / 2**20 * per_million, 1),
                       "memory": cost["memory"]})
    counts_of = {n: match_counts(texts, reference, n, cfg.ngram_short) for n in cfg.curve_n}
    curve_flags = {(n, m): [c >= m for c in counts_of[n]]
                   for n in cfg.curve_n for m in cfg.curve_min_count}
    # Natural overlap: the base documents the audit matches, among those any method flagged
    # (the audit judges each document alone, so a subset gives the same answer).
    if "audit" in flags_of:
        natural = {i for i, f in enumerate(flags_of["audit"]) if f and not samples_of[i]}
    else:
        candidates = sorted({i for flags in [*flags_of.values(), *curve_flags.values()]
                             for i, f in enumerate(flags) if f and not samples_of[i]})
        natural = {i for i, f in zip(candidates, audit_flag([texts[i] for i in candidates],
                                                            reference, options)) if f}
    rows = []
    for name in cfg.methods:
        rows += judge(name, DECONTAMINATORS[name], options, flags_of[name], samples_of, natural,
                      levels, described)
    curve = threshold_curve(curve_flags, samples_of, natural, levels, described, cfg.ngram_short)
    summary = {
        "kind": KIND, "corpus": str(corpus), "corpus_sha256": manifest.get("corpus_sha256"),
        **described, "reference_samples": len(reference.samples),
        "documents": len(texts), "injected_documents": sum(bool(s) for s in samples_of),
        "levels": [{"dose": dose, "samples": len(ids)} for dose, ids in levels],
        "natural_overlap_rule": "base documents the lab's audit matches (exact or near), among "
                                "the flagged ones; not counted as false positives",
        "options": {"ngram_n": cfg.ngram_n, "ngram_rule": cfg.ngram_rule,
                    "ngram_short": cfg.ngram_short,
                    "jaccard": cfg.jaccard, "num_perm": cfg.num_perm, "shingle": cfg.shingle},
        "methods": {name: {
            "source": DECONTAMINATORS[name].source, "rule": DECONTAMINATORS[name].summary,
            "parameters": DECONTAMINATORS[name].parameters(options),
            **{k: next(r for r in rows if r["method"] == name)[k]
               for k in ("flagged_documents", "flagged_injected", "flagged_natural_overlap",
                         "flagged_other", "precision")},
            "samples_found": sum(r["samples_found"] for r in rows if r["method"] == name),
            "injected_samples": sum(r["injected_samples"] for r in rows if r["method"] == name),
        } for name in cfg.methods},
        "timing": timing,
        "files": {"rows": "decontam.csv", "timing": "decontam_timing.csv",
                  "thresholds": "thresholds.csv"},
        "thresholds_rule": "the word n-gram rule (lm-eval's normalisation, --ngram-short) at "
                           "each n, a document flagged when at least min_count of its word "
                           "positions start a reference n-gram; recall over the samples of the "
                           "dose > 0 levels pooled",
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    with atomic_output_dir(Path(cfg.out), force=cfg.force, kind=KIND, inputs=inputs) as tmp:
        write_text_atomic(tmp / "decontam.csv", csv_text(rows, COLUMNS))
        write_text_atomic(tmp / "decontam_timing.csv", csv_text(timing, TIMING_COLUMNS))
        write_text_atomic(tmp / "thresholds.csv", csv_text(curve, CURVE_COLUMNS))
        write_json_atomic(tmp / "summary.json", summary)
    summary["rows"], summary["thresholds"] = rows, curve
    return summary


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
