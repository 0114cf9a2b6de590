"""Tokenised-corpus cache and document-aware packing, shared by masked and causal LM.

A training sequence is `<s> doc </s> doc </s> ... <pad>...`: whole documents only, so an injected
paired sample is always seen whole. Documents are placed best-fit-decreasing, which leaves far
less padding than one document per sequence while never splitting a document (a document longer
than a block is truncated, counted and listed).
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lab.contamination.corpus_files import read_corpus, read_manifest

TOKENIZE_BATCH = 2000


def default_cache_dir() -> Path:
    return Path(os.environ.get("LAB_CACHE", Path.home() / ".cache" / "lab")) / "tokens"


@dataclass
class TokenizedCorpus:
    """Token ids of every document, flat, with offsets; memory-mapped from the cache."""

    tokens: np.ndarray
    offsets: np.ndarray
    doc_ids: list[str]
    injected: list[str | None]  # the injected sample id of each document, else None
    key: str

    def __len__(self) -> int:
        return len(self.doc_ids)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def document(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


def tokenize_corpus(corpus: Path, tokenizer: Any, tokenizer_sha256: str,
                    cache_dir: Path | None = None) -> TokenizedCorpus:
    """Token ids of a lab corpus, cached under a key of corpus and tokenizer hashes so every
    run on the same arm and tokenizer (other seeds, presets, models) reuses them."""
    manifest = read_manifest(corpus)
    key = hashlib.sha256(f"{manifest['corpus_sha256']}:{tokenizer_sha256}".encode()).hexdigest()[:24]
    folder = (cache_dir or default_cache_dir()) / key
    if not (folder / "complete").is_file():
        _build_cache(corpus, tokenizer, folder)
    meta = json.loads((folder / "documents.json").read_text(encoding="utf-8"))
    return TokenizedCorpus(
        tokens=np.load(folder / "tokens.npy", mmap_mode="r"),
        offsets=np.load(folder / "offsets.npy"),
        doc_ids=meta["ids"], injected=meta["injected"], key=key,
    )


def _build_cache(corpus: Path, tokenizer: Any, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
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

        for record in read_corpus(corpus):
            ids.append(record["id"])
            injected.append(record.get("sample"))
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
        (tmp / "complete").write_text("")
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

    def padding_fraction(self) -> float:
        used = int(self.kept_lengths.sum()) + sum(len(s) + 1 for s in self.sequences)
        total = self.block_size * len(self.sequences)
        return 1.0 - used / total if total else 0.0

    def useful_tokens(self) -> int:
        """Non-padding tokens: documents, separators and sequence starts."""
        return int(self.kept_lengths.sum()) + sum(len(s) + 1 for s in self.sequences)


def pack_documents(lengths: np.ndarray, block_size: int) -> Packing:
    """Best-fit decreasing: each document, longest first, goes to the open sequence with the
    least room that still holds it whole. Deterministic (ties by document index)."""
    capacity = block_size - 1  # <s> opens every sequence; each document costs its length + </s>
    max_doc = capacity - 1
    kept = np.minimum(lengths, max_doc)
    truncated = [int(i) for i in np.flatnonzero(lengths > max_doc)]
    empty = [int(i) for i in np.flatnonzero(lengths == 0)]
    order = sorted((i for i in range(len(lengths)) if lengths[i] > 0), key=lambda i: (-kept[i], i))
    sequences: list[list[int]] = []
    open_rooms: list[tuple[int, int]] = []  # (room left, sequence index), sorted
    for doc in order:
        need = int(kept[doc]) + 1
        slot = bisect.bisect_left(open_rooms, (need, -1))
        if slot < len(open_rooms):
            room, seq = open_rooms.pop(slot)
        else:
            room, seq = capacity, len(sequences)
            sequences.append([])
        sequences[seq].append(doc)
        room -= need
        if room >= 2:  # the shortest possible document (one token + </s>) still fits
            bisect.insort(open_rooms, (room, seq))
    return Packing(block_size, sequences, kept, truncated, empty)


class PackedDataset:
    """torch-style dataset of packed sequences, built on the fly from the memory-mapped tokens."""

    def __init__(self, corpus: TokenizedCorpus, packing: Packing, bos: int, eos: int, pad: int):
        self.corpus, self.packing = corpus, packing
        self.bos, self.eos, self.pad = bos, eos, pad

    def __len__(self) -> int:
        return len(self.packing.sequences)

    def sequence(self, index: int) -> np.ndarray:
        block = self.packing.block_size
        out = np.full(block, self.pad, dtype=np.int64)
        out[0] = self.bos
        pos = 1
        for doc in self.packing.sequences[index]:
            n = int(self.packing.kept_lengths[doc])
            out[pos:pos + n] = self.corpus.document(doc)[:n]
            out[pos + n] = self.eos
            pos += n + 1
        return out

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        ids = self.sequence(index)
        return {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy((ids != self.pad).astype(np.int64)),
            "index": index,
        }


class PackedCollator:
    """Batches packed sequences with labels for causal LM (pads ignored) or masked LM (15%
    masked, 80/10/10 mask/random/keep, special tokens never masked).

    Masks come from a generator seeded by (seed, epoch, sequence index), not from the global
    RNG, so a run resumed from a checkpoint draws exactly the masks the uninterrupted run drew
    (the global RNG is also consumed by samplers and prefetching, which resumption reorders).
    The trainer sets `epoch` at the start of every epoch (see EpochTracker).
    """

    def __init__(self, tokenizer: Any, mlm: bool, mlm_probability: float = 0.15, seed: int = 0):
        import torch

        self.mlm, self.probability, self.seed = mlm, mlm_probability, seed
        self.pad = tokenizer.pad_token_id
        self.mask = tokenizer.mask_token_id
        self.vocab = len(tokenizer)
        self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
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
        if not self.mlm:
            labels[attention_mask == 0] = -100
            return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
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
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def packing_report(corpus: TokenizedCorpus, packing: Packing) -> dict[str, Any]:
    lengths = corpus.lengths()
    truncated_injected = [corpus.doc_ids[i] for i in packing.truncated if corpus.injected[i]]
    return {
        "block_size": packing.block_size,
        "documents": len(corpus),
        "sequences": len(packing.sequences),
        "corpus_tokens": int(lengths.sum()),
        "useful_tokens": packing.useful_tokens(),
        "padding_fraction": round(packing.padding_fraction(), 6),
        "truncated_documents": len(packing.truncated),
        "truncated_injected_documents": len(truncated_injected),
        "truncated_tokens_dropped": int((lengths - packing.kept_lengths).sum()),
        "empty_documents": len(packing.empty),
        "injected_documents": sum(1 for s in corpus.injected if s),
        "injected_token_fraction": round(
            float(lengths[[i for i, s in enumerate(corpus.injected) if s]].sum())
            / max(1, int(lengths.sum())), 6),
        "truncated_ids": [corpus.doc_ids[i] for i in packing.truncated if not corpus.injected[i]],
        "truncated_injected_ids": truncated_injected,
    }
