"""Inference and scoring: generate outputs for a benchmark split and score them per sample.

Works on a fine-tuned model (lab finetune) or, for GPT-2, straight on a pre-trained one
(direct inference, the study's epoch 0). Scores are split into injected / held-out / naturally
overlapping samples using the pre-training corpus manifest, so one split-half model yields a
seen-vs-unseen comparison.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lab.common import LabError, atomic_output_dir, environment_record, write_json_atomic
from lab.corpora import Sample, load_samples
from lab.eval import metrics as metric_fns
from lab.models import positions_of
from lab.train.finetune import (
    causal_prompt, get_task, pretraining_record, read_stage_manifest, seq2seq_source,
)


@dataclass
class Decoding:
    mode: str = "greedy"  # greedy | beam | sample
    beams: int = 1
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 50

    @classmethod
    def parse(cls, text: str, **sampling: Any) -> "Decoding":
        if text == "greedy":
            return cls()
        if text == "sample":
            return cls(mode="sample", **sampling)
        if text.startswith("beam:") and text[5:].isdigit() and int(text[5:]) >= 1:
            return cls(mode="beam", beams=int(text[5:]))
        raise LabError(f"--decoding {text}: choose greedy, beam:K (K >= 1) or sample")

    def generate_kwargs(self) -> dict[str, Any]:
        if self.mode == "sample":
            return dict(do_sample=True, temperature=self.temperature, top_p=self.top_p,
                        top_k=self.top_k, num_beams=1)
        return dict(do_sample=False, num_beams=self.beams)

    def label(self) -> str:
        return {"greedy": "greedy", "beam": f"beam{self.beams}", "sample": "sample"}[self.mode]


def load_generator(model_dir: Path) -> tuple[Any, Any, dict[str, Any], str]:
    """(model, tokenizer, manifest, architecture) of a lab model that can generate."""
    from transformers import AutoModelForCausalLM, EncoderDecoderModel, PreTrainedTokenizerFast

    manifest = read_stage_manifest(model_dir, "--model")
    kind = manifest.get("kind")
    if kind == "lab-pretrained":
        if manifest["model"]["family"] != "gpt2":
            raise LabError(f"--model {model_dir}: a pre-trained {manifest['model']['family']} "
                           "cannot generate (masked LM); fine-tune it first (lab finetune)")
        architecture = "causal-lm"
    elif kind == "lab-finetuned":
        architecture = manifest["architecture"]
    else:
        raise LabError(f"--model {model_dir}: not a lab pre-trained or fine-tuned model")
    weights = Path(model_dir) / "model"
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(weights))
    loader = AutoModelForCausalLM if architecture == "causal-lm" else EncoderDecoderModel
    model = loader.from_pretrained(str(weights))
    model.eval()
    return model, tokenizer, manifest, architecture


def padded(rows: list[list[int]], pad: int, left: bool) -> tuple[Any, Any]:
    """(ids, attention mask) of token lists padded to the longest: on the left for a causal LM
    that generates (every prompt then ends where its output starts), else on the right."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
    return ids, mask


def generate(model: Any, tokenizer: Any, architecture: str, sources: list[str], decoding: Decoding,
             max_source: int, max_new_tokens: int, batch_size: int) -> list[str]:
    """Batched generation with the KV cache, longest inputs first; outputs in input order."""
    import torch

    positions = positions_of(model.config if architecture == "causal-lm" else model.config.decoder)

    if architecture == "causal-lm":
        prompts = [causal_prompt(tokenizer, s, max_source) for s in sources]
    else:
        prompts = [seq2seq_source(tokenizer, s, max_source) for s in sources]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    outputs: list[str] = [""] * len(prompts)
    pad = tokenizer.pad_token_id
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        ids, mask = padded([prompts[i] for i in batch], pad, left=architecture == "causal-lm")
        width = ids.shape[1]
        # A causal model's prompt and output share its positions.
        room = positions - width if architecture == "causal-lm" else positions - 1
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max(1, min(max_new_tokens, room)),
                eos_token_id=tokenizer.eos_token_id, pad_token_id=pad, use_cache=True,
                **decoding.generate_kwargs(),
            )
        if architecture == "causal-lm":
            generated = generated[:, width:]
        for row, i in enumerate(batch):
            outputs[i] = tokenizer.decode(generated[row], skip_special_tokens=True).strip()
    return outputs


def default_source_length(model: Any, architecture: str) -> int:
    """Direct inference on a pre-trained GPT-2: half its positions for the prompt."""
    positions = positions_of(model.config if architecture == "causal-lm" else model.config.encoder)
    return (positions - 3) // 2 if architecture == "causal-lm" else positions


def _read_ids(path: Path) -> set[str]:
    if not Path(path).is_file():
        raise LabError(f"--ids {path}: no such file")
    return {line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}


def _groups(manifest: dict[str, Any]) -> dict[str, str]:
    """Sample id -> injected / held_out, and pre-existing overlap, from the pre-training corpus."""
    corpus = pretraining_record(manifest).get("corpus", {})
    groups = {sample_id: "injected" for sample_id in corpus.get("injected_ids", [])}
    groups.update({sample_id: "held_out" for sample_id in corpus.get("held_out_ids", [])})
    for entry in corpus.get("pre_existing_verbatim", []):
        groups[entry.rsplit("/", 1)[0]] = "pre_existing"
    return groups


def run_evaluate(model_dir: Path, task_name: str, split: str = "test", ids: Path | None = None,
                 decoding: str = "greedy", batch_size: int = 16, max_new_tokens: int | None = None,
                 metrics: tuple[str, ...] = metric_fns.METRICS, out: Path | None = None,
                 force: bool = False, seed: int = 0, corpora_dir: Path | None = None,
                 temperature: float = 0.8, top_p: float = 0.95, top_k: int = 50) -> dict[str, Any]:
    """Entry point of `lab evaluate`: predictions.jsonl and metrics.json for one split."""
    from transformers import set_seed

    started = time.perf_counter()
    task = get_task(task_name)
    plan = Decoding.parse(decoding, temperature=temperature, top_p=top_p, top_k=top_k)
    if batch_size < 1:
        raise LabError(f"--batch-size {batch_size}: must be >= 1")
    model, tokenizer, manifest, architecture = load_generator(model_dir)
    trained_task = manifest.get("task", {}).get("name")
    if trained_task and trained_task != task.name:
        raise LabError(f"--model {model_dir}: fine-tuned for {trained_task}, not {task.name}")
    out = Path(out) if out else Path(model_dir) / f"eval-{task.name}-{split}-{plan.label()}"
    if out.exists() and not force:
        raise LabError(f"{out}: output directory exists (use --force to replace it)")
    samples: list[Sample] = load_samples(task.benchmark, split, corpora_dir,
                                         require_references=True).records
    if ids is not None:
        wanted = _read_ids(ids)
        unknown = wanted - {s.id for s in samples}
        if unknown:
            raise LabError(f"--ids {ids}: unknown sample id {sorted(unknown)[0]}")
        samples = [s for s in samples if s.id in wanted]
    config = manifest.get("config", {})
    max_source = int(config.get("max_source_length", 0)) or default_source_length(model, architecture)
    max_new = max_new_tokens or int(config.get("max_target_length", 0)) or max_source

    set_seed(seed)
    gen_started = time.perf_counter()
    predictions = generate(model, tokenizer, architecture, [s.input for s in samples], plan,
                           max_source, max_new, batch_size)
    gen_seconds = time.perf_counter() - gen_started
    references = [s.output for s in samples]
    overall, per_sample = metric_fns.score(references, predictions, metrics, task.target_language,
                                           task.name)  # task.name: em of its CodeXGLUE evaluator
    groups = _groups(manifest)
    by_group: dict[str, dict[str, float]] = {}
    for group in ("injected", "held_out", "pre_existing"):
        chosen = [i for i, s in enumerate(samples) if groups.get(s.id) == group]
        if chosen:
            scores, _ = metric_fns.score([references[i] for i in chosen],
                                         [predictions[i] for i in chosen],
                                         [m for m in metrics if m != "codebleu"], task.target_language,
                                         task.name)
            by_group[group] = {"samples": len(chosen), **scores}
    result = {
        "kind": "lab-evaluation", "task": task.name, "split": split, "model": str(model_dir),
        "decoding": plan.__dict__, "samples": len(samples), "metrics": overall, "by_group": by_group,
        "metric_definitions": {m: metric_fns.describe(task.name)[m] for m in metrics},
        "generation_seconds": round(gen_seconds, 2), "seed": seed,
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    with atomic_output_dir(out, force=force) as tmp:
        with open(tmp / "predictions.jsonl", "wb") as handle:
            for i, sample in enumerate(samples):
                row = {"id": sample.id, "source": sample.input, "reference": sample.output,
                       "prediction": predictions[i], "group": groups.get(sample.id, "unknown"),
                       "injected": groups.get(sample.id) == "injected",
                       "scores": {m: values[i] for m, values in per_sample.items()}}
                handle.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")
        write_json_atomic(tmp / "metrics.json", result)
    result["out"] = str(out)
    return result
