"""The corpus reader's check of an embedded arm's placements (lab.contamination.forms.embedded):
where the manifest's `embedding` says each injected document sits inside its host, checked
against the documents the shards hold (lab.corpora.shards.verify_corpus reads them once and
keeps, through `Watched`, the texts this needs).

Why: a decontaminator's matched span is scored against these offsets, and the arm's removals and
size rest on each host being used once. So a manifest whose offsets were shifted, a host text
changed at its block, a host document lost or written twice, or a host still in the arm as a
base document is refused in one line naming the field, as the reader's other checks are.

What is checked, per `embedding.documents[i]` (and per `decontamination.placebo_replacements`
row with a host: a removed copy's placebo stand-in written into the same host):

- the document holding the block (`id`; a stand-in's `placebo_document`) is in the shards
  exactly once, and is an injected document (a stand-in: a base document);
- its `host` is one of `removed_base_ids`, hosts no other block, and is no document of the
  shards itself (the host as written carries the injected document's id);
- 0 <= `start` < `end` <= the written text's length, and `sha256` is the sha256 of
  text[start:end] (the block as the form wrote it, indented, in UTF-8);
- two placements in one document do not overlap (one document, one block);
- the placements are the arm's injected documents, no more and no fewer (after
  `--decontaminate-with` too: the survivors' placements, each removed copy's by its stand-in's).
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import orjson

from lab.common import LabError

EMBEDDED = "embedded"
# The id field of a corpus line, found in its bytes (an unescaped quote occurs in a JSON line
# only around keys and values, so this is the key, not text inside a document).
_ID_FIELD = re.compile(rb'"id":("(?:[^"\\]|\\.)*")')


class Watched:
    """The ids of base documents whose texts the shard read keeps (an embedded arm's hosts,
    which must be absent, and its placebo stand-ins, which hold blocks), and the note that keeps
    them: every injected document's text, and a base document's when its id is watched."""

    def __init__(self, base_ids: set[str]):
        self.base_ids = frozenset(base_ids)

    def note(self, line: bytes, record: dict[str, Any] | None,
             texts: dict[str, list[str]]) -> None:
        """Keep the text of one line: `record` is the parsed line of an injected document, None
        for a base line (not parsed unless its id is watched)."""
        if record is None:
            match = _ID_FIELD.search(line)
            if match is None or orjson.loads(match.group(1)) not in self.base_ids:
                return
            record = orjson.loads(line)
        texts.setdefault(str(record.get("id")), []).append(str(record.get("text")))


def watched(manifest: dict[str, Any]) -> Watched | None:
    """What the shard read keeps for this manifest's placement check; None when it places
    nothing (every form but embedded)."""
    if "embedding" not in manifest and _form(manifest) != EMBEDDED:
        return None
    ids: set[str] = set()
    for row in [*_rows(manifest.get("embedding"), "documents"), *_replacements(manifest)]:
        ids.update(str(row.get(key)) for key in ("host", "placebo_document") if key in row)
    return Watched(ids)


def _form(manifest: dict[str, Any]) -> str | None:
    spec = (manifest.get("options") or {}).get("contamination_form")
    return spec.partition(":")[0] if isinstance(spec, str) else None


def _rows(record: Any, name: str) -> list[dict[str, Any]]:
    rows = record.get(name) if isinstance(record, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _replacements(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The decontamination record's placebo stand-ins written into a host (embedded arms)."""
    return [r for r in _rows(manifest.get("decontamination"), "placebo_replacements")
            if "host" in r]


def check_placements(path: Path, manifest: dict[str, Any], texts: dict[str, list[str]],
                     injected_documents: int) -> None:
    """The manifest's `embedding` (and its embedded stand-ins) against the documents the shards
    hold: `texts` maps an id to the texts of the documents of that id the read kept (Watched),
    `injected_documents` counts the shards' injected documents. LabError naming the field."""
    form = _form(manifest)
    if "embedding" not in manifest:
        if form == EMBEDDED:
            raise LabError(f"{path}: field 'embedding' missing (an embedded arm records each "
                           "injected document's host and offsets)")
        return
    if form != EMBEDDED:
        raise LabError(f"{path}: field 'embedding' is there, but options.contamination_form is "
                       f"{form or 'verbatim'!r} (only an embedded arm places documents in hosts)")
    record = manifest["embedding"]
    documents = record.get("documents") if isinstance(record, dict) else None
    if not isinstance(documents, list) or not all(isinstance(d, dict) for d in documents):
        raise LabError(f"{path}: field 'embedding.documents' must be a list of placements")
    removed = manifest.get("removed_base_ids")
    removed = set(removed) if isinstance(removed, list) else set()
    host_of: dict[str, str] = {}   # host id -> the field that placed a block in it
    blocks: dict[str, list[tuple[int, int, str]]] = {}  # document id -> its blocks
    placements = [(f"embedding.documents[{i}]", row, "id", True)
                  for i, row in enumerate(documents)]
    placements += [(f"decontamination.placebo_replacements[{i}]", row, "placebo_document", False)
                   for i, row in enumerate(_rows(manifest.get("decontamination"),
                                                 "placebo_replacements")) if "host" in row]
    for name, row, id_key, injected in placements:
        doc_id, text = _holder(path, name, row, id_key, injected, texts)
        start, end = _check_block(path, name, row, doc_id, text)
        for other_start, other_end, other in blocks.get(doc_id, ()):
            if start < other_end and other_start < end:
                raise LabError(f"{path}: field '{name}.start' is {start}: its block [{start}, "
                               f"{end}) overlaps {other}'s [{other_start}, {other_end}) in "
                               f"{doc_id}")
        blocks.setdefault(doc_id, []).append((start, end, name))
        _check_host(path, name, row, removed, host_of, texts)
    if len(documents) != injected_documents:
        raise LabError(f"{path}: field 'embedding.documents' lists {len(documents)} placements; "
                       f"the shards hold {injected_documents} injected documents (one "
                       "placement each)")


def _holder(path: Path, name: str, row: dict[str, Any], id_key: str, injected: bool,
            texts: dict[str, list[str]]) -> tuple[str, str]:
    """The id and text of the one document of the shards holding a placement's block."""
    doc_id = row.get(id_key)
    if not isinstance(doc_id, str) or not doc_id:
        raise LabError(f"{path}: field '{name}.{id_key}' must name a document")
    found = texts.get(doc_id, [])
    kind = "injected" if injected else "base"
    if len(found) != 1:
        raise LabError(f"{path}: field '{name}.{id_key}' is {doc_id!r}: the shards hold "
                       f"{len(found)} {kind} documents of that id, not 1 (the host as written)")
    return doc_id, found[0]


def _check_host(path: Path, name: str, row: dict[str, Any], removed: set[str],
                host_of: dict[str, str], texts: dict[str, list[str]]) -> None:
    host = row.get("host")
    if not isinstance(host, str) or not host:
        raise LabError(f"{path}: field '{name}.host' must name a base document")
    if host not in removed:
        raise LabError(f"{path}: field '{name}.host' is {host!r}, not one of removed_base_ids "
                       "(a host is a base document the arm removes)")
    if host in host_of:
        raise LabError(f"{path}: field '{name}.host' is {host!r}, the host of {host_of[host]} "
                       "too (one block a host)")
    if host in texts:
        raise LabError(f"{path}: field '{name}.host' is {host!r}, which the shards still hold "
                       "as a base document (a host is in the arm only around its block)")
    host_of[host] = name


def _check_block(path: Path, name: str, row: dict[str, Any], doc_id: str, text: str
                 ) -> tuple[int, int]:
    """The block's offsets within the written text, and its sha256 at them."""
    for key in ("start", "end"):
        value = row.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LabError(f"{path}: field '{name}.{key}' is {value!r}, not a character offset")
    start, end, digest = int(row["start"]), int(row["end"]), row.get("sha256")
    if end <= start:
        raise LabError(f"{path}: field '{name}.end' is {end}, not past start {start}")
    if end > len(text):
        raise LabError(f"{path}: field '{name}.end' is {end}, past the end of {doc_id}'s text "
                       f"({len(text)} characters)")
    if not isinstance(digest, str) or len(digest) != 64:
        raise LabError(f"{path}: field '{name}.sha256' must be the block's sha256 (hex)")
    if block_sha256(text[start:end]) == digest:
        return start, end
    moved = _find_block(text, end - start, digest)
    if moved is not None:
        raise LabError(f"{path}: field '{name}.start' is {start}, but the block sits at "
                       f"[{moved}, {moved + end - start}) of {doc_id}'s text (offsets shifted)")
    raise LabError(f"{path}: field '{name}.sha256' does not match {doc_id}'s text[{start}:{end}] "
                   "(the host's text at its block was changed, or an offset moved)")


def _find_block(text: str, length: int, digest: str) -> int | None:
    """Where in `text` a span of `length` characters has sha256 `digest` (only after a
    mismatch: it tells a shifted offset from a changed text)."""
    for at in range(len(text) - length + 1):
        if block_sha256(text[at:at + length]) == digest:
            return at
    return None


def block_sha256(text: str) -> str:
    """A placement's `sha256`: of the block as written (text[start:end]), in UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
