"""Two runners of one study at once (`lab study R --out S` started twice, seconds apart, or two
SLURM jobs): each reports only the stages it ran, and study.json keeps a grow whichever runner
writes it last (issue 70, row 1)."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from lab.study import execution, runner, scheduler, stages as kinds
from lab.study.grid import Stage
from lab.study.recipe import load_recipe

MICRO = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
WORK_SECONDS = 0.5  # one made-up stage: long enough for the second runner to wait on it


@dataclasses.dataclass
class Named:
    """The config of the made-up stage kind these tests run."""
    name: str


def _slow_work(stage: Stage, study: Path, corpora_dir, threads=None) -> None:
    time.sleep(WORK_SECONDS)
    out = stage.out(study)
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}")


def _one_runner(stages: list[Stage], study: Path, report) -> None:
    """A runner's schedule in a process of its own: what it ran, what it found done, its events."""
    submit, shutdown = scheduler.submitter("local", 1, 1, study, None, None)
    events, elsewhere = [], []
    try:
        timings = scheduler.schedule(stages, study, submit, 1,
                                     lambda event, stage, *more: events.append((event, stage.key)),
                                     elsewhere)
    finally:
        shutdown()
    report.put(([t["stage"] for t in timings], elsewhere, events))


def test_two_runners_each_report_only_the_stages_they_ran(tmp_path, monkeypatch):
    monkeypatch.setitem(kinds.KINDS, "x", kinds.StageKind(Named, print, key=("name",)))
    monkeypatch.setattr(execution, "_run_stage_unlocked", _slow_work)
    study = tmp_path / "study"
    (study / "stages").mkdir(parents=True)
    first = Stage("x", Named("a"))
    second = Stage("x", Named("b"), inputs=[first])
    stages = [first, second, Stage("x", Named("c"), inputs=[second])]
    context = multiprocessing.get_context("fork")  # the made-up kind and work go with it
    reports = [context.Queue(), context.Queue()]
    runners = [context.Process(target=_one_runner, args=(stages, study, report))
               for report in reports]
    runners[0].start()
    # The second starts once the first is running stage a: it waits for a's lock, then finds
    # a finished.
    deadline = time.monotonic() + 30
    while not execution.stage_log(first, study).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    runners[1].start()
    (ran_1, elsewhere_1, events_1), (ran_2, elsewhere_2, events_2) = (
        report.get(timeout=60) for report in reports)
    for process in runners:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert first.key in ran_1 and first.key in elsewhere_2 and first.key not in ran_2
    for stage in stages:  # each ran by one runner, and the other says it did not run it
        assert (stage.key in ran_1) != (stage.key in ran_2), stage.key
        assert (stage.key in elsewhere_1) == (stage.key in ran_2), stage.key
        assert (stage.key in elsewhere_2) == (stage.key in ran_1), stage.key
    for events, elsewhere in ((events_1, elsewhere_1), (events_2, elsewhere_2)):
        assert [key for event, key in events if event == scheduler.OTHER_RUNNER] == elsewhere
        assert not {key for event, key in events if event == "end"} & set(elsewhere)


@pytest.fixture
def no_stages(monkeypatch):
    """run_study with its records and nothing else: no stage runs, no table is collected."""
    monkeypatch.setattr(runner, "submitter", lambda *args: (None, lambda: None))
    monkeypatch.setattr(runner, "finish", lambda stage, study: None)
    monkeypatch.setattr(runner, "collect", lambda recipe, stages, study: (
        study / "results.csv", study / "samples.csv"))
    monkeypatch.setattr(runner, "data_folders", lambda recipe, corpora: {})
    monkeypatch.setattr(runner, "environment_record", lambda: {})


def test_a_grow_is_recorded_whichever_runner_writes_study_json_last(tmp_path, monkeypatch,
                                                                     no_stages):
    """The first runner grows a finished two-seed study to three seeds; the second starts
    while the first is between writing recipe.json (three seeds: nothing for the second to
    grow) and study.json, and writes study.json last."""
    recipe = load_recipe(MICRO)
    study = tmp_path / "study"
    monkeypatch.setattr(runner, "schedule", lambda *args: [])
    monkeypatch.setattr(runner, "study_data", lambda recipe, corpora: {})
    runner.run_study(recipe, study, workers=1, ready_checked=True)
    assert "grown" not in runner.read_summary(study)

    grown = dataclasses.replace(recipe, seeds=[*recipe.seeds, max(recipe.seeds) + 1])
    main = threading.current_thread()
    second: list[threading.Thread] = []
    results: dict[str, dict] = {}

    def second_runner() -> None:
        results["second"] = runner.run_study(grown, study, workers=1, ready_checked=True)

    def data_then_second_runner(recipe, corpora):
        # Called by each runner between its recipe.json and its study.json: the first starts
        # the second here and gives it time to read both records.
        if threading.current_thread() is main and not second:
            second.append(threading.Thread(target=second_runner))
            second[0].start()
            time.sleep(1.0)
        return {}

    def schedule(*args):
        if threading.current_thread() is not main:
            time.sleep(1.0)  # the second runner finishes, and writes study.json, last
        return []

    monkeypatch.setattr(runner, "study_data", data_then_second_runner)
    monkeypatch.setattr(runner, "schedule", schedule)
    results["first"] = runner.run_study(grown, study, workers=1, ready_checked=True)
    second[0].join(timeout=60)
    final = json.loads((study / runner.SUMMARY).read_text())
    assert [record["differs_in"] for record in final.get("grown", [])] == [["seeds"]]
    assert results["first"]["grown"] == final["grown"] == results["second"]["grown"]


def test_a_summary_keeps_every_grow_once_and_drops_another_runners_shard():
    earlier = {"study": "s", "grown": [{"differs_in": ["seeds"], "stages": 30}],
               "shard_seeds": [1], "planned_power": 0.5}
    ours = {"study": "s", "stages": 40,
            "grown": [{"differs_in": ["seeds"], "stages": 30},
                      {"differs_in": ["pretrain.lr"], "stages": 40}]}
    merged = runner.merged_summary(earlier, ours)
    assert merged["grown"] == ours["grown"]  # the earlier record once, the new one after it
    assert "shard_seeds" not in merged and merged["planned_power"] == 0.5
    assert runner.merged_summary(earlier, {"study": "s"})["grown"] == earlier["grown"]
