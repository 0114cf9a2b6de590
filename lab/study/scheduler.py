"""Where and when a study's stages run: the executors (this process, a pool of local workers,
submitit jobs locally or on SLURM) and the scheduler that starts each stage once its inputs are
finished."""
from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

from lab.common import LabError
from lab.study.execution import (available_cores, die_with_parent, recorded_seconds, run_stage,
                                 stage_log, submit_stage)
from lab.study.grid import Stage, describe, world_size

EXECUTORS = ("local", "slurm", "submitit-local")
# schedule()'s event for a stage another runner of the study finished while this one waited
OTHER_RUNNER = "done by another runner"


def check_executor(executor: str, workers: int | None) -> None:
    if executor not in EXECUTORS:
        raise LabError(f"--executor {executor}: choose from {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise LabError(f"--workers {workers}: must be >= 1")


def default_workers(executor: str, threads: int) -> int:
    """Stages at a time when --workers is not given: as many as the cores hold at the study's
    thread count locally (one at the default: more would only share the same cores)."""
    return 64 if executor == "slurm" else max(1, available_cores() // threads)


def _worker_init() -> None:
    # Die with the runner: a killed `lab study` must not leave workers finishing stages
    # behind the back of the run that resumes it.
    die_with_parent()
    # Ctrl-C reaches the whole process group: the runner answers it with one line and its exit
    # takes the workers down (above); a worker's own KeyboardInterrupt traceback would only add
    # noise to the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Finished:
    """Handle of a stage that already ran in this process (one local worker: no pool); its
    error, if any, is raised where a worker's would be, else whether it ran here (run_stage)."""

    def __init__(self, error: Exception | None = None, ran: bool = True):
        self.error, self.ran = error, ran

    def done(self) -> bool:
        return True

    def result(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.ran


class _SubmititHandle:
    def __init__(self, job: Any, stage: Stage):
        self.job, self.stage = job, stage

    def done(self) -> bool:
        return self.job.done()

    def result(self) -> bool:
        try:
            # every task of the job (one, or one per rank); False: another runner finished it
            return all(ran is not False for ran in self.job.results())
        except LabError:
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise LabError(f"stage {self.stage.key} failed on {type(self.job).__name__} "
                           f"{self.job.job_id}: {first} (logs: {self.job.paths.stderr})") from None


def submitter(executor: str, workers: int, threads: int, study: Path, corpora_dir: Path | None,
              slurm: dict[str, Any] | None, limits: dict[str, int] | None = None):
    """(submit(stage) -> handle with done()/result(), shutdown()). `limits`: each stage's job
    time limit in minutes (SLURM; lab.study.jobs.time_limit_minutes)."""
    if executor == "local" and workers == 1:
        def run_here(stage: Stage) -> _Finished:
            try:
                ran = run_stage(stage, study, corpora_dir, threads)
            except Exception as exc:  # noqa: BLE001 - reported by schedule() like a worker's
                return _Finished(exc)
            return _Finished(ran=ran)
        return run_here, lambda: None
    if executor == "local":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init)
        return (lambda stage: pool.submit(run_stage, stage, study, corpora_dir, threads),
                lambda: pool.shutdown(wait=True, cancel_futures=True))
    try:
        import submitit
    except ImportError:
        raise LabError(f"--executor {executor}: needs submitit "
                       "(.venv/bin/pip install -e '.[slurm]')") from None
    if executor == "slurm":
        from lab.study.jobs import slurm_submitter

        def parameters(stage: Stage) -> dict[str, Any]:
            return job_parameters(stage, executor, threads, slurm or {}, (limits or {}).get(stage.key))

        submit_job = slurm_submitter(study, corpora_dir, threads, parameters)
        return (lambda stage: _SubmititHandle(submit_job(stage), stage)), lambda: None
    pool = submitit.LocalExecutor(folder=study / "submitit")

    def submit(stage: Stage) -> _SubmititHandle:
        # One executor, its parameters set for each job: a multi-rank pre-training is one job of
        # `processes` tasks per node (one rank each), every other stage a one-task job.
        pool.update_parameters(**job_parameters(stage, executor, threads, slurm or {}))
        return _SubmititHandle(submit_stage(pool, stage, study, corpora_dir, threads), stage)

    return submit, lambda: None


def job_parameters(stage: Stage, executor: str, threads: int, slurm: dict[str, Any],
                   limit_minutes: int | None = None) -> dict[str, Any]:
    """submitit parameters of one stage's job. `slurm` (--slurm key=value) applies to every job,
    a timeout_min there over the stage's own `limit_minutes`; a multi-rank pre-training asks
    for its nodes, one task per rank and, on SLURM, one GPU per rank; everything else is one
    task (on the GPUs --slurm gives, if any)."""
    base: dict[str, Any] = {"timeout_min": limit_minutes or 24 * 60}
    if executor == "slurm":
        base.update(name=f"lab-{stage.kind}", cpus_per_task=threads)
    world = world_size(stage.launch)
    if stage.kind == "pretrain" and world > 1:
        processes = stage.launch.get("processes", 1)
        ranks = {"nodes": stage.launch.get("nodes", 1), "tasks_per_node": processes}
        if executor == "slurm":
            ranks.update(gpus_per_node=processes, cpus_per_task=max(1, threads // processes))
        return {**base, **slurm, **ranks}
    one = {"tasks_per_node": 1}
    if executor == "slurm":
        one["nodes"] = 1
        if str(stage.launch.get("device", "cpu")).startswith("cuda"):
            one["gpus_per_node"] = 1  # fine-tuning, evaluation and probes: one GPU each
    return {**base, **slurm, **one}


def schedule(stages: list[Stage], study: Path, submit: Callable[[Stage], Any], workers: int,
             on_event: Callable[..., None], elsewhere: list[str] | None = None
             ) -> list[dict[str, Any]]:
    """Run every unfinished stage once its inputs are finished, at most `workers` at a time,
    seed by seed: a study stopped part-way (hours of CPU, a session's end) then holds every arm
    of the seeds it finished, i.e. complete comparisons, not every seed of its first arms. The
    order changes no result: each stage's inputs and seed are fixed by its key.

    Returns the timings of the stages this runner ran. A stage another runner of the same study
    finished meanwhile (its handle's result is False) is no timing of this one: it is event
    OTHER_RUNNER and its key goes to `elsewhere`."""
    seed_rank: dict[Any, int] = {}
    for stage in stages:
        seed_rank.setdefault(stage.labels.get("seed"), len(seed_rank))
    position = {id(stage): index for index, stage in enumerate(stages)}
    waiting = sorted((s for s in stages if not s.done(study)),
                     key=lambda s: (seed_rank[s.labels.get("seed")], position[id(s)]))
    running: dict[str, tuple[Stage, Any, float]] = {}
    timings = []
    warned: set[str] = set()
    while waiting or running:
        ready = [s for s in waiting if all(i.done(study) for i in s.inputs)]
        launch = ready[: max(0, workers - len(running))]
        for stage in launch:
            waiting.remove(stage)
            on_event("start", stage)
            started = time.perf_counter()  # before submit: in-process, submit runs the stage
            running[stage.key] = (stage, submit(stage), started)
        finished = [key for key, (_s, handle, _t) in running.items() if handle.done()]
        for key in finished:
            stage, handle, started = running.pop(key)
            try:
                ran_here = handle.result()  # re-raises the stage's error: the study stops there
            except LabError:
                raise
            except Exception as exc:  # a crash inside a worker: its traceback is in the log
                log = stage_log(stage, study)
                where = f" (traceback in {log})" if log.is_file() else ""
                raise LabError(f"stage {key} ({describe(stage)}) failed: "
                               f"{type(exc).__name__}: {exc}{where}") from exc
            if ran_here is False:
                if elsewhere is not None:
                    elsewhere.append(key)
                on_event(OTHER_RUNNER, stage)
                continue
            recorded = recorded_seconds(stage, study)  # the stage's own time, as it ran
            seconds = round(time.perf_counter() - started if recorded is None else recorded, 3)
            timings.append({"stage": key, "kind": stage.kind, "seconds": seconds})
            on_event("end", stage, seconds)
            for warning in log_warnings(stage_log(stage, study)):
                if warning not in warned:  # each distinct warning once per run, not per stage
                    warned.add(warning)
                    on_event("warning", stage, warning)
        if not finished and running:
            time.sleep(0.2)
        elif not finished and not running and waiting:
            missing = waiting[0]
            raise LabError(f"stage {missing.key} waits for inputs that did not finish")
    return timings


# A warning line in a stage log: Python's warnings ("...Warning: ..."), the `logging` records of
# DeepSpeed and others ("[WARNING]", "WARNING:"), and transformers' logger, whose default format
# prefixes "[transformers]" and shows warnings and errors only, and the lab's own ("lab: warning: ").
WARNING_LINE = re.compile(r"Warning: |\[WARNING\]|\bWARNING\b|^\[transformers\] |^lab: warning: ")
_LOG_TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]?\s*")


def log_warnings(log: Path) -> list[str]:
    """The distinct warning lines of a stage log, in order, without their timestamps."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = [_LOG_TIMESTAMP.sub("", line).strip() for line in lines if WARNING_LINE.search(line)]
    return list(dict.fromkeys(found))
