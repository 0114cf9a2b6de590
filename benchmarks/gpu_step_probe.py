"""Where a lab pre-training step's time goes on a GPU: a diagnosis beside benchmarks/gpu_check.py.

The lab's model (transformers GPT-2 or RoBERTa at a preset, the flex document kernel, compiled,
bf16 autocast, fused AdamW, gradient clipping at 1.0) is trained here in a bare loop, compiled
once, in variants that each add one thing of what `lab pretrain` does, in this order:

  random       random packed batches (3 to 6 documents a row) on the GPU, BlockMasks made before
  model        the same with batches of the real corpus (--corpus, --tokenizer), collated before
  +items       GPT-2's loss divided by the step's predicted tokens (num_items_in_batch)
  +groups      AdamW with the lab's two parameter groups (no decay on biases and LayerNorm)
  +mask        the BlockMask built every step from the document numbers
  +host        the batch collated on the host every step (PackedCollator), pinned and copied
  +loader      batches from lab.train.loop's DataLoader (2 loader processes, pinned memory)
  lab-loop     lab.train.loop.train_plain itself (the steady rate it records)

    python benchmarks/gpu_step_probe.py --corpus C --tokenizer T      # on a GPU
    python benchmarks/gpu_step_probe.py --dry-run --corpus C --tokenizer T   # CPU: micro, forward
                                                                      # only (lab-loop: mask path)
Without --corpus only `random` and what needs no corpus runs. Prints ms per step, tokens/s
per variant (total tokens over total time, after two untimed steps) and its ratio to `random`
(the model alone; benchmarks/gpu_check.py's plain-gpt2 is the bare loop to compare `random` with).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class _Tokenizer:
    """What build_config and PackedCollator read of a tokenizer."""

    bos_token_id, pad_token_id, eos_token_id, mask_token_id = 0, 1, 2, 4

    def __init__(self, vocab: int):
        self.vocab = vocab
        self.all_special_ids = [0, 1, 2, 3, 4]

    def __len__(self) -> int:
        return self.vocab


def _features(rows: int, block: int, vocab: int, generator: Any) -> list[dict[str, Any]]:
    """PackedDataset-like items: each row 3 to 6 documents and a little padding."""
    import torch

    items = []
    for index in range(rows):
        documents = int(torch.randint(3, 7, (1,), generator=generator))
        used = block - int(torch.randint(0, 16, (1,), generator=generator))
        cuts = sorted(torch.randperm(used - 2, generator=generator)[:documents - 1].add(1).tolist())
        segments = torch.zeros(block, dtype=torch.long)
        for number, (start, end) in enumerate(zip([0] + cuts, cuts + [used]), start=1):
            segments[start:end] = number
        ids = torch.randint(5, vocab, (block,), generator=generator)
        ids[segments == 0] = 1
        items.append({"input_ids": ids, "attention_mask": (segments > 0).long(),
                      "segments": segments, "index": index})
    return items


def probe(family: str, preset: str, block: int, batch: int, vocab: int, steps: int,
          warmup: int, dry_run: bool, corpus: Path | None = None, tokenizer: Path | None = None,
          cache: Path | None = None) -> dict[str, Any]:
    import torch

    from lab.models import build_config, build_model, position_offset
    from lab.train.attention import use_flex_attention, with_document_mask
    from lab.train.loop import BatchesOfTheRun, decay_groups, micro_batches
    from lab.train.packing import PackedCollator

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    train = cuda  # FlexAttention has no backward on a CPU: the dry run goes forward only
    if cuda:
        torch.set_float32_matmul_precision("high")
    dataset = None
    if corpus is not None:
        from lab.tokenizer import load_tokenizer, tokenizer_hash
        from lab.train.packing import PackedDataset, pack_documents, tokenize_corpus

        tok = load_tokenizer(tokenizer)
        tokens = tokenize_corpus(corpus, tok, tokenizer_hash(tokenizer), cache)
        dataset = PackedDataset(tokens, pack_documents(tokens.lengths(), block,
                                                       samples=tokens.injected),
                                tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    else:
        tok = _Tokenizer(vocab)
    torch.manual_seed(0)
    model = build_model(family, build_config(family, preset, tok, block)).to(device)
    had_dropout = use_flex_attention(model)
    model.train(train)
    compiled = torch.compile(model)
    fused = {"fused": True} if cuda else {}
    whole = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, **fused)
    grouped = torch.optim.AdamW(decay_groups(model, 0.01), lr=5e-4, **fused)
    causal = family == "gpt2"
    collator = PackedCollator(tok, mlm=not causal, seed=0, attention="flex",
                              position_offset=position_offset(model.config), rows=batch)
    generator = torch.Generator().manual_seed(0)
    random_batches = [_features(batch, block, len(tok), generator) for _ in range(4)]
    real_batches = ([[dataset[(b * batch + i) % len(dataset)] for i in range(batch)]
                     for b in range(4)] if dataset is not None else [])

    def to_device(inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: v.pin_memory().to(device, non_blocking=True) if cuda and hasattr(v, "to")
                else v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}

    def ready(batches: list) -> list[dict[str, Any]]:
        return [with_document_mask(to_device(collator(b)), causal) for b in batches]

    ready_random, ready_real = ready(random_batches), ready(real_batches)
    on_device = [to_device(collator(b)) for b in real_batches]

    def step(inputs: dict[str, Any], optimizer: Any = whole, items: bool = False) -> None:
        more = ({"num_items_in_batch": (inputs["labels"][:, 1:] != -100).sum()}
                if items and causal else {})
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            if train:
                loss = compiled(**inputs, **more).loss
            else:
                with torch.no_grad():
                    loss = compiled(**inputs, **more).loss
        if train:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    loader_iter: list[Any] = []

    def from_loader(i: int) -> None:
        if not loader_iter:
            plan = micro_batches(len(dataset), _settings(batch, block, causal, 10_000), 0, 10_000)
            loader_iter.append(iter(torch.utils.data.DataLoader(
                BatchesOfTheRun(dataset, collator, plan, batch, 0), batch_size=None,
                num_workers=2, pin_memory=cuda, prefetch_factor=4,
                generator=torch.Generator().manual_seed(0))))
        _, inputs = next(loader_iter[0])
        inputs = {k: v.to(device, non_blocking=True) if hasattr(v, "to") else v
                  for k, v in inputs.items()}
        step(with_document_mask(inputs, causal), grouped, True)

    variants = {"random": lambda i: step(ready_random[i % 4])}
    if dataset is not None:
        variants.update({
            "model": lambda i: step(ready_real[i % 4]),
            "+items": lambda i: step(ready_real[i % 4], whole, True),
            "+groups": lambda i: step(ready_real[i % 4], grouped, True),
            "+mask": lambda i: step(with_document_mask(on_device[i % 4], causal), grouped, True),
            "+host": lambda i: step(with_document_mask(to_device(collator(real_batches[i % 4])),
                                                       causal), grouped, True),
            "+loader": from_loader,
        })
    result: dict[str, Any] = {"family": family, "preset": preset, "block": block, "batch": batch,
                              "device": torch.cuda.get_device_name() if cuda else "cpu",
                              "torch": torch.__version__, "train": train, "variants": {}}
    started = time.perf_counter()
    first = "model" if dataset is not None else "random"
    for i in range(max(1, warmup)):  # compiles
        variants[first](i)
    if cuda:
        torch.cuda.synchronize()
    result["compile_warmup_seconds"] = round(time.perf_counter() - started, 1)
    for name, run in variants.items():
        for i in range(2):
            run(i)
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        for i in range(steps):
            run(i)
        if cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - began) / steps
        _report(result, name, seconds, batch * block, family, preset)
    if dataset is not None:
        result["variants"]["lab-loop"] = _lab_loop(model, had_dropout, dataset, tok, batch, block,
                                                   causal, steps, cuda, result, family, preset)
    return result


def _settings(batch: int, block: int, causal: bool, steps: int, **more: Any) -> Any:
    from lab.train.loop import LoopSettings

    fields = dict(batch_size=batch, grad_accum=1, epochs=1.0, max_steps=steps, lr=5e-4,
                  weight_decay=0.01, lr_scheduler="linear", warmup_steps=0, seed=0,
                  save_steps=10 ** 9, log_steps=50, bf16=False, compile=False, causal=causal,
                  block_size=block)
    return LoopSettings(**{**fields, **more})


def _report(result: dict[str, Any], name: str, seconds: float, tokens: int, family: str,
            preset: str) -> None:
    first = next(iter(result["variants"].values()), None)  # `random`: the model alone
    ratio = first["tokens_per_second"] and tokens / seconds / first["tokens_per_second"] \
        if first else 1.0
    result["variants"][name] = {"ms_per_step": round(seconds * 1e3, 2),
                                "tokens_per_second": round(tokens / seconds, 1),
                                "x_random": round(ratio, 3)}
    print(f"{family} {preset} {name:8s}: {seconds * 1e3:7.2f} ms/step, "
          f"{tokens / seconds:,.0f} tokens/s, {ratio:.3f}x random", flush=True)


def _lab_loop(model: Any, had_dropout: Any, dataset: Any, tok: Any, batch: int, block: int,
              causal: bool, steps: int, cuda: bool, result: dict[str, Any], family: str,
              preset: str) -> dict[str, Any]:
    """train_plain on the same model (its compiled code is reused), steady rate after 20 steps;
    on a CPU the mask path uncompiled (FlexAttention has no backward there)."""
    import tempfile

    from lab.models import position_offset
    from lab.train.attention import restore_attention
    from lab.train.loop import train_plain
    from lab.train.packing import PackedCollator
    from lab.train.speed import make_steady_throughput_callback

    if not cuda:
        restore_attention(model, had_dropout)
    collator = PackedCollator(tok, mlm=not causal, seed=0, attention="flex" if cuda else "mask",
                              position_offset=position_offset(model.config),
                              rows=batch if cuda else None)
    total = 20 + steps
    settings = _settings(batch, block, causal, total, bf16=cuda, compile=cuda, fused_adamw=cuda,
                         loader_workers=2 if cuda else 0, pin_memory=cuda)
    throughput = make_steady_throughput_callback()
    with tempfile.TemporaryDirectory() as folder:
        train_plain(model, dataset, collator, settings, "cuda" if cuda else "cpu",
                    Path(folder), None, throughput)
    rate = throughput.record(batch * block, 1)["steady_tokens_per_second"]
    if rate:
        _report(result, "lab-loop", batch * block / rate, batch * block, family, preset)
    return result["variants"].get("lab-loop", {"tokens_per_second": rate})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="gpt2", choices=("gpt2", "roberta"))
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true", help="micro shapes, a few steps")
    parser.add_argument("--corpus", type=Path, default=None, help="a corpus made by lab inject")
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.dry_run:
        args.preset, args.block, args.batch, args.vocab, args.steps = "micro", 128, 4, 1000, 3
    if (args.corpus is None) != (args.tokenizer is None):
        parser.error("--corpus and --tokenizer go together")
    result = probe(args.family, args.preset, args.block, args.batch, args.vocab, args.steps,
                   args.warmup, args.dry_run, args.corpus, args.tokenizer, args.cache_dir)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
