"""benchmarks/plain_loop.py: the plain PyTorch loop the lab's GPU pre-training is measured
against. Tiny shapes, float32, eager, CPU: its models train, match the transformers models of
the same shape (parameter counts, and the loss itself on copied weights), its FLOP count is the
PaLM formula, and the CLI writes its result."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # benchmarks/ has no __init__.py: a namespace package
    sys.path.insert(0, str(REPO))

from benchmarks.plain_loop import (  # noqa: E402
    build_model, flops_per_token, main, matmul_parameters, parameter_count, run,
)

@pytest.fixture(autouse=True)
def one_thread():
    """Tiny shapes on one thread: two threads on a shared two-core machine spin against other
    processes (a 4 ms step took 650 ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = dict(layers=2, hidden=64, heads=2, ffn=256, vocab=500, block=32)
RUN = dict(TINY, batch=2, dtype="fp32", compile=False, device="cpu", quiet=True)


def hf_model(model: str, positions: int | None = None):
    from transformers import GPT2Config, GPT2LMHeadModel, RobertaConfig, RobertaForMaskedLM

    t = TINY
    if model == "gpt2":  # as lab.models.build_config builds the paper preset: an untied head
        config = GPT2Config(n_layer=t["layers"], n_embd=t["hidden"], n_head=t["heads"],
                            n_inner=t["ffn"], n_positions=positions or t["block"],
                            vocab_size=t["vocab"], tie_word_embeddings=False,
                            bos_token_id=0, eos_token_id=2, pad_token_id=1)
        return GPT2LMHeadModel(config)
    config = RobertaConfig(num_hidden_layers=t["layers"], hidden_size=t["hidden"],
                           num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                           max_position_embeddings=t["block"] + 2, type_vocab_size=1,
                           vocab_size=t["vocab"], bos_token_id=0, eos_token_id=2, pad_token_id=1)
    return RobertaForMaskedLM(config)


def hf_matmul_weights(hf) -> int:
    """Weights of HF's Linear and Conv1D modules (+ RoBERTa's decoder, tied to the embeddings)."""
    from transformers.pytorch_utils import Conv1D

    return sum(m.weight.numel() for m in hf.modules() if isinstance(m, (torch.nn.Linear, Conv1D)))


@pytest.mark.parametrize("model", ["gpt2", "roberta"])
def test_parameter_counts_match_transformers(model):
    ours = build_model(model, **TINY)
    hf = hf_model(model)
    # RobertaForMaskedLM has no pooler, and neither has ours: the totals are equal, tied
    # decoder counted once, token-type row and the decoder bias included.
    assert parameter_count(ours) == sum(p.numel() for p in hf.parameters())
    expected = matmul_parameters(model, TINY["layers"], TINY["hidden"], TINY["ffn"], TINY["vocab"])
    assert ours.matmul_weights() == expected
    assert hf_matmul_weights(hf) == expected  # RoBERTa's decoder is an nn.Linear in HF


def test_paper_shape_counts():
    """The paper preset at vocabulary 16,000, by hand."""
    h, f, v, n = 768, 3072, 16000, 12
    per_layer = 4 * h * h + 2 * h * f  # 7,077,888
    assert matmul_parameters("gpt2", n, h, f, v) == 12 * per_layer + v * h == 97_222_656
    assert matmul_parameters("roberta", n, h, f, v) == 97_222_656 + h * h
    with torch.device("meta"):
        paper = build_model("gpt2", v, 512, n, h, 12, f)
    assert parameter_count(paper) == (
        97_222_656 + v * h + 512 * h + n * (2 * 2 * h + 3 * h + h + f + h) + 2 * h)


def test_flops_per_token_by_hand():
    # 6 * matmul params + 12 * layers * hidden * block
    assert flops_per_token(2, 64, 32, 130_304) == 6 * 130_304 + 12 * 2 * 64 * 32 == 830_976
    assert flops_per_token(12, 768, 512, 97_222_656) == 583_335_936 + 56_623_104 == 639_959_040
    tiny = matmul_parameters("gpt2", 2, 64, 256, 500)
    assert tiny == 2 * (4 * 64 * 64 + 2 * 64 * 256) + 500 * 64 == 130_304


def _copy_gpt2(ours, hf):
    t = hf.transformer
    sd = {"wte.weight": t.wte.weight, "wpe.weight": t.wpe.weight, "ln_f.weight": t.ln_f.weight,
          "ln_f.bias": t.ln_f.bias, "lm_head.weight": hf.lm_head.weight}
    for i, b in enumerate(t.h):  # Conv1D keeps (in, out): transpose
        sd.update({f"h.{i}.ln_1.weight": b.ln_1.weight, f"h.{i}.ln_1.bias": b.ln_1.bias,
                   f"h.{i}.ln_2.weight": b.ln_2.weight, f"h.{i}.ln_2.bias": b.ln_2.bias,
                   f"h.{i}.attn.qkv.weight": b.attn.c_attn.weight.t(),
                   f"h.{i}.attn.qkv.bias": b.attn.c_attn.bias,
                   f"h.{i}.attn.proj.weight": b.attn.c_proj.weight.t(),
                   f"h.{i}.attn.proj.bias": b.attn.c_proj.bias,
                   f"h.{i}.mlp.fc.weight": b.mlp.c_fc.weight.t(), f"h.{i}.mlp.fc.bias": b.mlp.c_fc.bias,
                   f"h.{i}.mlp.proj.weight": b.mlp.c_proj.weight.t(),
                   f"h.{i}.mlp.proj.bias": b.mlp.c_proj.bias})
    ours.load_state_dict({k: v.detach().contiguous() for k, v in sd.items()}, strict=True)


def _copy_roberta(ours, hf):
    e, head = hf.roberta.embeddings, hf.lm_head
    sd = {"word_embeddings.weight": e.word_embeddings.weight,
          "position_embeddings.weight": e.position_embeddings.weight,
          "token_type_embeddings.weight": e.token_type_embeddings.weight,
          "ln_emb.weight": e.LayerNorm.weight, "ln_emb.bias": e.LayerNorm.bias,
          "head_dense.weight": head.dense.weight, "head_dense.bias": head.dense.bias,
          "head_ln.weight": head.layer_norm.weight, "head_ln.bias": head.layer_norm.bias,
          "head_bias": head.bias}
    for i, layer in enumerate(hf.roberta.encoder.layer):
        a = layer.attention.self
        sd.update({
            f"layer.{i}.attn.qkv.weight": torch.cat([a.query.weight, a.key.weight, a.value.weight]),
            f"layer.{i}.attn.qkv.bias": torch.cat([a.query.bias, a.key.bias, a.value.bias]),
            f"layer.{i}.attn.proj.weight": layer.attention.output.dense.weight,
            f"layer.{i}.attn.proj.bias": layer.attention.output.dense.bias,
            f"layer.{i}.ln_1.weight": layer.attention.output.LayerNorm.weight,
            f"layer.{i}.ln_1.bias": layer.attention.output.LayerNorm.bias,
            f"layer.{i}.mlp.fc.weight": layer.intermediate.dense.weight,
            f"layer.{i}.mlp.fc.bias": layer.intermediate.dense.bias,
            f"layer.{i}.mlp.proj.weight": layer.output.dense.weight,
            f"layer.{i}.mlp.proj.bias": layer.output.dense.bias,
            f"layer.{i}.ln_2.weight": layer.output.LayerNorm.weight,
            f"layer.{i}.ln_2.bias": layer.output.LayerNorm.bias})
    ours.load_state_dict({k: v.detach().contiguous() for k, v in sd.items()}, strict=True)


@pytest.mark.parametrize("model", ["gpt2", "roberta"])
def test_same_loss_as_transformers_on_copied_weights(model):
    """Same maths per token: HF's weights copied in, dropout off (eval), the losses agree."""
    torch.manual_seed(0)
    block, vocab = TINY["block"], TINY["vocab"]
    # ids >= 5: no pad token (HF RoBERTa derives positions from it), no special ids.
    tokens = torch.randint(5, vocab, (2, block + (model == "gpt2")))
    if model == "gpt2":  # HF scores block + 1 tokens' block next-token predictions, as ours
        hf = hf_model(model, positions=block + 1).eval()
        ours = build_model(model, **{**TINY, "positions": block + 1}).eval()
        _copy_gpt2(ours, hf)
        with torch.no_grad():
            expected = hf(input_ids=tokens, labels=tokens).loss
            got = ours(tokens)
            # the lab's batches (--data): block tokens, labels -100 where nothing is predicted
            labels = tokens.clone()
            labels[:, :3] = -100
            labelled = (hf(input_ids=tokens, labels=labels).loss, ours(tokens, labels))
        assert torch.allclose(*labelled, rtol=1e-5, atol=1e-5), labelled
    else:
        hf = hf_model(model).eval()
        ours = build_model(model, **TINY).eval()
        _copy_roberta(ours, hf)
        masked = torch.rand(tokens.shape) < 0.15
        masked[0, 0] = True
        inputs = torch.where(masked, torch.full_like(tokens, 4), tokens)
        labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
        with torch.no_grad():
            expected = hf(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                          labels=labels).loss
            got = ours(inputs, labels)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), (got, expected)


@pytest.mark.parametrize("model", ["gpt2", "roberta"])
def test_trains_finite_loss_and_overfits_a_fixed_batch(model):
    quick = run(model=model, steps=3, warmup=1, **RUN)
    assert quick["loss_finite"] and len(quick["losses"]) == 1 + 1 + 3  # first, warm-up, timed
    assert quick["tokens_per_second"] > 0 and quick["mfu"] is None
    fixed = run(model=model, steps=20, warmup=0, batches=1, lr=3e-3, **RUN)
    losses = fixed["losses"]
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses


def test_mfu_with_a_peak():
    result = run(model="gpt2", steps=2, warmup=0, peak_tflops=1.0, **RUN)
    expected = result["tokens_per_second"] * result["flops_per_token"] / 1e12
    assert result["mfu"] == pytest.approx(expected)
    assert result["tokens_per_second"] == pytest.approx(2 * 32 / result["step_seconds_median"])


def test_measure_peak_only():
    result = run(measure_peak=True, peak_size=64, steps=0, device="cpu", dtype="fp32", quiet=True)
    assert result["peak_tflops_measured"] > 0 and result["mfu_peak_tflops"] > 0
    assert result["tokens_per_second"] is None and "params" not in result


def test_cli_writes_json(tmp_path):
    out = tmp_path / "sub" / "result.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "plain_loop.py"), "--model", "roberta",
         "--layers", "2", "--hidden", "64", "--heads", "2", "--ffn", "256", "--vocab", "500",
         "--block", "32", "--batch", "2", "--steps", "3", "--warmup", "1", "--dtype", "fp32",
         "--no-compile", "--device", "cpu", "--measure-peak", "--peak-size", "64",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text(encoding="utf-8"))
    assert {"tokens_per_second", "step_seconds_median", "mfu"} <= set(result)
    assert result["tokens_per_second"] > 0 and result["step_seconds_median"] > 0
    assert result["peak_tflops"] is None and result["peak_tflops_measured"] > 0
    assert result["mfu"] is not None  # the measured peak stands in for --peak-tflops
    last = proc.stdout.strip().splitlines()[-2]
    assert last.startswith("plain-loop roberta fp32 eager: ") and "tokens/s" in last


def test_cli_without_peak_has_no_mfu(tmp_path, capsys):
    """The same CLI in-process (main), defaults for what is not given: gpt2, no compile."""
    out = tmp_path / "r.json"
    assert main(["--layers", "1", "--hidden", "32", "--heads", "2", "--ffn", "64", "--vocab",
                 "100", "--block", "16", "--batch", "2", "--steps", "2", "--warmup", "0",
                 "--dtype", "fp32", "--device", "cpu", "--json", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["mfu"] is None and result["model"] == "gpt2" and result["compiled"] is False
    assert result["tokens_per_second"] > 0 and result["step_seconds_median"] > 0
    assert "MFU n/a" in capsys.readouterr().out


def test_bad_data_is_refused_in_one_line(tmp_path, capsys):
    import numpy as np

    missing = tmp_path / "none.npz"
    assert main(["--data", str(missing), *map(str, ["--steps", 1])]) == 2
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, input_ids=np.zeros((2, 3, 4), dtype=np.int32),
             labels=np.zeros((2, 3, 4), dtype=np.int32))
    assert main(["--data", str(wrong), "--model", "gpt2", "--layers", "1", "--hidden", "16",
                 "--heads", "2", "--ffn", "32", "--vocab", "50", "--block", "8", "--batch", "2",
                 "--steps", "1", "--device", "cpu", "--dtype", "fp32"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(e.startswith("plain_loop: error: ") for e in errors)
    assert "none.npz" in errors[0] and "expected (batches, 2, 8)" in errors[1]
