"""Running one corpus step over many units (shards, buckets) on an existing data engine.

A step is a module-level function from one unit (a JSON-able dict) to one JSON-able result.
Every unit's result is written to its own file, so what a step produces depends only on its
units, never on how many tasks ran them or in which order: the single-process path and the
distributed one give the same bytes by construction.

Executors: `local` with one task runs the units in this process (no engine involved);
`local` with N tasks runs them as a pipeline of Hugging Face's datatrove on its local executor
(N processes); `slurm` submits the same pipeline as a SLURM job array with datatrove's SLURM
executor and waits for every unit's result.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from lab.common import LabError, param

EXECUTORS = ("local", "slurm")
SLURM_POLL_SECONDS = 15


@dataclass(kw_only=True)  # keyword-only: a command's config can extend it with required fields
class ExecutorConfig:
    """Where a streaming corpus step runs. Declared once; `lab inject` and `lab audit` take it."""
    executor: str = param("local", "Engine that runs the corpus steps: local (this machine; "
                                   "datatrove's local executor when --tasks > 1) or slurm "
                                   "(datatrove's SLURM executor, a job array).")
    tasks: int = param(1, "Parallel tasks of each corpus step (shards and buckets are split "
                          "between them; the output does not depend on it).")
    slurm_partition: str | None = param(None, "SLURM partition (--executor slurm).")
    slurm_time: str = param("04:00:00", "SLURM time limit of one task (--executor slurm).")


def check_executor(cfg: ExecutorConfig) -> None:
    if cfg.executor not in EXECUTORS:
        raise LabError(f"--executor {cfg.executor}: unknown executor (choose from "
                       f"{', '.join(EXECUTORS)})")
    if isinstance(cfg.tasks, bool) or not isinstance(cfg.tasks, int) or cfg.tasks < 1:
        raise LabError(f"--tasks {cfg.tasks}: must be a whole number >= 1")
    if cfg.executor == "slurm":
        if not cfg.slurm_partition:
            raise LabError("--executor slurm: give --slurm-partition")
        if shutil.which("sbatch") is None:
            raise LabError("--executor slurm: sbatch not found on this machine (run on a SLURM "
                           "login node, or use --executor local)")


class UnitStep:
    """A datatrove pipeline step: every task takes the next unit no task has claimed yet
    (largest input file first, so that no task is left with a big file at the end) until none
    is left, and writes each unit's result to results/unit-NNNNN.json; an error is written in
    place of the result, so the caller can report it in one line. A claim is a file created
    exclusively, so tasks on many nodes sharing the folder never run a unit twice."""

    name = "lab unit step"
    type = "lab"

    def __init__(self, function: Callable[[dict], dict], units: list[dict], results: Path):
        self.function = function
        self.units = units
        self.results = str(results)

    def __call__(self, data: Any, rank: int = 0, world_size: int = 1) -> None:
        results = Path(self.results)
        for index in sorted(range(len(self.units)), key=lambda i: -_unit_bytes(self.units[i])):
            try:
                os.close(os.open(results / f"unit-{index:05d}.claim",
                                 os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
            run_unit(self.function, self.units, index, results)


def _unit_bytes(unit: dict) -> int:
    path = unit.get("path")
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0  # the unit's own step reports a missing file


def run_unit(function: Callable[[dict], dict], units: list[dict], index: int,
             results: Path) -> None:
    try:
        outcome = {"result": function(units[index])}
    except LabError as exc:
        outcome = {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported by the caller as one line, with a log
        outcome = {"error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()}
    path = results / f"unit-{index:05d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(outcome))
    os.replace(tmp, path)


def run_step(cfg: ExecutorConfig, name: str, function: Callable[[dict], dict],
             units: list[dict], workdir: Path) -> list[dict]:
    """Results of `function` over `units`, in unit order, however the units were run."""
    return list(iter_step(cfg, name, function, units, workdir))


def iter_step(cfg: ExecutorConfig, name: str, function: Callable[[dict], dict],
              units: list[dict], workdir: Path) -> Iterator[dict]:
    """`run_step` whose results are read one at a time, so that a caller folding them (k
    smallest keys of every unit) holds one unit's result at once, however many units."""
    folder = Path(workdir) / name
    results = folder / "results"
    shutil.rmtree(folder, ignore_errors=True)
    results.mkdir(parents=True)
    tasks = min(cfg.tasks, max(1, len(units)))
    step = UnitStep(function, units, results)
    if cfg.executor == "local" and tasks == 1:
        step(None)
    elif cfg.executor == "local":
        _datatrove_local(step, tasks, folder / "logs")
    else:
        _datatrove_slurm(cfg, step, tasks, folder, len(units))
    return _read_results(name, folder, len(units))


def _read_results(name: str, folder: Path, units: int) -> Iterator[dict]:
    for index in range(units):
        path = folder / "results" / f"unit-{index:05d}.json"
        if not path.is_file():
            raise LabError(f"{name}: unit {index} produced no result (see {folder / 'logs'})")
        outcome = orjson.loads(path.read_bytes())
        if "error" in outcome:
            if "traceback" in outcome:
                (folder / f"unit-{index:05d}.traceback").write_text(outcome["traceback"])
            raise LabError(f"{name}: {outcome['error']}")
        yield outcome["result"]


def _datatrove_local(step: UnitStep, tasks: int, logs: Path) -> None:
    from lab.executor_datatrove import QuietLocalExecutor, quiet_console

    quiet_console()
    QuietLocalExecutor(pipeline=[step], tasks=tasks, workers=tasks, logging_dir=str(logs),
                       skip_completed=False).run()


def _datatrove_slurm(cfg: ExecutorConfig, step: UnitStep, tasks: int, folder: Path,
                     units: int) -> None:
    from datatrove.executor import SlurmPipelineExecutor

    from lab.executor_datatrove import quiet_console

    quiet_console()
    SlurmPipelineExecutor(pipeline=[step], tasks=tasks, time=cfg.slurm_time,
                          partition=cfg.slurm_partition, logging_dir=str(folder / "logs"),
                          job_name=f"lab-{folder.name}", venv_path=_venv_activate(),
                          skip_completed=False).run()
    results = folder / "results"
    while len(list(results.glob("unit-*.json"))) < units:
        time.sleep(SLURM_POLL_SECONDS)


def _venv_activate() -> str | None:
    activate = Path(sys.prefix) / "bin" / "activate"
    return str(activate) if activate.is_file() else None
