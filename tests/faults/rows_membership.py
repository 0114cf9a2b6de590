"""Fault-table rows for issue 59 (membership): built with the constructors of table.py.

A corpus manifest's membership is checked against the corpus's own documents (row 3), a
reference model must never have seen the scored samples (row 5), an empty detector list is
refused before anything is written (rows 8, 11), and a corpus is not a model (row 16)."""
from __future__ import annotations

import json
from pathlib import Path

from .table import PRETRAIN, QUICK_RECIPE, STUDY, Case, Setup, copy_then, error, recipe
from .world import must


def swap_members(folder: Path) -> None:
    """The first 5 injected ids traded for the first 5 held-out ones: the shards unchanged."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    injected, held_out = manifest["injected_ids"], manifest["held_out_ids"]
    injected[:5], held_out[:5] = held_out[:5], injected[:5]
    path.write_text(json.dumps(manifest, indent=2))


def scale_counts(folder: Path) -> None:
    """Every count of the manifest times 1000."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["counts"] = {name: value * 1000 for name, value in manifest["counts"].items()}
    path.write_text(json.dumps(manifest, indent=2))


def pretrained(name: str) -> Setup:
    """Another micro GPT-2 on the paired arm (another seed, so other weights): it saw the
    paired arm's injected samples."""
    def make(root: Path) -> None:
        if not (root / name / "manifest.json").is_file():
            must([*PRETRAIN, "--seed", "1", "--out", name], root)
    return make


def _on_corpus(corpus: str) -> list[str]:
    return [corpus if part == "paired" else part for part in PRETRAIN]


DETECT = ["detect", "--model", "pt", "--max-samples", "4", "--out", "out-detect"]
SWAPPED = copy_then("paired", "arm-swap", swap_members)
SWAPPED_FIELD = "arm-swap/manifest.json: field 'injected_ids' lists 5 samples"
EMPTY = "--detectors: name at least one detector"

ROWS: list[Case] = [
    # row 3: membership edited in a corpus manifest
    error("corpora verify: 5 injected ids swapped with held-out ones",
          ["corpora", "verify", "arm-swap"], SWAPPED_FIELD, SWAPPED),
    error("corpora verify: counts x 1000", ["corpora", "verify", "arm-x1000"],
          "arm-x1000/manifest.json: field 'counts.injected_samples' is 100000",
          copy_then("paired", "arm-x1000", scale_counts)),
    error("pretrain: a corpus whose injected ids were swapped", [*_on_corpus("arm-swap"), "--out", "out-pt"],
          SWAPPED_FIELD, SWAPPED),
    error("pretrain --dry-run: a corpus whose injected ids were swapped",
          [*_on_corpus("arm-swap"), "--dry-run", "--out", "out-pt"], SWAPPED_FIELD, SWAPPED),
    error("detect: --groups a corpus whose injected ids were swapped",
          [*DETECT, "--groups", "arm-swap"], SWAPPED_FIELD, SWAPPED),
    # row 5: a reference that saw the samples
    error("detect: --reference the model itself",
          [*DETECT, "--detectors", "loss,reference", "--reference", "pt"],
          "--reference pt: the same weights as --model pt"),
    error("detect: --reference a model that pre-trained on the scored samples",
          [*DETECT, "--detectors", "loss,reference", "--reference", "pt-seen"],
          "--reference pt-seen: it pre-trained on 100 of the scored samples", pretrained("pt-seen")),
    # rows 8, 11: no detector to run
    error("detect: --detectors ,", [*DETECT, "--detectors", ","], EMPTY),
    error("detect: --detectors ''", [*DETECT, "--detectors", ""], EMPTY),
    error("detect: only a detector that does not apply", [*DETECT, "--detectors", "reference"],
          "--detectors reference: none applies to this gpt2 model without --reference"),
    error("study: detect.detectors []", [*STUDY, "bad.yaml"],
          "detect.detectors: name at least one detector",
          recipe(QUICK_RECIPE + "detect:\n  enabled: true\n  detectors: []\n")),
    # row 16: a corpus given as the model
    error("detect: --model a corpus", ["detect", "--model", "paired", "--out", "out-detect"],
          "--model paired: is a corpus, not a model"),
]
