"""Faults a user meets (damaged models, non-UTF-8 files, a file where a folder should be, a
read-only or full disk, Ctrl-C, data changed under a study) end in one `lab: error:` line,
exit 2 (130/143 for signals), nothing half-written (issue 14)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.common import LabError, cached_sha256
from lab.study.recipe import load_recipe
from lab.study.execution import run_stage
from lab.study.grid import expand
from lab.study.runner import SUMMARY, run_study, study_data
from tests.faults.world import tmpfs

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

MICRO = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
PRETRAIN = ["pretrain", "--model", "gpt2", "--corpus", "paired", "--tokenizer", "tok",
            "--preset", "micro", "--max-steps", "4", "--save-steps", "2", "--block-size", "128",
            "--batch-size", "4", "--cache-dir", "cache"]
INJECT = ["inject", "--benchmark", "codetrans", "--setting", "paired", "--seed", "0",
          "--base-splits", "valid", "--limit", "300", "--fraction", "0.05"]


def lab(args: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], cwd=cwd,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200", **env),
                          capture_output=True, text=True, timeout=600)


def error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """The one `lab: error:` line (a training run may log before it), exit 2, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("lab: error: ")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def world(micro_world, tmp_path_factory) -> Path:
    """The micro world's arms and tokenizer, a 4-step micro GPT-2 and its E0 model."""
    root = tmp_path_factory.mktemp("faults")
    for name in ("control", "tok", "paired"):
        (root / name).symlink_to(micro_world / name)
    for args in (PRETRAIN + ["--out", "pt"],
                 ["finetune", "--pretrained", "pt", "--task", "translation", "--epochs", "0",
                  "--out", "e0"]):
        result = lab(args, root)
        assert result.returncode == 0, result.stderr[-2000:]
    (root / "ids.txt").write_text("codetrans:test:0\n")
    return root


def damaged_copy(world: Path, source: str, name: str, file: str, data: bytes) -> Path:
    target = world / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(world / source, target)
    (target / file).write_bytes(data)
    return target


# --- damaged models and tokenizers --------------------------------------------------------------

@pytest.mark.long
@pytest.mark.parametrize("file, data", [
    ("model/model.safetensors", b"\0" * 64),
    ("model/config.json", b"{"),
    ("model/tokenizer.json", b'{"version": "1.0", "trunc'),
])
def test_damaged_model_files_are_one_line_for_every_command(world, file, data):
    """A model's manifest records its files (model_files): a damaged one is refused by its
    size before anything loads it. Models saved before that record reach the loaders, which
    name the folder too."""
    name = "pt-" + file.replace("/", "-")
    commands = (["finetune", "--pretrained", name, "--task", "translation", "--epochs", "1",
                 "--train-size", "8", "--out", "ft-out"],
                ["evaluate", "--model", "e0-" + name, "--task", "translation", "--ids",
                 "ids.txt", "--max-new-tokens", "4", "--out", "ev-out"],
                ["probe", "--model", name, "--max-samples", "4", "--out", "probe-out"],
                ["llm-eval", "--model", "e0-" + name, "--contaminated", "set.jsonl",
                 "--perturbed", "set.jsonl", "--task", "java2cs", "--repetitions", "1",
                 "--max-new-tokens", "4"])
    (world / "set.jsonl").write_text('{"question": "int a;", "answer": "int a;"}\n')
    for recorded in (True, False):
        for source, target in (("pt", name), ("e0", "e0-" + name)):
            folder = damaged_copy(world, source, target, file, data)
            if not recorded:
                manifest = json.loads((folder / "manifest.json").read_text())
                del manifest["model_files"]  # and its membership hash: a legacy record
                (manifest.get("pretrained") or manifest).pop("membership_sha256")
                (folder / "manifest.json").write_text(json.dumps(manifest))
        # The recorded sizes are checked by one function before any loader runs: every command
        # meets it on the first file, one command on the others (the loaders differ per file).
        every = not recorded or file == "model/model.safetensors"
        for args in commands if every else commands[1:2]:
            line = error_line(lab(args, world), name)
            if recorded:
                assert f"{file} has {len(data)} bytes" in line, line
            elif file.endswith(".safetensors"):
                assert f"{file} is truncated" in line, line
            else:
                assert "cannot be loaded" in line and "damaged or incomplete" in line, line
    assert not any((world / out).exists() for out in ("ft-out", "ev-out", "probe-out"))


def test_truncated_tokenizer_given_to_pretrain(world):
    tokenizer = world / "tok-cut"
    shutil.rmtree(tokenizer, ignore_errors=True)
    shutil.copytree(world / "tok", tokenizer)
    data = (tokenizer / "tokenizer.json").read_bytes()
    (tokenizer / "tokenizer.json").write_bytes(data[: len(data) // 2])
    args = [*PRETRAIN, "--tokenizer", "tok-cut", "--out", "pt-cut"]
    error_line(lab(args, world), "--tokenizer", "tok-cut", "tokenizer.json differs from the sha256")
    assert not (world / "pt-cut").exists() and not (world / "pt-cut.partial").exists()


# --- non-UTF-8 inputs ---------------------------------------------------------------------------

def test_non_utf8_ids_files_and_manifests(world):
    (world / "latin1-ids.txt").write_bytes("codetrans:test:0 caf\xe9\n".encode("latin-1"))
    error_line(lab(["evaluate", "--model", "e0", "--task", "translation", "--ids",
                    "latin1-ids.txt", "--out", "ev-out"], world),
               "--ids latin1-ids.txt: not UTF-8 text (byte 20)")
    without_fraction = [a for a in INJECT if a not in ("--fraction", "0.05")]
    error_line(lab([*without_fraction, "--test-ids", "latin1-ids.txt", "--out", "arm-out"], world),
               "--test-ids latin1-ids.txt: not UTF-8 text")
    arm = world / "arm-latin1"
    shutil.rmtree(arm, ignore_errors=True)
    shutil.copytree(world / "paired", arm)
    (arm / "manifest.json").write_bytes(b'{"kind": "lab-corpus \xff"}')
    error_line(lab([*PRETRAIN, "--corpus", "arm-latin1", "--out", "pt-out"], world),
               "arm-latin1/manifest.json: not UTF-8 text")
    model = damaged_copy(world, "e0", "e0-latin1", "manifest.json", b'{"kind": "\xff"}')
    error_line(lab(["evaluate", "--model", model.name, "--task", "translation", "--out",
                    "ev-out"], world), "e0-latin1/manifest.json: not UTF-8 text")
    assert not any((world / out).exists() for out in ("ev-out", "arm-out", "pt-out"))


# --- where outputs cannot go --------------------------------------------------------------------

def test_out_under_a_file(world):
    (world / "notes.txt").write_text("mine\n")
    for args in ([*INJECT, "--out", "notes.txt/arm"], [*PRETRAIN, "--out", "notes.txt/pt"],
                 ["evaluate", "--model", "e0", "--task", "translation", "--ids", "ids.txt",
                  "--out", "notes.txt/ev"]):
        error_line(lab(args, world), "notes.txt is a file, not a folder")
    assert (world / "notes.txt").read_text() == "mine\n"


@pytest.fixture
def immutable_folder(world):
    folder = world / "locked"
    folder.mkdir(exist_ok=True)
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode:
        pytest.skip("chattr +i is not available here (root ignores chmod)")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_output_in_an_immutable_folder(world, immutable_folder):
    error_line(lab([*INJECT, "--out", "locked/arm"], world),
               "locked/arm: cannot write in locked (Operation not permitted)")
    error_line(lab([*PRETRAIN, "--out", "locked/pt"], world), "locked/pt.partial")
    assert list(immutable_folder.iterdir()) == []


@pytest.fixture
def full_disk(tmp_path):
    """A 300 KB tmpfs: room for a few files, not for an arm or a checkpoint."""
    with tmpfs(tmp_path / "full", "300k") as mount:
        yield mount


def test_full_disk_during_inject_and_pretrain(world, full_disk):
    error_line(lab([*INJECT, "--limit", "3000", "--out", full_disk / "arm"], world),
               f"{full_disk / 'arm'}: cannot write (No space left on device)")
    error_line(lab([*PRETRAIN, "--out", full_disk / "pt"], world),
               f"{full_disk / 'pt.partial'}: cannot write (No space left on device)")
    assert list(full_disk.iterdir()) == []


# --- studies: leftovers, signals, --slurm, changed data -----------------------------------------

def test_a_resumed_stage_removes_what_a_killed_one_left(tmp_path):
    stage = next(s for s in expand(load_recipe(MICRO)) if s.kind == "inject")
    out = stage.out(tmp_path)
    out.parent.mkdir(parents=True)
    for leftover in (".tmp-abc123", ".old-def456"):
        (out.parent / (out.name + leftover) / "corpus").mkdir(parents=True)
    run_stage(stage, tmp_path, None, threads=1)
    assert stage.done(tmp_path)
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name)) == \
        sorted([out.name, out.name + ".lock", out.name + ".log", out.name + ".timing.json"])


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_study_says_how_to_resume(tmp_path, signum, code):
    study = tmp_path / "study"
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "study", str(MICRO), "--out",
                             str(study), "--workers", "2", "--set", "seeds=[0]"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(study.glob("stages/*.lock")) and proc.poll() is None:
        assert time.monotonic() < deadline, "no stage started"
        time.sleep(0.2)
    time.sleep(1.0)  # the workers are inside a stage
    os.killpg(proc.pid, signum) if signum == signal.SIGINT else proc.send_signal(signum)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    # The data's folder too (issue 59 row 13): a new shell has no LAB_CORPORA.
    corpora = Path(os.environ["LAB_CORPORA"]).resolve()
    assert err.splitlines() == [f"lab: interrupted; resume with: lab study {MICRO} --out {study} "
                                f"--set 'seeds=[0]' --workers 2 --corpora {corpora}"], err
    # No worker outlives the runner (they would finish stages behind the resumed run's back).
    deadline = time.monotonic() + 30  # the resource tracker notices its parent is gone
    while subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True).stdout.strip():
        assert time.monotonic() < deadline, "processes of the study outlived it"
        time.sleep(0.5)


def test_bad_slurm_parameters_are_one_line_even_in_a_dry_run(tmp_path):
    result = lab(["study", MICRO, "--out", tmp_path / "s", "--dry-run", "--slurm", "gpus=[1,"],
                 tmp_path)
    error_line(result, "--slurm gpus=[1,: value is not valid YAML")


def test_a_study_refuses_data_that_changed_since_it_began(tmp_path):
    recipe = load_recipe(MICRO)
    study = tmp_path / "study"
    study.mkdir()
    recorded = study_data(recipe, None)
    recorded["csn-java"]["valid/java_valid_0.jsonl.gz"] = "0" * 64  # another copy of CSN
    (study / SUMMARY).write_text(json.dumps({"study": "micro", "data": recorded}))
    plan = run_study(recipe, study, dry_run=True)
    assert plan["refusal"].startswith(f"{study / SUMMARY}: the data changed since this study "
                                      "began (csn-java valid/java_valid_0.jsonl.gz differs)")
    with pytest.raises(LabError) as refused:
        run_study(recipe, study)
    assert str(refused.value) == plan["refusal"] and not (study / "stages").exists()


def test_fingerprints_depend_on_content_not_on_where_the_file_is(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "a" / "x.txt", tmp_path / "b" / "x.txt"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text("same\n")
    assert cached_sha256(first) == cached_sha256(second)
    second.write_text("other\n")
    os.utime(second, ns=(1, 1))
    assert cached_sha256(second) != cached_sha256(first)
    assert len(json.loads((tmp_path / "cache" / "fingerprints.json").read_text())) == 3
