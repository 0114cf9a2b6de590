"""Running one stage of a study, whoever runs it (the runner's process, a pool worker, a
submitit job): under the stage's lock, its output in its log, timed, its config bound to the
study folder, as one process or as the ranks of a multi-process pre-training.

Each stage's entry function writes its output atomically (an interrupted pre-training keeps
OUT.partial with checkpoints and is resumed), so after a kill a stage simply runs again.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from filelock import FileLock

from lab import progress
from lab.common import LabError, command_line, write_json_atomic
from lab.study.grid import Stage, launch_key, model_name, world_size
from lab.study.stages import KINDS, bind
from lab.train.common import TENSORBOARD_DIR

# STUDY/tensorboard/MODEL/ARM/seedK/STAGE: a link to each trained model's event files, so that
# `tensorboard --logdir STUDY/tensorboard` names its runs by model, arm, seed and stage.
TENSORBOARD = "tensorboard"


@contextlib.contextmanager
def stage_lock(stage: Stage, study: Path) -> Iterator[None]:
    """Hold STUDY/stages/KEY.lock while a stage runs: a second runner on the same study (a
    resumed run beside the workers of a killed one, two SLURM jobs) waits instead of colliding.
    The lock is the kernel's (flock), released when its holder dies."""
    lock = stage.out(study).with_name(stage.key + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock):
        yield


def _remove_leftovers(stage: Stage, study: Path) -> None:
    """Temporary siblings of a stage's output that a killed run left (atomic outputs are built
    in OUT.tmp-* and swapped through OUT.old-*). Called under the stage's lock: whoever wrote
    them no longer holds it, so nobody is writing them now. OUT.partial (a pre-training to
    resume) is kept."""
    out = stage.out(study)
    for pattern in (".tmp-*", ".old-*"):
        for leftover in out.parent.glob(out.name + pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def stage_log(stage: Stage, study: Path) -> Path:
    return stage.out(study).with_name(stage.key + ".log")


def stage_timing(stage: Stage, study: Path) -> Path:
    """STUDY/stages/KEY.timing.json: the stage's wall time as it ran, whoever ran it."""
    return stage.out(study).with_name(stage.key + ".timing.json")


def recorded_seconds(stage: Stage, study: Path) -> float | None:
    try:
        return float(json.loads(stage_timing(stage, study).read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def _timed(stage: Stage, study: Path, threads: int) -> Iterator[None]:
    """Times the stage's own work (not a queue or a lock before it) the same way for every
    executor, and records it beside the stage's output once the stage is finished."""
    started = time.perf_counter()
    yield
    write_json_atomic(stage_timing(stage, study), {
        "seconds": round(time.perf_counter() - started, 3), "threads": threads,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


_CONSOLE_FDS: list[tuple[int, int]] = []  # the console's stdout/stderr while a stage's log has 1/2


def console_stderr() -> int:
    """A descriptor of the console's stderr, also while a stage running in this process sends
    descriptors 1 and 2 to its log (a signal handler's last line belongs on the console)."""
    return _CONSOLE_FDS[0][1] if _CONSOLE_FDS else 2


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[None]:
    """Send this process's output to a stage's log: file descriptors 1 and 2 (library and
    C-level output, and the ranks a stage launches) and Python's sys.stdout / sys.stderr, which
    need not be those descriptors (a test's captured streams). The runner's progress display
    writes to a terminal handle of its own, so it stays on the console."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        progress.quiet_libraries()  # a log: no library bars (lab.progress decides)
        _CONSOLE_FDS.append(saved_fds)
        try:
            yield
        except BaseException:
            traceback.print_exc()
            raise
        finally:
            _CONSOLE_FDS.pop()
            log.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or SLURM)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_stage(stage: Stage, study: Path, corpora_dir: Path | None, threads: int) -> bool:
    """Run one stage unless it is finished, on `threads` torch threads (the study's, fixed: a
    float sum depends on how many threads share it), its output in STUDY/stages/KEY.log and
    its wall time in KEY.timing.json, whatever the executor. Returns whether it ran here:
    False where another runner of the study finished it (while this one waited for its lock),
    so that each runner reports only the stages it ran."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with stage_lock(stage, study):
            _remove_leftovers(stage, study)
            if stage.done(study):  # another runner may have finished it while we waited
                return False
            with _output_to(stage_log(stage, study)), _timed(stage, study, threads):
                _run_stage_unlocked(stage, study, corpora_dir, threads)
            return True
    finally:
        # A stage run in the lab's own process leaves it as it found it (the next caller, a
        # test or a notebook, keeps its own thread count).
        torch.set_num_threads(before)


def _run_stage_unlocked(stage: Stage, study: Path, corpora_dir: Path | None,
                        threads: int | None = None) -> None:
    """The stage's entry function on its bound config; a pre-training of several ranks (or
    under DeepSpeed) is started as those ranks, each running `lab pretrain`."""
    cfg = bind(stage, study, corpora_dir)
    if launch_key(stage.launch) or stage.launch.get("deepspeed"):
        launch_ranks(cfg, stage.launch, threads or available_cores(), stage_log(stage, study))
    else:
        KINDS[stage.kind].run(cfg)
    finish(stage, study)


def finish(stage: Stage, study: Path) -> None:
    """What follows a finished stage: its kind's `after` (a trained model's card) and its
    TensorBoard link. Run by the process that ran the stage, and again for every finished
    stage at the end of a study run (a kill between the stage's last file and this leaves
    nothing missing); both give the same files a second time."""
    if not stage.done(study):
        return  # its last file is missing: the scheduler says so (its inputs never finish)
    after = KINDS[stage.kind].after
    if after is not None:
        after(stage.out(study))
    show_in_tensorboard(stage, study)


def tensorboard_link(stage: Stage, study: Path) -> Path:
    """STUDY/tensorboard/MODEL/ARM/seedK/KIND[-LABEL...]: the run name a trained stage gets,
    from its labels (a fine-tuning's epochs and train size)."""
    labels = stage.labels
    extra = "".join(f"-{name}{value}" for name, value in labels.items()
                    if name not in ("model", "preset", "arm", "seed", "groups") and value is not None)
    return (study / TENSORBOARD / model_name(labels) / str(labels["arm"])
            / f"seed{labels['seed']}" / f"{stage.kind}{extra}")


def show_in_tensorboard(stage: Stage, study: Path) -> None:
    """Link a finished stage's TensorBoard folder (a trained model's event files) under
    STUDY/tensorboard by its readable name: a relative symlink, made under a temporary name and
    renamed over the old one, so a reader never sees it half made. Nothing for a stage that
    wrote none."""
    events = stage.out(study) / TENSORBOARD_DIR
    if "model" not in stage.labels or not events.is_dir():
        return
    link = tensorboard_link(stage, study)
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(events, link.parent)
    if os.path.islink(link) and os.readlink(link) == target:
        return
    temporary = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(target, temporary)
    os.replace(temporary, link)


def rank_command(cfg: Any, launch: dict[str, Any]) -> list[str]:
    """The command that starts `lab pretrain` with `cfg` on every rank of one node."""
    processes = str(launch.get("processes", 1))
    if launch.get("launcher", "torchrun") == "deepspeed":
        # lab reads its rank from the environment and takes no --local_rank argument.
        start = ["deepspeed", "--num_nodes", "1", "--num_gpus", processes, "--no_local_rank",
                 "--module"]
    else:
        start = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                 "--nproc_per_node", processes, "-m"]
    return [*start, "lab.cli", "pretrain", *command_line(cfg)]


def launch_ranks(cfg: Any, launch: dict[str, Any], threads: int, log: Path | None = None) -> None:
    """Run one pre-training as `processes` ranks under its launcher, in this process's output,
    and wait. The launcher dies with this process, and each rank with the launcher
    (LAB_DIE_WITH_PARENT), so a killed study leaves no rank behind; an interrupted run keeps
    OUT.partial and its checkpoints, from which the next run resumes. A rank that refused its
    run says why in `log` (the stage's): its line is the error's."""
    import subprocess

    if launch.get("nodes", 1) != 1:
        raise LabError(f"resources.pretrain.nodes {launch['nodes']}: more than one node needs "
                       "--executor slurm")
    processes = launch.get("processes", 1)
    written = log.stat().st_size if log is not None and log.exists() else 0
    env = {**os.environ, "LAB_DIE_WITH_PARENT": "1",
           "OMP_NUM_THREADS": str(max(1, threads // processes))}
    sys.stdout.flush()
    sys.stderr.flush()
    launcher = subprocess.Popen(rank_command(cfg, launch), env=env, preexec_fn=die_with_parent)
    try:
        code = launcher.wait()
    except BaseException:
        launcher.terminate()  # the launcher stops its ranks
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
        raise
    if code != 0:
        ranks = f"{processes} rank{'s' if processes != 1 else ''}"
        said = _last_refusal(log, written)
        raise LabError(f"pre-training on {ranks} failed (exit {code}): {said}" if said else
                       f"pre-training on {ranks} failed (exit {code}); its log says why")


def _last_refusal(log: Path | None, start: int) -> str | None:
    """The last `lab: error:` line the ranks wrote to the stage's log after byte `start` (this
    launch's lines, not an earlier attempt's), without its prefix."""
    try:
        with open(log, "rb") if log else contextlib.nullcontext(None) as handle:
            lines = [] if handle is None else handle.read()[start:].decode(
                "utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found = [line.split("lab: error:", 1)[1].strip() for line in lines if "lab: error:" in line]
    return found[-1] if found else None


def die_with_parent() -> None:
    """In a child: get SIGKILL when the parent dies (Linux), so no stage outlives its runner."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_rank(stage: Stage, study: Path, threads: int, resume: bool) -> bool:
    """One task of a multi-rank pre-training job: the scheduler started one per rank; submitit
    tells each its rank and the rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, ...), and each runs
    the pre-training itself, no launcher in between. Rank 0 holds the stage's lock and clears
    what a killed run left; the others meet it at the rendezvous."""
    import dataclasses

    import submitit
    import torch

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    torch.set_num_threads(max(1, threads // world_size(stage.launch)))
    cfg = dataclasses.replace(bind(stage, study), resume=resume)
    if int(os.environ["RANK"]) != 0:
        KINDS[stage.kind].run(cfg)
        return True
    with stage_lock(stage, study):
        _remove_leftovers(stage, study)
        with _output_to(stage_log(stage, study)), _timed(stage, study, threads):
            KINDS[stage.kind].run(cfg)
            finish(stage, study)
    return True


def submit_stage(pool: Any, stage: Stage, study: Path, corpora_dir: Path | None, threads: int,
                 one: Callable[..., bool] = run_stage, ranks: Callable[..., bool] = run_rank) -> Any:
    """A stage as one submitit job: `one` in a one-task job, or a multi-rank pre-training's
    `ranks` in each task of its job."""
    if stage.kind == "pretrain" and world_size(stage.launch) > 1:
        # Every rank must agree on resuming: decided once, here, not by each task.
        partial = stage.out(study).with_name(stage.key + ".partial")
        return pool.submit(ranks, stage, study, threads, partial.exists())
    return pool.submit(one, stage, study, corpora_dir, threads)
