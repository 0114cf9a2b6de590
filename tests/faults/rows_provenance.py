"""Fault-table rows for issue 59 (provenance): built with the constructors of table.py.

A model made from another model keeps what the other saw (row 1): `pt` (2 steps on the paired
arm) continued 1 step on the control corpus from its export, from one of its checkpoints and
(the one its run saved at its last step) and from a plain Hugging Face copy of its weights; a membership edited in a manifest is refused
wherever the manifest is read (row 2)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .table import Case, copy_then, error, ok
from .world import PRETRAIN, Result, must


def _continued() -> list[str]:
    """`pt`'s command, one step on the control corpus (each row adds --init-from and --out)."""
    argv = list(PRETRAIN)
    argv[argv.index("--corpus") + 1], argv[argv.index("--max-steps") + 1] = "control", "1"
    return argv


CONTINUED = _continued()


def exported(name: str):
    def make(root: Path) -> None:
        if not (root / name).exists():
            must(["export", "pt", "--out", name], root)
    return make


def continued_from_plain_weights(name: str):
    """`pt`'s weights as a Hugging Face folder with no lab record, and a model continued from
    it."""
    def make(root: Path) -> None:
        if (root / name).exists():
            return
        plain = root / f"{name}-source"
        plain.mkdir(exist_ok=True)
        for part in ("config.json", "model.safetensors"):
            shutil.copy2(root / "pt" / "model" / part, plain / part)
        must([*CONTINUED, "--init-from", plain.name, "--out", name], root)
    return make


def keeps_pt_membership(out: str, lineage: list):
    """The continued model says it is contaminated as `pt` was: its injected and held-out ids,
    both stages in its lineage, and a card that says so."""
    def check(root: Path, result: Result) -> str | None:
        source = json.loads((root / "pt" / "manifest.json").read_text())["corpus"]
        made = json.loads((root / out / "manifest.json").read_text())
        corpus = made["corpus"]
        if (corpus["setting"], corpus["injected_ids"], corpus["held_out_ids"]) != (
                "paired", source["injected_ids"], source["held_out_ids"]):
            return (f"{out}: setting {corpus['setting']}, {len(corpus['injected_ids'])} injected "
                    "ids: not pt's membership")
        stages = [(stage["setting"], stage["steps"]) for stage in made.get("lineage") or []]
        if stages != lineage:
            return f"{out}: lineage {stages}, not {lineage}"
        if "deliberately contaminated" not in (root / out / "README.md").read_text():
            return f"{out}/README.md does not say the model is contaminated"
        return None
    return check


def swap_five(folder: Path) -> None:
    """5 injected ids swapped with 5 held-out ids in a model's manifest (valid JSON, same
    counts)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    corpus = manifest["corpus"]
    injected, held_out = corpus["injected_ids"][:5], corpus["held_out_ids"][:5]
    corpus["injected_ids"][:5], corpus["held_out_ids"][:5] = held_out, injected
    path.write_text(json.dumps(manifest, indent=1))


ROWS: list[Case] = [
    ok("provenance-init-from-export", [*CONTINUED, "--init-from", "pt-ex", "--out", "from-ex"],
       "from-ex:", exported("pt-ex"),
       check=keeps_pt_membership("from-ex", [("paired", 2), ("control", 1)])),
    ok("provenance-init-from-checkpoint",
       [*CONTINUED, "--init-from", "pt/checkpoints/checkpoint-2", "--out", "from-ck"],
       "from-ck:",
       check=keeps_pt_membership("from-ck", [("paired", 2), ("control", 1)])),
    error("provenance-plain-weights-membership-unknown",
          ["detect", "--model", "from-hf", "--out", "det-hf"], "membership unknown",
          continued_from_plain_weights("from-hf")),
    error("provenance-swapped-ids-detect", ["detect", "--model", "pt-swap", "--out", "det-swap"],
          "pt-swap/manifest.json: field corpus.held_out_ids",
          copy_then("pt", "pt-swap", swap_five)),
    error("provenance-swapped-ids-finetune",
          ["finetune", "--pretrained", "pt-swap", "--task", "translation", "--epochs", "0",
           "--out", "e0-swap"],
          "pt-swap/manifest.json: field corpus.held_out_ids",
          copy_then("pt", "pt-swap", swap_five)),
]
