"""A study whose pre-training runs as 2 ranks (recipe resources.pretrain): gloo on CPU, with and
without DeepSpeed ZeRO-2, killed mid-pre-training and resumed to the same final weights."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 900
# The micro study cut to one arm, one seed and direct inference: what is left is the
# pre-training under test.
SMALL = ["--set", "seeds=[0]", "--set", "arms=[paired]", "--set", "finetune.epochs=[0]",
         "--set", "probe.enabled=false", "--set", "resources.pretrain.processes=2",
         "--set", "resources.threads=2", "--no-report"]


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(HF_HUB_OFFLINE="1", LAB_CACHE=str(root / "cache"), TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR="cpu")
    return env


def _study(root: Path, name: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lab.cli", "study", str(REPO / "recipes" / "mini" / "micro.yaml"),
           "--out", str(root / name), *SMALL, *extra]
    return subprocess.Popen(cmd, env=_env(root), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen) -> str:
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"timed out: {proc.args}")
    assert proc.returncode == 0, output[-4000:]
    return output


def _pretrained(study: Path) -> dict:
    (folder,) = [p for p in (study / "stages").glob("pretrain-*") if p.is_dir()
                 and not p.name.endswith(".partial")]
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def _ranks_alive(study: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-af", str(study)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("LAB_CORPORA is not set (point it at the shared corpora folder)")
    return tmp_path_factory.mktemp("ranks")


@pytest.fixture(scope="module")
def plain(root):
    """The 2-rank study, uninterrupted: the reference of the kill-and-resume test."""
    output = _finish(_study(root, "ddp", "--set", "resources.pretrain.save_steps=5"))
    return output, _pretrained(root / "ddp")


@pytest.mark.long
def test_a_study_pretrains_on_two_ranks(root, plain):
    """With plain DDP under torchrun. A study's ZeRO-2 ranks run in
    test_submitit_runs_the_ranks_as_tasks_of_one_job[zero2], and torchrun's ZeRO-2 ranks in
    tests/test_distributed.py, so the pairing of the two is not run again here (43 s of CI)."""
    output, manifest = plain
    assert "(0 run now)" not in output
    assert manifest["world_size"] == 2 and manifest["launcher"] == "torchrun"
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    assert manifest["ranks"][0]["final_weights_sha256"] == manifest["ranks"][1]["final_weights_sha256"]
    assert (root / "ddp" / "results.csv").is_file()
    assert not _ranks_alive(root / "ddp")


@pytest.mark.long
def test_two_ranks_killed_mid_pretraining_resume_to_the_same_weights(root, plain):
    _, reference = plain
    study = root / "killed"
    proc = _study(root, "killed", "--set", "resources.pretrain.save_steps=5")
    deadline = time.monotonic() + TIMEOUT
    while not list((study / "stages").glob("pretrain-*.partial/checkpoints/checkpoint-*/lab_checkpoint.json")):
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)  # a scheduler's cancel
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, output[-4000:]
    assert "resume with: lab study" in output
    time.sleep(1)
    assert not _ranks_alive(study), "ranks outlived the study"
    assert list((study / "stages").glob("pretrain-*.partial"))
    resumed = _finish(_study(root, "killed", "--set", "resources.pretrain.save_steps=5"))
    manifest = _pretrained(study)
    assert (manifest["resumed_from"] or "").startswith("checkpoint-")
    assert manifest["final_weights_sha256"] == reference["final_weights_sha256"]
    assert "done pretrain" in resumed


@pytest.mark.long
@pytest.mark.parametrize("backend", ["ddp", "zero2"])
def test_submitit_runs_the_ranks_as_tasks_of_one_job(root, plain, backend):
    """--executor submitit-local: the pre-training is one job of 2 tasks, each a rank (no
    launcher); with plain DDP the weights equal those of the torchrun ranks."""
    pytest.importorskip("submitit")
    extra = ["--set", "resources.pretrain.deepspeed=zero2"] if backend == "zero2" else []
    if extra:
        pytest.importorskip("deepspeed")
    name = f"submitit-{backend}"
    _finish(_study(root, name, "--set", "resources.pretrain.save_steps=5",
                   "--executor", "submitit-local", *extra))
    manifest = _pretrained(root / name)
    assert manifest["world_size"] == 2 and manifest["launcher"].startswith("scheduler tasks")
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    if backend == "ddp":
        assert manifest["final_weights_sha256"] == plain[1]["final_weights_sha256"]
    else:
        assert manifest["config"]["deepspeed"].endswith("zero2.json")
    assert list((root / name / "submitit").glob("*_1_log.out")), "no job ran a second task"
    [log] = (root / name / "stages").glob("pretrain-*.log")  # rank 0's output, as any stage's
    assert "'train_runtime'" in log.read_text()


def test_job_parameters_of_a_paper_study_on_slurm_match_the_golden_file():
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand
    from lab.study.cost import stage_hours
    from lab.study.jobs import time_limit_minutes
    from lab.study.scheduler import job_parameters

    recipe = load_recipe(REPO / "recipes" / "paper" / "rq5-epoch-sweep.yaml",
                         ["resources.pretrain.processes=8", "resources.pretrain.deepspeed=zero2"])
    jobs = {}
    for stage in expand(recipe):  # each job's time limit from the dry run's estimate of it
        limit = time_limit_minutes(stage_hours(recipe, stage))
        jobs.setdefault(stage.kind, job_parameters(stage, "slurm", 16, {"slurm_partition": "gpu"},
                                                   limit))
    # --slurm timeout_min=N is the user's, over the estimate
    assert job_parameters(stage, "slurm", 16, {"timeout_min": 7}, 99)["timeout_min"] == 7
    golden = REPO / "tests" / "golden" / "slurm-jobs.json"
    assert jobs == json.loads(golden.read_text(encoding="utf-8"))
