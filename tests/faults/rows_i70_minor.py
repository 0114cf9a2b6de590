"""Fault-table rows for issue 70 (minor, rows 18-27): built with the constructors of table.py.

`partial:` ran as the default fraction but was recorded as `partial:`, and `partial:1e-9` wrote
one-character documents: both are refused, naming the option (lab.contamination.soft.parse_form).
An export's tokenizer said model_max_length 256 (the micro GPT-2's positions) where pre-training
trained 128 (--block-size): it now says the trained positions (lab.tokenizer.fit_to_model).
`lab corpora verify` passed a shard whose base document is not UTF-8 (sha256s recomputed), which
pre-training refuses: verify_corpus now decodes every shard (lab.corpora.shards._read_injected).
An option no chosen method reads (`--methods exact --jaccard 0.5`, `--detectors loss --k 0.3`)
was ignored silently: it is refused, naming it (lab.common.refuse_unused_options).
A folder output given as an existing file said "output directory exists": it says it is a file
(lab.common.check_output), with --force or not.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from .table import EXPORT, INJECT, Case, copy_then, error, ok
from .world import PRETRAIN, Result

FORM = [*INJECT, "--setting", "paired", "--fraction", "0.1", "--contamination-form"]



def max_length_is_trained_positions(root: Path, result: Result) -> str | None:
    """The export's tokenizer_config.json states the positions pre-training trained."""
    trained = json.loads((root / "pt" / "manifest.json").read_text())["config"]["block_size"]
    configs = sorted((root / "out-export").rglob("tokenizer_config.json"))
    if not configs:
        return "the export has no tokenizer_config.json"
    stated = json.loads(configs[0].read_text()).get("model_max_length")
    return None if stated == trained else \
        f"model_max_length {stated}, but pre-training trained {trained} positions"


def base_document_not_utf8(folder: Path) -> None:
    """One byte of the first base document's text made 0xff, its shard's sha256 and the
    corpus_sha256 recomputed: a corpus whose record agrees with its bytes, not valid UTF-8."""
    from lab.corpora.shards import shards_digest

    manifest = json.loads((folder / "manifest.json").read_text())
    shard = manifest["shards"][0]
    path = folder / shard["file"]
    lines = gzip.decompress(path.read_bytes()).split(b"\n")
    base = next(n for n, line in enumerate(lines) if b'"sample":""' in line)
    at = lines[base].index(b'"text":"') + len(b'"text":"') + 1
    lines[base] = lines[base][:at] + b"\xff" + lines[base][at + 1:]
    data = gzip.compress(b"\n".join(lines), mtime=0)
    path.write_bytes(data)
    shard["sha256"] = hashlib.sha256(data).hexdigest()
    manifest["corpus_sha256"] = shards_digest(manifest["shards"])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


ROWS: list[Case] = [
    error("i70 minor: partial: with nothing after the colon", [*FORM, "partial:"],
          "--contamination-form partial:: nothing after the colon"),
    error("i70 minor: partial:1e-9 keeps a character per document", [*FORM, "partial:1e-9"],
          "--contamination-form partial:1e-9: the fraction must be in [0.01, 1)"),
    error("i70 minor: renamed: takes no value", [*FORM, "renamed:"],
          "--contamination-form renamed:: only partial takes a value"),
    ok("i70 minor: an export's model_max_length is the trained positions", EXPORT,
       check=max_length_is_trained_positions),
    error("i70 minor: corpora verify of a shard that is not UTF-8",
          ["corpora", "verify", "bad-utf8"], "bad-utf8/corpus/part-00000.jsonl.gz:1: not UTF-8",
          copy_then("paired", "bad-utf8", base_document_not_utf8)),
    error("i70 minor: decontam --jaccard without minhash",
          ["decontam", "--corpus", "paired", "--out", "out-decontam", "--methods", "exact",
           "--jaccard", "0.5"], "--jaccard 0.5: no method in --methods uses it"),
    error("i70 minor: detect --k without a Min-K% detector",
          ["detect", "--model", "pt", "--out", "out-detect", "--detectors", "loss", "--k", "0.3"],
          "--k 0.3: no method in --detectors uses it"),
    error("i70 minor: inject --out an existing file", [*INJECT[:-1], "existing.json",
                                                        "--setting", "control"],
          "existing.json: is a file (name the folder to write)"),
    error("i70 minor: pretrain --out an existing file, --force",
          [*PRETRAIN, "--out", "existing.json", "--force"],
          "existing.json: is a file (name the folder to write)"),
]
