"""Issue 70's minor rows that the fault table cannot express (tests/faults/rows_i70_minor.py
holds the others): a full disk that leaves `OUT.partial` behind says so (the table counts any
file beside --out as a change); the Docker image records the commit it was built from and has
the slurm extra."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.faults.world import run_lab, tmpfs


@pytest.fixture
def small_disk(tmp_path):
    """A 3,000 KiB tmpfs: room for one micro GPT-2 checkpoint (about 2 MiB), not for two."""
    with tmpfs(tmp_path / "disk", "3000k") as folder:
        yield folder


def test_a_full_disk_names_the_kept_checkpoint_and_resume(micro_world, small_disk, tmp_path):
    out = small_disk / "pt"
    result = run_lab(["pretrain", "--model", "gpt2", "--corpus", str(micro_world / "paired"),
                      "--tokenizer", str(micro_world / "tok"), "--preset", "micro",
                      "--max-steps", "3", "--save-steps", "1", "--block-size", "128",
                      "--batch-size", "4", "--cache-dir", str(tmp_path / "cache"),
                      "--out", str(out)], tmp_path)
    kept = sorted(p.name for p in (small_disk / "pt.partial" / "checkpoints").glob("checkpoint-*"))
    assert result.rc == 2 and result.traceback is None
    error = result.stderr.strip().splitlines()[-1]
    assert kept, "no whole checkpoint was left: the disk is too small for this test"
    assert error.startswith(f"lab: error: {out}.partial: cannot write (No space left on device)")
    assert f"its {kept[-1]} is kept" in error and "--resume" in error
    assert not out.exists()


DOCKERFILE = Path(__file__).resolve().parents[1] / "docker" / "Dockerfile"


def test_outside_git_the_commit_comes_from_the_image(monkeypatch):
    """The image has no .git (no git either): git_commit reads the build's LAB_GIT_COMMIT."""
    import lab.common as common

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(common.subprocess, "run", no_git)
    monkeypatch.setenv(common.GIT_COMMIT_VARIABLE, "0123abc")
    assert common.git_commit() == "0123abc"
    monkeypatch.delenv(common.GIT_COMMIT_VARIABLE)
    assert common.git_commit() is None


def test_the_image_takes_the_commit_and_the_slurm_extra():
    text = DOCKERFILE.read_text(encoding="utf-8")
    from lab.common import GIT_COMMIT_VARIABLE

    assert re.search(rf"^ARG {GIT_COMMIT_VARIABLE}=", text, re.M)
    assert re.search(rf"^\s+{GIT_COMMIT_VARIABLE}=\$\{{{GIT_COMMIT_VARIABLE}\}}", text, re.M)
    assert re.search(rf"^LABEL org\.opencontainers\.image\.revision=\$\{{{GIT_COMMIT_VARIABLE}",
                     text, re.M)
    assert re.search(r"^RUN pip install -e \.\[slurm\]", text, re.M)
