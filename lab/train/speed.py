"""Pre-training speed: what a run on a GPU gets by default, and how fast a run went.

Defaults by device. A pre-training leaves `bf16`, `compile` and `attention` unset (null) unless
told; they are then taken from where it runs (DEVICE_DEFAULTS). On a CPU that is what the lab
always did, so CPU numbers are unchanged; on a CUDA GPU it is bfloat16 autocast, and for the
small and paper presets torch.compile and the FlexAttention document kernel, plus what no option
controls there: fused AdamW, TF32 matmuls for what runs in float32, and pinned host memory. One process there
trains in the plain loop (lab.train.loop) instead of the HF Trainer. The manifest's `speed`
records what was used.

Throughput. A run's wall-clock average includes start-up and compilation, which dominate a short
run. `SteadyThroughput` times the steps after the first ones (STEADY_SKIP) to the end, and the
manifest gives that rate beside the wall-clock one, with the model FLOPs utilisation (MFU) where
the GPU's bf16 matmul rate is known (PEAK_BF16_TFLOPS).
"""
from __future__ import annotations

import time
from typing import Any

# setting -> (on a CUDA GPU, elsewhere). Compilation (tens of seconds for each new shape) and the
# flex kernel (compiled too) pay back only where steps are costly: on a GPU they are the default
# for the presets in COMPILED_PRESETS; a tiny model's whole run is shorter than its compilation.
DEVICE_DEFAULTS: dict[str, tuple[Any, Any]] = {
    "bf16": (True, False),
    "compile": (True, False),
    "attention": ("flex", "mask"),
    # lab.train.loop; one process without DeepSpeed only (pretrain.resolve_for_device)
    "loop": ("plain", "trainer"),
}
COMPILED_PRESETS = ("small", "paper")

# Dense bfloat16 matrix rate per GPU, in TFLOP/s, matched in this order against the name torch
# gives the device. Hopper's are the rate an 8192^3 bf16 matmul reached on H100 and H200 machines
# (769-798 TFLOP/s; the datasheet says 989), so MFU is against what the chip delivers; the others
# are datasheet figures. A device not listed gets no MFU.
PEAK_BF16_TFLOPS: tuple[tuple[str, float, str], ...] = (
    ("H200", 790.0, "measured: 8192^3 bf16 matmul (datasheet 989)"),
    ("H100 PCIe", 756.0, "datasheet"),
    ("H100", 790.0, "measured: 8192^3 bf16 matmul (datasheet 989)"),
    ("A100", 312.0, "datasheet"),
    ("L40S", 362.0, "datasheet"),
)

# Steps left out of the steady rate: the first holds compilation and allocator warm-up.
STEADY_SKIP_MIN, STEADY_SKIP_MAX, STEADY_MIN_STEPS = 2, 20, 3


def training_device() -> str:
    """Where the HF Trainer puts a pre-training: a CUDA GPU when one is visible."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_default(setting: str, value: Any, device: str, preset: str = "paper") -> Any:
    """`value`, or where it is None the default of `setting` for a `preset` model on `device`
    (cpu, cuda, cuda:N)."""
    if value is not None:
        return value
    on_gpu, elsewhere = DEVICE_DEFAULTS[setting]
    if setting in ("compile", "attention") and preset not in COMPILED_PRESETS:
        return elsewhere
    return on_gpu if str(device).startswith("cuda") else elsewhere


def peak_bf16_tflops(device_name: str | None) -> tuple[float, str] | None:
    """(TFLOP/s, where the figure comes from) of a GPU named like torch names it, or None."""
    if not device_name:
        return None
    for needle, tflops, source in PEAK_BF16_TFLOPS:
        if needle.lower() in device_name.lower():
            return tflops, source
    return None


def shape_matmul_parameters(family: str, layers: int, hidden: int, ffn: int, vocab: int) -> int:
    """Weights used in matrix products once per token: per layer q, k, v and the attention
    output (4 x hidden^2) and the feed-forward's two matrices (2 x hidden x ffn); then GPT-2's
    output head (vocab x hidden, tied or not: the product happens either way) or RoBERTa's MLM
    dense layer (hidden^2) and decoder (vocab x hidden). Embedding look-ups, norms and biases
    are not matmuls. The one count for the lab's MFU and benchmarks/plain_loop.py."""
    if family not in ("gpt2", "roberta"):
        raise ValueError(f"model {family!r}: choose from gpt2, roberta")
    head = vocab * hidden + (hidden * hidden if family == "roberta" else 0)
    return layers * (4 * hidden * hidden + 2 * hidden * ffn) + head


def shape_flops_per_token(layers: int, hidden: int, block: int, matmul_params: int) -> int:
    """Training FLOPs per token: 6 per matmul weight (2 forward, 4 backward) plus attention's
    scores and values, 12 x layers x hidden x block (PaLM's appendix B), not halved for causal
    models (PaLM's, nanoGPT's and Megatron's convention), so both families of one shape have
    the same attention FLOPs. Per-document attention skips the tiles two documents never share:
    this is what a dense run of the shape does, the convention that lets MFU compare kernels."""
    return 6 * matmul_params + 12 * layers * hidden * block


def _shape(config: Any) -> tuple[str, int, int, int, int]:
    """(family, layers, hidden, ffn, vocab) of a GPT-2 or RoBERTa config."""
    if getattr(config, "model_type", "") == "gpt2":
        return ("gpt2", config.n_layer, config.n_embd, config.n_inner or 4 * config.n_embd,
                config.vocab_size)
    return ("roberta", config.num_hidden_layers, config.hidden_size, config.intermediate_size,
            config.vocab_size)


def matmul_parameters(config: Any) -> int:
    return shape_matmul_parameters(*_shape(config))


def flops_per_token(config: Any, block_size: int) -> int:
    _, layers, hidden, _, _ = _shape(config)
    return shape_flops_per_token(layers, hidden, block_size, matmul_parameters(config))


def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def steady_skip(total_steps: int) -> int:
    return max(STEADY_SKIP_MIN, min(STEADY_SKIP_MAX, total_steps // 5))


def make_steady_throughput_callback() -> Any:
    from transformers import TrainerCallback

    class SteadyThroughput(TrainerCallback):
        """Times the optimizer steps after the first steady_skip(max_steps) to the last one,
        synchronising the GPU at both ends only (every step between runs ahead asynchronously,
        as it would untimed). Checkpoints saved between them count; the final save does not."""

        def __init__(self) -> None:
            self.start: tuple[float, int] | None = None
            self.end: tuple[float, int] | None = None
            self.began: float | None = None
            self.first_step: int | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.began, self.first_step = time.perf_counter(), state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            if self.start is None and state.global_step - self.first_step >= steady_skip(
                    state.max_steps - self.first_step):
                _synchronize()
                self.start = (time.perf_counter(), state.global_step)
            elif state.global_step >= state.max_steps:
                # the last step: the final checkpoint, written after it, is not training
                _synchronize()
                self.end = (time.perf_counter(), state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            if self.end is None:
                _synchronize()
                self.end = (time.perf_counter(), state.global_step)

        def record(self, tokens_per_step: int, flops_per_token: int) -> dict[str, Any]:
            """The steady rate in tokens (every position of every sequence) per second, the
            seconds before it, and MFU where the GPU's rate is known."""
            record: dict[str, Any] = {"steady_tokens_per_second": None, "steady_steps": None,
                                      "startup_seconds": None}
            if self.start and self.end and self.end[1] - self.start[1] >= STEADY_MIN_STEPS:
                seconds = self.end[0] - self.start[0]
                steps = self.end[1] - self.start[1]
                rate = steps * tokens_per_step / seconds
                record.update(steady_tokens_per_second=round(rate, 1),
                              steady_steps=[self.start[1], self.end[1]],
                              startup_seconds=round(self.start[0] - self.began, 2))
                peak = peak_bf16_tflops(gpu_name())
                record["flops_per_token"] = flops_per_token
                if peak:
                    record["mfu"] = round(rate * flops_per_token / (peak[0] * 1e12), 4)
                    record["peak_bf16_tflops"] = {"value": peak[0], "source": peak[1]}
                else:
                    record["mfu"] = None
            return record

    return SteadyThroughput()
