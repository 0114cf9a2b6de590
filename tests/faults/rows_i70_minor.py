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
`lab stats` on a read-only study printed no table (it failed writing report/stats.json first):
the tables show, and a line says stats.json was not written and why. `lab report` on a full disk
left an empty report/ behind: it is removed (lab.cli.analysis.report).
Shell completion completed no values: an option whose values a lab table names (--setting,
--preset, --detectors, ...) completes them, a path option completes files
(lab.cli.shared._completion).
It still imports the whole CLI per TAB (about 1.5 s; docs/commands.md says so).
"""
from __future__ import annotations

import atexit
import gzip
import hashlib
import json
import os
import subprocess
from pathlib import Path

from .rows_writes import tmpfs
from .table import EXPORT, INJECT, Case, Setup, copy_then, error, ok
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


def read_only_study(name: str) -> Setup:
    """A finished study's tables (test_report's) at NAME, a read-only bind mount of NAME.src;
    the row is skipped where mounting needs privileges it lacks."""
    def make(root: Path) -> None:
        import pytest
        from test_report import CONTROL, PAIRED, write_study

        source, folder = root / f"{name}.src", root / name
        if not source.exists():
            write_study(source, {"control": CONTROL, "paired": PAIRED})
        if os.path.ismount(folder):
            return
        folder.mkdir(exist_ok=True)
        for options in (["--bind", str(source)], ["-o", "remount,ro,bind", str(source)]):
            if subprocess.run(["mount", *options, str(folder)], capture_output=True).returncode:
                pytest.skip("cannot bind-mount read-only here (needs root or CAP_SYS_ADMIN)")
        atexit.register(subprocess.run, ["umount", "-l", str(folder)], capture_output=True)
    return make


def study_on_a_full_disk(root: Path) -> None:
    """A finished study's tables on a small tmpfs (disk-r/study), then the disk filled."""
    from test_report import CONTROL, PAIRED, write_study

    tmpfs("disk-r", "256k")(root)
    write_study(root / "disk-r" / "study", {"control": CONTROL, "paired": PAIRED})
    stat = os.statvfs(root / "disk-r")
    (root / "disk-r" / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize))


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
    ok("i70 minor: stats on a read-only study shows its tables", ["stats", "ro-study"],
       "stats.json not written, the tables above are whole: ro-study/report: cannot create "
       "(Read-only file system)", read_only_study("ro-study"),
       check=lambda root, result: None if "paired" in result.stdout else "no table shown"),
    error("i70 minor: report on a full disk leaves no empty report/", ["report", "disk-r/study"],
          "disk-r/study/report/stats.json", study_on_a_full_disk),
    ok("i70 minor: completion of a setting's value", [], "paired-placebo",
       env={"_LAB_COMPLETE": "complete_bash", "COMP_WORDS": "lab inject --setting pa",
            "COMP_CWORD": "3"}),
    ok("i70 minor: completion of a path", [], "paired/",
       env={"_LAB_COMPLETE": "complete_bash", "COMP_WORDS": "lab pretrain --corpus pai",
            "COMP_CWORD": "3"}),
]
