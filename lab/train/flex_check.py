"""The flex document kernel checked against the 4D-mask path on the device it is about to train on.

Why: the kernel's backward pass reads the BlockMask's key-column tiles, which its forward pass
never reads and which no CPU can run (torch has no FlexAttention backward on a CPU). A layout
change to those tiles (964b434) passed every CPU test, then trained GPT-2 into NaN and RoBERTa
into a wrong model on an H200 (issue 57). So the first time a process trains with the flex path
on a device, `check_flex_kernel` puts one small packed batch (`check_features`: documents that
cross tile edges, one document filling its row, many short ones, padding) through both paths of
a two-layer model of the run's shape (hidden size, heads, vocabulary, block) and compares the
logits over document tokens and every parameter's gradient: in float32 with TF32 off, and for a
bf16 run also under bf16 autocast. A relative error above TOLERANCES refuses the run in one line
(the way out: `--attention mask`); a pass is recorded in the manifest (`speed.flex_check`).
`benchmarks/gpu_check.py`'s correctness part runs the same comparison (`compare_paths`) on real
packed data.
"""
from __future__ import annotations

import contextlib
import copy
import time
from typing import Any

from lab.common import LabError

# Largest relative error ||flex - mask|| / ||mask|| accepted, per precision: of the logits over
# the tokens of documents, and of the gradients. In float32 the gradients are judged matrix by
# matrix (the worst weight matrix or embedding): a wrong attention backward shows in the attention
# weights, while the embeddings and the output head, which hold most of the gradient's norm, hide
# it in a sum (halving every gradient through attention moved the sum by 0.008, a query matrix by
# 0.5). Biases are left out of the worst: a key bias's gradient is zero in exact arithmetic
# (softmax ignores a shift shared by a query's scores), so its relative error is rounding over
# rounding. In bf16, where small gradients are mostly rounding, all parameters are judged
# together. A correct kernel measured 1e-6 (float32) and 2e-3 (bf16) together on an H200; the
# wrong key-column tiles gave 0.16-0.47 together.
TOLERANCES: dict[str, dict[str, Any]] = {
    "float32": {"logits": 1e-4, "gradients": 5e-4, "gradients_judged": "worst matrix"},
    "bf16": {"logits": 2e-2, "gradients": 5e-2, "gradients_judged": "all parameters together"},
}
CHECK_LAYERS = 2  # the checked model's depth: the kernel is the same in every layer
CHECK_ROWS = 4

_checked: dict[tuple, dict[str, Any]] = {}  # one check per process, device, config and precision


def check_features(tokenizer: Any, block: int, seed: int = 0) -> list[dict[str, Any]]:
    """CHECK_ROWS packed rows of `block` tokens in PackedDataset's form (`<s> ... </s>` per
    document, random non-special tokens, padding numbered 0): documents whose edges fall inside
    the 128-token tiles and padding after them; one document filling its row; many short
    documents; one long document then half a row of padding."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    layouts = [  # document lengths in order; the row's rest is padding
        [block // 3 + 5, 7, block // 4 - 3, block // 5, 1],
        [block],
        [3 + (k % 9) for k in range(block)],
        [block // 2 + 3],
    ]
    features = []
    for index, lengths in enumerate(layouts):
        segments = torch.zeros(block, dtype=torch.long)
        ids = torch.full((block,), tokenizer.pad_token_id, dtype=torch.long)
        start, number = 0, 0
        for length in lengths:
            if start >= block:
                break
            end = min(block, start + length)
            number += 1
            segments[start:end] = number
            pick = torch.randint(len(ordinary), (end - start,), generator=generator)
            ids[start:end] = ordinary[pick]
            ids[start] = tokenizer.bos_token_id
            if end - start > 1:
                ids[end - 1] = tokenizer.eos_token_id
            start = end
        features.append({"input_ids": ids, "attention_mask": (ids != tokenizer.pad_token_id).long(),
                         "segments": segments, "index": index})
    return features


@contextlib.contextmanager
def _float32_matmuls_exact(device: str):
    """TF32 off while the float32 comparison runs (a CUDA training process turns it on)."""
    import torch

    if not str(device).startswith("cuda"):
        yield
        return
    before = torch.get_float32_matmul_precision()
    cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cudnn.allow_tf32 = cudnn


def _relative(want: list[Any], got: list[Any]) -> float:
    num = sum(float((w.float() - g.float()).norm()) ** 2 for w, g in zip(want, got))
    den = sum(float(w.float().norm()) ** 2 for w in want)
    return (num / den) ** 0.5 if den else float("inf") if num else 0.0


def compare_paths(model: Any, tokenizer: Any, features: list[dict[str, Any]], device: str,
                  precisions: tuple[str, ...] = ("float32",),
                  gradients: bool | None = None) -> dict[str, dict[str, Any]]:
    """Per precision, how far the flex path's logits (over document tokens) and gradients (of the
    loss, all parameters) are from the 4D-mask path's on the same collated batch:
    {precision: {logits, gradients, limits, loss: [mask, flex], ok}}. gradients None: where the
    device has a flex backward (CUDA). The model is left in eval mode on `device`, its attention
    as it was."""
    import torch

    from lab.models import model_family, position_offset
    from lab.train.attention import restore_attention, use_flex_attention, with_document_mask
    from lab.train.packing import PackedCollator

    if gradients is None:
        gradients = str(device).startswith("cuda")
    mlm = model_family(model.config) == "roberta"
    offset = position_offset(model.config)

    def collated(attention: str) -> dict[str, Any]:
        batch = PackedCollator(tokenizer, mlm=mlm, seed=1, position_offset=offset,
                               attention=attention)(features)
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    mask_batch, flex_batch = collated("mask"), collated("flex")
    real = flex_batch["document_ids"] > 0
    model.to(device).eval()

    def run(inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], float]:
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(gradients):
            out = model(**inputs)
            if gradients:
                out.loss.backward()
        grads = ({name: p.grad.detach().clone() for name, p in model.named_parameters()
                  if p.grad is not None} if gradients else {})
        return out.logits.detach().float()[real], grads, float(out.loss.detach())

    report: dict[str, dict[str, Any]] = {}
    for precision in precisions:
        autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                                  enabled=precision == "bf16")
        exact = _float32_matmuls_exact(device) if precision == "float32" else contextlib.nullcontext()
        with exact, autocast:
            want_logits, want_grads, want_loss = run(mask_batch)
            dropout = use_flex_attention(model)
            try:
                got_logits, got_grads, got_loss = run(with_document_mask(flex_batch,
                                                                         causal=not mlm))
            finally:
                restore_attention(model, dropout)
        model.zero_grad(set_to_none=True)
        limits = TOLERANCES[precision]
        entry: dict[str, Any] = {"logits": _relative([want_logits], [got_logits]),
                                 "gradients": None, "loss": [want_loss, got_loss],
                                 "limits": limits}
        if gradients:
            names = sorted(want_grads)
            if sorted(got_grads) != names:
                raise RuntimeError("the flex path's gradients reach other parameters than the "
                                   "mask path's")
            per = {n: _relative([want_grads[n]], [got_grads[n]]) for n in names
                   if want_grads[n].ndim >= 2}
            worst = max(per, key=per.__getitem__)
            together = _relative([want_grads[n] for n in names], [got_grads[n] for n in names])
            entry.update(gradients_worst_matrix={"name": worst, "error": per[worst]},
                         gradients_together=together,
                         gradients=per[worst] if limits["gradients_judged"] == "worst matrix"
                         else together)
        entry["ok"] = entry["logits"] <= limits["logits"] and (
            entry["gradients"] is None or entry["gradients"] <= limits["gradients"])
        report[precision] = entry
    return report


def check_flex_kernel(config: Any, tokenizer: Any, block: int, device: str, bf16: bool,
                      gradients: bool | None = None) -> dict[str, Any]:
    """The check of the module's docstring, once per process for a device, family, shape and
    precision (later calls return the first record, `cached` true). The caller's random state is
    left as it was."""
    import torch

    from lab.models import build_model, model_family

    family = model_family(config)
    precisions = ("float32", "bf16") if bf16 else ("float32",)
    key = (str(device), block, config.to_json_string(), precisions, gradients)
    if key in _checked:
        return {**_checked[key], "cached": True}
    started = time.perf_counter()
    small = copy.deepcopy(config)
    if family == "gpt2":
        small.n_layer = min(small.n_layer, CHECK_LAYERS)
    else:
        small.num_hidden_layers = min(small.num_hidden_layers, CHECK_LAYERS)
    cuda = str(device).startswith("cuda")
    index = torch.device(device).index if cuda else None
    devices = [torch.cuda.current_device() if index is None else index] if cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        model = build_model(family, small)
        errors = compare_paths(model, tokenizer, check_features(tokenizer, block), device,
                               precisions, gradients)
    del model
    record = {
        "ok": all(e["ok"] for e in errors.values()), "device": str(device),
        "gpu": torch.cuda.get_device_name(torch.device(device)) if cuda else None,
        "torch": torch.__version__, "layers": CHECK_LAYERS, "rows": CHECK_ROWS, "block": block,
        "errors": errors, "seconds": round(time.perf_counter() - started, 2), "cached": False}
    _checked[key] = record
    return record


def failure_message(record: dict[str, Any]) -> str:
    """One line: what disagreed, by how much, where, and the way out."""
    worst = []
    for precision, errors in record["errors"].items():
        for what in ("logits", "gradients"):
            value, limit = errors[what], errors["limits"][what]
            if value is not None and not value <= limit:
                which = (f" ({errors['gradients_worst_matrix']['name']})"
                         if what == "gradients" and errors["limits"]["gradients_judged"]
                         == "worst matrix" else "")
                worst.append(f"{what} in {precision} {value:.3g} > {limit:g}{which}")
    where = record["device"] + (f" ({record['gpu']})" if record.get("gpu") else "")
    return (f"--attention flex: the FlexAttention document kernel disagrees with the mask path "
            f"on {where} with torch {record['torch']} (relative error: {'; '.join(worst)}); "
            "train with --attention mask (a recipe: pretrain.attention: mask)")


def require_flex_kernel(config: Any, tokenizer: Any, block: int, device: str, bf16: bool,
                        gradients: bool | None = None) -> dict[str, Any]:
    """check_flex_kernel's record, or LabError when the check fails."""
    record = check_flex_kernel(config, tokenizer, block, device, bf16, gradients)
    if not record["ok"]:
        raise LabError(failure_message(record))
    return record
