"""What every decontaminator receives: the reference samples and the run's options."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from lab.corpora import Sample

NGRAM_RULES = ("any", "janitor")
NGRAM_SHORT = ("skip", "whole")


@dataclass(frozen=True)
class Reference:
    """The benchmark samples a corpus is decontaminated against, and their sides' languages
    (java, cs, nl: the lab's own audit treats code and natural language differently)."""
    samples: Sequence[Sample]
    input_language: str = "java"
    output_language: str = "cs"

    def sides(self) -> list[tuple[str, str]]:
        """(sample id, text) of every non-empty side, input then output, in sample order."""
        return [(sample.id, text) for sample in self.samples
                for text in (sample.input, sample.output) if text.strip()]


@dataclass(frozen=True)
class Options:
    """The methods' parameters (`lab decontam`'s options; each method reads its own)."""
    ngram_n: int = 13          # `ngram` and `datatrove`: words per n-gram
    ngram_rule: str = "any"    # n-gram methods: any shared n-gram, or lm-eval's Janitor cut
    ngram_short: str = "skip"  # n-gram methods: a side of fewer than n words: skip, or whole
    jaccard: float = 0.8       # minhash: Jaccard threshold
    num_perm: int = 128        # minhash: permutations
    shingle: int = 5           # minhash: code tokens per shingle
    seed: int = 1              # minhash: the permutations' seed (datasketch's default)
    winnow_k: int = 10         # winnow: code tokens per k-gram
    winnow_w: int = 4          # winnow: k-gram hashes per window (one fingerprint kept each)
    winnow_names: str = "abstract"  # winnow: keep identifiers, or also match them abstracted
    containment: float = 0.8   # winnow: the score a flagged document reaches
