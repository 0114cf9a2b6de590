"""What one arm injects, resolved once: `lab inject`'s first step of three (plan, build, record).

`load_injection_data` reads what the plan depends on (the benchmark's injected split and, for a
placebo, the splits it draws from); `plan_injection(config, data)` then decides, from these
alone, everything the arm injects: the benchmark's spec, the setting (in its contamination
form), the samples taking part, the ones injected and their split-half, dose and timing groups,
a placebo's own samples, the copies of each and the injected documents. The plan is frozen and
read by the builders (lab.contamination.build, lab.contamination.streaming) and by the record
(lab.contamination.record), none of which looks the benchmark, setting or samples up again.

Which base documents make way is the build's: the same for both corpus formats in number (one
removed per injected document), not in which, since format 2 decides them shard by shard.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.contamination.config import InjectConfig
from lab.contamination.placebo import (PlaceboPool, PlaceboSplits, choose_placebo,
                                       load_placebo_splits, placebo_pool)
from lab.contamination.selection import dose_levels, plan_timing, select_samples
from lab.contamination.settings import Setting
from lab.corpora import Loaded, Sample, check_references, get_spec, load_samples
from lab.corpora.base import DatasetSpec


@dataclass(frozen=True)
class InjectionData:
    """The data an arm's plan is decided from, read once."""

    spec: DatasetSpec                    # the benchmark's
    bench: Loaded                        # its injected split, whole
    placebo_splits: PlaceboSplits | None  # a placebo's other splits, else None


def load_injection_data(cfg: InjectConfig) -> InjectionData:
    """Read the benchmark split the arm injects from and, for a placebo setting, the splits it
    draws its own samples from."""
    spec = get_spec(cfg.benchmark)
    bench = load_samples(cfg.benchmark, cfg.split, cfg.corpora_dir)
    placebo = load_placebo_splits(cfg) if settings_table.get(cfg.setting).placebo else None
    return InjectionData(spec, bench, placebo)


@dataclass(frozen=True)
class InjectionPlan:
    """What an arm injects, decided from the config and the benchmark alone (before any base
    document is read): the same for both corpus formats."""

    spec: DatasetSpec               # the benchmark's
    bench: Loaded
    samples: list[Sample]           # the samples taking part (--samples)
    table_setting: Setting          # the settings table's row of --setting
    setting: Setting                # the same, in the contamination form its documents take
    form: soft.ContaminationForm
    levels: list[list[int]] | None  # a dose ladder's levels (sample indices)
    timing_levels: list[list[int]] | None  # positions in `selected` of each timing level
    selected: list[int]             # samples the setting selects (a placebo matches their count)
    chosen: list[int]               # test samples injected (the rest are held out)
    pool: PlaceboPool | None
    sources: list[Sample]           # samples whose documents are injected
    copies: list[int]               # copies of each source
    injected: list[dict[str, Any]]  # the injected documents


def plan_injection(cfg: InjectConfig, data: InjectionData) -> InjectionPlan:
    """The arm's plan: a function of the config and the data alone (--test-ids's file is read
    as the config's own list)."""
    bench = data.bench
    samples: list[Sample] = bench.records
    if not samples:
        raise LabError(f"{cfg.benchmark} split '{cfg.split}': no samples")
    if cfg.samples is not None:
        if cfg.samples > len(samples):
            raise LabError(f"--samples {cfg.samples}: {cfg.benchmark} {cfg.split} holds only "
                           f"{len(samples)} samples")
        samples = samples[: cfg.samples]
    table_setting = setting = settings_table.get(cfg.setting)
    form = soft.parse_form(cfg.contamination_form)
    if not form.verbatim:  # its documents come in the contamination form
        setting = soft.FormedSetting.of(setting, form, cfg.seed, cfg.benchmark, cfg.base)
    # A placebo selects the test samples its base setting would inject with this seed (their
    # count is what it matches) and injects none of them.
    levels = dose_levels(samples, cfg) if cfg.doses and setting.injects else None
    dose_of = ({i: dose for dose, level in zip(cfg.doses or (), levels) for i in level}
               if levels is not None else {})
    selected = (sorted(i for i, dose in dose_of.items() if dose) if levels is not None
                else select_samples(samples, cfg) if setting.injects else [])
    chosen = selected if setting.injects_test else []
    if setting.injects_test and setting.needs_output:
        check_references(bench)
    pool = (placebo_pool(cfg, data.spec, setting, bench.records,
                         data.placebo_splits or PlaceboSplits([], []))
            if setting.placebo else None)
    sources = (choose_placebo(pool, [samples[i] for i in selected], setting, cfg)
               if pool is not None else [samples[i] for i in chosen])
    # Copies of each source: its level's dose (a placebo sample stands for the test sample of
    # the same rank), else --repeat.
    copies = [dose_of[i] for i in selected] if levels is not None else [cfg.repeat] * len(sources)
    injected = []
    for sample, times in zip(sources, copies):
        for side, text in setting.documents(sample):
            for copy in range(times):
                injected.append({
                    "id": f"inject:{sample.id}:{side}:{copy}", "text": text,
                    "sample": sample.id, "side": side, "copy": copy,
                    **({"form": form.name} if not form.verbatim else {}),
                })
    timing_levels = None
    if setting.injects and not timing_table.is_uniform(cfg.timing):
        timing_levels = plan_timing(cfg, samples, selected)
    return InjectionPlan(data.spec, bench, samples, table_setting, setting, form, levels,
                         timing_levels, selected, chosen, pool, sources, copies, injected)
