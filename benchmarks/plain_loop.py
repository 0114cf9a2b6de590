"""A plain PyTorch pre-training loop (nanoGPT style): the baseline the lab's GPU pre-training is
measured against ("paper-shape pre-training at >= 0.95x a compiled plain loop and >= 40% MFU").

    python benchmarks/plain_loop.py --model gpt2 --compile --dtype bf16 --peak-tflops 989
    python benchmarks/plain_loop.py --model roberta --compile --measure-peak --json out.json

Quick CPU smoke run (tiny shapes):

    python benchmarks/plain_loop.py --model gpt2 --layers 2 --hidden 128 --heads 2 --ffn 512 \\
        --vocab 2000 --block 128 --batch 4 --steps 5 --warmup 2 --compile

No HF Trainer and no transformers: torch, and the lab's FLOPs count (lab.train.speed). Two
model families with the same maths per token as the lab's transformers models of the same
shape (defaults: the `paper` preset, 12 layers, hidden 768, 12 heads, FFN 3072, block 512,
vocabulary 16,000):

  gpt2     GPT2LMHeadModel (untied head, as the lab's paper preset): learned token + position
           embeddings -> dropout; pre-LN blocks (LN -> causal SDPA self-attention -> proj ->
           dropout -> add; LN -> FFN with tanh GELU ("gelu_new") -> dropout -> add); final LN;
           Linear(hidden, vocab, bias=False); cross entropy over next tokens. LN eps 1e-5.
  roberta  RobertaForMaskedLM: (word + token type 0 + position) embeddings -> LN -> dropout;
           post-LN layers (bidirectional SDPA -> dense -> dropout -> add & LN; FFN with exact
           erf GELU -> dropout -> add & LN); MLM head dense -> GELU -> LN -> decoder tied to the
           word embeddings + bias; cross entropy over the masked 15% (mask drawn on the device
           with torch.rand every step, labels -100 elsewhere). LN eps 1e-12. Positions count
           from padding_idx + 1 = 2, as RoBERTa's do (the table has block + 2 rows).

Differences from the transformers modules, none of which changes the FLOPs or the parameters:
q, k and v are one Linear(hidden, 3 * hidden) (HF RoBERTa has three Linears, HF GPT-2 one
Conv1D); attention has no probability dropout (dropout_p=0: the lab's fast GPU path uses none;
HF's eager/SDPA attention applies attn_pdrop / attention_probs_dropout_prob = 0.1 in training);
GPT-2's loss uses `block` next-token targets (the data is block + 1 tokens long) where HF's
shifts the logits and scores block - 1; RoBERTa's masked positions take one mask id (no 80/10/10
split: elementwise work, negligible). Hidden dropout (residual, embedding) is 0.1 as in both HF
configs (--dropout). Parameter totals equal the HF models' (tests/test_plain_loop.py); the
lab's paper GPT-2 has a 1,024-row position table (n_positions 1024): --positions 1024 counts it
(110.4M at vocabulary 16,000; embedding rows cost no FLOPs). Initialisation follows HF's (normal 0.02; GPT-2's c_proj scaled by
1/sqrt(2 * layers)).

Training step: forward (loss inside the model, so torch.compile sees it), backward, gradient
clipping at --clip (1.0, the HF Trainer's max_grad_norm; 0 turns it off), AdamW (lr 5e-4,
weight decay 0.01 on weights with two or more dimensions, none on biases and LN, as the HF
Trainer; fused on CUDA), zero_grad(set_to_none=True). No LR schedule (a Python-side multiply).
Data: --batches distinct random batches generated on the device once and rotated, so the data
loader costs nothing; or --data FILE, a .npz of `input_ids` and `labels` (int arrays of shape
(batches, batch, block), labels -100 where nothing is predicted), the batches a `lab pretrain`
run trains on in its order, collated by the lab (benchmarks/gpu_check.py writes them): step i
takes batch i, GPT-2 predicting labels[:, 1:] from every position but the last (HF's shift) and
RoBERTa the lab's masked positions. Both are moved to the device once, as the random ones are. bf16 = torch.autocast(bfloat16) over fp32 master weights.

Timing: the first step (which compiles, with --compile) and --warmup further steps are untimed
and reported apart (compile+warmup seconds); then --steps timed steps. On CUDA each step is
bracketed by CUDA events (no synchronisation between steps, so the host may queue ahead as in
real training; one synchronize at the end); elsewhere by time.perf_counter(). The median step
time is reported, tokens/s = batch * block / median step.

FLOPs per token: 6 * matmul parameters + 12 * layers * hidden * block (PaLM, appendix B), where
matmul parameters are the weights used in matrix multiplications (attention qkv + output
projection, FFN, the output head / MLM dense + decoder), not embedding lookups, LN or biases.
MFU = tokens/s * FLOPs per token / peak FLOP/s, the peak being --peak-tflops (e.g. the vendor's
dense bf16 figure), or else the rate --measure-peak measured (a bf16 8192^3 matmul on CUDA).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab, run from a checkout
from lab.train.speed import shape_flops_per_token, shape_matmul_parameters  # noqa: E402

MODELS = ("gpt2", "roberta")
# The lab's `paper` preset (lab/models.py) and the shapes of the GPU check.
DEFAULTS: dict[str, Any] = dict(
    model="gpt2", vocab=16000, block=512, batch=32, layers=12, hidden=768, heads=12, ffn=3072,
    positions=None, steps=30, warmup=10, compile=False, dtype="bf16", device=None,
    fused_adamw=None, tf32=None, peak_tflops=None, measure_peak=False, peak_size=None,
    json=None, seed=0, lr=5e-4, weight_decay=0.01, clip=1.0, dropout=0.1, mlm_probability=0.15,
    batches=8, data=None, quiet=False,
)
GPT2_LN_EPS = 1e-5       # GPT2Config.layer_norm_epsilon
ROBERTA_LN_EPS = 1e-12   # RobertaConfig.layer_norm_eps
ROBERTA_PAD_ID = 1       # RobertaConfig.pad_token_id: positions start at pad + 1
INIT_STD = 0.02          # initializer_range of both configs


# --- FLOPs ---------------------------------------------------------------------------------

# The counts are the lab's own (lab.train.speed), so the plain loop's MFU and `lab pretrain`'s
# are one formula: matmul_parameters(model, layers, hidden, ffn, vocab) and
# flops_per_token(layers, hidden, block, matmul_params).
matmul_parameters = shape_matmul_parameters
flops_per_token = shape_flops_per_token


# --- models --------------------------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, h))


class FFN(nn.Module):
    def __init__(self, hidden: int, ffn: int, approximate: str):
        super().__init__()
        self.fc = nn.Linear(hidden, ffn)
        self.proj = nn.Linear(ffn, hidden)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=GPT2_LN_EPS)
        self.attn = SelfAttention(hidden, heads, causal=True)
        self.ln_2 = nn.LayerNorm(hidden, eps=GPT2_LN_EPS)
        self.mlp = FFN(hidden, ffn, approximate="tanh")  # HF "gelu_new"
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT2(nn.Module):
    """GPT2LMHeadModel(tie_word_embeddings=False): forward(tokens[B, T+1]) -> mean next-token loss."""

    def __init__(self, vocab: int, positions: int, layers: int, hidden: int, heads: int,
                 ffn: int, dropout: float = 0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPT2Block(hidden, heads, ffn, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=GPT2_LN_EPS)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.h:  # HF GPT-2 scales the residual projections
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * layers))

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """tokens[B, T+1] (inputs and next-token targets), or tokens[B, T] with labels[B, T]
        scored as HF's GPT-2 scores them (logits of positions 0..T-2 against labels 1..T-1)."""
        x, y = (tokens[:, :-1], tokens[:, 1:]) if labels is None else (tokens, labels)
        pos = torch.arange(x.shape[1], device=x.device)
        h = self.drop(self.wte(x) + self.wpe(pos))
        for block in self.h:
            h = block(h)
        logits = self.lm_head(self.ln_f(h))
        if labels is not None:
            logits, y = logits[:, :-1], y[:, 1:]
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                               ignore_index=-100)

    def matmul_weights(self) -> int:
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))


class RobertaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, causal=False)
        self.ln_1 = nn.LayerNorm(hidden, eps=ROBERTA_LN_EPS)
        self.mlp = FFN(hidden, ffn, approximate="none")  # HF "gelu" (erf)
        self.ln_2 = nn.LayerNorm(hidden, eps=ROBERTA_LN_EPS)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.drop(self.attn(x)))
        return self.ln_2(x + self.drop(self.mlp(x)))


class Roberta(nn.Module):
    """RobertaForMaskedLM(type_vocab_size=1): forward(inputs[B, T], labels[B, T]) -> mean loss
    over the positions whose label is not -100. No pooler (RobertaForMaskedLM has none)."""

    def __init__(self, vocab: int, positions: int, layers: int, hidden: int, heads: int,
                 ffn: int, dropout: float = 0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=ROBERTA_PAD_ID)
        self.position_embeddings = nn.Embedding(positions, hidden, padding_idx=ROBERTA_PAD_ID)
        self.token_type_embeddings = nn.Embedding(1, hidden)  # type 0 everywhere: one row added
        self.ln_emb = nn.LayerNorm(hidden, eps=ROBERTA_LN_EPS)
        self.drop = nn.Dropout(dropout)
        self.layer = nn.ModuleList(RobertaLayer(hidden, heads, ffn, dropout)
                                   for _ in range(layers))
        self.head_dense = nn.Linear(hidden, hidden)
        self.head_ln = nn.LayerNorm(hidden, eps=ROBERTA_LN_EPS)
        self.head_bias = nn.Parameter(torch.zeros(vocab))  # decoder: word embeddings^T + bias
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ROBERTA_PAD_ID + 1, ROBERTA_PAD_ID + 1 + inputs.shape[1],
                           device=inputs.device)
        h = self.word_embeddings(inputs) + self.token_type_embeddings.weight[0]
        h = self.drop(self.ln_emb(h + self.position_embeddings(pos)))
        for layer in self.layer:
            h = layer(h)
        h = self.head_ln(F.gelu(self.head_dense(h)))
        # The decoder runs over every position, as RobertaForMaskedLM's does; the loss keeps the
        # masked ones.
        logits = F.linear(h, self.word_embeddings.weight, self.head_bias)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100)

    def matmul_weights(self) -> int:
        linears = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        return linears + self.word_embeddings.weight.numel()  # + the tied decoder


def build_model(model: str, vocab: int, block: int, layers: int, hidden: int, heads: int,
                ffn: int, dropout: float = 0.1, positions: int | None = None) -> nn.Module:
    """The model on the CPU in float32. positions: rows of the position table (default: block
    for GPT-2, block + 2 for RoBERTa; the lab's paper GPT-2 has 1,024)."""
    if model == "gpt2":
        return GPT2(vocab, positions or block, layers, hidden, heads, ffn, dropout)
    if model == "roberta":
        return Roberta(vocab, positions or block + 2, layers, hidden, heads, ffn, dropout)
    raise ValueError(f"model {model!r}: choose from {', '.join(MODELS)}")


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# --- peak ----------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_peak(device: str | torch.device, dtype: str = "bf16", size: int | None = None,
                 reps: int = 10, inner: int | None = None) -> dict[str, Any]:
    """Achieved matmul TFLOP/s: n x n x n products (n = 8192 on CUDA, 512 elsewhere) of random
    (not zero: zeros run faster on some GPUs) matrices; each of `reps` timed samples runs
    `inner` products back to back between synchronisations (10 on CUDA, so that launch and
    synchronisation cost nothing), after 3 untimed samples; the median sample counts."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    n = size or (8192 if cuda else 512)
    inner = inner or (10 if cuda else 1)
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    times = []
    for i in range(3 + reps):
        _sync(device)
        start = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b, out=out)
        _sync(device)
        if i >= 3:
            times.append((time.perf_counter() - start) / inner)
    median = statistics.median(times)
    del a, b, out
    if cuda:
        torch.cuda.empty_cache()
    return {"size": n, "dtype": dtype, "reps": reps, "inner": inner, "seconds_median": median,
            "tflops": 2 * n ** 3 / median / 1e12}


# --- training ------------------------------------------------------------------------------

def _optimizer(model: nn.Module, lr: float, weight_decay: float, fused: bool):
    """AdamW as the HF Trainer groups it: decay on matrices, none on biases and LayerNorm."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kwargs = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=lr, **kwargs)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform
    return platform.processor() or platform.machine() or device.type


def run(**kwargs: Any) -> dict[str, Any]:
    """Build, (compile,) warm up and time the plain loop; the result dict (see main's --json).
    Keyword arguments: the CLI's options (DEFAULTS) by their Python names."""
    unknown = set(kwargs) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"run(): unknown arguments {sorted(unknown)}")
    o = argparse.Namespace(**{**DEFAULTS, **kwargs})
    if o.model not in MODELS:
        raise ValueError(f"model {o.model!r}: choose from {', '.join(MODELS)}")
    if o.positions is not None and o.positions < o.block + (2 if o.model == "roberta" else 0):
        raise ValueError(f"positions {o.positions}: fewer than block {o.block} needs")
    if o.dtype not in ("bf16", "fp32"):
        raise ValueError(f"dtype {o.dtype!r}: bf16 or fp32")
    if o.steps < 0 or o.warmup < 0 or o.batches < 1:
        raise ValueError("steps and warmup must be >= 0, batches >= 1")
    say = (lambda *a: None) if o.quiet else (lambda *a: print(*a, flush=True))

    device = torch.device(o.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    if cuda and device.index is None:  # torch.cuda.set_device refuses a device without index
        device = torch.device("cuda", torch.cuda.current_device())
    fused = cuda if o.fused_adamw is None else bool(o.fused_adamw)
    tf32 = cuda if o.tf32 is None else bool(o.tf32)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.cuda.set_device(device)
    say(f"torch {torch.__version__}, device {device} ({_device_name(device)})"
        + (f", tf32 {'on' if tf32 else 'off'}" if cuda else f", {torch.get_num_threads()} threads"))

    result: dict[str, Any] = {
        "model": o.model, "dtype": o.dtype, "compiled": bool(o.compile), "torch": torch.__version__,
        "device": str(device), "device_name": _device_name(device), "vocab": o.vocab,
        "block": o.block, "batch": o.batch, "layers": o.layers, "hidden": o.hidden,
        "heads": o.heads, "ffn": o.ffn, "steps": o.steps, "warmup": o.warmup,
        "fused_adamw": fused, "tf32": tf32 if cuda else None, "lr": o.lr,
        "weight_decay": o.weight_decay, "clip": o.clip, "dropout": o.dropout, "seed": o.seed,
        "peak_tflops": o.peak_tflops, "peak_tflops_measured": None,
    }
    if o.measure_peak:
        peak = measure_peak(device, o.dtype, o.peak_size)
        result["peak_tflops_measured"] = peak["tflops"]
        result["peak_measurement"] = peak
        say(f"peak: {peak['dtype']} {peak['size']}^3 matmul {peak['tflops']:.4g} TFLOP/s "
            f"(median of {peak['reps']}, {peak['seconds_median'] * 1e3:.2f} ms)")
    peak_tflops = o.peak_tflops or result["peak_tflops_measured"]
    result["mfu_peak_tflops"] = peak_tflops
    if o.steps == 0:  # --measure-peak alone
        result.update(tokens_per_second=None, step_seconds_median=None, mfu=None)
        _write_json(result, o.json, say)
        return result

    # The lab's batches (--data), checked before any model is built.
    labelled = load_batches(o.data, o.batch, o.block, o.vocab, device) if o.data else None
    if cuda:  # the training run's peak, not the matmul's
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(o.seed)
    model = build_model(o.model, o.vocab, o.block, o.layers, o.hidden, o.heads, o.ffn,
                        o.dropout, o.positions).to(device)
    model.train()
    params = parameter_count(model)
    matmul = matmul_parameters(o.model, o.layers, o.hidden, o.ffn, o.vocab)
    assert matmul == model.matmul_weights(), (matmul, model.matmul_weights())
    per_token = flops_per_token(o.layers, o.hidden, o.block, matmul)
    result.update(params=params, matmul_params=matmul, flops_per_token=per_token)
    optimizer = _optimizer(model, o.lr, o.weight_decay, fused)
    step_model = torch.compile(model) if o.compile else model

    # Random token ids, generated once on the device: GPT-2 reads block + 1 tokens (inputs and
    # next-token targets), RoBERTa block tokens. Or the lab's batches (--data), moved once.
    length = o.block + 1 if o.model == "gpt2" else o.block
    generator = torch.Generator(device=device).manual_seed(o.seed)
    data = [torch.randint(0, o.vocab, (o.batch, length), device=device, generator=generator)
            for _ in range(o.batches if labelled is None else 0)]
    if labelled is not None:
        result["data"] = {"path": str(o.data), "batches": len(labelled)}
    mask_id = min(4, o.vocab - 1)  # <mask> in a RoBERTa-style tokenizer
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=o.dtype == "bf16")

    def step(i: int) -> torch.Tensor:
        with autocast:
            if labelled is not None:
                loss = step_model(*labelled[i % len(labelled)])
            elif o.model == "gpt2":
                loss = step_model(data[i % len(data)])
            else:
                tokens = data[i % len(data)]
                masked = torch.rand(tokens.shape, device=device) < o.mlm_probability
                inputs = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
                labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
                loss = step_model(inputs, labels)
        loss.backward()
        if o.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    losses: list[torch.Tensor] = []
    _sync(device)
    start = time.perf_counter()
    losses.append(step(0))  # compiles with --compile
    _sync(device)
    first = time.perf_counter() - start
    for i in range(1, 1 + o.warmup):
        losses.append(step(i))
    _sync(device)
    warm = time.perf_counter() - start - first
    result.update(first_step_seconds=first, warmup_seconds=warm, compile_warmup_seconds=first + warm)
    say(f"{'compile + ' if o.compile else ''}first step {first:.2f} s, "
        f"{o.warmup} warm-up steps {warm:.2f} s")

    times: list[float] = []
    offset = 1 + o.warmup
    if cuda:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(o.steps + 1)]
        _sync(device)
        wall = time.perf_counter()
        events[0].record()
        for i in range(o.steps):
            losses.append(step(offset + i))
            events[i + 1].record()
        _sync(device)
        wall = time.perf_counter() - wall
        times = [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(o.steps)]
    else:
        wall = time.perf_counter()
        for i in range(o.steps):
            t0 = time.perf_counter()
            losses.append(step(offset + i))
            times.append(time.perf_counter() - t0)
        wall = time.perf_counter() - wall
    median = statistics.median(times)
    tokens_per_second = o.batch * o.block / median
    achieved = tokens_per_second * per_token / 1e12
    result.update(
        step_seconds_median=median, step_seconds_mean=wall / o.steps, step_seconds=times,
        tokens_per_second=tokens_per_second, achieved_tflops=achieved,
        mfu=achieved / peak_tflops if peak_tflops else None,
    )
    loss_values = torch.stack(losses).float().cpu().tolist()
    result.update(losses=loss_values, loss_first=loss_values[0], loss_last=loss_values[-1],
                  loss_finite=all(math.isfinite(v) for v in loss_values))
    result["max_memory_allocated_gib"] = (torch.cuda.max_memory_allocated(device) / 2 ** 30
                                          if cuda else None)
    if cuda:
        say(f"GPU memory peak (max_memory_allocated) {result['max_memory_allocated_gib']:.2f} GiB")
    mfu = (f"MFU {100 * result['mfu']:.1f}% of {peak_tflops:.4g} TFLOP/s" if peak_tflops
           else "MFU n/a (no --peak-tflops)")
    say(f"plain-loop {o.model} {o.dtype} {'compiled' if o.compile else 'eager'}: "
        f"{tokens_per_second:.0f} tokens/s, step {median * 1e3:.1f} ms (median of {o.steps}), "
        f"{achieved:.3g} TFLOP/s achieved, {mfu}, compile+warmup {first + warm:.1f} s, "
        f"params {params / 1e6:.1f}M (matmul {matmul / 1e6:.1f}M), "
        f"loss {loss_values[0]:.3f} -> {loss_values[-1]:.3f}")
    _write_json(result, o.json, say)
    return result


def load_batches(path: str | Path, batch: int, block: int, vocab: int,
                 device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """--data: [(input_ids, labels)] per step on `device`, after checking the file's shapes and
    token ids against the run's."""
    import numpy as np

    with np.load(path) as arrays:
        ids, labels = arrays["input_ids"], arrays["labels"]
    if ids.ndim != 3 or ids.shape != labels.shape or ids.shape[1:] != (batch, block):
        raise ValueError(f"--data {path}: input_ids {ids.shape} and labels {labels.shape}, "
                         f"expected (batches, {batch}, {block}) both")
    if ids.min() < 0 or ids.max() >= vocab:
        raise ValueError(f"--data {path}: token ids outside the vocabulary of {vocab}")
    ids_t = torch.from_numpy(ids.astype(np.int64)).to(device)
    labels_t = torch.from_numpy(labels.astype(np.int64)).to(device)
    return [(ids_t[i], labels_t[i]) for i in range(ids_t.shape[0])]


def _write_json(result: dict[str, Any], path: str | None, say: Any) -> None:
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        say(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = DEFAULTS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=MODELS, default=d["model"])
    p.add_argument("--vocab", type=int, default=d["vocab"])
    p.add_argument("--block", type=int, default=d["block"], help="tokens per sequence")
    p.add_argument("--batch", type=int, default=d["batch"], help="sequences per step")
    p.add_argument("--layers", type=int, default=d["layers"])
    p.add_argument("--hidden", type=int, default=d["hidden"])
    p.add_argument("--heads", type=int, default=d["heads"])
    p.add_argument("--ffn", type=int, default=d["ffn"])
    p.add_argument("--positions", type=int, default=d["positions"],
                   help="rows of the position table (default block, RoBERTa block + 2; the "
                        "lab's paper GPT-2 has 1024): parameters only, no FLOPs")
    p.add_argument("--steps", type=int, default=d["steps"], help="timed steps (0: no training, e.g. --measure-peak only)")
    p.add_argument("--warmup", type=int, default=d["warmup"],
                   help="untimed steps after the first (compiling) one")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=d["compile"],
                   help="torch.compile(model)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=d["dtype"],
                   help="bf16: autocast over fp32 weights")
    p.add_argument("--device", default=d["device"], help="default cuda if available, else cpu")
    p.add_argument("--fused-adamw", action=argparse.BooleanOptionalAction, default=None,
                   help="AdamW(fused=True) (default on with CUDA)")
    p.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                   help="TF32 matmuls and convolutions (default on with CUDA)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's peak matmul TFLOP/s at --dtype, for MFU")
    p.add_argument("--measure-peak", action="store_true",
                   help="time a matmul first (8192^3 on CUDA) and print its TFLOP/s; used for "
                        "MFU when --peak-tflops is not given (--steps 0: measure only)")
    p.add_argument("--peak-size", type=int, default=None, help="--measure-peak's matrix size")
    p.add_argument("--json", default=None, metavar="PATH", help="write the result dict here")
    p.add_argument("--seed", type=int, default=d["seed"])
    p.add_argument("--lr", type=float, default=d["lr"])
    p.add_argument("--weight-decay", type=float, default=d["weight_decay"])
    p.add_argument("--clip", type=float, default=d["clip"],
                   help="gradient clipping norm (the HF Trainer's 1.0; 0: off)")
    p.add_argument("--dropout", type=float, default=d["dropout"],
                   help="residual and embedding dropout (HF's resid/embd/hidden 0.1)")
    p.add_argument("--mlm-probability", type=float, default=d["mlm_probability"])
    p.add_argument("--batches", type=int, default=d["batches"],
                   help="distinct random batches rotated (1: one fixed batch)")
    p.add_argument("--data", default=d["data"], metavar="NPZ",
                   help="train on these batches (input_ids, labels) instead of random ones")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        run(**vars(parse_args(argv)))
    except (ValueError, OSError, KeyError) as exc:  # bad options or --data: one line, exit 2
        print(f"plain_loop: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
