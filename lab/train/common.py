"""Training plumbing shared by pre-training and fine-tuning (both run on the HF Trainer)."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any


def state_sha256(model: Any) -> str:
    """Hash of all weights (names, shapes and values) in a fixed order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def trained_weights_sha256(model: Any) -> str:
    """state_sha256 of a model after training. Under DeepSpeed ZeRO-3 each rank holds only a
    partition of every weight, so all ranks gather the full weights first (a collective: every
    rank must call this)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            return state_sha256(model)
    return state_sha256(model)


def latest_checkpoint(folder: Path) -> Path | None:
    """Newest checkpoint whose save completed (the trainer state is written last)."""
    complete = [p for p in folder.glob("checkpoint-*")
                if (p / "trainer_state.json").is_file() and p.name.split("-")[-1].isdigit()]
    return max(complete, key=lambda p: int(p.name.split("-")[-1]), default=None)


def training_arguments(output_dir: Path, **settings: Any):
    """TrainingArguments with the lab's defaults; settings this transformers version does not
    know are dropped (the lab supports 4.44 to 5.x)."""
    import torch
    from transformers import TrainingArguments

    wanted: dict[str, Any] = dict(
        report_to=[], use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0,
        remove_unused_columns=False, disable_tqdm=True, logging_first_step=True,
        save_total_limit=2,
        # Both families use every weight in every step: skip DDP's per-step unused-weight search.
        ddp_find_unused_parameters=False,
    )
    wanted.update(settings)
    wanted["output_dir"] = str(output_dir)
    known = {f.name for f in dataclasses.fields(TrainingArguments)}
    return TrainingArguments(**{k: v for k, v in wanted.items() if k in known})
