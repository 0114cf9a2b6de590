"""Continued pre-training: `lab pretrain --init-from DIR` starts from existing weights (a lab
pre-trained model or a local Hugging Face checkpoint of the same family, shape and tokenizer)
instead of random ones; the optimizer and schedule start fresh. What cannot be continued is
refused, on one line, before anything is written.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lab.common import LabError
from lab.models import MANIFEST, WEIGHTS_SUBDIR, build_config


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


def _checkpoint_step(path: Path) -> int | None:
    """N of a lab checkpoint folder `RUN/checkpoints/checkpoint-N` (one that holds the lab's
    record of its files), else None."""
    from lab.train.common import CHECKPOINT_RECORD

    number = path.name.removeprefix("checkpoint-")
    if (path.name.startswith("checkpoint-") and number.isdigit()
            and path.parent.name == "checkpoints" and (path / CHECKPOINT_RECORD).is_file()):
        return int(number)
    return None


def _at_step(manifest: dict[str, Any], step: int, checkpoint: str) -> dict[str, Any]:
    """A finished run's manifest as its checkpoint at `step` stood: the exposures and lineage
    up to that step, no final weights."""
    record = {**manifest, "steps": step, "final_weights_sha256": None}
    exposures = manifest.get("exposures")
    if exposures:
        trimmed = {**exposures, "steps": step,
                   "by_sample": {sample: [s for s in steps if s <= step]
                                 for sample, steps in exposures["by_sample"].items()}}
        if exposures.get("stages"):
            trimmed["stages"] = _cut(exposures["stages"], step)
        trimmed["summary"] = _summary(trimmed, manifest["corpus"])
        record["exposures"] = trimmed
    if manifest.get("lineage"):
        lineage = _cut(manifest["lineage"], step)
        lineage[-1] = {**lineage[-1], "weights_sha256": None, "checkpoint": checkpoint}
        record["lineage"] = lineage
    return record


def _cut(stages: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The stages (each with its `steps`, in order) that the first `step` steps ran through."""
    kept, left = [], step
    for stage in stages:
        if left <= 0:
            break
        kept.append({**stage, "steps": min(stage["steps"], left)})
        left -= stage["steps"]
    return kept


def _init_source(path: Path) -> tuple[str, Path, dict[str, Any] | None, list[Path]]:
    """(kind, weights folder, the source's lab manifest or None, safetensors files) of an
    --init-from folder. What the weights saw comes with them wherever the lab recorded it:
    lab pretrain's OUT (kind lab: its manifest.json), a `lab export` of it (lab-export: its
    lab_manifest.json, which must describe these very weights) or one of its checkpoints
    (lab-checkpoint: the run's manifest.json, as it stood at that step). Any other folder is
    a Hugging Face model (huggingface) whose membership nobody knows."""
    from lab.common import files_problem
    from lab.models import (EXPORTED_MANIFEST, MODEL_FILES, read_model_manifest,
                            read_stage_manifest)
    from lab.train.common import checkpoint_problem

    name = f"--init-from {path}"
    if not path.is_dir():
        raise LabError(f"{name}: no such directory")
    kind, weights, manifest, source = "huggingface", path, None, path
    step = _checkpoint_step(path)
    if (path / MANIFEST).is_file():
        kind, weights = "lab", path / WEIGHTS_SUBDIR
        manifest, source = read_stage_manifest(path, "--init-from"), path / MANIFEST
    elif (path / EXPORTED_MANIFEST).is_file():
        kind, source = "lab-export", path / EXPORTED_MANIFEST
        manifest = read_model_manifest(source)
    elif step is not None:
        run = path.parent.parent
        if not (run / MANIFEST).is_file():
            raise LabError(f"{name}: a checkpoint of a run that has not finished ({run} has no "
                           f"{MANIFEST}), so what its weights saw is not recorded yet: finish "
                           "the run (lab pretrain --resume) first")
        kind, source = "lab-checkpoint", run / MANIFEST
        manifest = _at_step(read_stage_manifest(run, "--init-from"), step, path.name)
    if manifest is not None and manifest.get("kind") != "lab-pretrained":
        raise LabError(f"{name}: {source} is a {manifest.get('kind') or 'lab'} record, not lab "
                       "pretrain's (start from a pre-trained model, its export or checkpoint)")
    if not (weights / "config.json").is_file():
        raise LabError(f"{name}: no config.json in {weights} (not a model folder)")
    files = sorted(weights.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in weights.glob("*.bin"))
        raise LabError(f"{name}: no safetensors weights" + (
            f", only {pickled[0]} (pickle, which the lab never loads: save the model again with "
            "save_pretrained, safetensors by default)" if pickled else ""))
    if kind == "lab-export" and manifest.get(MODEL_FILES) is not None:
        recorded = {f: e for f, e in manifest[MODEL_FILES].items() if f.endswith(".safetensors")}
        problem = files_problem(weights, recorded)
        if problem is not None:
            raise LabError(f"{name}: {problem}: not the weights its {EXPORTED_MANIFEST} records "
                           "(the export was changed: export the model again)")
    if kind == "lab-checkpoint":
        problem = checkpoint_problem(path)
        if problem is not None:
            raise LabError(f"{name}: an incomplete checkpoint ({problem})")
    return kind, weights, manifest, files


def check_init_from(cfg: Any, tokenizer: Any) -> dict[str, Any] | None:
    """The record of --init-from's weights ({path, kind, weights_sha256, steps}; steps: a lab
    model's), after refusing, before any work, a folder the run cannot start from: missing, no
    config.json or safetensors weights, another family, tokenizer or shape than `cfg` builds.
    None without --init-from."""
    if cfg.init_from is None:
        return None
    from lab.common import loading, read_text_file, sha256_file
    from lab.models import check_model_files
    from lab.tokenizer import tokenizer_hash

    path = Path(cfg.init_from)
    name = f"--init-from {path}"
    kind, weights, manifest, files = _init_source(path)
    if kind == "lab":
        check_model_files(path, "--init-from")
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
    digests = [f"{f.name} {sha256_file(f)}\n" for f in files]
    return {"path": str(path.resolve()), "kind": kind,
            "weights_sha256": (digests[0].split()[1] if len(digests) == 1
                               else hashlib.sha256("".join(digests).encode()).hexdigest()),
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


def _source_manifest(init: dict[str, Any]) -> dict[str, Any] | None:
    """The lab manifest of check_init_from's source (at its step, for a checkpoint); None for
    a Hugging Face folder."""
    return _init_source(Path(init["path"]))[2]


def continued_records(init: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What a model continued from `init` (check_init_from's record) has seen in all: its
    `corpus` (joined_membership), its `exposures` on the whole lineage's steps (the source's,
    then its own after the source's last step), its `lineage`, one entry per pre-training stage,
    first to last, and `own_corpus`, the record of this stage's corpus alone. A source without
    a lab record (a Hugging Face folder) is one stage of unknown membership."""
    source = _source_manifest(init)
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
        exposures["summary"] = _summary(exposures, corpus)
    return {"corpus": corpus, "exposures": exposures, "lineage": [*lineage, stage],
            "own_corpus": mine}


# A model's corpus record says `membership: unknown` when some of its weights came from a
# source with no lab record of what it saw: its held-out samples may be members, so nothing
# about it is scored as if they were not.
UNKNOWN = "unknown"


def joined_membership(init: dict[str, Any], mine: dict[str, Any],
                      source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The membership of a model continued from `init` on a corpus with record `mine` (a
    corpus manifest or a pre-trained model's corpus record), the stages' joined: of the stage
    that injected test samples, this one's when none did; when both did (one benchmark split,
    no dose or timing levels), a sample is injected if either stage injected it and held out
    only if both held it out. Unknown (UNKNOWN) when either stage's is. What cannot be joined
    is refused on one line. `source`: the source's manifest, read when not given."""
    if source is None and init["kind"] != "huggingface":
        source = _source_manifest(init)
    if source is None:
        return {**mine, "membership": UNKNOWN}
    theirs = source["corpus"]
    unknown = {"membership": UNKNOWN} if UNKNOWN in (theirs.get("membership"),
                                                     mine.get("membership")) else {}
    if not (theirs.get("injected_ids") and mine.get("injected_ids")):
        return {**(theirs if theirs.get("injected_ids") else mine), **unknown}
    where = [(c.get("benchmark"), c.get("benchmark_split")) for c in (theirs, mine)]
    if where[0] != where[1]:
        raise LabError(f"--init-from {init['path']}: it injected {where[0][0]} {where[0][1]} "
                       f"samples and this corpus {where[1][0]} {where[1][1]}: one model's "
                       "membership is of one benchmark split")
    if any(c.get("dose_levels") or c.get("timing_levels") for c in (theirs, mine)):
        raise LabError(f"--init-from {init['path']}: both stages inject test samples and one has "
                       "dose or timing levels, which no longer say what a sample saw; continue "
                       "on a clean corpus (setting control)")
    injected = list(dict.fromkeys([*theirs["injected_ids"], *mine["injected_ids"]]))
    seen, held_before = set(injected), set(theirs.get("held_out_ids") or [])
    return {**mine, "injected_ids": injected,
            "held_out_ids": [i for i in mine.get("held_out_ids", [])
                             if i not in seen and i in held_before],
            "truncated_ids": sorted(set(theirs.get("truncated_ids") or [])
                                    | set(mine.get("truncated_ids") or [])), **unknown}


def _summary(exposures: dict[str, Any], corpus: dict[str, Any]) -> dict[str, Any]:
    from lab.train.schedule import exposure_summary

    levels = corpus.get("timing_levels")
    groups = {lv["timing"]: lv["ids"] for lv in levels} if levels else None
    return exposure_summary(exposures["by_sample"], exposures["steps"], groups)
