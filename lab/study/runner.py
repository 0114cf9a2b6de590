"""`lab study`: expand a recipe into stages, run what is not finished, collect one results table.

The study's parts, each in its module: its stages and their keys (lab.study.grid, the kinds in
lab.study.stages), running one stage (lab.study.execution), the executors and the scheduler
(lab.study.scheduler) and the results tables (lab.analysis.collect). Here: the study folder's
records (recipe.json, study.json) and the run from start to tables.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.common import (LabError, check_apart, environment_record, read_json_if_there,
                        write_json_atomic)
from lab.corpora import corpora_inputs
from lab.analysis.plan import ANALYSIS, check_new_run, frozen_analysis, with_frozen_statistics
from lab.analysis.collect import PROBES, collect
from lab.study.cost import estimate
from lab.study.execution import available_cores, finish, recorded_seconds
from lab.study.grid import evaluated_models, expand
from lab.study.preflight import check_ready, pending_stages, slow_settings
from lab.analysis.questions import power_plan
from lab.analysis.study_record import SUMMARY, read_summary
from lab.study.recipe import Recipe, recipe_dict, recipe_from_dict, study_differences
from lab.study.scheduler import check_executor, default_workers, schedule, submitter

RECIPE = "recipe.json"  # the study's recipe, as recorded when it began (recipe_dict)
# Held while a runner reads and writes RECIPE and SUMMARY: two runners of one study (started
# seconds apart, or SLURM jobs) each keep what the other recorded (merged_summary).
RECORDS_LOCK = "study.json.lock"


@contextlib.contextmanager
def records_lock(study: Path) -> Iterator[None]:
    """Hold STUDY/study.json.lock (the kernel's flock, released when its holder dies)."""
    from filelock import FileLock

    with FileLock(Path(study) / RECORDS_LOCK):
        yield


def merged_summary(current: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """study.json as one runner writes it over what is there now (`current`, maybe written by
    another runner since this one read it): this runner's fields, every earlier field it does
    not set (less a shard's seeds, which only the run given them has), and every `grown` record
    of either, each once, in order: a grow is recorded whichever runner writes last."""
    grown = list(current.get("grown") or [])
    grown += [record for record in ours.get("grown") or [] if record not in grown]
    merged = {**{k: v for k, v in current.items() if k != "shard_seeds"}, **ours}
    if grown:
        merged["grown"] = grown
    return merged


def update_summary(study: Path, ours: dict[str, Any]) -> dict[str, Any]:
    """Write merged_summary(study.json now, `ours`) under the records' lock; returns it."""
    with records_lock(study):
        summary = merged_summary(read_summary(study), ours)
        write_json_atomic(Path(study) / SUMMARY, summary)
    return summary


def study_threads(recipe: Recipe, study: Path, summary: dict[str, Any] | None = None) -> int:
    """The torch threads of every stage of this study: the recipe's, else those recorded when
    the study began (a resumed or re-run study computes what the first run computed), else
    this machine's cores. A recipe that asks for another count than the recorded one is
    refused: its stages would not reproduce the finished ones. `summary`: study.json, if the
    caller has read it."""
    recorded = (read_summary(study) if summary is None else summary).get("threads")
    requested = recipe.resources.threads
    if recorded is not None and requested is not None and recorded != requested:
        raise LabError(f"{study / SUMMARY}: the study's stages run on {recorded} threads; "
                       f"resources.threads {requested} would compute other numbers "
                       f"(use --threads {recorded} or a new --out)")
    return requested or recorded or max(1, available_cores() // stages_per_gpu(recipe))


# GPU memory one stage may take, by the largest preset of the study (GiB; the CUDA context and
# allocator slack included): what sizes resources.stages_per_gpu when it is null.
STAGE_GPU_GIB = {"micro": 2, "tiny": 3, "small": 8, "paper": 40}
MAX_STAGES_PER_GPU = 8


def stages_per_gpu(recipe: Recipe) -> int:
    """Stages at a time on the study's GPU: the recipe's count, else as many as the GPU's memory
    holds (at most MAX_STAGES_PER_GPU and half the cores); 1 for a CPU study."""
    device = recipe.resources.device
    if not device.startswith("cuda"):
        return 1
    if recipe.resources.stages_per_gpu:
        return recipe.resources.stages_per_gpu
    import torch

    if not torch.cuda.is_available():
        return 1
    index = int(device.split(":")[1]) if ":" in device else 0
    gib = torch.cuda.get_device_properties(index).total_memory / 2**30
    need = max(STAGE_GPU_GIB.get(preset, 40) for preset in recipe.preset)
    return max(1, min(MAX_STAGES_PER_GPU, int(gib // need), available_cores() // 2))


def study_data(recipe: Recipe, corpora_dir: Path | None) -> dict[str, dict[str, str]]:
    """Fingerprints of the datasets a study reads (its base corpus, its benchmark and, for a
    -paper subset, the benchmark it was drawn from): stage keys come from the recipe alone, so
    this is what tells a resumed study that `--corpora` now holds other data."""
    from lab.corpora import data_fingerprints

    names = dict.fromkeys([recipe.corpus.base, recipe.benchmark,
                           recipe.benchmark.removesuffix("-paper")])
    return {name: data_fingerprints(name, corpora_dir) for name in names}


def data_folders(recipe: Recipe, corpora_dir: Path | None) -> dict[str, str]:
    """Where each dataset of the study (study_data's) is read from here: its local folder
    (absolute) or `hub`; a dataset found nowhere is left out. Recorded when a study begins, so
    that a run that cannot find the data says where it was."""
    from lab.corpora import get_spec

    folders: dict[str, str] = {}
    for name in study_data(recipe, corpora_dir):
        spec = get_spec(name)
        for split in spec.splits:
            try:
                where, _files = spec.locate(split, corpora_dir)
            except LabError:  # missing here, or a --corpora/LAB_CORPORA that is not a folder
                continue
            folders[name] = where if where == "hub" else str(Path(where).resolve())
            break
    return folders


def data_problem(study: Path, summary: dict[str, Any], now: dict[str, dict[str, str]],
                 corpora_dir: Path | None) -> str | None:
    """Why the data found here is not the data the study began with (STUDY/study.json's
    `data`), else None: missing (a split it read from a local file is in no local folder now:
    a shell without LAB_CORPORA, another --corpora; pointing at it resumes the study) or
    changed (another file or other bytes: its stages were built on the old data). A study
    begun before fingerprints were recorded takes today's."""
    from lab.corpora import candidate_roots, get_spec

    recorded: dict[str, dict[str, str]] = summary.get("data") or {}
    for name, files in recorded.items():
        found = now.get(name, {})
        local_now = {file.split("/")[0] for file in found if "/" in file}
        gone = sorted(file for file in files if "/" in file and file.split("/")[0] not in local_now)
        if gone:
            was = (summary.get("data_folders") or {}).get(name)
            try:
                looked = ", ".join(str(root / get_spec(name).subdir)
                                   for _label, root in candidate_roots(corpora_dir))
            except LabError as exc:  # --corpora or LAB_CORPORA names no folder
                looked = str(exc)
            root = str(Path(was).parent) if was and was != "hub" else "DIR"
            return (f"{study / SUMMARY}: the data this study began with is missing here ({name} "
                    f"{gone[0]}{f', read from {was}' if was else ''}; looked in {looked}): "
                    f"pass --corpora {root} or set LAB_CORPORA={root}, and the study resumes "
                    "where it stopped")
    for name, files in recorded.items():
        for file in sorted(set(files) | set(now.get(name, {}))):
            if files.get(file) != now.get(name, {}).get(file):
                return (f"{study / SUMMARY}: the data changed since this study began ({name} "
                        f"{file} differs); its stages were built on the old data: use a new "
                        "--out")
    return None


def resume_corpora(corpora_dir: Path | None) -> Path | None:
    """The --corpora of the command that resumes a study: the one given, else LAB_CORPORA's
    folder (absolute): resumed in a shell without LAB_CORPORA, the study would find its data
    missing. None where the data came from ./corpora or the hub, which a resume finds again, or
    where LAB_CORPORA lists several folders (--corpora takes one: the resume needs the same
    LAB_CORPORA)."""
    from lab.corpora.base import lab_corpora_folders

    if corpora_dir is not None:
        return Path(corpora_dir)
    folders = lab_corpora_folders()
    return folders[0].resolve() if len(folders) == 1 else None


def check_start(recipe: Recipe, study: Path, corpora_dir: Path | None = None,
                executor: str = "local", seeds: list[int] | None = None,
                allow_underpowered: bool = False, smoke: bool = False) -> list[str]:
    """Everything that refuses to start a study, in one place: `lab study` runs it before its
    first stage, and `--dry-run` runs the same, so a dry run says no (exit 2, the same line)
    exactly when the real run would. Raises one LabError: the study folder (not a study's,
    another recipe's, other thread counts), its data (missing or changed since it began), then
    every missing piece at once (preflight.check_ready). Returns the warnings of a study that
    may start. Writes nothing."""
    study = Path(study)
    check_study_folder(study, corpora_dir)
    check_recorded_recipe(recipe, study)
    summary = read_summary(study)
    if summary and bool(summary.get("smoke")) != smoke:
        raise LabError(f"{study / SUMMARY}: " + (
            "a smoke study (lab study --smoke): its sizes were shrunk; run the real study in a "
            "new --out" if summary.get("smoke") else
            "a study run without --smoke: a smoke run goes to a new --out"))
    check_new_run(recipe, study / SUMMARY, summary)
    study_threads(recipe, study, summary)
    problem = data_problem(study, summary, study_data(recipe, corpora_dir), corpora_dir)
    if problem:
        raise LabError(problem)
    return check_ready(recipe, study, corpora_dir, executor, seeds=seeds,
                       allow_underpowered=allow_underpowered, power=not smoke)


def check_recorded_recipe(recipe: Recipe, study: Path) -> list[str]:
    """Refuse a study folder that holds another recipe (STUDY/recipe.json). Fields added to the
    schema since the study began take their defaults, so an older study resumes; any real
    difference is refused and named. Resources may differ (a study begun on a laptop goes on on
    a cluster): the thread count is checked against what the study recorded (study_threads),
    and a launch that changes results changes the stage keys. A study may grow: a recipe whose
    stages include every stage of the recorded one (a sweep given more values, more seeds
    after the first) keeps what was run, since a stage's key is its whole configuration;
    returns those differences (recorded in study.json as `grown`), else []."""
    recorded = study / RECIPE
    if not recorded.is_file():
        return []
    try:
        previous = recipe_from_dict(json.loads(recorded.read_text()))
    except (OSError, ValueError) as exc:
        raise LabError(f"{recorded}: unreadable ({exc})") from None
    except LabError as exc:
        raise LabError(f"{recorded}: a recipe this lab cannot read ({exc})") from None
    changed = study_differences(previous, recipe)
    if changed and not {s.key for s in expand(previous)} <= {s.key for s in expand(recipe)}:
        raise LabError(f"{recorded}: the study directory holds another recipe (differs in "
                       f"{', '.join(changed[:3])}; use a new --out)")
    return changed


def check_study_folder(study: Path, corpora_dir: Path | None) -> None:
    """A study folder is new, empty, or one a study began (its RECIPE or SUMMARY): never a
    corpus, a model or a user's folder, nor a dataset folder, one holding it or inside it
    (lab.common.check_apart). The only output a study resumes instead of replacing."""
    check_apart(study, corpora_inputs(corpora_dir))
    if not study.exists():
        return
    if not study.is_dir():
        raise LabError(f"{study}: exists and is not a study directory")
    begun = (study / RECIPE).is_file() or (study / SUMMARY).is_file()
    # (the records' lock alone: a runner killed before it wrote the recipe)
    if any(p.name != RECORDS_LOCK for p in study.iterdir()) and not begun:
        raise LabError(f"{study}: exists and is not a study directory (no {RECIPE} or "
                       f"{SUMMARY}); use a new --out")


def run_study(recipe: Recipe, study: Path, corpora_dir: Path | None = None, dry_run: bool = False,
              executor: str = "local", workers: int | None = None,
              slurm: dict[str, Any] | None = None,
              on_event: Callable[..., None] | None = None, ready_checked: bool = False,
              seeds: list[int] | None = None, allow_underpowered: bool = False,
              smoke: dict[str, Any] | None = None) -> dict[str, Any]:
    """Entry point of `lab study`: run the stages that are not finished, then collect results.
    `ready_checked`: the caller has run check_start for this recipe and folder;
    `seeds`: run only the shard of those seeds (`expand`); `allow_underpowered`: run a study
    whose primary tests can never reach alpha (lab.analysis.questions.power_problem); `smoke`:
    `recipe` is a smoke recipe, and this is what study.json records of it
    (lab.study.smoke.smoke_record)."""
    study = Path(study)
    stages = expand(recipe, seeds)
    check_executor(executor, workers)
    if dry_run:
        # A plan for another machine (a cluster) is worth printing where the study cannot run:
        # the plan, then the one line the real run would refuse with (`refusal`).
        pending = pending_stages(recipe, study, seeds)
        try:
            warnings, refusal = check_start(recipe, study, corpora_dir, executor, seeds,
                                            allow_underpowered, bool(smoke)), None
        except LabError as exc:
            warnings, refusal = slow_settings(pending, executor), str(exc)
        return {"stages": len(stages), "done": len(stages) - len(pending),
                "estimate": estimate(recipe, stages, study),
                "power": power_plan(recipe, models=evaluated_models(stages)),
                "refusal": refusal, "warnings": warnings}
    if not ready_checked:
        check_start(recipe, study, corpora_dir, executor, seeds, allow_underpowered, bool(smoke))
    study.mkdir(parents=True, exist_ok=True)
    with records_lock(study):
        # The grow is judged and recorded under the lock: a second runner started meanwhile
        # reads the recipe and study.json this one leaves, never one without the other.
        grown = check_recorded_recipe(recipe, study)
        previous_summary = read_summary(study)
        threads = study_threads(recipe, study, previous_summary)
        workers = workers or default_workers(executor, threads)
        # The analysis is the one the study began with (check_start refused any other):
        # recipe.json and the tables record it, planned seeds included, however the seeds grow.
        analysis = previous_summary.get(ANALYSIS) or frozen_analysis(recipe)
        recipe = with_frozen_statistics(recipe, analysis)
        if read_json_if_there(study / RECIPE) != recipe_dict(recipe):  # begun, grown or older
            write_json_atomic(study / RECIPE, recipe_dict(recipe))
        # Recorded before any stage runs: a kill at any point leaves the count for the resume.
        # The power the study was planned with, at its declared effect: recorded before any
        # stage, so that it cannot be computed again from what the seeds then show.
        planned = previous_summary.get("planned_power") or power_plan(
            recipe, models=evaluated_models(expand(recipe))).get("power")
        ours: dict[str, Any] = {
            "study": recipe.name, "stages": len(stages), "threads": threads,
            "executor": executor, "workers": workers, "data": study_data(recipe, corpora_dir),
            "data_folders": data_folders(recipe, corpora_dir), "planned_power": planned,
            ANALYSIS: analysis, **({"smoke": smoke} if smoke else {}),
            **({"shard_seeds": sorted(seeds)} if seeds is not None else {}),
            # a recipe that grew the study: what it added, each time (merged_summary keeps
            # every earlier one)
            **({"grown": [{"differs_in": grown, "stages": len(stages)}]} if grown else {})}
        summary = merged_summary(previous_summary, ours)
        write_json_atomic(study / SUMMARY, summary)
    limits = None
    if executor == "slurm":
        from lab.study.cost import benchmark_sizes, stage_hours
        from lab.study.jobs import time_limit_minutes

        sizes = benchmark_sizes(recipe)  # once: it reads the benchmark's files
        limits = {s.key: time_limit_minutes(stage_hours(recipe, s, sizes)) for s in stages}
    submit, shutdown = submitter(executor, workers, threads, study, corpora_dir, slurm, limits)
    started = time.perf_counter()
    elsewhere: list[str] = []
    try:
        timings = schedule(stages, study, submit, workers, on_event or (lambda *a, **k: None),
                           elsewhere)
    finally:
        shutdown()
    for stage in stages:  # those finished by earlier (killed) runs, other runners or shards too
        finish(stage, study)
    # Every finished stage's own wall time, those of earlier (killed, resumed) runs included.
    recorded = {s.key: recorded_seconds(s, study) for s in stages}
    stage_seconds = {key: seconds for key, seconds in recorded.items() if seconds is not None}
    results, samples = collect(recipe, stages, study)
    # `ran`: the stages this runner ran; `done_by_another_runner`: those it found finished by a
    # runner of the same study while it waited for them.
    ours.update(ran=timings, done_by_another_runner=elsewhere, stage_seconds=stage_seconds,
                seconds={"this_run": round(time.perf_counter() - started, 3),
                         "stages_this_run": round(sum(t["seconds"] for t in timings), 3),
                         "all_stages": round(sum(stage_seconds.values()), 3),
                         "stages_timed": len(stage_seconds)},
                results=str(results), samples=str(samples),
                probes=str(study / PROBES), environment=environment_record())
    return update_summary(study, ours)

