"""Tokenised-corpus cache and document-aware packing, shared by masked and causal LM.

Documents are placed whole (never split across sequences) best-fit-decreasing, which leaves far
less padding than one document per sequence; a document longer than a block is truncated,
counted and listed. Two layouts:

- per-document (the default): `<s> doc </s> <s> doc </s> ... <pad>...`, every document a
  segment of its own that attends only to itself, its positions starting at 0 (RoBERTa: at
  padding_idx + 1): the model computes exactly what one document per sequence, padded, computes
  (the study's setting), without the padding. GPT-2 gets per-document `position_ids` and no
  attention mask, from which transformers builds a block-diagonal causal mask itself
  (`create_causal_mask` detects positions that restart); RoBERTa, whose bidirectional mask
  ignores positions, gets a 4D block-diagonal boolean mask and its position ids.
- cross-document (opt-out, `--cross-document-attention`): `<s> doc </s> doc </s> ... <pad>...`
  with one causal / bidirectional mask over the whole sequence and positions running on, as
  HF's `group_texts` (but with whole documents).

In both, no sequence holds two documents of one injected sample (two copies, or the two sides of
an unpaired sample), so a model cannot copy one from the other in context.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from lab.common import (LabError, files_problem, files_record, lab_cache_dir, remove_stale_siblings,
                        temporary_prefix)
from lab.corpora.shards import read_corpus, read_shard, verify_corpus
from lab.train.attention import DOCUMENT_IDS

TOKENIZE_BATCH = 2000


def default_cache_dir() -> Path:
    return lab_cache_dir() / "tokens"


@dataclass
class TokenizedCorpus:
    """Token ids of every document, with offsets into their concatenation; the tokens of each
    corpus shard memory-mapped from that shard's cache entry (`parts`, in corpus order)."""

    parts: list[np.ndarray]
    offsets: np.ndarray
    doc_ids: list[str]
    injected: list[str | None]  # the injected sample id of each document, else None
    key: str
    entries: list[Path] = field(default_factory=list)  # cache folder of each part
    part_documents: np.ndarray | None = None  # index of each part's first document

    def __post_init__(self) -> None:
        if self.part_documents is None:
            self.part_documents = np.zeros(1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def document(self, i: int) -> np.ndarray:
        part = int(np.searchsorted(self.part_documents, i, side="right")) - 1
        base = self.offsets[self.part_documents[part]]
        return self.parts[part][self.offsets[i] - base:self.offsets[i + 1] - base]

    @property
    def tokens(self) -> np.ndarray:
        """Every token, concatenated in memory (small corpora, tests and benchmarks)."""
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint32)


def tokenize_corpus(corpus: Path, tokenizer: Any, tokenizer_sha256: str,
                    cache_dir: Path | None = None, tasks: int = 1) -> TokenizedCorpus:
    """Token ids of a lab corpus, built shard by shard: one cache entry per corpus shard, keyed
    by the shard's and the tokenizer's sha256 (every run on the same shard and tokenizer
    reuses it), the missing ones filled by `tasks` parallel tasks (datatrove's local
    executor), and the arm's index the concatenation of its shards' in corpus order.

    The corpus is verified against its manifest's hashes first (the keys trust the shards'
    sha256), and a cache entry against the sizes and sha256 recorded when it was written (see
    `_check_cache`); a damaged entry is rebuilt from its shard (it is derived data), with a
    warning."""
    from lab.executor import ExecutorConfig, run_step

    corpus = Path(corpus)
    manifest = verify_corpus(corpus)
    root = Path(cache_dir or default_cache_dir())
    key = hashlib.sha256(f"{manifest['corpus_sha256']}:{tokenizer_sha256}".encode()).hexdigest()[:24]
    shards = manifest["shards"]
    entries = [root / "shards" / hashlib.sha256(
        f"{shard['sha256']}:{tokenizer_sha256}".encode()).hexdigest()[:24] for shard in shards]
    todo = []
    for shard, folder in zip(shards, entries):
        problem = _check_cache(folder) if (folder / "complete").is_file() else "absent"
        if problem != "absent" and problem is not None:
            print(f"lab: warning: token cache {folder}: {problem}; rebuilding it", file=sys.stderr)
            _discard(folder)
        if problem is not None and str(folder) not in {u["folder"] for u in todo}:
            todo.append({"shard": str(corpus / shard["file"]), "documents": shard["documents"],
                         "folder": str(folder), "tokenizer": tokenizer})
    if todo:
        where = ("set LAB_CACHE to a writable folder (or give --cache-dir)"
                 if root == default_cache_dir() else "give another --cache-dir")
        try:  # a read-only or full cache is the cache's problem, not --out's
            root.mkdir(parents=True, exist_ok=True)
            workspace = tempfile.TemporaryDirectory(prefix="tokenize-", dir=root)
            with workspace as work:
                run_step(ExecutorConfig(tasks=tasks), "tokenize", tokenize_shard_unit,
                         [{**unit, "where": where} for unit in todo], Path(work))
        except OSError as exc:
            raise LabError(cache_unwritable(root, exc, where)) from None
        for unit in todo:
            problem = _check_cache(Path(unit["folder"]))
            if problem is not None:
                raise LabError(f"token cache {unit['folder']}: {problem} right after it was written")
    parts, offsets, doc_ids, injected, part_documents = [], [np.zeros(1, dtype=np.int64)], [], [], []
    for folder in entries:
        meta = json.loads((folder / "documents.json").read_text(encoding="utf-8"))
        part_documents.append(len(doc_ids))
        doc_ids += meta["ids"]
        injected += meta["injected"]
        offsets.append(np.load(folder / "offsets.npy")[1:] + offsets[-1][-1])
        parts.append(np.load(folder / "tokens.npy", mmap_mode="r"))
    return TokenizedCorpus(parts=parts, offsets=np.concatenate(offsets), doc_ids=doc_ids,
                           injected=injected, key=key, entries=entries,
                           part_documents=np.asarray(part_documents, dtype=np.int64))


def tokenize_shard_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """One step unit: the cache entry of one corpus shard."""
    try:
        _build_cache(read_shard(Path(unit["shard"]), unit["documents"]), unit["tokenizer"],
                     Path(unit["folder"]))
    except OSError as exc:  # raised in a task: its message is all that reaches the user
        raise LabError(cache_unwritable(Path(unit["folder"]).parent, exc, unit["where"])) from None
    return {"folder": unit["folder"]}


def cache_unwritable(folder: Path, exc: OSError, where: str) -> str:
    """The line for a cache that could not be written. A full disk reaches numpy as a short
    write, an OSError with no errno ("129703 requested and 16352 written"), so that case is
    named as what it almost always is."""
    cause = exc.strerror or f"only part written, {exc}: is the disk full?"
    return f"token cache {folder}: cannot write ({cause}); {where}"


CACHE_FILES = ("tokens.npy", "offsets.npy", "documents.json")


def _check_cache(folder: Path) -> str | None:
    """None if a complete cache entry holds the bytes recorded in its `complete` file, else
    what is wrong (see files_problem)."""
    try:
        record = json.loads((folder / "complete").read_text(encoding="utf-8") or "null")
    except (OSError, json.JSONDecodeError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return "no record of its files' hashes (written by an older lab)"
    if sorted(record["files"]) != sorted(CACHE_FILES):
        return f"its record lists {sorted(record['files'])}, not {list(CACHE_FILES)}"
    return files_problem(folder, record["files"])


def _discard(folder: Path) -> None:
    """Move a bad entry aside atomically (a reader that mapped it keeps its inode), then delete."""
    trash = Path(tempfile.mkdtemp(prefix=folder.name + ".bad-", dir=folder.parent))
    try:
        os.replace(folder, trash / "entry")
    except FileNotFoundError:
        pass  # another process discarded it first
    shutil.rmtree(trash, ignore_errors=True)


def _build_cache(records: Iterator[dict[str, Any]], tokenizer: Any, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(folder)  # what a killed build of this entry left
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(folder), dir=folder.parent))
    try:
        ids: list[str] = []
        injected: list[str | None] = []
        chunks: list[np.ndarray] = []
        lengths: list[int] = []
        batch: list[str] = []

        def flush() -> None:
            encoded = tokenizer(batch, add_special_tokens=False)["input_ids"]
            for row in encoded:
                chunks.append(np.asarray(row, dtype=np.uint32))
                lengths.append(len(row))
            batch.clear()

        for record in records:
            ids.append(record["id"])
            injected.append(record.get("sample") or None)  # "" (or absent): a base document
            batch.append(record["text"])
            if len(batch) == TOKENIZE_BATCH:
                flush()
        if batch:
            flush()
        tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint32)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        np.save(tmp / "tokens.npy", tokens)
        np.save(tmp / "offsets.npy", offsets)
        (tmp / "documents.json").write_text(json.dumps({"ids": ids, "injected": injected}))
        (tmp / "complete").write_text(json.dumps({"files": files_record(tmp, CACHE_FILES)}))
        try:
            os.replace(tmp, folder)
        except OSError:
            # Another process (another node sharing the cache) finished first: keep theirs.
            if not (folder / "complete").is_file():
                raise
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@dataclass
class Packing:
    """Which documents go into which training sequence, and what it cost."""

    block_size: int
    sequences: list[list[int]]
    kept_lengths: np.ndarray  # tokens kept of each document (after truncation)
    truncated: list[int] = field(default_factory=list)
    empty: list[int] = field(default_factory=list)
    cross_document: bool = False  # layout: see the module docstring
    displaced: int = 0  # documents the sample guard kept out of their best-fit sequence

    def useful_tokens(self) -> int:
        """Non-padding tokens: documents and their `<s>` / `</s>`."""
        documents = sum(len(s) for s in self.sequences)
        if self.cross_document:  # one <s> per sequence, one </s> per document
            return int(self.kept_lengths.sum()) + documents + len(self.sequences)
        return int(self.kept_lengths.sum()) + 2 * documents  # <s> doc </s> per document

    def padding_fraction(self) -> float:
        total = self.block_size * len(self.sequences)
        return 1.0 - self.useful_tokens() / total if total else 0.0


def _layout_costs(block_size: int, cross_document: bool) -> tuple[int, int]:
    """(room a sequence offers documents, tokens a document costs beyond its own)."""
    if cross_document:
        return block_size - 1, 1  # <s> opens the sequence; doc </s>
    return block_size, 2  # <s> doc </s>


def longest_document(block_size: int) -> int:
    """Tokens a document keeps at most (more are cut): a block less its `<s>` and `</s>`."""
    return block_size - 2


def pack_documents(lengths: np.ndarray, block_size: int, samples: list[str | None] | None = None,
                   cross_document: bool = False, levels: list[int | None] | None = None
                   ) -> Packing:
    """Best-fit decreasing: each document, longest first, goes to the open sequence with the
    least room that still holds it whole. Deterministic (ties by document index).

    `samples` gives each document's injected sample id (None for base documents): a document
    never joins a sequence that already holds a document of its sample (another copy, or the
    other side of an unpaired sample); it takes the next best-fitting sequence instead.
    `levels` gives each document's timing level (None: no level): a document of one level never
    joins a sequence holding a document of another, since a sequence is trained at one time.
    A document keeps at most block_size - 2 tokens in either layout (one per sequence, with its
    `<s>` and `</s>`, it fills a block), as in one-document-per-sequence training.
    """
    capacity, extra = _layout_costs(block_size, cross_document)
    max_doc = longest_document(block_size)
    lengths = np.asarray(lengths)
    if samples is not None and len(samples) != len(lengths):
        raise ValueError(f"{len(samples)} sample ids for {len(lengths)} documents")
    kept = np.minimum(lengths, max_doc)
    truncated = [int(i) for i in np.flatnonzero(lengths > max_doc)]
    empty = [int(i) for i in np.flatnonzero(lengths == 0)]
    order = sorted((i for i in range(len(lengths)) if lengths[i] > 0), key=lambda i: (-kept[i], i))
    sequences: list[list[int]] = []
    holds: dict[int, set[str]] = {}  # sequence -> injected samples it holds
    level_of: dict[int, int] = {}  # sequence -> the timing level of its documents
    open_rooms: list[tuple[int, int]] = []  # (room left, sequence index), sorted
    displaced = 0
    for doc in order:
        need = int(kept[doc]) + extra
        sample = samples[doc] if samples is not None else None
        slot = bisect.bisect_left(open_rooms, (need, -1))
        level = levels[doc] if levels is not None else None
        if sample is not None or level is not None:
            first = slot
            while slot < len(open_rooms) and (
                    sample in holds.get(open_rooms[slot][1], ())
                    or (level is not None
                        and level_of.get(open_rooms[slot][1], level) != level)):
                slot += 1
            displaced += slot != first and first < len(open_rooms)
        if slot < len(open_rooms):
            room, seq = open_rooms.pop(slot)
        else:
            room, seq = capacity, len(sequences)
            sequences.append([])
        sequences[seq].append(doc)
        if sample is not None:
            holds.setdefault(seq, set()).add(sample)
        if level is not None:
            level_of[seq] = level
        room -= need
        if room >= 1 + extra:  # the shortest possible document (one token) still fits
            bisect.insort(open_rooms, (room, seq))
    return Packing(block_size, sequences, kept, truncated, empty, cross_document, displaced)


def sequences_repeating_a_sample(packing: Packing, samples: list[str | None]) -> int:
    """Sequences that hold two documents of one injected sample (the guard keeps this at 0)."""
    count = 0
    for seq in packing.sequences:
        ids = [samples[d] for d in seq if samples[d] is not None]
        count += len(ids) != len(set(ids))
    return count


class PackedDataset:
    """torch-style dataset of packed sequences, built on the fly from the memory-mapped tokens.

    An item holds `input_ids`, `attention_mask` (1 on non-padding tokens), `segments` (1, 2, ...
    for the sequence's documents in order, 0 on padding) and the sequence's `index`.
    """

    def __init__(self, corpus: TokenizedCorpus, packing: Packing, bos: int, eos: int, pad: int):
        self.corpus, self.packing = corpus, packing
        self.bos, self.eos, self.pad = bos, eos, pad

    def __len__(self) -> int:
        return len(self.packing.sequences)

    def sequence(self, index: int) -> np.ndarray:
        return self.sequence_and_segments(index)[0]

    def sequence_and_segments(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        block = self.packing.block_size
        out = np.full(block, self.pad, dtype=np.int64)
        segments = np.zeros(block, dtype=np.int64)
        pos = 0
        if self.packing.cross_document:
            out[0], segments[0] = self.bos, 1
            pos = 1
        for number, doc in enumerate(self.packing.sequences[index], start=1):
            n = int(self.packing.kept_lengths[doc])
            start = pos
            if not self.packing.cross_document:
                out[pos] = self.bos
                pos += 1
            out[pos:pos + n] = self.corpus.document(doc)[:n]
            out[pos + n] = self.eos
            pos += n + 1
            segments[start:pos] = number
        return out, segments

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        ids, segments = self.sequence_and_segments(index)
        return {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy((ids != self.pad).astype(np.int64)),
            "segments": torch.from_numpy(segments),
            "index": index,
        }


def segment_positions(segments: Any) -> Any:
    """Each token's offset within its run of equal segment numbers (documents, and the padding
    run), for a (batch, length) tensor: [[1,1,1,2,2,0,0]] -> [[0,1,2,0,1,0,1]]."""
    import torch

    length = segments.shape[1]
    index = torch.arange(length).expand_as(segments)
    starts = torch.ones_like(segments, dtype=torch.bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    run_start = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
    return index - run_start


class PackedCollator:
    """Batches packed sequences with labels for causal LM (pads ignored) or masked LM (15%
    masked, 80/10/10 mask/random/keep, special tokens never masked), and what the model needs to
    keep documents apart (per-document layout):

    - causal LM (GPT-2): `position_ids` restarting at 0 on every document (and on the padding
      run), a 4D boolean mask, True where the key is in the query's document and not after it
      (the block-diagonal causal mask transformers builds from the position restarts when given
      no mask: the same bits under SDPA, and a padded batch is never scored without its mask),
      and `use_cache=False`. Labels are -100 on padding and on every document's `<s>` (never
      predicted, as in a sequence of its own).
    - masked LM (RoBERTa): `position_ids` from `position_offset` (RoBERTa: padding_idx + 1) on,
      per document, and a 4D boolean mask (batch, 1, length, length), True where query and key
      are in the same document (padding attends to padding only: no fully masked row).

    Cross-document layout: `input_ids`, the 2D `attention_mask` and `labels` only (the model's
    own positions and masks over the whole sequence).

    Masks come from a generator seeded by (seed, epoch, sequence index), not from the global
    RNG, so a run resumed from a checkpoint draws exactly the masks the uninterrupted run drew
    (the global RNG is also consumed by samplers and prefetching, which resumption reorders).
    The trainer sets `epoch` at the start of every epoch (see EpochTracker).
    """

    def __init__(self, tokenizer: Any, mlm: bool, mlm_probability: float = 0.15, seed: int = 0,
                 cross_document: bool = False, position_offset: int | None = None,
                 attention: str = "mask", rows: int | None = None):
        import torch

        self.mlm, self.probability, self.seed = mlm, mlm_probability, seed
        self.cross_document = cross_document
        self.attention, self.rows = attention, rows
        self.pad = tokenizer.pad_token_id
        self.mask = tokenizer.mask_token_id
        self.vocab = len(tokenizer)
        self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        # The lab's masked LM is RoBERTa (positions from padding_idx + 1), its causal LM GPT-2
        # (from 0); lab.models.position_offset gives it from a model config.
        self.position_offset = (position_offset if position_offset is not None
                                else (self.pad + 1 if mlm else 0))
        self.epoch = 0

    def _generator(self, index: int):
        import torch

        mixed = ((self.seed * 1_000_003 + self.epoch) * 2_147_483_647 + index) % (1 << 63)
        return torch.Generator().manual_seed(mixed)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        input_ids = torch.stack([f["input_ids"] for f in features]).clone()
        attention_mask = torch.stack([f["attention_mask"] for f in features])
        labels = input_ids.clone()
        if self.mlm:
            self._mask_tokens(features, input_ids, labels)
        else:
            labels[attention_mask == 0] = -100
        if self.cross_document:
            return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

        segments = torch.stack([f["segments"] for f in features])
        flex = self.attention == "flex"
        if flex:
            input_ids, attention_mask, segments, labels = self._fill_rows(
                input_ids, attention_mask, segments, labels)
        positions = segment_positions(segments)
        if self.mlm:
            position_ids = torch.where(segments > 0, positions + self.position_offset,
                                       torch.full_like(positions, self.pad))
            rest: dict[str, Any] = {}
        else:
            labels[positions == 0] = -100  # every document's <s>: nothing precedes it
            position_ids, rest = positions + self.position_offset, {"use_cache": False}
        if flex:  # the document numbers, from which the trainer builds the BlockMask
            keep_apart = {"attention_mask": attention_mask, DOCUMENT_IDS: segments}
        else:
            same_document = segments[:, :, None] == segments[:, None, :]
            if not self.mlm:
                length = segments.shape[1]
                same_document &= torch.ones(length, length, dtype=torch.bool).tril()
            keep_apart = {"attention_mask": same_document[:, None]}
        return {"input_ids": input_ids, **keep_apart, "position_ids": position_ids,
                "labels": labels, **rest}

    def _fill_rows(self, *tensors: Any) -> tuple[Any, ...]:
        """(input_ids, attention_mask, segments, labels) of a short batch, filled up to `rows`
        with rows of padding whose labels are all -100 (they add nothing to the loss or its
        gradient), so a compiled model sees one shape. The flex path only (lab.train.attention:
        it sends document numbers beside the 2D padding mask instead of the 4D mask)."""
        import torch

        short = (self.rows or 0) - tensors[0].shape[0]
        if short <= 0:
            return tensors
        length = tensors[0].shape[1]
        return tuple(torch.cat([tensor, torch.full((short, length), value, dtype=tensor.dtype)])
                     for tensor, value in zip(tensors, (self.pad, 0, 0, -100)))

    def _mask_tokens(self, features: list[dict[str, Any]], input_ids: Any, labels: Any) -> None:
        import torch

        maskable = ~torch.isin(input_ids, self.special)
        for row, feature in enumerate(features):
            gen = self._generator(int(feature["index"]))
            length = input_ids.shape[1]
            chosen = (torch.rand(length, generator=gen) < self.probability) & maskable[row]
            action = torch.rand(length, generator=gen)
            random_tokens = torch.randint(self.vocab, (length,), generator=gen)
            labels[row][~chosen] = -100
            to_mask = chosen & (action < 0.8)
            to_random = chosen & (action >= 0.8) & (action < 0.9)
            input_ids[row][to_mask] = self.mask
            input_ids[row][to_random] = random_tokens[to_random]


def embedded_block_ends(folder: Path, manifest: dict[str, Any], corpus: TokenizedCorpus,
                        tokenizer: Any) -> dict[int, int]:
    """Document index -> the tokens up to the end of its injected block, for an arm whose
    documents hold a sample inside a base document (the `embedded` form: the manifest's
    `embedding` offsets); empty for any other arm. The sample was seen whole iff its block
    ends within the tokens a block keeps, wherever the document itself ends."""
    placed = {str(row["id"]): int(row["end"])
              for row in (manifest.get("embedding") or {}).get("documents") or ()}
    if not placed:
        return {}
    index = {doc_id: i for i, doc_id in enumerate(corpus.doc_ids) if doc_id in placed}
    prefixes = [(index[r["id"]], str(r["text"])[:placed[r["id"]]])
                for r in read_corpus(folder) if r["id"] in index]
    if len(prefixes) != len(placed):
        raise LabError(f"{folder}: {len(placed)} embedded documents in its manifest, "
                       f"{len(prefixes)} in its shards")
    ids = tokenizer([text for _i, text in prefixes], add_special_tokens=False)["input_ids"]
    return {i: len(row) for (i, _text), row in zip(prefixes, ids)}


def packing_report(corpus: TokenizedCorpus, packing: Packing,
                   dose_of: dict[str, int] | None = None,
                   block_ends: dict[int, int] | None = None) -> dict[str, Any]:
    """What the packing trains on. Token counts are document tokens (no `<s>`, `</s>` or
    padding); "trained" ones are those kept after truncation at the block, which is what the
    injected share counts in both numerator and denominator. `dose_of` (injected sample id ->
    its dose, for a dose ladder) adds that share per dose. An injected sample was cut when its
    document was, or, inside a base document (`block_ends`, embedded_block_ends), when its
    block ends past the tokens a document keeps."""
    lengths = corpus.lengths()
    kept = packing.kept_lengths
    injected = [i for i, s in enumerate(corpus.injected) if s]
    truncated_injected = [i for i in packing.truncated if corpus.injected[i]]
    ends = block_ends or {}
    max_doc = longest_document(packing.block_size)
    cut_samples = [i for i in injected if ends.get(i, int(lengths[i])) > max_doc]
    trained = int(kept.sum())
    injected_trained = int(kept[injected].sum()) if injected else 0
    by_dose: dict[str, int] = {str(d): 0 for d in sorted(set((dose_of or {}).values()))}
    for i in injected if dose_of else []:
        by_dose[str(dose_of[corpus.injected[i]])] += int(kept[i])
    return {
        **({"injected_token_fraction_by_dose": {d: round(t / max(1, trained), 6)
                                                for d, t in by_dose.items()}} if dose_of else {}),
        "block_size": packing.block_size,
        "cross_document_attention": packing.cross_document,
        "documents": len(corpus),
        "sequences": len(packing.sequences),
        "corpus_tokens": int(lengths.sum()),
        "trained_tokens": trained,
        "useful_tokens": packing.useful_tokens(),
        "padding_fraction": round(packing.padding_fraction(), 6),
        "truncated_documents": len(packing.truncated),
        "truncated_injected_documents": len(truncated_injected),
        "truncated_tokens_dropped": int((lengths - kept).sum()),
        "empty_documents": len(packing.empty),
        "injected_documents": len(injected),
        "injected_trained_tokens": injected_trained,
        "injected_token_fraction": round(injected_trained / max(1, trained), 6),
        "sequences_with_repeated_sample": sequences_repeating_a_sample(packing, corpus.injected),
        "guard_displaced_documents": packing.displaced,
        # Sample ids (sorted, unique) whose injected document (embedded: its block) was cut at
        # the block size: the model never saw such a sample whole.
        "truncated_ids": sorted({corpus.injected[i] for i in cut_samples}),
        **({"truncation_of_embedded": "the block's end within the kept tokens "
                                      f"({len(ends)} blocks, "
                                      f"{sum(e > max_doc for e in ends.values())} cut)"}
           if ends else {}),
        "truncated_injected_ids": [corpus.doc_ids[i] for i in truncated_injected],
        "truncated_base_ids": [corpus.doc_ids[i] for i in packing.truncated if not corpus.injected[i]],
    }
