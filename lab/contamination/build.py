"""`lab inject`'s second step: write the arm's corpus from its plan (lab.contamination.plan).

Format 1 builds the arm in memory here (`build_in_memory`, with `--decontaminate-with`'s pass
over the built arm, lab.contamination.decontaminated); format 2 streams it shard by shard (lab.contamination.streaming). Both
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
from lab.contamination.decontaminated import decontaminate_arm
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
    placebo_copies: list[dict[str, Any]] = []
    intended_chars = (sum(len(d.text) for d in kept) + sum(len(r["text"]) for r in injected))
    if cfg.decontaminate_with is not None:
        # The refill's candidates in one seeded order of the whole base corpus, so that arms
        # of one seed draw their refills alike (nested, like their removals).
        # An embedded arm's hosts are in it around their blocks: none comes back as a refill.
        hosts = {e["host"] for e in embedding or ()}
        taken = {d.id for d in kept} | set(decontaminated) | hosts
        rank = list(range(len(everything)))
        random.Random(f"{cfg.seed}/refill").shuffle(rank)
        outside = [everything[j] for j in rank if everything[j].id not in taken]
        kept, injected, refill, placebo_copies, decontamination = decontaminate_arm(
            cfg, plan, kept, outside, injected, embedding,
            {d.id: d.text for d in everything if d.id in hosts})
        if embedding is not None:  # the placements of the documents left in the arm
            left = {r["id"] for r in injected}
            embedding = [e for e in embedding if e["id"] in left]
    final: list[dict[str, Any]] = [
        {"id": d.id, "text": d.text, **extra} for d in kept + refill] + [
        {**r, **extra} for r in placebo_copies] + injected
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
