"""What a study will cost before it runs: tokens, FLOPs and a CPU-time estimate per stage kind.

FLOPs follow the usual 6 x parameters x tokens for training and 2 x parameters x tokens for
generation. CPU time is FLOPs over the throughput this lab reaches on a 2-core CPU box (measured
with benchmarks/pretrain_throughput.py and benchmarks/generation.py on the tiny preset).

GPU-hours are FLOPs over a named GPU's peak dense bf16 FLOP/s times an assumed model FLOPs
utilisation (MFU), both printed beside the estimate. The training MFU is anchored on a public
run of the same model size: nanoGPT's GPT-2 124M on OpenWebText (karpathy/nanoGPT README and
config/train_gpt2.py: 600,000 iterations of 491,520 tokens, about 295B tokens, in about 4 days
on one 8xA100 40GB node) is about 107k tokens/s per A100, 6 x 124M x 107k = 7.9e13 FLOP/s, 25%
of the A100's 312 TFLOP/s. Decoding token by token is bound by memory bandwidth, not FLOPs:
its MFU is far lower (assumed 2%, the order batched greedy decoding of a 125M model reaches).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.contamination import settings as settings_table
from lab.study.recipe import Recipe
from lab.study.grid import preset_of

CHARS_PER_TOKEN = 3.4        # byte-level BPE on Java, measured on CSN with an 8k/4k vocabulary
CSN_DOCUMENT_CHARS = 740     # mean CSN-format Java method
# float32 in the Trainer on 2 cores, tiny GPT-2 at a 4k vocabulary (4.3M parameters): packed
# pre-training 3,354 useful tokens/s (README, bf16 section); fine-tuning, whose sequences are
# short (a CodeTrans pair is ~96 tokens), 8,060 useful tokens/s in bf16 with length-grouped
# batches (benchmarks/finetune_search.md), i.e. 5,480 in float32.
TRAIN_FLOPS_PER_SECOND = {"pretrain": 87e9, "finetune": 142e9}
BF16_SPEEDUP = 1.47           # bf16 autocast inside the Trainer on a CPU with AVX-512 BF16
                              # (README: 3,354 -> 4,926 tokens/s)
UNGROUPED_PADDING = 2.05      # fine-tuning samples/s grouped by length vs random batches (85.3 / 41.7)
GENERATE_FLOPS_PER_SECOND = 15e9  # batched greedy decoding, KV cache, tiny preset
INJECT_SECONDS_PER_BASE_DOCUMENT = 6e-5  # 7 s for the full 120k-document corpus
# Named GPUs: peak dense bf16 FLOP/s from the vendors' datasheets (without sparsity).
GPU_PEAK_BF16 = {"A100": 312e12, "H100": 989e12}
# Model FLOPs utilisation assumed per kind of work (see the module docstring for the anchor).
MFU = {"train": 0.25, "generate": 0.02}
WORK = {"pretrain": "train", "finetune": "train", "evaluate": "generate", "probe": "generate",
        "detect": "generate"}
STAGE_OVERHEAD_SECONDS = {"inject": 2, "tokenizer": 5, "pretrain": 10, "finetune": 8, "evaluate": 5,
                          "probe": 5, "detect": 5}


def parameters(recipe: Recipe, model: str, preset_name: str) -> int:
    """Transformer parameters of a preset at the recipe's vocabulary (biases and norms included)."""
    from lab.models import get_preset

    preset = get_preset(preset_name)
    d, layers, vocab = preset.hidden, preset.layers, recipe.tokenizer.vocab_size
    positions = (preset.gpt2_max_positions or preset.max_positions) if model == "gpt2" else preset.max_positions
    block = layers * (4 * d * d + 2 * d * preset.ffn + 9 * d + preset.ffn)
    head = 0 if (model != "gpt2" or preset.gpt2_tie_head) else vocab * d
    return block + vocab * d + positions * d + head


def _benchmark_sizes(recipe: Recipe) -> dict[str, Any]:
    """Sample counts and mean side lengths (chars) of the benchmark's splits, read from the data
    when it is available, else the CodeTrans test split's shape."""
    from lab.corpora import load_samples

    sizes: dict[str, Any] = {}
    for split in ("train", "test"):
        try:
            records = load_samples(recipe.benchmark, split).records
        except Exception:  # an estimate should not fail for want of data: fall back
            records = []
        if records:
            sizes[split] = (len(records), sum(len(s.input) for s in records) / len(records),
                            sum(len(s.output or "") for s in records) / len(records))
    sizes.setdefault("test", (1000, 190.0, 190.0))
    sizes.setdefault("train", sizes["test"])
    return sizes


def base_documents(recipe: Recipe) -> int:
    from lab.corpora import dataset_manifest

    counts = (dataset_manifest(recipe.corpus.base) or {}).get("expected_records") or {}
    return sum(counts.get(split, 0) for split in recipe.corpus.base_splits) or 120_000


def injected_copies(recipe: Recipe, test_samples: int) -> int:
    """Sample copies an injecting arm puts in: samples x fraction x repeat, or per level of a
    dose ladder its samples x its dose (a placebo: as many as its base arm)."""
    samples = min(recipe.injection.samples or test_samples, test_samples)
    if recipe.injection.doses:  # equal levels, each injected its dose
        doses = recipe.injection.doses
        return round(samples / len(doses) * sum(doses))
    return round(samples * (recipe.injection.fraction or 1.0)) * recipe.injection.repeat


def arm_tokens(recipe: Recipe, setting: str, bench: dict[str, Any], arm_documents: int) -> float:
    """Tokens of one epoch of an arm: injected documents are benchmark sides (test samples, or
    a placebo's train/valid samples), not CSN functions (a paired CodeTrans document is about
    half a CSN function)."""
    block = recipe.pretrain.block_size
    base_tokens = min(CSN_DOCUMENT_CHARS / CHARS_PER_TOKEN, block)
    table = settings_table.get(setting)
    test_n, *_ = bench["test"]
    _n, chars_in, chars_out = bench["train" if table.placebo else "test"]
    chars = {"input": chars_in, "output": chars_out}
    copies = injected_copies(recipe, test_n) if table.injects else 0
    documents = copies * table.documents_per_sample
    lengths = [min(sum(chars[side] for side in doc) / CHARS_PER_TOKEN, block) for doc in table.layout]
    return (arm_documents - documents) * base_tokens + copies * sum(lengths)


def _training_seconds(flops: float, kind: str, cfg: Any) -> float:
    """CPU seconds of a pre-training or fine-tuning stage on this machine: its FLOPs at the
    measured throughput, faster in bf16 where the CPU has bfloat16 instructions and far slower
    where it has not; random fine-tuning batches pay for their padding."""
    from lab.train.common import BF16_EMULATED_SLOWDOWN, bf16_is_native

    seconds = flops / TRAIN_FLOPS_PER_SECOND[kind]
    if cfg.bf16:
        seconds = seconds / BF16_SPEEDUP if bf16_is_native() else seconds * BF16_EMULATED_SLOWDOWN
    ungrouped = kind == "finetune" and not cfg.group_by_length
    return seconds * (UNGROUPED_PADDING if ungrouped else 1)


def estimate(recipe: Recipe, stages: list[Any], study: Path) -> list[dict[str, Any]]:
    """One row per stage kind: stages, already done, tokens, FLOPs, estimated CPU seconds and
    GPU-hours on each named GPU (gpu_hours)."""
    sizes = benchmark_sizes(recipe)
    rows: dict[str, dict[str, Any]] = {}
    for stage in stages:
        row = rows.setdefault(stage.kind, {"kind": stage.kind, "stages": 0, "done": 0, "tokens": 0.0,
                                           "flops": 0.0, "seconds": 0.0})
        row["stages"] += 1
        if stage.done(study):
            row["done"] += 1
            continue
        tokens, flops, seconds = _stage_cost(recipe, stage, sizes)
        row["tokens"] += tokens
        row["flops"] += flops
        row["seconds"] += seconds
    for row in rows.values():
        row["gpu_hours"] = gpu_hours(row["kind"], row["flops"])
    return list(rows.values())


def stage_hours(recipe: Recipe, stage: Any, sizes: dict[str, Any] | None = None) -> float:
    """One stage's estimated wall hours where it runs: on a CUDA device the slowest named GPU's
    hours shared by its ranks, else the CPU estimate (a cluster job's time limit starts here)."""
    _tokens, flops, seconds = _stage_cost(recipe, stage, sizes or benchmark_sizes(recipe))
    device = str(stage.launch.get("device", recipe.resources.device))
    if stage.kind not in WORK or not device.startswith("cuda"):
        return seconds / 3600
    ranks = stage.launch.get("processes", 1) * stage.launch.get("nodes", 1)
    overhead = STAGE_OVERHEAD_SECONDS.get(stage.kind, 0) / 3600
    return overhead + max(gpu_hours(stage.kind, flops).values()) / max(1, ranks)


def benchmark_sizes(recipe: Recipe) -> dict[str, Any]:
    """What every stage's estimate reads of the benchmark and corpus (read once per study)."""
    bench = _benchmark_sizes(recipe)
    base_total = base_documents(recipe)
    return {"bench": bench, "base_total": base_total,
            "arm_documents": recipe.corpus.limit or base_total}


def _stage_cost(recipe: Recipe, stage: Any, sizes: dict[str, Any]) -> tuple[float, float, float]:
    """(tokens, FLOPs, CPU seconds) of one stage. A kind without a measured overhead or
    estimate below (a new one) counts nothing."""
    bench, base_total, arm_documents = sizes["bench"], sizes["base_total"], sizes["arm_documents"]
    test_n, test_in, test_out = bench["test"]
    train_n, train_in, train_out = bench["train"]
    cfg, tokens, flops = stage.config, 0.0, 0.0
    seconds = float(STAGE_OVERHEAD_SECONDS.get(stage.kind, 0))
    if stage.kind == "inject":
        seconds += INJECT_SECONDS_PER_BASE_DOCUMENT * base_total
    elif stage.kind == "tokenizer":
        seconds += arm_documents * CSN_DOCUMENT_CHARS * 2e-7
    elif stage.kind == "pretrain":
        tokens = arm_tokens(recipe, stage.labels["arm"], bench, arm_documents) * cfg.epochs
        flops = 6 * parameters(recipe, cfg.model, cfg.preset) * tokens
        seconds += _training_seconds(flops, "pretrain", cfg)
    elif stage.kind == "finetune":
        examples = min(cfg.train_size or train_n, train_n)
        tokens = examples * (train_in + train_out) / CHARS_PER_TOKEN * cfg.epochs
        flops = 6 * parameters(recipe, stage.labels["model"], preset_of(stage)) * tokens
        seconds += _training_seconds(flops, "finetune", cfg)
    elif stage.kind == "evaluate":
        samples = min(cfg.max_samples or test_n, test_n)
        generated = cfg.max_new_tokens or test_out / CHARS_PER_TOKEN
        tokens = samples * (test_in / CHARS_PER_TOKEN + generated)
        flops = 2 * parameters(recipe, stage.labels["model"], preset_of(stage)) * tokens
        seconds += flops / GENERATE_FLOPS_PER_SECOND
    elif stage.kind == "probe":
        # Scoring passes over each probed sample (RoBERTa: 7 masked passes plus one per
        # name) and, for GPT-2, a greedy extraction of each output.
        samples = min(cfg.max_samples or test_n, test_n)
        model = stage.labels["model"]
        passes = 1 if model == "gpt2" else 7 + cfg.max_names // 2
        tokens = samples * (test_in + test_out) / CHARS_PER_TOKEN
        flops = 2 * parameters(recipe, model, preset_of(stage)) * tokens * passes
        seconds += flops / GENERATE_FLOPS_PER_SECOND
    elif stage.kind == "detect":
        # Members and as many non-members: scoring passes (RoBERTa: 7 masked ones) over the
        # samples, their renamed twins and the reference model; GPT-2 also generates each
        # output once greedily (extraction) and the CDD samples.
        samples = 2 * min(cfg.max_samples or test_n, test_n)
        model, chosen = stage.labels["model"], set(cfg.detectors)
        copies = (1 + ("reference" in chosen)
                  + (cfg.neighbours if "neighbourhood" in chosen else 0))
        generations = (("extraction" in chosen)
                       + (cfg.cdd_samples + 1 if "peakedness" in chosen else 0)
                       if model == "gpt2" else 0)
        tokens = samples * (test_in + test_out) / CHARS_PER_TOKEN * (
            copies * (1 if model == "gpt2" else 7) + generations)
        flops = 2 * parameters(recipe, model, preset_of(stage)) * tokens
        seconds += flops / GENERATE_FLOPS_PER_SECOND
    return tokens, flops, seconds


def gpu_hours(kind: str, flops: float) -> dict[str, float]:
    """GPU-hours of a stage kind's FLOPs on each named GPU at the assumed MFU (stages that do
    not compute on a GPU, inject and tokenizer, count none)."""
    work = WORK.get(kind)
    if work is None:
        return {gpu: 0.0 for gpu in GPU_PEAK_BF16}
    return {gpu: flops / (peak * MFU[work]) / 3600 for gpu, peak in GPU_PEAK_BF16.items()}


def gpu_assumptions() -> str:
    """The peaks and MFUs behind the GPU-hours, as one line for the dry run."""
    peaks = ", ".join(f"{gpu} {peak / 1e12:.0f} TFLOP/s" for gpu, peak in GPU_PEAK_BF16.items())
    return (f"GPU-hours at peak dense bf16 ({peaks}) x MFU {MFU['train']:.0%} for training, "
            f"{MFU['generate']:.0%} for generation (anchor: nanoGPT's GPT-2 124M on 8xA100, about "
            "107k tokens/s per GPU, 25% MFU)")
