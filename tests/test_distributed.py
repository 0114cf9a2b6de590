"""Two-process pre-training on CPU under torchrun: plain DDP and DeepSpeed ZeRO over gloo.

The same `lab pretrain` code path as one process and as a GPU cluster. Checked: the run exits 0;
only rank 0 writes OUT (no OUT.partial left) and its manifest lists both ranks; the ranks trained
on different data (first-batch hashes differ) and ended as identical replicas (final-weights
hashes agree, and equal the saved model's); the loss is finite; every backend starts from the
same weights, sees the same data and follows the same loss curve.

DeepSpeed compiles its shared-memory comm op (C++) on its first CPU run, about a minute on two
cores, cached in ~/.cache/torch_extensions; later runs take seconds.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # seconds per subprocess; a first DeepSpeed run compiles C++ ops
STEPS = 8
BACKENDS = {"ddp": None, "zero2": "zero2.json", "zero3": "zero3.json"}


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", LAB_CACHE=str(cache), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",  # CPU and gloo even on a GPU machine
        DS_ACCELERATOR="cpu",
    )
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _run(cmd: list[str], env: dict[str, str], log: Path) -> None:
    """Runs cmd in its own process group, so a timeout also ends the ranks torchrun started."""
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        log.write_text(output, encoding="utf-8")
        pytest.fail(f"timed out after {TIMEOUT} s: {' '.join(cmd)}\n{output[-4000:]}")
    log.write_text(output, encoding="utf-8")
    assert proc.returncode == 0, f"exit {proc.returncode}: {' '.join(cmd)}\n{output[-4000:]}"


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """A small paired arm and its tokenizer, built with the lab's own commands."""
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("LAB_CORPORA is not set (point it at the shared corpora folder)")
    root = tmp_path_factory.mktemp("distributed")
    env = _env(root / "cache")
    lab = [sys.executable, "-m", "lab.cli"]
    common = ["--benchmark", "codetrans", "--seed", "0", "--limit", "600", "--force"]
    _run(lab + ["inject", "--setting", "control", "--out", str(root / "control"), *common],
         env, root / "control.log")
    _run(lab + ["tokenizer", "train", "--corpus", str(root / "control"), "--out", str(root / "tok"),
                "--benchmarks", "codetrans", "--vocab-size", "1000", "--force"],
         env, root / "tok.log")
    _run(lab + ["inject", "--setting", "paired", "--fraction", "0.25", "--out",
                str(root / "paired"), *common], env, root / "paired.log")
    return {"root": root, "env": env, "corpus": root / "paired", "tokenizer": root / "tok"}


@pytest.fixture(scope="module")
def trained(micro):
    """Runs one backend on 2 ranks the first time it is asked for; returns (OUT, manifest)."""
    done: dict[str, tuple[Path, dict]] = {}

    def run(backend: str, model: str = "gpt2") -> tuple[Path, dict]:
        key = f"{model}-{backend}"
        if key not in done:
            if BACKENDS[backend]:
                pytest.importorskip("deepspeed")
            out = micro["root"] / f"pt-{key}"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                   "--nproc_per_node", "2", "-m", "lab.cli", "pretrain", "--model", model,
                   "--corpus", str(micro["corpus"]), "--tokenizer", str(micro["tokenizer"]),
                   "--preset", "micro", "--block-size", "64", "--batch-size", "4",
                   "--max-steps", str(STEPS), "--log-steps", "2", "--seed", "0",
                   "--out", str(out)]
            if BACKENDS[backend]:
                cmd += ["--deepspeed", str(REPO / "recipes" / "deepspeed" / BACKENDS[backend])]
            _run(cmd, micro["env"], micro["root"] / f"pt-{key}.log")
            done[key] = out, json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        return done[key]

    return run


@pytest.mark.long
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_two_ranks(trained, backend):
    out, manifest = trained(backend)
    assert not out.with_name(out.name + ".partial").exists()
    assert manifest["world_size"] == 2
    assert manifest["steps"] == STEPS
    ranks = manifest["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["first_batch_sha256"] != ranks[1]["first_batch_sha256"], "ranks saw the same data"
    assert ranks[0]["final_weights_sha256"] == ranks[1]["final_weights_sha256"], "replicas differ"
    assert manifest["final_weights_sha256"] == ranks[0]["final_weights_sha256"]
    assert manifest["final_weights_sha256"] != manifest["init_weights_sha256"]
    losses = [h["loss"] for h in manifest["loss"]["history"]] + [manifest["loss"]["train_loss"]]
    assert len(losses) > 1 and all(math.isfinite(x) for x in losses)
    if BACKENDS[backend]:
        assert manifest["config"]["deepspeed"].endswith(BACKENDS[backend])

    from transformers import AutoModelForCausalLM

    from lab.train.pretrain import state_sha256

    saved = AutoModelForCausalLM.from_pretrained(out / "model")
    assert state_sha256(saved) == manifest["final_weights_sha256"], "saved model is not the trained one"


@pytest.mark.long
def test_backends_agree(trained):
    """DDP and ZeRO start from the same weights, deal the same batches to the same ranks and
    follow the same loss curve (ZeRO shards optimizer state and gradients, not the maths)."""
    pytest.importorskip("deepspeed")
    _, ddp = trained("ddp")
    for backend in ("zero2", "zero3"):
        _, zero = trained(backend)
        assert zero["init_weights_sha256"] == ddp["init_weights_sha256"]
        assert [r["first_batch_sha256"] for r in zero["ranks"]] == \
            [r["first_batch_sha256"] for r in ddp["ranks"]]
        for a, b in zip(ddp["loss"]["history"], zero["loss"]["history"], strict=True):
            assert a["step"] == b["step"] and a["loss"] == pytest.approx(b["loss"], abs=1e-3)


@pytest.mark.long
def test_masked_lm_loss_is_not_scaled_by_world_size(trained):
    """RoBERTa's loss is a per-process mean; averaged over 2 ranks it must stay near ln(vocab)
    at initialisation (the Trainer once multiplied it by the process count)."""
    _, manifest = trained("ddp", model="roberta")
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    first = manifest["loss"]["history"][0]["loss"]
    assert abs(first - math.log(manifest["model"]["vocab_size"])) < 1.0, first


def test_a_stale_deepspeed_build_lock_is_named(tmp_path, monkeypatch, capsys):
    """A lock left by a build killed midway makes every later DeepSpeed run wait without a word;
    lab pretrain names it (and leaves a fresh one, which may be a build running now, alone)."""
    import time

    from lab.train.common import STALE_BUILD_LOCK_S, warn_of_stale_build_locks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    fresh, stale = tmp_path / "deepspeed_shm_comm" / "lock", tmp_path / "cpu_adam" / "lock"
    for lock in (fresh, stale):
        lock.parent.mkdir()
        lock.touch()
    old = time.time() - STALE_BUILD_LOCK_S - 60
    os.utime(stale, (old, old))
    assert warn_of_stale_build_locks() == [stale]
    err = capsys.readouterr().err
    assert str(stale) in err and "delete it if no build is running" in err and str(fresh) not in err
