"""`lab inject`'s third step: check the written arm against its plan and record it.

The guards fail loudly (inside the output's temporary folder, so nothing is left) when the arm
is not what its setting promises; the manifest then describes the arm from the plan
(lab.contamination.plan) and what the build wrote (lab.contamination.arm.Built): counts, the
injected, held-out and removed ids, the dose and timing levels, the contamination form, a
placebo's samples and length match, and the inputs.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from lab.codetokens import whitespace_hash
from lab.common import LabError, environment_record
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.contamination.arm import Built
from lab.contamination.config import FORMATS, PLACEBO_SHARE_TOLERANCE, InjectConfig
from lab.contamination.forms.embedded import BOUNDARY_RULE
from lab.contamination.overlap import CODE_LANGUAGES
from lab.contamination.placebo import PlaceboPool, form_length
from lab.contamination.plan import InjectionPlan
from lab.contamination.settings import Setting
from lab.corpora import Sample
from lab.corpora.shards import shards_digest


def record_arm(cfg: InjectConfig, plan: InjectionPlan, built: Built, started: float
               ) -> dict[str, Any]:
    """The arm's manifest, once its guards pass: the plan, what was written, the guards' record
    and the run's wall time (since `started`, a time.perf_counter())."""
    arm_injected = built.injected if built.injected is not None else plan.injected
    guards, pre_existing = check_guards(cfg, plan, built, arm_injected)
    guards.update(check_counts(cfg, plan, len(built.removed)))
    length_match = None
    if plan.pool is not None:
        guards.update(check_placebo(cfg, plan, plan.pool))
        length_match = placebo_length_match(cfg, plan, built)
    manifest = corpus_manifest(cfg, plan, built, guards, pre_existing, length_match)
    manifest["shards"] = built.shards
    manifest["corpus_sha256"] = shards_digest(built.shards)
    manifest["wall_seconds"] = round(time.perf_counter() - started, 2)
    return manifest


def corpus_manifest(cfg: InjectConfig, plan: InjectionPlan, built: Built, guards: dict[str, Any],
              pre_existing: list[str], length_match: dict[str, Any] | None) -> dict[str, Any]:
    samples, chosen, pool, injected = plan.samples, plan.chosen, plan.pool, plan.injected
    chosen_set = set(chosen)
    decontamination = built.decontamination
    sources = plan.sources
    if decontamination is not None:  # the samples left in the arm; the intended ones recorded
        injected = built.injected if built.injected is not None else injected
        gone = set(decontamination["removed_injected_ids"])
        chosen = [i for i in chosen if samples[i].id not in gone]
        sources = [s for s in sources if s.id not in gone]
    # The injected characters are the samples' (embedded: the blocks, not their hosts).
    injected_chars = (sum(e["end"] - e["start"] for e in built.embedding)
                      if built.embedding is not None else sum(len(r["text"]) for r in injected))
    manifest: dict[str, Any] = {
        "kind": "lab-corpus",
        "corpus_format": cfg.corpus_format,
        "selection": FORMATS[cfg.corpus_format],
        "setting": cfg.setting,
        "benchmark": cfg.benchmark,
        "benchmark_split": plan.bench.split,
        "seed": cfg.seed,
        "options": {
            "base": cfg.base, "base_splits": list(cfg.base_splits), "limit": cfg.limit,
            "repeat": cfg.repeat, "fraction": cfg.fraction, "samples": cfg.samples,
            **({"doses": list(cfg.doses)} if cfg.doses else {}),
            **({"timing": list(cfg.timing)} if not timing_table.is_uniform(cfg.timing) else {}),
            "test_ids": str(cfg.test_ids) if cfg.test_ids else None,
            "decontaminate": cfg.decontaminate, "shard_size": cfg.shard_size,
            **({"decontaminate_with": cfg.decontaminate_with}
               if cfg.decontaminate_with is not None else {}),
            **({"placebo_from": list(cfg.placebo_from)} if cfg.placebo_from else {}),
            **({"placebo_match": cfg.placebo_match} if pool is not None else {}),
            **({"contamination_form": cfg.contamination_form}
               if isinstance(plan.setting, soft.FormedSetting) else {}),
        },
        **({"executor": {"executor": cfg.executor, "tasks": cfg.tasks}}
           if cfg.corpus_format == 2 else {}),
        "counts": {
            "base_documents": built.base_total,
            "after_limit": built.after_limit,
            "decontaminated_removed": len(built.decontaminated),
            "arm_documents": built.arm_documents,
            "injected_samples": len(chosen),
            "held_out_samples": len(samples) - len(plan.chosen),
            "injected_documents": len(injected),
            "removed_documents": len(built.removed),
            "final_documents": built.final_documents,
            "injected_document_fraction": (round(len(injected) / built.final_documents, 6)
                                           if built.final_documents else 0.0),
            "injected_char_fraction": (round(injected_chars / built.total_chars, 6)
                                       if built.total_chars else 0.0),
            **({"placebo_samples": len(sources)} if pool is not None else {}),
        },
        "injected_ids": [samples[i].id for i in chosen],
        **({"intended_injected_ids": [samples[i].id for i in plan.chosen]}
           if decontamination is not None else {}),
        "held_out_ids": [s.id for i, s in enumerate(samples) if i not in chosen_set],
        "removed_base_ids": built.removed,
        "decontaminated_ids": built.decontaminated,
        **({"dose_levels": dose_record(cfg, plan, injected)}
           if plan.levels is not None else {}),
        **({"timing_levels": timing_record(cfg, plan)} if plan.timing_levels is not None else {}),
        **({"contamination_form": form_record(plan.setting, plan.sources)}
           if isinstance(plan.setting, soft.FormedSetting) else {}),
        **({"decontamination": decontamination} if decontamination is not None else {}),
        **({"embedding": embedding_record(built.embedding)}
           if built.embedding is not None else {}),
        "pre_existing_verbatim": pre_existing,
        "guards": guards,
        "inputs": {
            "base": built.provenance,
            "benchmark": plan.bench.provenance(),
            **({"placebo_pool": [part.provenance() for part in pool.parts]} if pool else {}),
        },
        "environment": environment_record(),
    }
    if pool is not None:
        manifest["placebo_ids"] = [s.id for s in sources]
        if decontamination is not None:
            manifest["intended_placebo_ids"] = [s.id for s in plan.sources]
        manifest["placebo"] = {
            "base_setting": plan.setting.base,
            "samples": [{"id": s.id, "split": s.split} for s in plan.sources],
            "by_split": dict(Counter(s.split for s in plan.sources)),
            # The test samples the base arm injects with this seed: the placebo injects as many
            # samples, and its models are probed on these (like the control's).
            "matched_test_ids": [samples[i].id for i in plan.selected],
            "pool": pool.record,
            "length_match": length_match,
        }
    return manifest


def form_record(setting: soft.FormedSetting, sources: list[Sample]) -> dict[str, Any]:
    """The arm's contamination form and its options, how many of the injected samples (a
    placebo's own) it altered, and those it left as verbatim writes them, with the reason."""
    unchanged = []
    for sample in sources:
        _documents, reason = setting.formed(sample)
        if reason is not None:
            unchanged.append({"id": sample.id, "reason": reason})
    return {**setting.contamination.record(), "seed": setting.seed,
            "altered_samples": len(sources) - len(unchanged), "unchanged": unchanged}


def embedding_record(embedding: list[dict[str, Any]]) -> dict[str, Any]:
    """Where an embedded arm's documents went: per injected document its host (a base document
    the arm removes) and the block's character offsets in the written text."""
    return {"rule": BOUNDARY_RULE, "offsets": "characters of the written text, [start, end)",
            "documents": embedding}


def dose_record(cfg: InjectConfig, plan: InjectionPlan, injected: list[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """Per level of the ladder, in ladder order: its dose, the test sample ids it holds (a
    placebo injects other samples in their place: `placebo_ids`), and its documents and
    characters in the arm."""
    setting, samples, levels = plan.setting, plan.samples, plan.levels or []
    sources, copies = plan.sources, plan.copies
    source_dose = {s.id: times for s, times in zip(sources, copies)}
    records = []
    for dose, level in zip(cfg.doses or (), levels):
        documents = [r for r in injected if source_dose[r["sample"]] == dose] if dose else []
        record = {"dose": dose, "samples": len(level), "ids": [samples[i].id for i in level],
                  "documents": len(documents),
                  "characters": sum(len(r["text"]) for r in documents)}
        if setting.placebo and dose:
            record["placebo_ids"] = [s.id for s, times in zip(sources, copies) if times == dose]
        records.append(record)
    return records


def timing_record(cfg: InjectConfig, plan: InjectionPlan) -> list[dict[str, Any]]:
    """Per timing level, in the order given: its window, the test sample ids it holds and the
    sample ids whose documents pre-training keeps inside the window (`sources`: a placebo's own
    samples, else the same ids)."""
    records = []
    for spec, positions in zip(cfg.timing, plan.timing_levels or []):
        timing = timing_table.parse_timing(spec)
        records.append({**timing.record(), "samples": len(positions),
                        "ids": [plan.samples[plan.selected[k]].id for k in positions],
                        "sources": [plan.sources[k].id for k in positions]})
    return records


def check_guards(cfg: InjectConfig, plan: InjectionPlan, built: Built, injected: list[dict]
                 ) -> tuple[dict[str, Any], list[str]]:
    """Fail loudly if the written arm is not what its setting promises: as many documents as
    the arm's base; every injected text as often as injected plus kept verbatim in the base;
    no test side verbatim in the arm unless injected or already in the base (pre-existing)."""
    samples, chosen = plan.samples, set(plan.chosen)
    if built.final_documents != built.arm_documents:
        raise LabError(f"internal guard: arm has {built.final_documents} documents, expected "
                       f"{built.arm_documents}")
    tally = built.tally
    expected = Counter(whitespace_hash(r["text"]) for r in injected)
    for key, times in expected.items():
        if tally.final[key] != times + tally.kept[key]:
            raise LabError(
                f"internal guard: an injected document occurs {tally.final[key]} times, "
                f"expected {times + tally.kept[key]}"
            )
    setting = plan.table_setting
    exposed_sides = setting.sides if setting.injects_test else ()
    pre_existing = []
    for i, sample in enumerate(samples):
        for side, text in (("input", sample.input), ("output", sample.output)):
            if not text.strip():
                continue
            key = whitespace_hash(text)
            if key in tally.base_hits:
                pre_existing.append(f"{sample.id}/{side}")
                continue
            if not (i in chosen and side in exposed_sides) and key in tally.final_hits:
                raise LabError(
                    f"guard: {side} of sample {sample.id} occurs verbatim in the {cfg.setting} "
                    "arm although it was not injected and was not pre-existing"
                )
    guards = {
        "equal_size": True,
        "injected_multiplicity": list(cfg.doses) if cfg.doses else cfg.repeat,
        "held_out_absent_unless_pre_existing": True,
    }
    return guards, pre_existing


def check_counts(cfg: InjectConfig, plan: InjectionPlan, removed: int) -> dict[str, Any]:
    """Documents added = samples x the setting's documents per sample x their dose (--repeat,
    or their level's) = documents removed, sample by sample; a placebo injects exactly as many
    samples per level as its base arm injects test samples."""
    setting, selected, sources = plan.setting, plan.selected, plan.sources
    copies, injected = plan.copies, plan.injected
    if len(sources) != len(selected):
        raise LabError(f"internal guard: {len(sources)} samples injected, expected {len(selected)}")
    per_sample = Counter(r["sample"] for r in injected)
    for sample, times in zip(sources, copies):
        if per_sample[sample.id] != times * setting.documents_per_sample:
            raise LabError(f"internal guard: sample {sample.id} has {per_sample[sample.id]} "
                           f"documents, expected {times * setting.documents_per_sample}")
    expected = setting.documents_per_sample * sum(copies)
    if len(injected) != expected or removed != expected:
        raise LabError(f"internal guard: {len(injected)} documents injected and {removed} "
                       f"removed, expected {expected} of each")
    counts = {"documents_per_sample": setting.documents_per_sample}
    if cfg.doses:
        counts["samples_per_dose"] = {str(d): copies.count(d) for d in cfg.doses if d}
    return counts


def placebo_length_match(cfg: InjectConfig, plan: InjectionPlan, built: Built) -> dict[str, Any]:
    """The lengths of the test samples the base arm injects and of the placebo samples standing
    for them, and each arm's injected share of its corpus's characters. The base arm of this
    seed keeps the very same base documents, so its share is exact without its corpus. A
    length-matched placebo whose share strays from its arm's by more than
    PLACEBO_SHARE_TOLERANCE is refused (inside the output's temporary folder: nothing is left)."""
    arm = [plan.samples[i] for i in plan.selected]
    arm_chars = injected_chars(plan.setting, arm, plan.copies)
    placebo_chars = injected_chars(plan.setting, plan.sources, plan.copies)
    total = built.intended_total_chars or built.total_chars  # before --decontaminate-with
    kept_base_chars = total - placebo_chars
    arm_share = arm_chars / (kept_base_chars + arm_chars)
    placebo_share = placebo_chars / (kept_base_chars + placebo_chars)
    difference = placebo_share / arm_share - 1
    lengths = {"arm": length_summary(plan.setting, arm),
               "placebo": length_summary(plan.setting, plan.sources)}
    if cfg.placebo_match == "length" and abs(difference) > PLACEBO_SHARE_TOLERANCE:
        raise LabError(
            f"--placebo-match length: the placebo injects {placebo_share:.4%} of its corpus's "
            f"characters and its arm {arm_share:.4%} ({difference:+.1%}, tolerance "
            f"{PLACEBO_SHARE_TOLERANCE:.0%}; mean length {lengths['placebo']['mean']} vs "
            f"{lengths['arm']['mean']} lab code tokens): the pool lacks samples of the arm's "
            "lengths (draw from more splits with --placebo-from, or lower --samples)")
    return {
        "method": cfg.placebo_match,
        "unit": "lab code tokens",
        **lengths,
        "mean_ratio": round(lengths["placebo"]["mean"] / lengths["arm"]["mean"], 4),
        "share_of_characters": {
            "arm": round(arm_share, 6), "placebo": round(placebo_share, 6),
            "relative_difference": round(difference, 4), "tolerance": PLACEBO_SHARE_TOLERANCE,
            "checked": cfg.placebo_match == "length",
        },
    }


def injected_chars(setting: Setting, samples: list[Sample], copies: list[int]) -> int:
    return sum(times * len(text) for sample, times in zip(samples, copies)
               for _side, text in setting.documents(sample))


def length_summary(setting: Setting, samples: list[Sample]) -> dict[str, Any]:
    """Distribution of the samples' lengths in the arm's form (one copy each)."""
    tokens, chars = np.asarray([form_length(setting, s) for s in samples]).T
    p10, p50, p90 = np.quantile(tokens, (0.1, 0.5, 0.9))
    return {"samples": len(samples), "mean": round(float(tokens.mean()), 1),
            "std": round(float(tokens.std()), 1), "p10": float(p10), "p50": float(p50),
            "p90": float(p90), "max": int(tokens.max()),
            "mean_chars": round(float(chars.mean()), 1)}


def check_placebo(cfg: InjectConfig, plan: InjectionPlan, pool: PlaceboPool
                  ) -> dict[str, Any]:
    """No placebo document may hold a test sample's side, exactly or as a near-duplicate, and
    none may come from the injected split."""
    spec, setting, sources, injected = plan.spec, plan.setting, plan.sources, plan.injected
    language = {"input": spec.input_language, "output": spec.output_language}
    by_id = {s.id: s for s in sources}
    for record in injected:
        sample = by_id.get(record["sample"])
        if sample is None or sample.split not in pool.record["splits"]:
            raise LabError(f"guard: placebo document {record['id']} is not from "
                           f"{', '.join(pool.record['splits'])}")
        for side in setting.sides:
            text = getattr(sample, side)
            match = pool.index.match(text, near=language[side] in CODE_LANGUAGES)
            if match.leaked:
                raise LabError(f"guard: placebo sample {sample.id} ({side}) matches "
                               f"{sorted(match.matched_ids())[0]} of the {cfg.split} split")
    return {"placebo_disjoint_from_test": True, "placebo_samples": len(sources)}
