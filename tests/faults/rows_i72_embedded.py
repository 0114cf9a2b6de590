"""Fault-table rows for issue 72 (the `embedded` contamination form): what the form refuses, in
one line and before anything is written. Its hosts are base documents (CodeSearchNet Java), so
a setting that injects CodeTrans's C# side has no file of its language to sit in. And an
embedded arm whose manifest moved a block's offsets is refused by the corpus reader naming the
field (lab.corpora.placements)."""
from __future__ import annotations

import json
from pathlib import Path

from .table import INJECT, Case, copy_then, error
from .world import must

EMBEDDED = [*INJECT, "--contamination-form", "embedded", "--setting"]
BUILT, ARM = "embedded-built", "arm-embedded"


def shifted_embedded_arm(root: Path) -> None:
    """A copy of an input-only embedded CodeTrans arm (built once), its first block's offsets
    moved by one character (the shards untouched: only the placement check sees it)."""
    if not (root / BUILT / "manifest.json").is_file():
        must([*INJECT[:-1], BUILT, "--contamination-form", "embedded", "--setting", "input-only",
              "--samples", "20"], root)
    copy_then(BUILT, ARM, shift_first_block)(root)


def shift_first_block(folder: Path) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    where = manifest["embedding"]["documents"][0]
    step = -1 if where["start"] else 1  # inside the document either way
    where.update(start=where["start"] + step, end=where["end"] + step)
    path.write_text(json.dumps(manifest, indent=2))


ROWS: list[Case] = [
    error("i72 embedded: inject paired codetrans (its C# side has no host)",
          [*EMBEDDED, "paired"],
          "--contamination-form embedded: paired injects codetrans's output side (cs), and the "
          "base corpus csn-java holds no cs file to host it (inject a java side: input-only)"),
    error("i72 embedded: inject output-only codetrans (C# alone)", [*EMBEDDED, "output-only"],
          "--contamination-form embedded: output-only injects codetrans's output side (cs)"),
    error("i72 embedded: corpora verify, a block's offsets shifted",
          ["corpora", "verify", ARM],
          f"{ARM}/manifest.json: field 'embedding.documents[0].start' is ", shifted_embedded_arm),
]
