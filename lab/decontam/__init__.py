"""Decontaminators: one small module each, one function shape, one table.

Every decontaminator is `flag(documents, reference, options) -> list[bool]`: for each corpus
document (its text), whether the method would remove it as contaminated by the reference
benchmark samples (lab.decontam.base.Reference: the samples and their sides' languages), under
the run's options (lab.decontam.base.Options: n-gram size, Jaccard threshold, ...). A method
sees only texts, never the documents' `sample` fields: `lab decontam` (lab.decontam.run) judges
its flags afterwards against the arm's ground truth (which documents are injected copies of
which benchmark sample), per dose level. DECONTAMINATORS names them, with where each method
comes from; docs/decontam.md says what each departs from.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

from lab.common import LabError
from lab.decontam import audit, dt_ngrams, exact, minhash, ngram, winnow
from lab.decontam.base import Options, Reference


@dataclass(frozen=True)
class Decontaminator:
    name: str
    flag: Callable[[Sequence[str], Reference, Options], list[bool]]
    source: str  # the paper or project whose rule it follows
    summary: str = ""
    parameters: Callable[[Options], str] = lambda options: ""  # the options it uses, as text
    # Optional, where cheap: per document, (sample id, score, (start, end) or None) of each
    # matching sample, for `lab decontam --write-clean`'s flagged.csv; without it, flags alone.
    match: Callable[[Sequence[str], Reference, Options],
                    list[list[tuple[str, float, tuple[int, int] | None]]]] | None = None
    # Set when what the method flags changed after studies were made: a decontaminated arm's
    # manifest records it and its stage key carries it, so a resumed study builds that arm
    # again (lab.study.stages) and keeps every other stage.
    revision: str = ""


def _ngram_parameters(n: int | None) -> Callable[[Options], str]:
    return lambda o: f"n={n or o.ngram_n} rule={o.ngram_rule} short={o.ngram_short}"


DECONTAMINATORS: dict[str, Decontaminator] = {d.name: d for d in (
    Decontaminator("exact", exact.flag, "BigCode (StarCoder) decontamination",
                   summary="a sample side, whitespace-normalised, is a substring of the document",
                   match=exact.match),
    *(Decontaminator(f"ngram{n}", partial(ngram.flag, n=n), "lm-evaluation-harness Janitor "
                     "(GPT-3 appendix C)", summary=f"shares a word {n}-gram with a sample "
                     "(lower-cased, punctuation deleted)", parameters=_ngram_parameters(n),
                     match=partial(ngram.match, n=n))
      for n in (8, 13, 50)),
    Decontaminator("ngram", ngram.flag, "lm-evaluation-harness Janitor (GPT-3 appendix C)",
                   summary="ngram8/13/50 with n = --ngram-n", parameters=_ngram_parameters(None),
                   match=ngram.match),
    Decontaminator("datatrove", dt_ngrams.flag, "datatrove NGramsDecontFilter",
                   summary="datatrove's own n-gram decontamination filter step, n = --ngram-n",
                   parameters=lambda o: f"n={o.ngram_n} query_ngrams=1 overlap_ngrams=1"),
    Decontaminator("minhash", minhash.flag, "datasketch MinHash LSH (Broder 1997)",
                   summary="estimated Jaccard of token shingles with a sample >= --jaccard",
                   parameters=lambda o: f"jaccard={o.jaccard} perm={o.num_perm} "
                                        f"shingle={o.shingle}"),
    Decontaminator("audit", audit.flag, "lab audit (Allamanis 2019 / SourcererCC)",
                   summary="the lab's own audit: exact after normalisation, or near-duplicate",
                   parameters=lambda o: "set>=0.8 multiset>=0.7 min_tokens=5"),
    Decontaminator("winnow", winnow.flag, "winnowing (Schleimer, Wilkerson & Aiken 2003; MOSS, "
                   "Dolos)", summary="containment of a code side's winnowed token fingerprints "
                   "in the document >= --containment (names kept or abstracted)",
                   parameters=lambda o: f"k={o.winnow_k} w={o.winnow_w} names={o.winnow_names} "
                                        f"containment={o.containment}", match=winnow.match,
                   revision=winnow.REVISION),
)}


# Not a method: `lab inject --decontaminate-with oracle` removes every injected copy by ground
# truth (the documents' `sample` field, which a method never sees; lab.contamination.
# decontaminated), the floor a method's residual inflation is measured from. Named here so that
# `lab decontam --methods oracle` is refused with the reason.
ORACLE = "oracle"


def check_methods(names: Sequence[str]) -> list[Decontaminator]:
    if ORACLE in names:
        raise LabError(f"--methods {ORACLE}: not a decontaminator (it removes by ground truth, "
                       "which a method never sees): use lab inject --decontaminate-with oracle")
    if not names:
        raise LabError(f"--methods: give at least one method (choose from "
                       f"{', '.join(DECONTAMINATORS)})")
    unknown = [n for n in names if n not in DECONTAMINATORS]
    if unknown:
        raise LabError(f"--methods {unknown[0]}: unknown method (choose from "
                       f"{', '.join(DECONTAMINATORS)})")
    if len(set(names)) != len(names):
        raise LabError(f"--methods {','.join(names)}: a method is listed twice")
    return [DECONTAMINATORS[n] for n in names]
