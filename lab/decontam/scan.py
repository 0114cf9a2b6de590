"""`lab decontam`'s second step: run every method over the arm's documents (its flags, time
and memory), the word n-gram counts behind the threshold curves, and the natural overlap (the
base documents the lab's audit matches), all from the plan (lab.decontam.plan)."""
from __future__ import annotations

import dataclasses
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.decontam.audit import flag as audit_flag
from lab.decontam.ngram import match_counts
from lab.decontam.plan import DecontamPlan
from lab.decontam.winnow import best_containment


@dataclass(frozen=True)
class Scan:
    """What the methods flagged, and at what cost."""

    flags_of: dict[str, list[bool]]                    # per method, per document
    timing: list[dict[str, Any]]                       # decontam_timing.csv's rows
    curve_flags: dict[tuple[int, int], list[bool]]     # per (n, min-count), per document
    natural: set[int]                                  # base documents the audit matches
    # winnow among the methods: per containment threshold, per document (else empty)
    containment_flags: dict[float, list[bool]] = dataclasses.field(default_factory=dict)


def scan_arm(plan: DecontamPlan, curve_n: tuple[int, ...], curve_min_count: tuple[int, ...],
             ngram_short: str, curve_containment: Sequence[float] = ()) -> Scan:
    """Each method's flags over the arm, measured; the threshold grids' flags (the winnow
    grid's when winnow runs); the natural overlap among the flagged base documents."""
    texts, reference, options, samples_of = (plan.texts, plan.reference, plan.options,
                                             plan.samples_of)
    flags_of: dict[str, list[bool]] = {}
    timing = []
    for name, method in plan.methods.items():
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
    counts_of = {n: match_counts(texts, reference, n, ngram_short) for n in curve_n}
    curve_flags = {(n, m): [c >= m for c in counts_of[n]]
                   for n in curve_n for m in curve_min_count}
    containment_flags: dict[float, list[bool]] = {}
    if "winnow" in plan.methods:  # its scores once more, untimed: the curve's points
        scores = [score for score, _sample in best_containment(texts, reference, options)]
        containment_flags = {c: [s >= c for s in scores] for c in curve_containment}
    # Natural overlap: the base documents the audit matches, among those any method flagged
    # (the audit judges each document alone, so a subset gives the same answer).
    if "audit" in flags_of:
        natural = {i for i, f in enumerate(flags_of["audit"]) if f and not samples_of[i]}
    else:
        candidates = sorted({i for flags in [*flags_of.values(), *curve_flags.values(),
                                             *containment_flags.values()]
                             for i, f in enumerate(flags) if f and not samples_of[i]})
        natural = {i for i, f in zip(candidates, audit_flag([texts[i] for i in candidates],
                                                            reference, options)) if f}
    return Scan(flags_of, timing, curve_flags, natural, containment_flags)


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
