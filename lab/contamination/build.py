"""`lab inject`'s second step: write the arm's corpus from its plan (lab.contamination.plan).

Format 1 builds the arm in memory here (`build_in_memory`, with `--decontaminate-with`'s pass
over the built arm); format 2 streams it shard by shard (lab.contamination.streaming). Both
return what was written (lab.contamination.arm.Built), which the record checks and describes.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.contamination import soft
from lab.contamination.arm import ArmTally, Built, too_few_documents
from lab.contamination.config import InjectConfig
from lab.contamination.overlap import SampleSideIndex
from lab.contamination.plan import InjectionPlan
from lab.contamination.streaming import build_streaming
from lab.corpora import Document, load_documents
from lab.corpora.shards import CORPUS_SUBDIR, write_shards


def build_arm(cfg: InjectConfig, plan: InjectionPlan, tmp: Path) -> Built:
    """Write the arm's shards under `tmp` (the output's temporary folder), in its format."""
    if cfg.corpus_format == 2:
        return build_streaming(cfg, plan, tmp)
    return build_in_memory(cfg, plan, tmp)


def build_in_memory(cfg: InjectConfig, plan: InjectionPlan, tmp: Path) -> Built:
    """Format 1: the whole base corpus in memory, choices by Python's seeded random."""
    base_parts = load_documents(cfg.base, cfg.base_splits, cfg.corpora_dir)
    base: list[Document] = [doc for part in base_parts for doc in part.records]
    everything = base
    base_total = len(base)
    if cfg.limit is not None:
        if cfg.limit > base_total:
            raise LabError(f"--limit {cfg.limit}: the base corpus holds only {base_total} documents")
        keep = sorted(random.Random(f"{cfg.seed}/limit").sample(range(base_total), cfg.limit))
        base = [base[i] for i in keep]
    after_limit = len(base)
    decontaminated: list[str] = []
    if cfg.decontaminate:
        spec = plan.spec
        index = SampleSideIndex(plan.samples, spec.input_language, spec.output_language)
        dirty = {d.id for d in base if any(index.scan(d.text))}
        decontaminated = sorted(dirty)
        base = [d for d in base if d.id not in dirty]
    if len(plan.injected) > len(base):
        raise too_few_documents(cfg, len(plan.injected), len(base))
    order = list(range(len(base)))
    random.Random(f"{cfg.seed}/remove").shuffle(order)
    removed = set(order[: len(plan.injected)])
    extra = soft.base_fields(cfg.contamination_form)
    kept = [d for i, d in enumerate(base) if i not in removed]
    # embedded: each injected document written inside one of the removed base documents
    injected, embedding = soft.placed_documents(
        plan.form, plan.injected, lambda: [(base[i].id, base[i].text) for i in removed],
        cfg.seed)
    refill, decontamination = [], None
    intended_chars = (sum(len(d.text) for d in kept) + sum(len(r["text"]) for r in injected))
    if cfg.decontaminate_with is not None:
        # The refill's candidates in one seeded order of the whole base corpus, so that arms
        # of one seed draw their refills alike (nested, like their removals).
        dirty = set(decontaminated)
        in_arm = {d.id for d in kept}
        rank = list(range(len(everything)))
        random.Random(f"{cfg.seed}/refill").shuffle(rank)
        outside = [everything[j] for j in rank
                   if everything[j].id not in in_arm and everything[j].id not in dirty]
        kept, injected, refill, decontamination = decontaminate_arm(cfg, plan, kept, outside,
                                                                    injected)
        if embedding is not None:  # the placements of the documents left in the arm
            left = {r["id"] for r in injected}
            embedding = [e for e in embedding if e["id"] in left]
    final: list[dict[str, Any]] = [
        {"id": d.id, "text": d.text, **extra} for d in kept + refill] + injected
    random.Random(f"{cfg.seed}/order").shuffle(final)
    tally = ArmTally.for_plan(plan.samples, injected)
    kept_ids = {d.id for d in kept}
    for d in base:
        tally.add_base(d.text, kept=d.id in kept_ids)
    for d in refill:  # base documents from outside the arm's base, in the arm now
        tally.add_base(d.text, kept=True)
    for record in final:
        tally.add_final(record["text"], injected="sample" in record)
    shards = write_shards(tmp / CORPUS_SUBDIR, final, cfg.shard_size)
    return Built([part.provenance() for part in base_parts], base_total, after_limit,
                 decontaminated, len(base), sorted(base[i].id for i in removed), shards,
                 len(final), sum(len(r["text"]) for r in final), tally,
                 injected=(injected if decontamination is not None or embedding is not None
                           else None),
                 decontamination=decontamination,
                 intended_total_chars=intended_chars if decontamination is not None else None,
                 embedding=embedding)


# How many refill candidates a decontaminated arm flags at a time (the methods judge each
# document alone, so the chunks change nothing but the work done).
REFILL_CHUNK = 2_000


def decontaminate_arm(cfg: InjectConfig, plan: InjectionPlan, kept: list[Document],
                      outside: list[Document], injected: list[dict[str, Any]]
                      ) -> tuple[list[Document], list[dict[str, Any]], list[Document],
                                 dict[str, Any]]:
    """`--decontaminate-with METHOD` on a built arm (its kept base documents and its injected
    ones as written, `injected`: embedded's inside their hosts): the method (lab.decontam,
    default options) flags documents against the arm's benchmark samples (the --samples
    subset, as `lab decontam` reads them); every flagged one goes, injected copy or base
    document, and as many base documents from `outside` the arm
    (the base corpus's documents the --limit subset or the injection's removals left out, in
    the seeded order of random.Random(seed/refill) over the whole base corpus, skipping those
    the method flags) take their places. Returns the kept base documents, the surviving
    injected ones, the refill and the manifest's `decontamination` record."""
    from dataclasses import asdict

    from lab.decontam import DECONTAMINATORS
    from lab.decontam.base import Options, Reference

    name = str(cfg.decontaminate_with)
    method = DECONTAMINATORS[name]
    options = Options()
    spec = plan.spec
    reference = Reference(plan.samples, spec.input_language, spec.output_language)
    flags = method.flag([d.text for d in kept] + [r["text"] for r in injected], reference,
                        options)
    base_flags, injected_flags = flags[:len(kept)], flags[len(kept):]
    flagged_base = sorted(d.id for d, f in zip(kept, base_flags) if f)
    clean_base = [d for d, f in zip(kept, base_flags) if not f]
    surviving = [r for r, f in zip(injected, injected_flags) if not f]
    needed = len(flagged_base) + sum(injected_flags)
    refill: list[Document] = []
    checked = skipped = 0
    while len(refill) < needed and checked < len(outside):
        chunk = outside[checked:checked + max(REFILL_CHUNK, 2 * needed)]
        checked += len(chunk)
        for d, f in zip(chunk, method.flag([d.text for d in chunk], reference, options)):
            if len(refill) == needed:
                break
            if f:
                skipped += 1
            else:
                refill.append(d)
    if len(refill) < needed:
        raise LabError(
            f"--decontaminate-with {name}: {needed} documents flagged in the {cfg.setting} arm, "
            f"but only {len(refill)} unflagged base documents outside the arm to take their "
            "places (keep the arm's size: take a --limit subset of a larger base corpus)")
    copies_of: dict[str, set[int]] = {}
    for r in surviving:
        copies_of.setdefault(r["sample"], set()).add(r["copy"])
    changed = {s.id: len(copies_of.get(s.id, ())) for s, times in zip(plan.sources, plan.copies)
               if len(copies_of.get(s.id, ())) != times}
    record = {
        "method": name, "source": method.source, "rule": method.summary,
        "parameters": method.parameters(options), "options": asdict(options),
        "flagged_documents": needed,
        "flagged_injected_documents": sum(injected_flags),
        "flagged_base_documents": len(flagged_base),
        "removed_injected_ids": [s for s, n in changed.items() if n == 0],
        "surviving_copies": changed,
        "removed_base_documents": len(flagged_base),
        "removed_base_document_ids": flagged_base,
        "refilled": len(refill),
        "refilled_ids": sorted(d.id for d in refill),
        "refill_candidates": len(outside), "refill_candidates_flagged": skipped,
        "refill_rule": "base documents outside the arm (the --limit subset's rest and the "
                       "injection's removals), in random.Random(seed/refill) order of the whole "
                       "base corpus, those the method flags skipped",
    }
    return clean_base, surviving, refill, record
