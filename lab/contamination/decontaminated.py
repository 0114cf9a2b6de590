"""`lab inject --decontaminate-with METHOD`: the pass over a built format-1 arm that removes what
a decontaminator flags, and what takes each removed document's place.

Why a removed injected copy is replaced by a placebo copy, not a base document: the injected
copies may be the arm's only documents of the target language (CodeTrans's C# in a Java corpus).
Refilled with Java base documents, an arm after `exact` held no C# at all, so its lift mixed
removing the leak with removing the target language. Here each removed copy of a test sample
gives its place to the same setting's document, in the same contamination form, of that
sample's placebo stand-in: a benchmark pair of a split no model is scored on (the placebo arm's
draw, lab.contamination.placebo: `placebo_from`, length-matched by `placebo_match`, seeded by
the arm's seed, so the stand-in of a test sample is the one its placebo arm injects). The
target-language exposure stays that of the arm as built; only the leak goes. An embedded copy's
stand-in is written into the same host. The stand-in documents are written as base documents
(no `sample` field: nothing injected a test sample into them), named `placebo:SAMPLE:SIDE:COPY`,
and the manifest's decontamination record lists which stand-in replaced which copy.

A flagged base document (or a placebo arm's own copy: it holds no test sample) is refilled from
base documents outside the arm, as before.

`oracle` (ORACLE) is no lab.decontam method: it removes every injected copy of a test sample by
ground truth (the documents' `sample` field, which a method never sees), replaced the same way:
the arm as it would be had nothing leaked, at equal size and target-language exposure, whose lift
is the floor a decontaminator's residual is measured from (lab.analysis.decontam_lift).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from lab.common import LabError
from lab.contamination import soft
from lab.contamination.config import InjectConfig
from lab.contamination.placebo import choose_placebo, load_placebo_splits, placebo_pool
from lab.contamination.plan import InjectionPlan
from lab.corpora import Document, Sample
from lab.decontam import DECONTAMINATORS, ORACLE
from lab.decontam.base import Options, Reference

# How many refill candidates a decontaminated arm flags at a time (the methods judge each
# document alone, so the chunks change nothing but the work done).
REFILL_CHUNK = 2_000
# The id prefix of a placebo copy standing in for a removed injected copy.
PLACEBO_COPY = "placebo"
REPLACEMENT_RULE = ("each removed copy of a test sample replaced by the same setting's document, "
                    "in the arm's contamination form, of the sample's placebo stand-in (the "
                    "placebo arm's draw of this seed: placebo_from, placebo_match), written as "
                    "a base document (embedded: in the same host); flagged base documents "
                    "refilled from base documents outside the arm")


def flag_documents(cfg: InjectConfig, plan: InjectionPlan, texts: list[str],
                   samples_of: list[str]) -> tuple[list[bool], dict[str, Any]]:
    """Per document, whether the arm's decontaminator removes it, and the record's description
    of the method. `samples_of`: each document's injected sample id ("" for a base document),
    read by the oracle alone."""
    name = str(cfg.decontaminate_with)
    if name == ORACLE:
        references = {s.id for s in plan.samples}
        return ([s in references for s in samples_of],
                {"method": ORACLE, "source": "ground truth (the documents' sample field)",
                 "rule": "every injected copy of a benchmark sample", "parameters": {},
                 "options": {}})
    method = DECONTAMINATORS[name]
    options = Options()
    reference = Reference(plan.samples, plan.spec.input_language, plan.spec.output_language)
    return (method.flag(texts, reference, options),
            {"method": name, "source": method.source, "rule": method.summary,
             "parameters": method.parameters(options), "options": asdict(options),
             **({"revision": method.revision} if method.revision else {})})


def decontaminate_arm(cfg: InjectConfig, plan: InjectionPlan, kept: list[Document],
                      outside: list[Document], injected: list[dict[str, Any]],
                      embedding: list[dict[str, Any]] | None, host_text: dict[str, str]
                      ) -> tuple[list[Document], list[dict[str, Any]], list[Document],
                                 list[dict[str, Any]], dict[str, Any]]:
    """The decontaminator over a built arm (its kept base documents and its injected ones as
    written, `injected`: embedded's inside their hosts, whose placements are `embedding` and
    whose texts as the base corpus holds them are `host_text`): flagged documents go; a test
    sample's copy is replaced by its placebo stand-in's (module docstring), any other by a base
    document from `outside` the arm (the --limit subset's rest and the injection's removals but
    an embedded arm's hosts, in the seeded order of random.Random(seed/refill) over the whole
    base corpus, skipping those the method flags). Returns the kept base documents, the
    surviving injected ones, the base refill, the placebo copies and the manifest's
    `decontamination` record."""
    references = {s.id for s in plan.samples}
    flags, described = flag_documents(
        cfg, plan, [d.text for d in kept] + [r["text"] for r in injected],
        [""] * len(kept) + [str(r["sample"]) for r in injected])
    base_flags, injected_flags = flags[:len(kept)], flags[len(kept):]
    flagged_base = sorted(d.id for d, f in zip(kept, base_flags) if f)
    clean_base = [d for d, f in zip(kept, base_flags) if not f]
    surviving = [r for r, f in zip(injected, injected_flags) if not f]
    flagged_copies = [r for r, f in zip(injected, injected_flags) if f]
    leaked = [r for r in flagged_copies if r["sample"] in references]
    placebo_copies, replaced, pool_record = placebo_replacements(cfg, plan, leaked, embedding,
                                                                 host_text)
    needed = len(flagged_base) + len(flagged_copies) - len(leaked)
    refill, skipped = base_refill(cfg, plan, outside, needed)
    copies_of: dict[str, set[int]] = {}
    for r in surviving:
        copies_of.setdefault(r["sample"], set()).add(r["copy"])
    changed = {s.id: len(copies_of.get(s.id, ())) for s, times in zip(plan.sources, plan.copies)
               if len(copies_of.get(s.id, ())) != times}
    record = {
        **described,
        "flagged_documents": len(flagged_base) + len(flagged_copies),
        "flagged_injected_documents": len(flagged_copies),
        "flagged_base_documents": len(flagged_base),
        "removed_injected_ids": [s for s, n in changed.items() if n == 0],
        "surviving_copies": changed,
        "removed_base_documents": len(flagged_base),
        "removed_base_document_ids": flagged_base,
        "replaced_by_placebo": len(replaced),
        "placebo_replacements": replaced,
        **({"placebo_pool": pool_record} if pool_record is not None else {}),
        "refilled": len(refill),
        "refilled_ids": sorted(d.id for d in refill),
        "refill_candidates": len(outside), "refill_candidates_flagged": skipped,
        "replacement_rule": REPLACEMENT_RULE,
        "refill_rule": "base documents outside the arm (the --limit subset's rest and the "
                       "injection's removals), in random.Random(seed/refill) order of the whole "
                       "base corpus, those the method flags skipped",
    }
    return clean_base, surviving, refill, placebo_copies, record


def base_refill(cfg: InjectConfig, plan: InjectionPlan, outside: list[Document], needed: int
                ) -> tuple[list[Document], int]:
    """The first `needed` documents of `outside` the decontaminator does not flag (the oracle
    flags no base document), and how many it skipped."""
    refill: list[Document] = []
    checked = skipped = 0
    while len(refill) < needed and checked < len(outside):
        chunk = outside[checked:checked + max(REFILL_CHUNK, 2 * needed)]
        checked += len(chunk)
        flags, _ = flag_documents(cfg, plan, [d.text for d in chunk], [""] * len(chunk))
        for d, f in zip(chunk, flags):
            if len(refill) == needed:
                break
            if f:
                skipped += 1
            else:
                refill.append(d)
    if len(refill) < needed:
        raise LabError(
            f"--decontaminate-with {cfg.decontaminate_with}: {needed} documents to refill in the "
            f"{cfg.setting} arm, but only {len(refill)} unflagged base documents outside the arm "
            "to take their places (keep the arm's size: take a --limit subset of a larger base "
            "corpus)")
    return refill, skipped


def stand_ins(cfg: InjectConfig, plan: InjectionPlan) -> tuple[dict[str, Sample], dict[str, Any]]:
    """Test sample id -> its placebo stand-in, for every sample the arm injects: the placebo
    arm's draw (choose_placebo over the pool of `placebo_from`'s splits, with this seed), and
    the pool's record."""
    pool = placebo_pool(cfg, plan.spec, plan.setting, plan.bench.records,
                        load_placebo_splits(cfg))
    selected = [plan.samples[i] for i in plan.selected]
    chosen = choose_placebo(pool, selected, plan.setting, cfg)
    return {s.id: p for s, p in zip(selected, chosen)}, pool.record


def placebo_replacements(cfg: InjectConfig, plan: InjectionPlan, removed: list[dict[str, Any]],
                         embedding: list[dict[str, Any]] | None, host_text: dict[str, str]
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                    dict[str, Any] | None]:
    """The placebo copies replacing the `removed` injected copies of test samples, one each (the
    stand-in's document at the same position of the setting's documents, same copy number; in
    an embedded arm written into the removed copy's host), the record of which replaced which,
    and the placebo pool's record (None: nothing to replace, and no pool read)."""
    if not removed:
        return [], [], None
    stand_in, pool_record = stand_ins(cfg, plan)
    host_of = {e["id"]: e["host"] for e in embedding or ()}
    sample_of = {s.id: s for s in plan.samples}
    documents, replaced = [], []
    for copy in removed:
        placebo = stand_in[copy["sample"]]
        own = [side for side, _text in plan.setting.documents(sample_of[copy["sample"]])]
        side, text = plan.setting.documents(placebo)[own.index(copy["side"])]
        document = {"id": f"{PLACEBO_COPY}:{placebo.id}:{side}:{copy['copy']}", "text": text,
                    "sample": placebo.id}
        row = {"document": copy["id"], "sample": copy["sample"], "placebo": placebo.id,
               "placebo_split": placebo.split, "placebo_document": document["id"]}
        if copy["id"] in host_of:
            host = host_of[copy["id"]]
            placed, where = soft.placed_documents(plan.form, [document],
                                                  lambda: [(host, host_text[host])], cfg.seed)
            document = placed[0]
            row.update(host=host, start=where[0]["start"], end=where[0]["end"],
                       sha256=where[0]["sha256"])
        documents.append({"id": document["id"], "text": document["text"]})
        replaced.append(row)
    return documents, replaced, pool_record
