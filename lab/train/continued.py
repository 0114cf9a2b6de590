"""Continued pre-training: `lab pretrain --init-from DIR` starts from existing weights (a lab
pre-trained model or a local Hugging Face checkpoint of the same family, shape and tokenizer)
instead of random ones; the optimizer and schedule start fresh. What cannot be continued is
refused, on one line, before anything is written.

A study's `continued` section (ContinuedSection) is declared here too: the recipe assembles it
beside the other sections, and the grid turns it into pairs of pre-training stages.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.common import LabError, param
from lab.models import EXPORTED_MANIFEST, MANIFEST, build_config
from lab.train.artefacts import (SOURCE_READERS, UNKNOWN, checkpoint_step, exposures_summary,
                                 joined_membership, source_record, source_weights,
                                 weights_digest)


# The recipe's `continued` section: which model continues from which (the grid reads it).
CONTINUED_ORDERS = ("clean-after", "clean-first")


@dataclass
class ContinuedSection:
    """Continued pre-training (lab pretrain --init-from) in two stages, each keyed and resumable
    like any pre-training; the models it makes are models of their own in every table
    (gpt2/clean-after:2), beside the arms' from-scratch models."""
    order: str | None = param(
        None, "null: none. clean-after: every pre-trained model goes on training on its seed's "
              "control corpus (clean) for each clean_epochs value: what is left of the "
              "contamination after clean training (the exposures' steps run on). clean-first: "
              "every arm's pre-training starts from a model first trained clean for "
              "clean_epochs (one per seed and value): a checkpoint contaminated mid-way.")
    clean_epochs: list[float] = field(default_factory=lambda: [1.0], metadata={
        "expect": "float > 0", "help": "Epochs of the clean stage; a list sweeps them (one "
                                       "continued model per value, arm and seed)."})


# What an --init-from model must share with the run's (label: config attribute), by family.
INIT_SHAPE = {
    "gpt2": {"layers": "n_layer", "hidden": "n_embd", "heads": "n_head", "ffn": "n_inner",
             "vocab_size": "vocab_size", "positions": "n_positions",
             "tied head": "tie_word_embeddings"},
    "roberta": {"layers": "num_hidden_layers", "hidden": "hidden_size",
                "heads": "num_attention_heads", "ffn": "intermediate_size",
                "vocab_size": "vocab_size", "positions": "max_position_embeddings",
                "token types": "type_vocab_size"},
}


def _init_source(path: Path) -> tuple[str, Path, dict[str, Any] | None, list[Path]]:
    """(kind, weights folder, the source's lab manifest or None, safetensors files) of an
    --init-from folder. What the weights saw comes with them wherever the lab recorded it, each
    read by its one reader (lab.train.artefacts, which checks the weights against the record):
    lab pretrain's OUT (kind lab: its manifest.json), a `lab export` of it (lab-export: its
    lab_manifest.json) or one of its checkpoints (lab-checkpoint: the run's manifest.json, as it
    stood at that step). Any other folder is a Hugging Face model (huggingface) whose
    membership nobody knows."""
    name = f"--init-from {path}"
    if not path.is_dir():
        raise LabError(f"{name}: no such directory")
    kind, manifest = "huggingface", None
    if (path / MANIFEST).is_file():
        kind = "lab"
    elif (path / EXPORTED_MANIFEST).is_file():
        kind = "lab-export"
    elif checkpoint_step(path) is not None:
        kind = "lab-checkpoint"
    if kind in SOURCE_READERS:
        manifest = SOURCE_READERS[kind](path, "--init-from")
        source = path / (EXPORTED_MANIFEST if kind == "lab-export" else MANIFEST)
        if kind == "lab-checkpoint":
            source = path.parent.parent / MANIFEST
        if manifest.get("kind") != "lab-pretrained":
            raise LabError(f"{name}: {source} is a {manifest.get('kind') or 'lab'} record, not "
                           "lab pretrain's (start from a pre-trained model, its export or "
                           "checkpoint)")
    weights = source_weights(path, kind)
    if not (weights / "config.json").is_file():
        raise LabError(f"{name}: no config.json in {weights} (not a model folder)")
    files = sorted(weights.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in weights.glob("*.bin"))
        raise LabError(f"{name}: no safetensors weights" + (
            f", only {pickled[0]} (pickle, which the lab never loads: save the model again with "
            "save_pretrained, safetensors by default)" if pickled else ""))
    return kind, weights, manifest, files


def check_init_from(cfg: Any, tokenizer: Any) -> dict[str, Any] | None:
    """The record of --init-from's weights ({path, kind, weights_sha256, steps}; steps: a lab
    model's), after refusing, before any work, a folder the run cannot start from: missing, no
    config.json or safetensors weights, another family, tokenizer or shape than `cfg` builds.
    None without --init-from."""
    if cfg.init_from is None:
        return None
    from lab.common import loading, read_text_file
    from lab.tokenizer import tokenizer_hash

    path = Path(cfg.init_from)
    name = f"--init-from {path}"
    kind, weights, manifest, files = _init_source(path)
    with loading(weights / "config.json", "--init-from"):
        raw = json.loads(read_text_file(weights / "config.json"))
    family = raw.get("model_type") if isinstance(raw, dict) else None
    if family != cfg.model:
        raise LabError(f"{name}: a {family or 'unknown'} model, not {cfg.model} (--model)")
    if manifest is not None:
        theirs = manifest.get("tokenizer") or {}
        if theirs.get("sha256") != tokenizer_hash(cfg.tokenizer):
            raise LabError(f"{name}: trained with another tokenizer ({theirs.get('path')}) than "
                           f"--tokenizer {cfg.tokenizer} (their sha256 differ)")
    elif (weights / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        with loading(weights / "tokenizer.json", "--init-from"):
            vocab = Tokenizer.from_file(str(weights / "tokenizer.json")).get_vocab(True)
        ours = tokenizer.get_vocab()
        differ = sum(ours.get(t) != i for t, i in vocab.items()) + len(ours.keys() - vocab.keys())
        if differ:
            raise LabError(f"{name}: its tokenizer.json has another vocabulary than --tokenizer "
                           f"{cfg.tokenizer} ({differ} tokens differ)")
    target = build_config(cfg.model, cfg.preset, tokenizer, cfg.block_size)
    with loading(weights / "config.json", "--init-from"):
        source = type(target).from_pretrained(str(weights), local_files_only=True)

    def shape(config: Any) -> dict[str, Any]:
        values = {label: getattr(config, attribute, None)
                  for label, attribute in INIT_SHAPE[cfg.model].items()}
        if cfg.model == "gpt2" and values["ffn"] is None:  # GPT-2's default inner size
            values["ffn"] = 4 * config.n_embd
        return values

    theirs, ours = shape(source), shape(target)
    differ = [f"{k} {theirs[k]} (this run {ours[k]})" for k in ours if theirs[k] != ours[k]]
    if differ:
        raise LabError(f"{name}: another shape than the {cfg.model} {cfg.preset} preset with "
                       f"this tokenizer: {', '.join(differ)}")
    return {"path": str(path.resolve()), "kind": kind, "weights_sha256": weights_digest(weights),
            "steps": manifest.get("steps") if manifest is not None else None}


def load_init_weights(model: Any, init: dict[str, Any]) -> None:
    """--init-from's weights (check_init_from's record) into `model`, as build_model made it
    for this run (its config, dropout included, stays the run's): safetensors only, every
    weight of the model (a tied one saved once), nothing else."""
    from safetensors.torch import load_file

    from lab.common import loading

    _, weights, _, files = _init_source(Path(init["path"]))
    with loading(weights, "--init-from"):
        state = {k: v for f in files for k, v in load_file(str(f)).items()}
        result = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {id(params[k]) for k in state if k in params}
    missing = [k for k in result.missing_keys if id(params.get(k)) not in loaded]
    if missing or result.unexpected_keys:
        problem = (f"lacks {len(missing)} weights ({missing[0]}, ...)" if missing else
                   f"has {len(result.unexpected_keys)} weights the model has not "
                   f"({result.unexpected_keys[0]}, ...)")
        raise LabError(f"--init-from {init['path']}: {problem}")


def continued_records(init: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What a model continued from `init` (check_init_from's record) has seen in all: its
    `corpus` (joined_membership), its `exposures` on the whole lineage's steps (the source's,
    then its own after the source's last step), its `lineage`, one entry per pre-training stage,
    first to last, and `own_corpus`, the record of this stage's corpus alone. A source without
    a lab record (a Hugging Face folder) is one stage of unknown membership."""
    source = source_record(init)
    mine = manifest["corpus"]
    corpus = joined_membership(init, mine, source)
    stage = {"corpus_sha256": mine.get("sha256"), "setting": mine.get("setting"),
             "steps": manifest.get("steps"), "weights_sha256": manifest.get("final_weights_sha256")}
    if source is None:
        unknown = {"corpus_sha256": None, "setting": None, "steps": None,
                   "weights_sha256": init["weights_sha256"], "membership": UNKNOWN,
                   "path": init["path"]}
        return {"corpus": corpus, "exposures": manifest.get("exposures"),
                "lineage": [unknown, stage], "own_corpus": mine}
    theirs = source["corpus"]
    corpus["pre_existing_verbatim"] = sorted(set(theirs.get("pre_existing_verbatim") or [])
                                             | set(mine.get("pre_existing_verbatim") or []))
    lineage = source.get("lineage") or [
        {"corpus_sha256": theirs.get("sha256"), "setting": theirs.get("setting"),
         "steps": source.get("steps"), "weights_sha256": source.get("final_weights_sha256")}]
    before, own = source.get("exposures"), manifest.get("exposures")
    exposures = own
    if before and own:
        offset = before["steps"]
        by_sample = {s: list(v) for s, v in before["by_sample"].items()}
        for sample, steps in own["by_sample"].items():
            by_sample.setdefault(sample, []).extend(step + offset for step in steps)
        exposures = {"order": f"{before['order']} then {own['order']}",
                     "steps": offset + own["steps"],
                     "stages": [{"steps": offset, **({"levels": before["levels"]}
                                                     if before.get("levels") else {})},
                                {"steps": own["steps"], **({"levels": own["levels"]}
                                                           if own.get("levels") else {})}],
                     "by_sample": dict(sorted(by_sample.items()))}
        exposures["summary"] = exposures_summary(exposures, corpus)
    return {"corpus": corpus, "exposures": exposures, "lineage": [*lineage, stage],
            "own_corpus": mine}


