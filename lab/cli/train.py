"""`lab`'s training commands: pre-training from scratch (lab pretrain), fine-tuning (lab finetune)
and a trained model as a plain transformers folder (lab export)."""
from __future__ import annotations

import os
import sys

from lab.cli.shared import console, options_of
from lab.modelcard import ExportConfig, write_model_card
from lab.train.finetune import FinetuneConfig
from lab.train.pretrain import PretrainConfig


@options_of(PretrainConfig)
def pretrain(cfg: PretrainConfig) -> None:
    """Pre-train RoBERTa or GPT-2 from scratch on one arm's corpus."""
    from lab.train.pretrain import run_pretrain

    result = run_pretrain(cfg)
    if cfg.dry_run:
        params = result["parameters"]
        console.print(f"{result['model']} {result['preset']}: {params['total']:,} parameters "
                      f"({params['non_embedding']:,} non-embedding), vocabulary "
                      f"{result['vocab_size']}, {result['tokens_per_step']:,} tokens per step")
        return
    if result.get("kind") == "lab-pretrained":  # rank 0, whose folder is complete
        write_model_card(cfg.out)  # README.md, from the manifest the stage wrote
        loss = result["loss"]
        console.print(f"{cfg.out}: {result['steps']} steps, loss {loss['first']:.3f} -> "
                      f"{loss['final']:.3f}, {result['useful_tokens_per_second']:,.0f} useful "
                      f"tokens/s, padding {result['packing']['padding_fraction']:.1%}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A rank of a multi-process launch, its work written and its process group left: end
        # here. Interpreter shutdown can still abort it on a loaded machine ("terminate called
        # without an active exception" from a communication thread of DeepSpeed ZeRO-3), which
        # fails the whole launch after the model was saved.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

@options_of(FinetuneConfig)
def finetune(cfg: FinetuneConfig) -> None:
    """Fine-tune a pre-trained model on the task's train split (or keep it: --epochs 0)."""
    from lab.train.finetune import run_finetune

    manifest = run_finetune(cfg)
    write_model_card(cfg.out)  # README.md, from the manifest the stage wrote
    loss = manifest["loss"]
    trained = f"loss {loss['first']:.3f} -> {loss['final']:.3f}" if loss["first"] else "not trained"
    console.print(f"{cfg.out}: {manifest['architecture']} for {cfg.task}, "
                  f"{manifest['data']['train_used']} training samples, {cfg.epochs} epochs, {trained}")

@options_of(ExportConfig)
def export(cfg: ExportConfig) -> None:
    """Write a model as a folder plain transformers loads, with its model card."""
    from lab.modelcard import export_model

    record = export_model(cfg)
    console.print(f"{record['out']}: {record['architecture']}, {', '.join(record['files'])}",
                  markup=False, highlight=False, soft_wrap=True)
    if "hub" in record:
        console.print(f"pushed to {record['hub']['repo']} ({record['hub']['commit']})")
