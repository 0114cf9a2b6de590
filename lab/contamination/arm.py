"""An arm as its two builders hand it to inject's guards: format 1 (in memory,
lab.contamination.inject) and format 2 (streamed, lab.contamination.streaming) both gather an
ArmTally document by document and return a Built."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from lab.codetokens import whitespace_hash
from lab.common import LabError
from lab.contamination import SEP_MARKER, segments


class ArmTally:
    """What the injection guards need to know of an arm, gathered document by document (so
    that a streamed arm is checked like one held in memory): which test sides occur verbatim
    in the arm's base (whole, or as a side of a `<SEP>` document), and how often each injected
    text occurs among the kept base documents and in the written arm."""

    def __init__(self, test_keys: set[bytes], injected_keys: set[bytes]):
        self.test_keys = test_keys
        self.injected_keys = injected_keys
        self.base_hits: set[bytes] = set()
        self.final_hits: set[bytes] = set()
        self.kept: Counter = Counter()
        self.final: Counter = Counter()

    @classmethod
    def for_plan(cls, samples: list[Any], injected: list[dict[str, Any]]) -> "ArmTally":
        return cls({whitespace_hash(text) for s in samples for text in (s.input, s.output)
                    if text.strip()},
                   {whitespace_hash(r["text"]) for r in injected})

    def add_base(self, text: str, kept: bool) -> None:
        whole = whitespace_hash(text)
        if whole in self.test_keys:
            self.base_hits.add(whole)
        if SEP_MARKER in text:
            self.base_hits.update(k for k in map(whitespace_hash, segments(text))
                                  if k in self.test_keys)
        if kept and whole in self.injected_keys:
            self.kept[whole] += 1

    def add_final(self, text: str, injected: bool) -> None:
        whole = whitespace_hash(text)
        if whole in self.injected_keys:
            self.final[whole] += 1
        if whole in self.test_keys:
            self.final_hits.add(whole)
        if injected:
            self.final_hits.update(k for k in map(whitespace_hash, segments(text))
                                   if k in self.test_keys)

    def to_json(self) -> dict[str, Any]:
        return {"base_hits": sorted(k.hex() for k in self.base_hits),
                "final_hits": sorted(k.hex() for k in self.final_hits),
                "kept": {k.hex(): n for k, n in self.kept.items()},
                "final": {k.hex(): n for k, n in self.final.items()}}

    def merge(self, part: dict[str, Any]) -> None:
        self.base_hits.update(bytes.fromhex(k) for k in part.get("base_hits", ()))
        self.final_hits.update(bytes.fromhex(k) for k in part.get("final_hits", ()))
        self.kept.update({bytes.fromhex(k): n for k, n in part.get("kept", {}).items()})
        self.final.update({bytes.fromhex(k): n for k, n in part.get("final", {}).items()})


@dataclass
class Built:
    """The base side of an arm, as a builder wrote it."""

    provenance: list[dict[str, Any]]
    base_total: int
    after_limit: int
    decontaminated: list[str]
    arm_documents: int
    removed: list[str]
    shards: list[dict[str, Any]]
    final_documents: int
    total_chars: int
    tally: ArmTally
    # --decontaminate-with: the injected documents left in the arm (None: all of the plan's)
    # and the manifest's `decontamination` record.
    injected: list[dict[str, Any]] | None = None
    decontamination: dict[str, Any] | None = None
    intended_total_chars: int | None = None  # the arm's characters before it
    # embedded: per injected document, its host and the block's offsets (the manifest's
    # `embedding`); None for every other form.
    embedding: list[dict[str, Any]] | None = None


def too_few_documents(cfg: Any, injected: int, available: int) -> LabError:
    """The refusal of an arm whose injected documents outnumber the base documents left to
    remove (cfg: the arm's InjectConfig)."""
    dosing = (f"--doses {','.join(map(str, cfg.doses))}" if cfg.doses
              else f"--repeat {cfg.repeat}")
    return LabError(f"--setting {cfg.setting} {dosing}: {injected} documents to remove, "
                    f"but the base corpus holds only {available} (raise --limit or lower the dose)")
