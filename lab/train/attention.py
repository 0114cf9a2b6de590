"""Per-document attention in pre-training: which kernel keeps packed documents apart.

- `mask`: the collator sends a 4D boolean mask (batch, 1, length, length) that transformers hands
  to SDPA. Any device, and attention-probability dropout applies; but a mask keeps SDPA off its
  flash kernel, so on a GPU it is the slow path.
- `flex`: the collator sends each token's document number (`document_ids`, batch x length) and the
  trainer turns it on the device into a FlexAttention `BlockMask` (document-causal for GPT-2,
  document-bidirectional for RoBERTa): the same bits as the mask, computed by a fused kernel that
  skips the blocks two documents never share. FlexAttention has no attention-probability dropout,
  so that dropout is 0 on this path (the manifest says so); the config the model is saved with
  keeps its value for fine-tuning.
- unset (null): `flex` where pre-training of a small or paper model runs on a CUDA GPU and
  torch has FlexAttention, `mask` elsewhere (a CPU run computes the numbers it always did);
  lab.train.speed.

The cross-document layout has no per-document mask and ignores this setting.
"""
from __future__ import annotations

from typing import Any

from lab.common import LabError

ATTENTION_KERNELS = ("mask", "flex")
# The name under which transformers' attention interface finds the flex kernel.
FLEX_IMPLEMENTATION = "lab_document_flex"
DOCUMENT_IDS = "document_ids"  # the collator's key on the flex path


def check_attention(choice: str) -> str:
    if choice not in ATTENTION_KERNELS:
        raise LabError(f"--attention {choice}: choose from {', '.join(ATTENTION_KERNELS)}")
    return choice


def flex_attention_available() -> bool:
    try:
        from torch.nn.attention import flex_attention  # noqa: F401  (torch >= 2.5)
    except ImportError:
        return False
    return True


def resolve_attention(choice: str | None, device: str, preset: str = "paper") -> str:
    """`mask` or `flex` for a pre-training of a `preset` model on `device`; None: the default
    there (flex on a CUDA GPU whose torch has FlexAttention, for the presets worth compiling;
    else mask)."""
    from lab.train.speed import device_default

    resolved = check_attention(device_default("attention", choice, device, preset))
    if resolved == "flex" and not flex_attention_available():
        if choice is None:
            return "mask"
        import torch

        raise LabError(f"--attention flex: this torch ({torch.__version__}) has no FlexAttention "
                       "(torch >= 2.5 has it)")
    if resolved == "flex" and not str(device).startswith("cuda"):
        raise LabError(f"--attention flex: FlexAttention trains on a CUDA GPU only, and this "
                       f"pre-training runs on {device} (use mask)")
    return resolved


_compiled_flex: Any = None


def _flex_kernel() -> Any:
    """flex_attention, compiled once: uncompiled it runs an unfused reference that is slower
    than the mask path (inside a compiled model it is traced and fused with the model)."""
    global _compiled_flex
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling():
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def _document_flex_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                             scaling: float | None = None, dropout: float = 0.0,
                             document_mask: Any = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention interface: (batch, heads, length, head_dim) in, (batch, length,
    heads, head_dim) out, under the BlockMask passed as `document_mask`."""
    if document_mask is None:
        raise RuntimeError("document flex attention called without its document_mask")
    if dropout:
        raise RuntimeError("document flex attention has no attention dropout (set it to 0)")
    kernel = _flex_kernel() if query.is_cuda or _compiling() else _eager_flex()
    out = kernel(query, key, value, block_mask=document_mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _compiling() -> bool:
    import torch

    return torch.compiler.is_compiling()


def _eager_flex() -> Any:
    """CPU (tests; inference only): the unfused reference, which computes the same function."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    def reference(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return flex_attention(*args, **kwargs)

    return reference


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The mask transformers would build for this implementation: none (the BlockMask travels
    as `document_mask`)."""
    return None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(FLEX_IMPLEMENTATION, _document_flex_attention)
    try:
        from transformers import AttentionMaskInterface
    except ImportError:  # older transformers build no mask per implementation
        return
    AttentionMaskInterface.register(FLEX_IMPLEMENTATION, _no_mask)


def use_flex_attention(model: Any) -> float:
    """Switch a GPT-2 or RoBERTa model to the document flex kernel, its attention-probability
    dropout to 0 (the modules', not the config's); returns the dropout it had."""
    _register()
    model._lab_attention_before = model.config._attn_implementation
    model.set_attn_implementation(FLEX_IMPLEMENTATION)
    had = 0.0
    for module in _attention_dropouts(model):
        had = max(had, module.p)
        module.p = 0.0
    return had


def restore_attention(model: Any, dropout: float) -> None:
    """Undo use_flex_attention (before saving: a loader elsewhere knows no lab kernel)."""
    model.set_attn_implementation(getattr(model, "_lab_attention_before", None) or "sdpa")
    for module in _attention_dropouts(model):
        module.p = dropout


def _attention_dropouts(model: Any) -> list[Any]:
    import torch

    # GPT-2's attention keeps it as attn_dropout, RoBERTa's self-attention as dropout
    return [module for name, module in model.named_modules()
            if isinstance(module, torch.nn.Dropout)
            and (name.endswith("attn.attn_dropout") or name.endswith("attention.self.dropout"))]


# FlexAttention's tile: a BlockMask says, per tile of BLOCK x BLOCK queries and keys, whether
# none, some (the mask function decides) or all of its pairs attend.
BLOCK = 128


def document_block_mask(document_ids: Any, causal: bool) -> Any:
    """The FlexAttention BlockMask of a (batch, length) tensor of document numbers: a query sees
    the keys of its own document (and, causal, not after it). Padding (number 0) sees padding,
    as in the 4D mask: no query row is empty.

    torch's create_block_mask evaluates the mask function through vmap, which costs the host
    more than a paper-size step costs the GPU; here the tiles come from the dense mask in a few
    tensor operations on the device (tests check them against create_block_mask)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    documents = document_ids
    batch, length = documents.shape
    same = documents[:, :, None] == documents[:, None, :]
    if causal:
        same &= torch.ones(length, length, dtype=torch.bool, device=documents.device).tril()
    tiles = -(-length // BLOCK)
    edge = tiles * BLOCK - length
    if edge:  # keys and queries beyond the length attend nowhere
        same = torch.nn.functional.pad(same, (0, edge, 0, edge), value=False)
    grid = same.view(batch, tiles, BLOCK, tiles, BLOCK)
    some = grid.any(dim=4).any(dim=2)
    full = grid.all(dim=4).all(dim=2)

    def ordered(tile_mask: Any) -> tuple[Any, Any]:
        # Contiguous, as create_block_mask's: the kernels read a row of indices at stride 1
        # whatever the tensor's strides say, and a transposed tile mask keeps its transposed
        # layout through .to() and argsort (the backward pass then read the wrong tiles).
        tile_mask = tile_mask[:, None].to(torch.int32).contiguous()  # (batch, 1, rows, columns)
        counts = tile_mask.sum(dim=-1).to(torch.int32).contiguous()
        indices = torch.argsort(tile_mask, dim=-1, descending=True, stable=True)
        return counts, indices.to(torch.int32).contiguous()

    def same_document(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return documents[b, q] == documents[b, kv]

    def same_document_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (documents[b, q] == documents[b, kv]) & (q >= kv)

    partial, mask_mod = some & ~full, same_document_causal if causal else same_document
    kv_partial, kv_full = ordered(partial), ordered(full)
    try:
        # The backward pass reads the tiles by key column too: transposing the tile masks here
        # is a few operations, where from_kv_blocks rebuilds them through vmap on the host,
        # which cost 2.5 ms a step of a paper-size model on an H100 (benchmarks/gpu_step_probe.py).
        q_partial, q_full = ordered(partial.transpose(1, 2)), ordered(full.transpose(1, 2))
        return BlockMask(seq_lengths=(length, length), kv_num_blocks=kv_partial[0],
                         kv_indices=kv_partial[1], full_kv_num_blocks=kv_full[0],
                         full_kv_indices=kv_full[1], q_num_blocks=q_partial[0],
                         q_indices=q_partial[1], full_q_num_blocks=q_full[0],
                         full_q_indices=q_full[1], BLOCK_SIZE=(BLOCK, BLOCK), mask_mod=mask_mod)
    except TypeError:  # a torch whose BlockMask takes other arguments
        return BlockMask.from_kv_blocks(*kv_partial, *kv_full, BLOCK_SIZE=BLOCK,
                                        mask_mod=mask_mod, seq_lengths=(length, length))


# The flex path's code whose work a CPU cannot check in full (torch has no flex backward on a
# CPU). A change to any of it is not the default until the GPU check's correctness part has
# passed on it: tests/test_gpu_speed.py finds its cuda_only_sha256() in a committed record of a
# passing check (results/gpu-*/verified-*.json; docs/scaling-out.md, "CUDA-only code").
CUDA_ONLY = ("document_block_mask", "with_document_mask", "_document_flex_attention",
             "_flex_kernel", "use_flex_attention")


def cuda_only_sha256() -> str:
    """sha256 of the source of the CUDA_ONLY functions, in that order."""
    import hashlib
    import inspect
    import sys

    module = sys.modules[__name__]
    source = "".join(inspect.getsource(getattr(module, name)) for name in CUDA_ONLY)
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def with_document_mask(inputs: dict[str, Any], causal: bool) -> dict[str, Any]:
    """A flex-path batch made ready for the model: its document numbers become the BlockMask
    (its 2D padding mask stays: transformers then builds no mask of its own, _no_mask)."""
    inputs = dict(inputs)
    documents = inputs.pop(DOCUMENT_IDS)
    inputs["document_mask"] = document_block_mask(documents, causal)
    return inputs
