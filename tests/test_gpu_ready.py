"""GPU-ready stages on a machine without a GPU: a GPU asked for is refused in one line before any
weights load (never a silent CPU run), bfloat16 inference runs, the recipe's device and precision
key evaluation and probes only, and scripts/gpu-smoke.sh's dry run shows its plan."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError

REPO = Path(__file__).resolve().parents[1]


def _lab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _one_line(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert fragment in result.stderr, result.stderr


@pytest.mark.parametrize("command", [
    ["evaluate", "--model", "m", "--task", "translation", "--out", "ev"],
    ["probe", "--model", "m", "--out", "ev"],
    ["llm-eval", "--model", "m", "--contaminated", "a.json", "--perturbed", "b.json", "--out", "ev"],
])
@pytest.mark.parametrize("placement, message", [
    (["--device", "cuda"], "--device cuda: no CUDA GPU is visible here"),
    (["--device", "cuda:1"], "--device cuda:1: no CUDA GPU is visible here"),
    (["--device", "tpu"], "--device tpu: choose cpu, cuda, cuda:N"),
    (["--device", "cpu", "--dtype", "float16"], "--dtype float16: half precision inference needs a GPU"),
    (["--dtype", "half"], "--dtype half: choose from float32, bfloat16, float16"),
])
def test_a_placement_that_cannot_be_met_is_refused_before_anything_loads(tmp_path, command,
                                                                         placement, message):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text('{"question": "int a;", "answer": "int a;"}\n')
    _one_line(_lab(command + placement, tmp_path), message)
    assert not (tmp_path / "ev").exists()


def test_bfloat16_inference_runs_on_a_cpu(micro_world, tmp_path):
    from lab.eval.generate import run_evaluate
    from lab.detect.probe import run_probe
    from lab.train.pretrain import PretrainConfig, run_pretrain

    model = tmp_path / "pt"
    run_pretrain(PretrainConfig(model="gpt2", corpus=micro_world / "paired", out=model,
                                tokenizer=micro_world / "tok", preset="micro", max_steps=4,
                                batch_size=8, block_size=128, cache_dir=tmp_path / "cache"))
    ids = tmp_path / "ids.txt"
    ids.write_text("codetrans:test:0\ncodetrans:test:1\n")
    full = run_evaluate(model, "translation", ids=ids, max_new_tokens=8, metrics=("bleu",),
                        out=tmp_path / "fp32")
    half = run_evaluate(model, "translation", ids=ids, max_new_tokens=8, metrics=("bleu",),
                        dtype="bfloat16", out=tmp_path / "bf16")
    assert full["samples"] == half["samples"] == 2
    probed = run_probe(model, tmp_path / "probe", max_samples=6, max_names=2, dtype="bfloat16")
    assert probed["probes"]["loss"]["samples"]["injected"] > 0


def test_recipe_device_and_precision_key_evaluation_and_probes_only():
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand

    recipe = REPO / "recipes" / "quickstart.yaml"
    before = {s.key: s.kind for s in expand(load_recipe(recipe))}
    # pre-training pinned to what a CPU does (else the GPU's defaults key it: test_gpu_speed)
    after = {s.key: s.kind for s in expand(load_recipe(recipe, ["resources.device=cuda",
                                                                "resources.dtype=bfloat16",
                                                                "pretrain.bf16=false",
                                                                "pretrain.loop=trainer"]))}
    changed = sorted({kind for key, kind in before.items() if key not in after})
    assert changed == ["evaluate", "probe"]
    for bad, message in (("resources.device=tpu", "resources.device: 'tpu': choose cpu, cuda"),
                         ("resources.dtype=half", "resources.dtype: 'half': choose from")):
        with pytest.raises(LabError, match=message):
            load_recipe(recipe, [bad])


def test_gpu_smoke_dry_run_shows_both_plans_and_refuses_to_run_without_a_gpu(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
           "LAB": f"{sys.executable} -m lab.cli", "GPU_SMOKE_OUT": str(tmp_path / "smoke"),
           "COLUMNS": "200"}
    script = REPO / "scripts" / "gpu-smoke.sh"
    dry = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=600)
    # both plans shown, each refused as its real run would be here (no GPU): exit 2
    assert dry.returncode == 2, dry.stderr
    assert "== one GPU" in dry.stdout and "== two GPUs, ZeRO-2, bf16" in dry.stdout
    assert dry.stdout.count("29 stages, 0 done") == 2
    assert dry.stderr.count("no CUDA GPU is visible here") == 2, dry.stderr
    assert not (tmp_path / "smoke").exists()
    real = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert real.returncode == 2 and "no CUDA GPU visible" in real.stderr
