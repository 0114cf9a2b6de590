"""The tasks lab models are fine-tuned and evaluated on, the samples a fine-tuning run trains
on, and how outputs are decoded: what training, evaluation, baselines and model cards share.

A task is declared by its benchmark's module (lab.corpora.codetrans's translation,
lab.corpora.concode's generation: the DatasetSpec's `task`), so TASKS is read off the registered
datasets and no code here names a benchmark; adding a task is one benchmark module plus its line
in lab.corpora.DATASETS (docs/design.md, "A task").
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common import DataNotFound, LabError
from lab.corpora import DATASETS, Sample, get_spec, load_samples
from lab.corpora.base import Task

__all__ = ["Task", "TASKS", "registered_tasks", "get_task", "task_for_benchmark", "of_task",
           "train_subset", "fine_tuning_split", "has_validation_split", "has_train_split",
           "fine_tuning_records", "check_sampling", "Decoding"]

# Every registered benchmark's task, in lab.corpora.DATASETS's order (a -paper subset declares
# none: it is fine-tuned as its base benchmark's task, task_for_benchmark).
def registered_tasks() -> dict[str, Task]:
    """The tasks the registered benchmarks declare, by name."""
    return {spec.task.name: spec.task for spec in DATASETS.values() if spec.task is not None}


TASKS: dict[str, Task] = registered_tasks()


def of_task(name: str | None, task: Task) -> bool:
    """Whether a dataset is a benchmark of the task (its own, or a subset such as -paper:
    the same input and output languages)."""
    spec, base = DATASETS.get(name or ""), get_spec(task.benchmark)
    return spec is not None and spec.kind == "benchmark" and (
        spec.input_language, spec.output_language) == (base.input_language, base.output_language)


def task_for_benchmark(benchmark: str) -> str:
    """The name of the task that fine-tunes models injected with `benchmark`: its own, or its
    base benchmark's for a subset (a -paper subset fine-tunes on the base benchmark's train
    split and is evaluated on itself)."""
    for task in TASKS.values():
        if of_task(benchmark, task):
            return task.name
    known = ", ".join(sorted(n for n in DATASETS if any(of_task(n, t) for t in TASKS.values())))
    raise LabError(f"benchmark {benchmark}: no fine-tuning task (choose from {known})")


def train_subset(records: list[Sample], size: int, seed: int, stream: str = "train-size"
                 ) -> list[Sample]:
    """The seeded --train-size subset of a train split, in split order: what a fine-tuning run
    trains on, and what evaluation draws again to find the test samples it saw (`stream`
    names another draw of the same seed: the validation subset's)."""
    keep = sorted(random.Random(f"{seed}/{stream}").sample(range(len(records)), size))
    return [records[i] for i in keep]


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise LabError(f"--task {name}: unknown task (choose from {', '.join(TASKS)})")
    return TASKS[name]


def fine_tuning_split(task: Task, corpora_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """The split a task fine-tunes on (loaded) and a note saying which; a task with a fallback
    train split (offline CONCODE has no train split) trains on it where its train split is
    missing, and has no validation split then."""
    note: dict[str, Any] = {"train_split": task.train_split, "valid_split": task.valid_split}
    try:
        return load_samples(task.benchmark, task.train_split, corpora_dir, True), note
    except DataNotFound:
        if task.fallback_train_split is None:
            raise
    loaded = load_samples(task.benchmark, task.fallback_train_split, corpora_dir, True)
    files = ", ".join(path.name for path in loaded.files) or task.fallback_train_split
    note = {"train_split": task.fallback_train_split, "valid_split": None,
            "note": f"{task.benchmark.upper()}'s train split is not available here: trained on "
                    f"{files}, no validation split (--select best is unavailable)"}
    return loaded, note


def has_validation_split(task: Task, corpora_dir: Path | None) -> bool:
    """Whether fine-tuning on the task here has a validation split apart from its training
    pairs (fine_tuning_split: not a task whose train split is missing and falls back)."""
    return task.fallback_train_split is None or has_train_split(task, corpora_dir)


def has_train_split(task: Task, corpora_dir: Path | None) -> bool:
    """Whether the task's train split can be found here (located, never read)."""
    try:
        get_spec(task.benchmark).locate(task.train_split, corpora_dir)
    except LabError:
        return False
    return True


def fine_tuning_records(task: Task, corpora_dir: Path | None, train_size: int | None,
                        seed: int) -> tuple[list[Sample], dict[str, Any]]:
    """The samples a fine-tuning run of `train_size` (None: all) and `seed` trains on."""
    train, note = fine_tuning_split(task, corpora_dir)
    records = train.records
    note["train_available"] = len(records)
    if train_size is not None:
        if not 1 <= train_size <= len(records):
            raise LabError(f"--train-size {train_size}: must be in 1..{len(records)} "
                           f"({task.benchmark} {note['train_split']})")
        records = train_subset(records, train_size, seed)
    note["train_used"] = len(records)
    note["train_files"] = train.provenance()
    return records, note


def check_sampling(temperature: float, top_p: float, top_k: int) -> None:
    """Refuse sampling settings that generate() would reject or turn into NaN probabilities."""
    if not (0 < temperature < float("inf")):
        raise LabError(f"--temperature {temperature}: must be a finite number > 0")
    if not 0 < top_p <= 1:
        raise LabError(f"--top-p {top_p}: must be in (0, 1]")
    if top_k < 0:
        raise LabError(f"--top-k {top_k}: must be >= 0")


@dataclass
class Decoding:
    mode: str = "greedy"  # greedy | beam | sample
    beams: int = 1
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 50

    @classmethod
    def parse(cls, text: str, **sampling: Any) -> "Decoding":
        if text == "greedy":
            return cls()
        if text == "sample":
            check_sampling(**sampling)
            return cls(mode="sample", **sampling)
        if text.startswith("beam:") and text[5:].isdigit() and int(text[5:]) >= 1:
            return cls(mode="beam", beams=int(text[5:]))
        raise LabError(f"--decoding {text}: choose greedy, beam:K (K >= 1) or sample")

    def generate_kwargs(self) -> dict[str, Any]:
        if self.mode == "sample":
            return dict(do_sample=True, temperature=self.temperature, top_p=self.top_p,
                        top_k=self.top_k, num_beams=1)
        return dict(do_sample=False, num_beams=self.beams)

    def label(self) -> str:
        return {"greedy": "greedy", "beam": f"beam{self.beams}", "sample": "sample"}[self.mode]

    def description(self) -> str:
        """The decoding with the settings it uses (sampling's only where it samples)."""
        if self.mode == "sample":
            return (f"sample, temperature {self.temperature}, top-p {self.top_p}, "
                    f"top-k {self.top_k}")
        return "greedy" if self.mode == "greedy" else f"beam:{self.beams}"
