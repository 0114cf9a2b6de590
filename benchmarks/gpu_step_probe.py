"""Where a lab pre-training step's time goes on a GPU: a diagnosis beside benchmarks/gpu_check.py.

The lab's model (transformers GPT-2 or RoBERTa at a preset, the flex document kernel, compiled,
bf16 autocast, fused AdamW, gradient clipping at 1.0) is trained here without the HF Trainer, on
random packed batches (3 to 6 documents a row) that live on the GPU, in three variants that add
one cost each:

  model        the BlockMasks built once, before timing: the model's own step
  +mask        the BlockMask built every step from the document numbers (what the trainer does)
  +host        the batch collated on the host every step (PackedCollator), pinned and copied

    python benchmarks/gpu_step_probe.py --family gpt2 --preset paper      # on a GPU
    python benchmarks/gpu_step_probe.py --dry-run                         # CPU: micro, forward only

Prints ms per step and tokens/s per variant (total tokens over total time, after warm-up steps).
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
          warmup: int, dry_run: bool) -> dict[str, Any]:
    import torch

    from lab.models import build_config, build_model, position_offset
    from lab.train.attention import use_flex_attention, with_document_mask
    from lab.train.packing import PackedCollator

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    train = cuda  # FlexAttention has no backward on a CPU: the dry run goes forward only
    if cuda:
        torch.set_float32_matmul_precision("high")
    tok = _Tokenizer(vocab)
    torch.manual_seed(0)
    model = build_model(family, build_config(family, preset, tok, block)).to(device)
    use_flex_attention(model)
    model.train(train)
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, fused=cuda)
    collator = PackedCollator(tok, mlm=family == "roberta", seed=0, attention="flex",
                              position_offset=position_offset(model.config), rows=batch)
    generator = torch.Generator().manual_seed(0)
    host_batches = [_features(batch, block, vocab, generator) for _ in range(4)]
    causal = family == "gpt2"

    def to_device(inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: v.pin_memory().to(device, non_blocking=True) if cuda and hasattr(v, "to")
                else v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}

    ready = [with_document_mask(to_device(collator(b)), causal) for b in host_batches]
    on_device = [to_device(collator(b)) for b in host_batches]

    def step(inputs: dict[str, Any]) -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            if train:
                loss = compiled(**inputs).loss
            else:
                with torch.no_grad():
                    loss = compiled(**inputs).loss
        if train:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    variants = {
        "model": lambda i: step(ready[i % 4]),
        "+mask": lambda i: step(with_document_mask(on_device[i % 4], causal)),
        "+host": lambda i: step(with_document_mask(to_device(collator(host_batches[i % 4])),
                                                   causal)),
    }
    result: dict[str, Any] = {"family": family, "preset": preset, "block": block, "batch": batch,
                              "device": torch.cuda.get_device_name() if cuda else "cpu",
                              "torch": torch.__version__, "train": train, "variants": {}}
    started = time.perf_counter()
    for i in range(max(1, warmup)):  # compiles
        variants["model"](i)
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
        result["variants"][name] = {"ms_per_step": round(seconds * 1e3, 2),
                                    "tokens_per_second": round(batch * block / seconds, 1)}
        print(f"{family} {preset} {name:6s}: {seconds * 1e3:7.2f} ms/step, "
              f"{batch * block / seconds:,.0f} tokens/s", flush=True)
    return result


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
    args = parser.parse_args(argv)
    if args.dry_run:
        args.preset, args.block, args.batch, args.vocab, args.steps = "micro", 128, 4, 1000, 3
    result = probe(args.family, args.preset, args.block, args.batch, args.vocab, args.steps,
                   args.warmup, args.dry_run)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
