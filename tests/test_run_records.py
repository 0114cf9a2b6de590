"""What a study run records of each stage, whatever the executor: its wall time, its log, and
each distinct warning once."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest

from lab.study import execution, scheduler, stages as kinds
from lab.study.execution import recorded_seconds, stage_log
from lab.study.grid import Stage
from lab.study.scheduler import log_warnings

WORK_SECONDS = 0.3


@dataclasses.dataclass
class Named:
    """The config of the made-up stage kinds these tests run."""
    name: str


@pytest.fixture
def made_up_kinds(monkeypatch):
    """Kinds of stage named by their config's `name` (the scheduler's tests need no real one);
    the real kinds' names stand for themselves."""
    for kind in ("x", "pretrain", "evaluate"):
        monkeypatch.setitem(kinds.KINDS, kind, kinds.StageKind(Named, print, key=("name",)))


def fake_work(stage: Stage, study: Path, corpora_dir, threads=None) -> None:
    """A stage that prints (Python and file-descriptor level), warns like the libraries do, and
    takes WORK_SECONDS."""
    print(f"training {stage.config.name}", flush=True)
    os.write(2, b"from C: progress 100%\n")
    print("[2026-11-25 08:33:58,662] [WARNING] [accel.py:213] Setting accelerator to CPU",
          file=sys.stderr)
    if stage.config.name == "b":
        print("[transformers] a warning only stage b has", file=sys.stderr)
    time.sleep(WORK_SECONDS)
    out = stage.out(study)
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}")


def test_stages_run_in_the_lab_process_are_timed_logged_and_warn_once(tmp_path, monkeypatch,
                                                                      capfd, made_up_kinds):
    """One worker: the stages run in the runner's own process (pool workers: test_study)."""
    study = tmp_path / "study"
    (study / "stages").mkdir(parents=True)
    first = Stage("x", Named("a"))
    stages = [first, Stage("x", Named("b"), inputs=[first])]
    monkeypatch.setattr(execution, "_run_stage_unlocked", fake_work)
    submit, shutdown = scheduler.submitter("local", 1, 1, study, None, None)
    events = []
    try:
        timings = scheduler.schedule(stages, study, submit, 1, lambda *event: events.append(event))
    finally:
        shutdown()
    # Timed as the stage ran (it used to be 0 s in the runner's own process).
    assert [t["stage"] for t in timings] == [s.key for s in stages]
    for stage, timing in zip(stages, timings):
        assert WORK_SECONDS <= timing["seconds"] == recorded_seconds(stage, study)
        record = json.loads(execution.stage_timing(stage, study).read_text())
        assert record["threads"] == 1
        ends = [e for e in events if e[0] == "end" and e[1] is stage]
        assert ends and ends[0][2] == timing["seconds"]
        # Everything the stage printed is in its log, not on the console.
        log = stage_log(stage, study).read_text()
        assert f"training {stage.config.name}" in log and "from C: progress 100%" in log
    console = capfd.readouterr()
    assert "training" not in console.out + console.err
    shown = [e[2] for e in events if e[0] == "warning"]
    assert sorted(shown) == sorted(set(shown))  # each once
    assert "[WARNING] [accel.py:213] Setting accelerator to CPU" in shown
    assert "[transformers] a warning only stage b has" in shown


def test_log_warnings_are_distinct_and_without_timestamps(tmp_path):
    log = tmp_path / "stage.log"
    log.write_text("{'loss': 1.0}\n"
                   "[2026-11-25 07:27:01,985] [WARNING] [real_accelerator.py:213:get_accelerator] CPU\n"
                   "[2026-11-25 08:33:58,662] [WARNING] [real_accelerator.py:213:get_accelerator] CPU\n"
                   "/x/y.py:3: FutureWarning: soon gone\n"
                   "  warnings.warn(\n"
                   "[transformers] `loss_type=None` was set\n"
                   "lab: warning: bf16: emulated\n"
                   "warnings in a model name: not a warning line\n")
    assert log_warnings(log) == ["[WARNING] [real_accelerator.py:213:get_accelerator] CPU",
                                 "/x/y.py:3: FutureWarning: soon gone",
                                 "[transformers] `loss_type=None` was set",
                                 "lab: warning: bf16: emulated"]
    assert log_warnings(tmp_path / "missing.log") == []


def test_stages_run_seed_by_seed_so_a_stopped_study_holds_whole_comparisons(tmp_path,
                                                                              made_up_kinds):
    """Expanded arm by arm, run seed by seed: after any prefix of the run, every arm of the first
    seeds is finished (inputs still come first)."""
    study = tmp_path / "study"
    (study / "stages").mkdir(parents=True)
    stages = []
    for arm in ("control", "paired"):
        for seed in (0, 1):
            trained = Stage("pretrain", Named(f"{arm}-{seed}"), labels={"arm": arm, "seed": seed})
            scored = Stage("evaluate", Named(trained.key), inputs=[trained],
                           labels={"arm": arm, "seed": seed})
            stages += [trained, scored]
    order = []

    class Finished:
        def done(self):
            return True

        def result(self):
            return None

    def submit(stage):
        order.append((stage.kind, stage.labels["arm"], stage.labels["seed"]))
        stage.out(study).mkdir(parents=True)
        (stage.out(study) / "manifest.json").write_text("{}")
        return Finished()

    scheduler.schedule(stages, study, submit, 1, lambda *event: None)
    assert order == [("pretrain", "control", 0), ("evaluate", "control", 0),
                     ("pretrain", "paired", 0), ("evaluate", "paired", 0),
                     ("pretrain", "control", 1), ("evaluate", "control", 1),
                     ("pretrain", "paired", 1), ("evaluate", "paired", 1)]


def _capability(env: dict) -> dict:
    import os
    import subprocess

    code = ("import lab, torch, json; from lab.common import environment_record; "
            "torch.ones(2).sum(); print(json.dumps(environment_record()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={k: v for k, v in {**os.environ, **env}.items() if v is not None})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_torch_cpu_kernels_are_pinned_to_one_instruction_set_and_recorded():
    """Importing lab pins torch's CPU kernels to AVX2 on every x86-64 CPU that has it (AVX-512
    ones included: their kernels compute other numbers), unless the user chose; manifests
    record what ran."""
    import platform

    import pytest

    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if platform.machine().lower() not in ("x86_64", "amd64") or "avx2" not in flags:
        pytest.skip("not an x86-64 CPU with AVX2")
    unset = {"ATEN_CPU_CAPABILITY": None, "MKL_CBWR": None, "ONEDNN_MAX_CPU_ISA": None}
    pinned = _capability(unset)
    assert pinned["cpu_capability"] == "AVX2" and pinned["cpu"] and "avx2" in pinned["cpu_extensions"]
    # the matrix-product libraries are held to the same instruction set, and recorded
    assert (pinned["mkl_cbwr"], pinned["onednn_max_cpu_isa"]) == ("AVX2", "AVX2")
    chosen = _capability({**unset, "ATEN_CPU_CAPABILITY": "default"})
    assert chosen["cpu_capability"] == "DEFAULT"
    assert (chosen["mkl_cbwr"], chosen["onednn_max_cpu_isa"]) == (None, None)  # the user's choice
    assert _capability({**unset, "MKL_CBWR": "COMPATIBLE"})["mkl_cbwr"] == "COMPATIBLE"
