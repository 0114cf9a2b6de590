"""A study through a real SLURM: a one-node cluster from Debian's slurm-wlm and munge on this
machine (scripts/slurm-local.sh; no systemd, no accounting database), the micro recipe's smoke
run submitted stage by stage with `lab study --executor slurm`, one stage's job requeued by
SLURM mid-run (as on preemption or a node failure), and the runner killed and started again
(139 s (docs/times.md: slurm-study) beside a CI run)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 900


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    if not all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "munged", "sbatch")):
        pytest.skip("needs Debian's slurm-wlm and munge (scripts/setup.sh --dev installs them as root)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs as root (it starts jobs as their user)")
    pytest.importorskip("submitit")
    folder = tmp_path_factory.mktemp("slurm")
    script = str(REPO / "scripts" / "slurm-local.sh")
    started = subprocess.run(["bash", script, "start", str(folder)], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}
    yield env
    subprocess.run(["bash", script, "stop", str(folder)], capture_output=True, timeout=60)


def test_the_queue_watcher_reads_squeue_where_sacct_fails_and_forgets_finished_jobs(monkeypatch):
    """lab.study.jobs.queue_watcher overrides submitit's SlurmInfoWatcher.update and reads its
    internals: checked here against the installed submitit, not only by the long test's cluster.
    A cluster without accounting: sacct fails, squeue gives the states, a job no longer queued
    is done and is not asked about again."""
    pytest.importorskip("submitit")
    from lab.study import jobs

    asked: list[list[str]] = []

    def sacct_fails(command, **_):
        asked.append(command)
        return subprocess.CompletedProcess(command, 1, b"", b"accounting storage is disabled")

    monkeypatch.setattr(jobs.subprocess, "run", sacct_fails)
    monkeypatch.setattr(jobs, "queue_states", lambda ids: {"12": "RUNNING"})
    watcher = jobs.queue_watcher()
    for job_id in ("12", "13"):
        watcher.register_job(job_id)
    assert watcher.get_state("12", mode="force") == "RUNNING" and not watcher.is_done("12", "cache")
    assert watcher.get_state("13", mode="cache") == jobs.GONE and watcher.is_done("13", "cache")
    assert asked[0][0] == "sacct" and {"12", "13"} <= set(asked[0])
    watcher.update()
    assert "12" in asked[1] and "13" not in asked[1]  # finished: not asked again


def test_a_stage_job_notes_each_start_and_refuses_past_its_requeues(tmp_path, monkeypatch):
    """Every start of a stage's job writes its job id, node and count to the stage's log; a job
    SLURM started more than MAX_REQUEUES + 1 times (preempted or its node failing again and
    again) refuses in one line naming the log, instead of running on forever."""
    from lab.common import LabError
    from lab.study import jobs
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    stage = expand(load_recipe(REPO / "recipes" / "mini" / "micro.yaml"))[0]
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    for restarts in range(jobs.MAX_REQUEUES + 1):
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))
        jobs._note_start(stage, tmp_path)
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(jobs.MAX_REQUEUES + 1))
    with pytest.raises(LabError, match=r"SLURM job 41 was requeued 4 times \(at most 3\); its log: "):
        jobs._note_start(stage, tmp_path)
    log = jobs.stage_log(stage, tmp_path).read_text()
    assert re.findall(r"^lab: SLURM job 41 on \S+, start (\d) of at most 4$", log, re.M) == [
        "1", "2", "3", "4", "5"]
    # submitit requeues a job near its time limit only where its callable can `checkpoint`:
    # the stage's job is requeued as the same call, which resumes the stage
    job = jobs.StageJob()
    again = job.checkpoint(stage, tmp_path, None, 1)
    assert again.function is job and again.args == (stage, tmp_path, None, 1)
    assert jobs.time_limit_minutes(0.0) == jobs.MIN_LIMIT_MINUTES
    assert jobs.time_limit_minutes(2.0) == 2 * 60 * 3 + 15  # 3x the estimate, 15 min more


def _study_command(study: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lab.cli", "study", str(REPO / "recipes" / "mini" / "micro.yaml"),
            "--smoke", "--executor", "slurm", "--slurm", "slurm_partition=debug", "--threads", "1",
            "--out", str(study), "--no-report", *extra]


def _wait_for(what: str, check, runner: subprocess.Popen, seconds: float = 300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if runner.poll() is not None:
            pytest.fail(f"the runner ended (rc {runner.returncode}) before {what}")
        time.sleep(0.2)
    pytest.fail(f"waited {seconds:.0f} s for {what}")


def _slurm(env: dict, *args: str) -> str:
    done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _done_lines(output: str) -> set[str]:
    return set(re.findall(r"^done (.+?) in ", output, re.M))


@pytest.mark.long
def test_a_study_through_slurm_survives_a_requeued_stage_and_a_killed_runner(slurm_env, tmp_path):
    study = tmp_path / "study"
    stages = study / "stages"
    first_log = tmp_path / "first-runner.log"
    with open(first_log, "w", encoding="utf-8") as log:
        runner = subprocess.Popen(_study_command(study), env=slurm_env, cwd=REPO, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # 1. A pre-training's job is requeued once its stage has started (SLURM kills it and
        # queues it again, as on preemption); SLURM holds a requeued job two minutes before it
        # may start, which the test cuts short.
        def started_pretraining():
            for path in sorted(stages.glob("pretrain-*.log")) if stages.is_dir() else []:
                if "start 1 of" in path.read_text(errors="replace"):
                    return path
            return None

        pretrain_log = _wait_for("a pre-training's job to start", started_pretraining, runner)
        key = pretrain_log.name[:-len(".log")]
        job = json.loads((stages / f"{key}.job.json").read_text())["job_id"]
        _slurm(slurm_env, "scontrol", "requeue", job)
        _wait_for("the requeued job to wait in the queue", lambda: _slurm(
            slurm_env, "squeue", "--noheader", "--format=%T", "--states=all", f"--jobs={job}"
        ) == "PENDING", runner, 60)
        _slurm(slurm_env, "scontrol", "update", f"JobId={job}", "StartTime=now")

        # 2. The runner is killed once some stages are done; its queued jobs go on.
        _wait_for("six finished stages", lambda: len(_done_lines(first_log.read_text())) >= 6,
                  runner)
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    done_first = _done_lines(first_log.read_text())

    # 3. Started again: it re-attaches to the jobs still queued or running, submits the rest,
    # reuses every finished stage and finishes the study.
    second = subprocess.run(_study_command(study), env=slurm_env, cwd=REPO, capture_output=True,
                            text=True, timeout=TIMEOUT)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-4000:]
    done_second = _done_lines(output)
    assert done_first and not done_first & done_second, (done_first, done_second)
    # the killed runner's jobs still in the queue are waited for, not submitted again
    attached = re.findall(r"^lab: (.+?): SLURM job \d+ \(\w+\) submitted by an earlier runner",
                          output, re.M)
    assert attached and not set(attached) & done_first, output[-4000:]

    # Every stage ran as a SLURM job: its job id (and node, and which start) in its log.
    logs = sorted(stages.glob("*.log"))
    assert len(logs) == 15
    for log in logs:
        assert re.search(r"^lab: SLURM job \d+ on \S+, start \d of at most 4$",
                         log.read_text(errors="replace"), re.M), log.name
        assert (stages / log.name.replace(".log", ".slurm")).is_dir()
    # The requeued pre-training started twice, under one job id, and finished.
    starts = re.findall(r"^lab: SLURM job (\d+) on \S+, start (\d)", pretrain_log.read_text(), re.M)
    assert [number for _job, number in starts][:2] == ["1", "2"] and {j for j, _ in starts} == {job}
    assert (stages / key / "manifest.json").is_file()

    status = subprocess.run(_study_command(study, "--status"), env=slurm_env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "15 stages: 15 done" in status.stdout, status.stdout[-2000:]
