"""The one reader of each trained artefact: a model folder (read_model), one of a run's
checkpoints (read_checkpoint) and a `lab export` folder (read_export). Every command that reads
one (probe, detect, evaluate, finetune, export, pretrain --init-from, llm-eval) calls these, so
each is checked the same way every time, not only where a hash happens to differ:

- its record is of the current format whole (a field of it removed is refused, not read as a
  legacy model's) and its membership is what was hashed when it was written (lab.models);
- its weights are the files that record lists (MODEL_FILES; a checkpoint's: the hash its run
  recorded at that step, CHECKPOINT_WEIGHTS);
- its membership agrees with the corpus at corpus.path, where that corpus is still there
  (verified against its shards), and with its parent (a fine-tuned model's pre-trained model,
  a continued model's --init-from source), where that is still there.

They live here, not in lab.models, because the corpus and the parent's records are read by
layers above lab.models (lab.corpora, lab.train.continued).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from lab.common import LabError, cached_sha256
from lab.models import (MANIFEST, MODEL_FILES, MODEL_KINDS, WEIGHTS_SUBDIR, membership_hashes,
                        pretraining_record, read_export_manifest, read_stage_manifest,
                        weights_problem)
from lab.train.common import CHECKPOINT_RECORD, CHECKPOINT_WEIGHTS, checkpoint_problem

# The fields of a model's corpus record that its pre-training corpus states too.
CORPUS_FIELDS = ("benchmark", "benchmark_split", "setting")
CORPUS_ID_FIELDS = ("injected_ids", "held_out_ids")


def read_model(folder: Path, option: str) -> dict[str, Any]:
    """The manifest of a lab model folder (or of a corpus, as written, where `option` accepts
    either), after every check of this module."""
    manifest = read_stage_manifest(folder, option)
    if manifest.get("kind") in MODEL_KINDS:
        _check_lineage(manifest, f"{option} {folder}")
    return manifest


def read_export(folder: Path, option: str) -> dict[str, Any]:
    """The lab manifest of a `lab export` folder, after every check of this module."""
    manifest = read_export_manifest(folder, option)
    _check_lineage(manifest, f"{option} {folder}")
    return manifest


def checkpoint_step(path: Path) -> int | None:
    """N of a lab checkpoint folder `RUN/checkpoints/checkpoint-N` (one that holds the lab's
    record of its files), else None."""
    number = path.name.removeprefix("checkpoint-")
    if (path.name.startswith("checkpoint-") and number.isdigit()
            and path.parent.name == "checkpoints" and (path / CHECKPOINT_RECORD).is_file()):
        return int(number)
    return None


def read_checkpoint(path: Path, option: str) -> dict[str, Any]:
    """The record of a checkpoint `RUN/checkpoints/checkpoint-N`: its finished run's manifest as
    it stood at step N (at_step), after the run is read (read_model), the
    checkpoint found whole, and its weights found to be those the run saved at step N (the
    run's CHECKPOINT_WEIGHTS): another run's checkpoint put into its folder is refused."""
    step = checkpoint_step(path)
    if step is None:
        raise LabError(f"{option} {path}: not a lab checkpoint (RUN/checkpoints/checkpoint-N "
                       f"with its {CHECKPOINT_RECORD})")
    run = path.parent.parent
    if not (run / MANIFEST).is_file():
        raise LabError(f"{option} {path}: a checkpoint of a run that has not finished ({run} has "
                       f"no {MANIFEST}), so what its weights saw is not recorded yet: finish "
                       "the run (lab pretrain --resume) first")
    manifest = read_model(run, option)
    problem = checkpoint_problem(path)
    if problem is not None:
        raise LabError(f"{option} {path}: an incomplete checkpoint ({problem})")
    recorded = manifest.get(CHECKPOINT_WEIGHTS)
    if recorded is None:
        if MODEL_FILES in manifest:  # of the current format: the record was removed, or is older
            raise LabError(f"{option} {path}: field {CHECKPOINT_WEIGHTS} missing from "
                           f"{run / MANIFEST} (the run's record of its checkpoints' weights: a "
                           "run made before the lab kept it, or an edited record): start from "
                           "the run's final model")
    else:
        weights = recorded.get(str(step)) if isinstance(recorded, dict) else None
        if not weights:
            raise LabError(f"{option} {path}: {run} saved no checkpoint at step {step} (field "
                           f"{CHECKPOINT_WEIGHTS} of its {MANIFEST}): a checkpoint of another run?")
        problem = weights_problem(path, weights)
        if problem is not None:
            raise LabError(f"{option} {path}: {problem}: not the weights {run} saved at step "
                           f"{step} (another run's checkpoint?)")
    return at_step(manifest, step, path.name)


def _check_lineage(manifest: dict[str, Any], named: str) -> None:
    _check_own_corpus(manifest, named)
    _check_parent(manifest, named)


def _check_own_corpus(manifest: dict[str, Any], named: str) -> None:
    """The membership of this model's own pre-training stage against its corpus, where that
    corpus is still there (its recorded sha256): the corpus verified against its shards
    (lab.corpora.shards.verify_corpus), then the benchmark, split, setting and the injected and
    held-out ids the model copied from it. A continued model keeps its own stage's record as
    own_corpus (its corpus is the lineage's joined membership, which no one corpus states)."""
    from lab.corpora.shards import read_manifest, verify_corpus

    record = pretraining_record(manifest)
    own = record.get("own_corpus") or record.get("corpus") or {}
    if not isinstance(own, dict) or not isinstance(own.get("path"), str):
        return
    folder = Path(own["path"])
    if not (folder / MANIFEST).is_file():
        return  # the corpus is gone: the model's (hashed) record is all there is
    try:
        theirs = read_manifest(folder)
    except LabError:
        return
    if theirs.get("corpus_sha256") != own.get("sha256"):
        return  # another corpus at that path now
    theirs = verify_corpus(folder)
    where = "pretrained." if record is not manifest else ""
    field = "own_corpus" if record.get("own_corpus") else "corpus"
    for name in CORPUS_FIELDS:
        if own.get(name) != theirs.get(name):
            raise LabError(f"{named}: its manifest's {where}{field}.{name} ({own.get(name)}) "
                           f"differs from that of its pre-training corpus {folder / MANIFEST} "
                           f"({theirs.get(name)})")
    for name in CORPUS_ID_FIELDS:
        if set(own.get(name) or []) != set(theirs.get(name) or []):
            raise LabError(f"{named}: its manifest's {where}{field}.{name} differs from that of "
                           f"its pre-training corpus {folder / MANIFEST} (checked against the "
                           "corpus's shards)")


def _check_parent(manifest: dict[str, Any], named: str) -> None:
    """A fine-tuned model's copy of its pre-trained model's record against that model, where
    it is still there with the same final weights: the membership it carries forward must be
    the parent's (its membership hashes, field by field). A continued model's joined membership
    against its --init-from source, where that source is still there with the same weights."""
    if manifest.get("kind") == "lab-finetuned":
        copy, parent = manifest.get("pretrained") or {}, manifest.get("pretrained_path")
        if not isinstance(parent, str) or not (Path(parent) / MANIFEST).is_file():
            return
        try:
            theirs = read_model(Path(parent), "--pretrained")
        except LabError:
            return  # the parent was changed since: the child's (hashed) record stands
        if theirs.get("final_weights_sha256") != copy.get("final_weights_sha256"):
            return  # another model at that path now
        mine, recorded = membership_hashes(copy), membership_hashes(theirs)
        for field in sorted(set(mine) | set(recorded)):
            if mine.get(field) != recorded.get(field):
                raise LabError(f"{named}: its manifest's pretrained.{field} differs from its "
                               f"pre-trained model's {Path(parent) / MANIFEST} (the membership "
                               "it carries forward must be its parent's)")
        return
    init = manifest.get("init_from")
    if manifest.get("kind") != "lab-pretrained" or not isinstance(init, dict) \
            or not isinstance(init.get("path"), str) or init.get("kind") not in SOURCE_READERS:
        return
    try:
        source = source_record(init)
        same = weights_digest(source_weights(Path(init["path"]), init["kind"])) == \
            init.get("weights_sha256")
    except (LabError, OSError):
        return  # the source was changed or removed since: the model's (hashed) record stands
    if not same:
        return  # other weights at that path now
    joined = joined_membership(init, manifest.get("own_corpus") or {}, source)
    corpus = manifest.get("corpus") or {}
    for name in CORPUS_ID_FIELDS:
        if set(corpus.get(name) or []) != set(joined.get(name) or []):
            raise LabError(f"{named}: its manifest's corpus.{name} differs from the membership "
                           f"of its lineage (its own corpus joined with its --init-from source "
                           f"{init['path']})")


# The reader of each kind of lab --init-from source (lab.train.continued names the kinds).
SOURCE_READERS = {"lab": read_model, "lab-export": read_export, "lab-checkpoint": read_checkpoint}


def source_record(init: dict[str, Any]) -> dict[str, Any] | None:
    """The lab record of an --init-from source (check_init_from's record: its kind and path),
    read by its kind's reader (a checkpoint's at its step); None for a Hugging Face folder."""
    reader = SOURCE_READERS.get(init["kind"])
    return None if reader is None else reader(Path(init["path"]), "--init-from")


def source_weights(path: Path, kind: str) -> Path:
    """The folder of an --init-from source's safetensors weights."""
    return path / WEIGHTS_SUBDIR if kind == "lab" else path


def weights_digest(folder: Path) -> str:
    """What an --init-from record keeps of its source's weights: the sha256 of its one
    safetensors file, or of the list of `name sha256` lines of several."""
    digests = [f"{f.name} {cached_sha256(f)}\n" for f in sorted(Path(folder).glob("*.safetensors"))]
    if len(digests) == 1:
        return digests[0].split()[1]
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def at_step(manifest: dict[str, Any], step: int, checkpoint: str) -> dict[str, Any]:
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
        trimmed["summary"] = exposures_summary(trimmed, manifest["corpus"])
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
        source = source_record(init)
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


def exposures_summary(exposures: dict[str, Any], corpus: dict[str, Any]) -> dict[str, Any]:
    """The summary of a (trimmed or joined) exposure record: lab.train.schedule.exposure_summary
    by its timing levels, where the corpus has them."""
    from lab.train.schedule import exposure_summary

    levels = corpus.get("timing_levels")
    groups = {lv["timing"]: lv["ids"] for lv in levels} if levels else None
    return exposure_summary(exposures["by_sample"], exposures["steps"], groups)
