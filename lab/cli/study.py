"""`lab`'s commands that run a study: a whole study from its recipe (lab study: its dry run, the
progress display, the resume line on a signal) and one study from shards of it (lab merge)."""
from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer
from rich.console import Console

from lab.cli.shared import CorporaOption, console, declared_default, parse_seeds, rich_table
from lab.common import LabError, duration_text
from lab.study.runner import run_study


def study(
    recipe: Path = typer.Argument(..., help="Recipe YAML (recipes/...)."),
    out: Optional[Path] = typer.Option(None, help="Study directory (default runs/NAME)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override: section.key=value."),
    dry_run: bool = typer.Option(False, help="Print the grid, what is done and the estimated cost."),
    status: bool = typer.Option(False, help="Print what each stage of the study folder is doing "
                                            "now (done, running, queued, failed, waiting; its "
                                            "SLURM job), start nothing."),
    executor: str = typer.Option(declared_default(run_study, "executor"),
                                 help="local, slurm (submitit) or submitit-local."),
    workers: Optional[int] = typer.Option(None, help="Stages at a time (local default: cores / "
                                                     "threads; slurm: 64 jobs)."),
    threads: Optional[int] = typer.Option(None, help="torch threads of every stage, fixed for the "
                                                     "study (= --set resources.threads=N; default: "
                                                     "the cores, recorded at the study's start)."),
    slurm: Optional[List[str]] = typer.Option(None, help="submitit parameter for --executor slurm, "
                                                         "key=value (slurm_partition=gpu, gpus_per_node=1)."),
    seeds: Optional[str] = typer.Option(None, help="Run only these of the recipe's seeds "
                                                   "(2,3): a shard, whose stages keep the whole "
                                                   "study's keys; `lab merge` joins shards run "
                                                   "apart into one study."),
    report: bool = typer.Option(True, help="Print the report's table and figure path at the end."),
    allow_underpowered: bool = typer.Option(
        False, "--allow-underpowered", help="Run a study whose primary tests can never reach "
                                            "alpha with its seeds (refused otherwise)."),
    smoke: bool = typer.Option(
        False, help="The recipe's whole shape (every arm, stage kind, swept value, question and "
                    "the report) on toy sizes, on a CPU, in minutes: what to run before sending a "
                    "study to a cluster. Only sizes shrink (printed; lab.study.smoke); the study "
                    "is NAME-smoke, marked so in its folder and tables."),
    corpora: Optional[Path] = CorporaOption,
) -> None:
    """Run a whole contamination study; finished stages are reused, interrupted ones resumed."""
    from lab.study.recipe import load_recipe
    from lab.study.runner import check_study_folder, run_study
    from lab.study.scheduler import check_executor

    overrides = list(set_ or []) + ([f"resources.threads={threads}"] if threads is not None else [])
    parsed = load_recipe(recipe, overrides)
    if smoke:
        from lab.study.smoke import smoke_lines, smoke_recipe, smoke_record

        parsed = smoke_recipe(parsed, corpora)
        console.print("\n".join(smoke_lines()), markup=False, highlight=False, soft_wrap=True)
    smoked = smoke_record() if smoke else None
    folder = out or Path("runs") / parsed.name
    check_executor(executor, workers)
    slurm_parameters = _parse_pairs(slurm or [], "--slurm")
    shard = parse_seeds(seeds)
    check_study_folder(folder, corpora)
    if status:
        _print_status(parsed, folder, shard)
        return
    if dry_run:
        plan = run_study(parsed, folder, corpora, dry_run=True, executor=executor, workers=workers,
                         seeds=shard, allow_underpowered=allow_underpowered, smoke=smoked)
        from lab.study.dry_run import dry_run_blocks

        for block in dry_run_blocks(plan, parsed, folder, smoke):
            if block.rows is None:
                console.print(block.title, markup=False, highlight=False, soft_wrap=True)
            else:
                console.print(rich_table(block.title, block.rows, list(block.rows[0])))
        if plan["refusal"]:  # the line the real run refuses with, and its exit code
            raise LabError(plan["refusal"])
        return
    from lab.study.runner import check_start, resume_corpora

    # Before the progress display opens; the dry run's checks (run_study) are these.
    for warning in check_start(parsed, folder, corpora, executor, shard, allow_underpowered,
                               smoke):
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    again = ["lab", "study", str(recipe), "--out", str(folder)]
    again += ["--executor", executor] if executor != "local" else []
    for option, values in (("--set", set_ or []), ("--slurm", slurm or []),
                           ("--workers", [workers] if workers else []),
                           ("--threads", [threads] if threads else []),
                           ("--seeds", [seeds] if seeds else []),
                           ("--corpora", [where] if (where := resume_corpora(corpora)) else [])):
        again += [part for value in values for part in (option, str(value))]
    again += ["--smoke"] if smoke else ["--allow-underpowered"] if allow_underpowered else []
    _exit_with_a_resume_line_on_signals(again)
    summary = _run_with_progress(parsed, folder, corpora, executor, workers, slurm_parameters,
                                 shard, smoked)
    took = summary["seconds"]
    console.print(f"{parsed.name}: {summary['stages']} stages ({len(summary['ran'])} run now in "
                  f"{duration_text(took['this_run'])}; all {took['stages_timed']} timed stages "
                  f"{duration_text(took['all_stages'])}); results {summary['results']}, per-sample "
                  f"{summary['samples']}")
    if report:
        from lab.analysis.report import run_report

        result = run_report(folder)  # the recipe's convention and alpha
        console.print(result["console"], markup=False, highlight=False, soft_wrap=True)
        console.print(f"figure: {', '.join(str(p) for p in result['figure'])}", markup=False,
                      highlight=False, soft_wrap=True)


def _print_status(recipe: Any, folder: Path, seeds: Optional[List[int]]) -> None:
    from collections import Counter

    from lab.study.grid import expand
    from lab.study.jobs import stage_states

    rows = stage_states(expand(recipe, seeds), folder)
    counts = Counter(row["state"] for row in rows)
    order = ("done", "running", "queued", "failed", "waiting")
    console.print(f"{recipe.name} ({folder}): {len(rows)} stages: "
                  + ", ".join(f"{counts[state]} {state}" for state in order if counts[state]),
                  markup=False, highlight=False, soft_wrap=True)
    for row in rows:
        if row["state"] != "done":
            where = f" on {row['node']}" if row["node"] and row["state"] == "running" else ""
            job = (f" (SLURM job {row['job']}: {(row['slurm_state'] or 'not in the queue').lower()}"
                   f"{where})" if row["job"] else "")
            console.print(f"  {row['state']:8} {row['what']}{job}", markup=False,
                          highlight=False, soft_wrap=True)


def _exit_with_a_resume_line_on_signals(command: List[str]) -> None:
    """Ctrl-C or SIGTERM (a scheduler's cancel) of `lab study`: one line saying how to resume,
    then an exit (130 / 143) without waiting for running stages. Safe: finished stages are
    complete folders, an interrupted pre-training resumes from its checkpoint, and the next run
    removes what the killed workers left."""
    import multiprocessing
    import shlex
    import signal

    again = " ".join(shlex.quote(part) for part in command)

    def stop(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one line, however often it is pressed
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for worker in multiprocessing.active_children():
            worker.kill()  # a stage cut short is redone (or resumed) by the next run
        from lab.study.execution import console_stderr

        os.write(console_stderr(), f"lab: interrupted; resume with: {again}\n".encode())
        raise SystemExit(128 + signum)  # unwinds: temporary outputs of this process are removed

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

def _parse_pairs(pairs: List[str], option: str) -> dict[str, Any]:
    import yaml

    parsed: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise LabError(f"{option} {pair}: expected key=value")
        key, value = pair.split("=", 1)
        try:
            parsed[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = str(exc).strip().splitlines()[0][:80]
            raise LabError(f"{option} {pair[:80]}: value is not valid YAML ({problem})") from None
    return parsed


@contextlib.contextmanager
def _terminal() -> Iterator[Console]:
    """A console on the terminal as it is now, for the progress display: while a stage runs in
    this process, descriptors 1 and 2 and sys.stdout/stderr go to the stage's log."""
    try:
        handle = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        yield Console(file=sys.stdout, width=200)  # a test's captured stream has no descriptor
        return
    try:
        yield Console(file=handle, width=None if handle.isatty() else 200)
    finally:
        handle.close()


def _run_with_progress(recipe: Any, folder: Path, corpora: Optional[Path], executor: str,
                       workers: Optional[int], slurm: dict[str, Any],
                       seeds: Optional[List[int]] = None,
                       smoke: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """lab study with a rich progress bar over stages, a line per finished stage with its wall
    time, and each distinct warning of the stages' logs once."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lab.study.execution import stage_log
    from lab.study.grid import describe, expand
    from lab.study.runner import run_study

    stages = expand(recipe, seeds)
    done = sum(s.done(folder) for s in stages)
    with _terminal() as terminal, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=terminal, redirect_stdout=False,
            redirect_stderr=False) as bar:
        task = bar.add_task(recipe.name, total=len(stages), completed=done)
        running: list[str] = []

        def on_event(event: str, stage: Any, detail: Any = None) -> None:
            if event == "start":
                running.append(describe(stage))
            elif event == "warning":
                log = stage_log(stage, folder).relative_to(folder)
                bar.console.print(f"warning (first in {log}): {detail}", markup=False,
                                  highlight=False, soft_wrap=True)
                return
            else:  # "end", or OTHER_RUNNER: a stage this runner did not run
                running.remove(describe(stage))
                bar.console.print(f"done {describe(stage)} in {duration_text(detail or 0)}"
                                  if event == "end" else f"{event}: {describe(stage)}")
                bar.advance(task)
            bar.update(task, description=f"{recipe.name}: {', '.join(running) or 'collecting'}")

        return run_study(recipe, folder, corpora, executor=executor, workers=workers, slurm=slurm,
                         on_event=on_event, ready_checked=True, seeds=seeds, smoke=smoke)

def merge(
    sources: List[Path] = typer.Argument(..., help="Study folders of one recipe: shards run "
                                                   "apart (lab study --seeds), killed or "
                                                   "running studies, or earlier merges."),
    out: Path = typer.Option(..., help="The merged study folder (new, or an earlier merge "
                                       "with --force)."),
    seeds: Optional[str] = typer.Option(None, help="Only these seeds (0,1): e.g. a running "
                                                   "study's finished ones."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier merge at --out."),
    plan_from: Optional[Path] = typer.Option(None, "--plan-from", help="The source whose "
                                             "analysis (statistics section) the merged study "
                                             "keeps where the sources' differ; recorded."),
) -> None:
    """One study from shards of it: the union of their finished cells, which `lab stats` and
    `lab report` read; a stage found twice must give the same numbers."""
    from lab.study.merge import merge_studies

    record = merge_studies(sources, out, parse_seeds(seeds), force, plan_from)
    for given in record["sources"]:
        console.print(f"{given['source']} ({given['from']}): seeds {given['seeds']}, "
                      f"{given['evaluations']} evaluations", markup=False, highlight=False,
                      soft_wrap=True)
    console.print(f"{record['recipe']}: seeds {record['seeds']}, {record['evaluations']} "
                  f"evaluations -> {record['out']} (lab report {record['out']})",
                  markup=False, highlight=False, soft_wrap=True)
