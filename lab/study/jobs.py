"""A study's stages as SLURM jobs, and what each stage is doing now (`lab study --status`).

Each stage is a job of its own (submitit): its time limit from the study's cost estimate, its
job files and logs in STUDY/stages/KEY.slurm/, its job id in STUDY/stages/KEY.job.json and, at
every start, in the stage's log. SLURM requeues a job on node failure (submitted with
--requeue), submitit on preemption and on the signal before its time limit; a stage resumes
from what the last start left (a pre-training from its newest checkpoint), and a job started
more than MAX_REQUEUES + 1 times refuses. A runner that was killed and started again re-attaches to the
jobs its stages still have in the queue instead of submitting them twice. Where the cluster
keeps no accounting database (no `sacct`), job states come from `squeue`.
"""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from lab.common import LabError, write_json_atomic
from lab.study.execution import run_rank, run_stage, stage_log, submit_stage
from lab.study.grid import Stage, describe

# Starts of one stage's job beyond the first that are allowed (preemption, node failure, timeout).
MAX_REQUEUES = 3
# A job's time limit: the stage's estimated hours times this, plus a margin for start-up, data
# staging and the estimate's error (docs/scaling-out.md), at least MIN_LIMIT minutes.
LIMIT_FACTOR = 3.0
LIMIT_MARGIN_MINUTES = 15
MIN_LIMIT_MINUTES = 20
# squeue states of a job that will still run (or runs): a restarted runner waits for it.
LIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
               "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT"}
GONE = "GONE"  # what a job no longer in squeue's list is taken as (no accounting database)


def job_folder(stage: Stage, study: Path) -> Path:
    """STUDY/stages/KEY.slurm: the job's submission script, submitit's pickles and its logs."""
    return stage.out(study).with_name(stage.key + ".slurm")


def job_record(stage: Stage, study: Path) -> Path:
    return stage.out(study).with_name(stage.key + ".job.json")


def recorded_job(stage: Stage, study: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(job_record(stage, study).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "job_id" in record else None


def time_limit_minutes(hours: float) -> int:
    """A stage job's time limit from its estimated wall hours (lab.study.cost.stage_hours)."""
    return max(MIN_LIMIT_MINUTES, math.ceil(hours * 60 * LIMIT_FACTOR + LIMIT_MARGIN_MINUTES))


def queue_states(job_ids: list[str]) -> dict[str, str] | None:
    """Each job's state in `squeue` (absent: no longer in the queue); None where squeue fails."""
    found = queue_entries(job_ids)
    return None if found is None else {job_id: state for job_id, (state, _node) in found.items()}


def queue_entries(job_ids: list[str]) -> dict[str, tuple[str, str]] | None:
    """(state, node) of each job in `squeue`; None where squeue fails."""
    if not job_ids:
        return {}
    try:
        done = subprocess.run(["squeue", "--noheader", "--format=%i|%T|%N", "--states=all",
                               "--jobs=" + ",".join(job_ids)], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        return None
    entries = {}
    for line in done.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, node = rest.partition("|")
        entries[job_id.split("_")[0]] = (state, node)
    return entries


def _note_start(stage: Stage, study: Path, rank: int = 0) -> None:
    """The job id, node and start count at the top of this start's lines in the stage's log;
    a stage started too often refuses (its job keeps being preempted or its node failing)."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    job_id = os.environ.get("SLURM_JOB_ID", "?")
    if rank == 0:
        log = stage_log(stage, study)
        log.parent.mkdir(parents=True, exist_ok=True)
        line = (f"lab: SLURM job {job_id} on {socket.gethostname()}, start {restarts + 1} of at "
                f"most {MAX_REQUEUES + 1}\n")
        # Outside the stage's lock (a duplicate job of the stage may be writing its log): one
        # write on an O_APPEND descriptor, so the line lands whole, not cut into another's.
        descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line.encode("utf-8"))
        finally:
            os.close(descriptor)
    if restarts > MAX_REQUEUES:
        raise LabError(f"stage {stage.key} ({describe(stage)}): SLURM job {job_id} was requeued "
                       f"{restarts} times (at most {MAX_REQUEUES}); its log: "
                       f"{stage_log(stage, study)}")


class StageJob:
    """What a stage's SLURM job runs: lab.study.execution.run_stage (or, in each task of a
    multi-rank pre-training's job, run_rank), its start noted. It has submitit's `checkpoint`,
    so that on the signal before its time limit or on preemption submitit requeues the same
    call (at most MAX_REQUEUES timeouts); the stage then resumes from what it left."""

    def __init__(self, ranks: bool = False):
        self.ranks = ranks

    def __call__(self, stage: Stage, study: Path, *args: Any) -> bool:
        if self.ranks:
            _note_start(stage, study, int(os.environ.get("SLURM_PROCID", "0") or 0))
            return run_rank(stage, study, *args)
        _note_start(stage, study)
        return run_stage(stage, study, *args)

    def checkpoint(self, *args: Any) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args)


def queue_watcher() -> Any:
    """submitit's SLURM job watcher, which asks `sacct`, falling back on `squeue` where the
    cluster keeps no accounting (sacct: "accounting storage is disabled"). It overrides
    submitit's `update` and reads its internals (`_make_command`, `_registered`, `_finished`,
    `_info_dict`): tests/test_slurm.py checks them against the installed submitit."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class QueueWatcher(SlurmInfoWatcher):
        def update(self) -> None:
            command = self._make_command()
            if command is None:
                return
            self._num_calls += 1
            try:
                asked = subprocess.run(command, capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                asked = None
            if asked is not None and asked.returncode == 0:
                self._info_dict.update(self.read_info(asked.stdout))
            else:
                ids = sorted({x.split("_")[0] for x in self._registered - self._finished})
                states = queue_states(ids)
                if states is not None:
                    for job_id in ids:
                        self._info_dict[job_id] = {"JobID": job_id,
                                                   "State": states.get(job_id, GONE)}
            self._last_status_check = time.time()
            # As submitit's own update: a finished job is not asked about again (a paper study
            # submits hundreds).
            self._finished.update(job_id for job_id in self._registered - self._finished
                                  if self.is_done(job_id, mode="cache"))

    return QueueWatcher(delay_s=60)


_WATCHER: list[Any] = []


def _watched(job: Any) -> Any:
    if not _WATCHER:
        _WATCHER.append(queue_watcher())
    job.watcher = _WATCHER[0]
    job.watcher.register_job(job.job_id)
    return job


def slurm_submitter(study: Path, corpora_dir: Path | None, threads: int, parameters: Any) -> Any:
    """submit(stage) -> a submitit job: a job still queued or running for the stage (a killed
    runner's) is re-attached, else the stage is submitted with `parameters(stage)` (its time
    limit among them), --requeue and MAX_REQUEUES timeouts; where each stage runs is printed."""
    import submitit
    from submitit.slurm.slurm import SlurmJob

    from lab.study.grid import world_size

    def submit(stage: Stage) -> Any:
        folder = job_folder(stage, study)
        tasks = world_size(stage.launch) if stage.kind == "pretrain" else 1
        earlier = recorded_job(stage, study)
        if earlier is not None:
            state = (queue_states([str(earlier["job_id"])]) or {}).get(str(earlier["job_id"]))
            if state in LIVE_STATES:
                print(f"lab: {describe(stage)}: SLURM job {earlier['job_id']} ({state.lower()}) "
                      f"submitted by an earlier runner, waited for; logs {folder}",
                      file=sys.stderr, flush=True)
                return _watched(SlurmJob(folder=folder, job_id=str(earlier["job_id"]),
                                         tasks=tuple(range(tasks))))
        pool = submitit.AutoExecutor(folder=folder, cluster="slurm",
                                     slurm_max_num_timeout=MAX_REQUEUES)
        options = parameters(stage)
        extra = dict(options.pop("slurm_additional_parameters", {}) or {})
        extra.setdefault("requeue", True)
        pool.update_parameters(slurm_additional_parameters=extra, **options)
        job = submit_stage(pool, stage, study, corpora_dir, threads, StageJob(), StageJob(ranks=True))
        write_json_atomic(job_record(stage, study), {
            "job_id": job.job_id, "tasks": tasks, "time_limit_min": options["timeout_min"],
            "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        print(f"lab: {describe(stage)}: SLURM job {job.job_id}, time limit "
              f"{options['timeout_min']} min; logs {folder}", file=sys.stderr, flush=True)
        return _watched(job)

    return submit


def stage_states(stages: list[Stage], study: Path) -> list[dict[str, Any]]:
    """What each stage is doing now: done, running (its lock is held, or its job runs), queued
    (its job waits in SLURM's queue), failed (its last job ended without finishing it) or
    waiting (nothing started it)."""
    jobs = {stage.key: recorded_job(stage, study) for stage in stages}
    ids = [str(job["job_id"]) for job in jobs.values() if job]
    states = queue_entries(ids) if ids else {}
    rows = []
    for stage in stages:
        job = jobs[stage.key]
        job_id = str(job["job_id"]) if job else None
        queued, node = (states or {}).get(job_id, (None, "")) if job_id else (None, "")
        if stage.done(study):
            state = "done"
        elif queued in ("RUNNING", "COMPLETING", "CONFIGURING") or _lock_held(stage, study):
            state = "running"
        elif queued in LIVE_STATES:
            state = "queued"
        elif job_id is not None and states is not None:
            state = "failed"  # its job ended (or left the queue) and the stage is not done
        else:
            state = "waiting"
        rows.append({"stage": stage.key, "what": describe(stage), "state": state,
                     "job": job_id, "slurm_state": queued, "node": node or None})
    return rows


def _lock_held(stage: Stage, study: Path) -> bool:
    lock = stage.out(study).with_name(stage.key + ".lock")
    if not lock.exists():
        return False
    try:
        with FileLock(lock, timeout=0):
            return False
    except Timeout:
        return True
