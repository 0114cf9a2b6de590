"""Fault-table rows for issue 70 (unclear, rows 11-17): built with the constructors of table.py.

Each fault was refused before, but with a line that named the wrong thing or no way out: a
full token cache reached the user as numpy's "N requested and M written" (row 11); an
evaluation of a model's earlier weights as "an evaluation of e0, not of e0" (12); a model
folder given as a corpus as "field 'shards' missing" (13); a read-only `lab merge --out` by
its hidden work folder (14); a split-half arm of `--samples 40` evaluated on the whole split
without naming --max-samples or --ids (15); `--num-perm 100000000` ran for minutes, silent
(16). The row's 7th case is not in the issue's text; taken here as the rest of row 13's
mix-up (17): a model given to `lab pretrain --corpus` (read_manifest now names a model for every
corpus reader), and a corpus given to `lab probe --model`, which said its "pre-training corpus
injected no test samples" (lab detect already said "is a corpus, not a model"; both now share
lab.detect.probe.refuse_corpus). Each now names the file, the cause and the fix.
"""
from __future__ import annotations

import json
from pathlib import Path

from .rows_writes import NO_CACHE_DIR, tmpfs
from .table import Case, error, shards, table_study, write
from .world import PRETRAIN, must

# An evaluation that names e0 but recorded other weights: e0 was trained again since.
EARLIER_EVALUATION = write("ev-old/metrics.json", json.dumps({
    "kind": "lab-evaluation", "model": "e0", "model_weights_sha256": "0" * 64,
    "task": "translation", "benchmark": "codetrans", "split": "test"}))


def arm_of_40(root: Path) -> None:
    """A split-half arm of the first 40 test samples (lab inject --samples 40) and a 1-step
    micro GPT-2 on it (built once: the row's damage is only that the evaluation is asked of
    the whole split)."""
    if (root / "pt40" / "manifest.json").is_file():
        return
    must(("inject", "--benchmark", "codetrans", "--setting", "paired", "--seed", "3",
          "--base-splits", "valid", "--limit", "300", "--fraction", "0.5", "--samples", "40",
          "--out", "arm40"), root)
    pretrain = [*PRETRAIN, "--out", "pt40"]
    pretrain[pretrain.index("paired")] = "arm40"
    pretrain[pretrain.index("--max-steps") + 1] = "1"
    must(pretrain, root)


# Pre-training asked to read a fine-tuned model as its corpus.
PRETRAIN_ON_A_MODEL = [arg if arg != "paired" else "e0" for arg in PRETRAIN]


ROWS: list[Case] = [
    # row 11: numpy's short write, "164038 requested and 4064 written", was the whole line
    error("unclear: pretrain on a full LAB_CACHE names the cache, the cause and LAB_CACHE",
          [*NO_CACHE_DIR, "--out", "out-pt"],
          "token cache cache/full/tokens/shards: cannot write (",
          tmpfs("cache/full", room=16384), env={"LAB_CACHE": "cache/full"}),
    # row 12: "an evaluation of e0, not of e0"
    error("unclear: export --evaluations of the model's earlier weights says evaluate again",
          ["export", "e0", "--evaluations", "ev-old", "--out", "out-export"],
          "evaluated e0's earlier weights (sha256 000000000000; they are ", EARLIER_EVALUATION),
    # row 13: "pt/manifest.json: field 'shards' missing"
    error("unclear: decontam --corpus a model folder says it is a model, not a corpus",
          ["decontam", "--corpus", "pt", "--out", "out-decontam"],
          "pt: a lab-pretrained folder (its manifest.json says so), not a corpus"),
    # row 17: the same for every reader of a corpus (here pre-training's)
    error("unclear: pretrain --corpus a fine-tuned model says it is a model, not a corpus",
          [*PRETRAIN_ON_A_MODEL, "--out", "out-pt"],
          "e0: a lab-finetuned folder (its manifest.json says so), not a corpus"),
    error("unclear: probe --model a corpus says it is a corpus, not a model",
          ["probe", "--model", "paired", "--out", "out-probe"],
          "--model paired: is a corpus, not a model"),
    # row 14: "ro/.merged.merging-20731: Read-only file system"
    error("unclear: merge --out on a read-only disk names --out",
          ["merge", "shard-a", "--out", "ro/merged"],
          "--out ro/merged: cannot write (Read-only file system)",
          shards(table_study("shard-a"), tmpfs("ro", read_only=True))),
    # row 15: "... evaluate the samples it split" named neither option
    error("unclear: evaluate on an arm of 40 samples names --max-samples 40 and --ids",
          ["evaluate", "--model", "pt40", "--task", "translation", "--max-new-tokens", "8",
           "--out", "out-eval"],
          "give --max-samples 40 (the arm split the first 40) or --ids FILE", arm_of_40),
    # row 16: ten minutes at full CPU, silent
    error("unclear: decontam --num-perm 100000000 is refused with the limit",
          ["decontam", "--corpus", "control", "--num-perm", "100000000", "--out", "out-decontam"],
          "--num-perm 100000000: must be from 1 to 4096"),
]
