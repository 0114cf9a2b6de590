"""Fault-table rows for issue 70 (models): built with the constructors of table.py.

Rows 2-6: a model folder, an export or a checkpoint whose record does not match its weights or
its membership. Each is read by its one reader (lab.train.artefacts), which every command that
reads one calls, so each fault is refused by every command, on one line naming the field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .table import PRETRAIN, Case, Setup, error
from .world import must

CONTROL_MODEL = "pt-ctl"  # a micro GPT-2 pre-trained on the control arm


def _control_model(root: Path) -> Path:
    if not (root / CONTROL_MODEL / "manifest.json").is_file():
        argv = [("control" if part == "paired" else part) for part in PRETRAIN]
        must([*argv, "--out", CONTROL_MODEL], root)
    return root / CONTROL_MODEL


def _fresh_copy(root: Path, source: str, target: str) -> Path:
    shutil.rmtree(root / target, ignore_errors=True)
    shutil.copytree(root / source, root / target)
    return root / target


def _control_record(root: Path, *drop: str) -> str:
    """The control model's manifest.json, less the fields `drop`."""
    manifest = json.loads((_control_model(root) / "manifest.json").read_text())
    for name in drop:
        del manifest[name]
    return json.dumps(manifest, indent=2)


def control_record_on_paired(target: str, *drop: str) -> Setup:
    """Row 2: the paired model `pt` copied to `target`, the control model's manifest.json (less
    `drop`) put over its own: contaminated weights under a control's record."""
    def make(root: Path) -> None:
        folder = _fresh_copy(root, "pt", target)
        (folder / "manifest.json").write_text(_control_record(root, *drop))
    return make


def control_record_on_export(target: str, *drop: str) -> Setup:
    """Row 3: an export of the paired model `pt`, its lab_manifest.json replaced by the
    control model's manifest (less `drop`)."""
    def make(root: Path) -> None:
        shutil.rmtree(root / target, ignore_errors=True)
        must(["export", "pt", "--out", target], root)
        (root / target / "lab_manifest.json").write_text(_control_record(root, *drop))
    return make


def paired_checkpoint_in_control_run(target: str) -> Setup:
    """Row 4: a copy of the control run whose last checkpoint is the paired run's (same step)."""
    def make(root: Path) -> None:
        _control_model(root)
        folder = _fresh_copy(root, CONTROL_MODEL, target)
        [theirs] = sorted((root / "pt" / "checkpoints").glob("checkpoint-*"))[-1:]
        shutil.rmtree(folder / "checkpoints" / theirs.name, ignore_errors=True)
        shutil.copytree(theirs, folder / "checkpoints" / theirs.name)
    return make


def swapped_members(target: str, rehash: bool) -> Setup:
    """Rows 5 and 6: `pt` copied to `target`, 3 injected ids of its manifest traded for 3
    held-out ones; its membership_sha256 recomputed (`rehash`: a consistent edit) or deleted."""
    def make(root: Path) -> None:
        from lab.models import MEMBERSHIP_HASH, membership_hashes

        folder = _fresh_copy(root, "pt", target)
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        corpus = manifest["corpus"]
        corpus["injected_ids"][:3], corpus["held_out_ids"][:3] = (corpus["held_out_ids"][:3],
                                                                  corpus["injected_ids"][:3])
        if rehash:
            manifest[MEMBERSHIP_HASH] = membership_hashes(manifest)
        else:
            del manifest[MEMBERSHIP_HASH]
        path.write_text(json.dumps(manifest, indent=2))
    return make


def _readers(model: str, groups: list[str]) -> list[tuple[str, list[str]]]:
    """(command, argv) of every command that reads a model folder `model`; `groups`: probe's
    (a control model's record names no injected samples: it is scored on the paired arm's)."""
    return [
        ("probe", ["probe", "--model", model, *groups, "--max-samples", "4", "--out", "out-probe"]),
        ("detect --groups", ["detect", "--model", model, "--groups", "paired",
                             "--max-samples", "4", "--out", "out-detect"]),
        ("evaluate", ["evaluate", "--model", model, "--task", "translation", "--ids", "ids.txt",
                      "--max-new-tokens", "4", "--out", "out-eval"]),
        ("finetune --epochs 0", ["finetune", "--pretrained", model, "--task", "translation",
                                 "--epochs", "0", "--out", "out-ft"]),
        ("export", ["export", model, "--out", "out-export"]),
    ]


PAIRED_GROUPS = ["--groups", "paired"]


def _on_control(*more: str) -> list[str]:
    argv = [("control" if part == "paired" else part) for part in PRETRAIN]
    return [*argv, *more, "--out", "out-pt"]


SWAP = "pt-swap"
SWAP_FILES = "pt-swap-files"
REHASHED, UNHASHED = "pt-ids-rehashed", "pt-ids-unhashed"

ROWS: list[Case] = [
    # row 2: a control model's record over paired weights, model_files removed (or kept)
    *[error(f"i70 row 2: {command}: a control model's manifest, model_files removed, over "
            "paired weights", argv, f"{SWAP}/manifest.json: field model_files missing",
            control_record_on_paired(SWAP, "model_files"))
      for command, argv in _readers(SWAP, PAIRED_GROUPS)],
    error("i70 row 2: probe: a control model's whole manifest over paired weights",
          _readers(SWAP_FILES, PAIRED_GROUPS)[0][1],
          f"{SWAP_FILES}: model/model.safetensors differs from the sha256 recorded",
          control_record_on_paired(SWAP_FILES)),
    # row 3: the same swap in an export's lab_manifest.json, then --init-from it
    error("i70 row 3: pretrain --init-from an export whose lab_manifest.json is a control "
          "model's, model_files removed", _on_control("--init-from", "exp-swap"),
          "exp-swap/lab_manifest.json: field model_files missing",
          control_record_on_export("exp-swap", "model_files")),
    error("i70 row 3: pretrain --init-from an export whose lab_manifest.json is a control "
          "model's", _on_control("--init-from", "exp-swap-files"),
          "exp-swap-files: model.safetensors differs from the sha256 recorded",
          control_record_on_export("exp-swap-files")),
    # row 4: a paired run's checkpoint put into a control run's checkpoints/
    error("i70 row 4: pretrain --init-from a paired checkpoint put in a control run",
          _on_control("--init-from", "ctl-run/checkpoints/checkpoint-2"),
          "not the weights ctl-run saved at step 2", paired_checkpoint_in_control_run("ctl-run")),
    # row 5: ids swapped, membership_sha256 recomputed: the corpus at corpus.path disagrees
    *[error(f"i70 row 5: {command}: injected and held-out ids swapped, membership rehashed",
            argv, f"{REHASHED}: its manifest's corpus.injected_ids differs from that of its "
                  "pre-training corpus", swapped_members(REHASHED, rehash=True))
      for command, argv in _readers(REHASHED, [])],
    # row 6: ids swapped and membership_sha256 deleted: not read as a legacy model
    *[error(f"i70 row 6: {command}: ids swapped, membership_sha256 deleted", argv,
            f"{UNHASHED}/manifest.json: field membership_sha256 missing",
            swapped_members(UNHASHED, rehash=False))
      for command, argv in _readers(UNHASHED, [])[:1]],
]
