"""The one table of injection settings: what each arm puts into its pre-training corpus.

Every module that needs to know what a setting injects reads it here: the injector (documents
per sample, sides, references), the recipe check (documents per sample against corpus.limit),
the study runner (which arms are probed on which samples), the cost estimate (tokens of an arm)
and the probes (the form a sample is scored in). Nothing else spells out a setting.

A *form* is how one benchmark sample becomes pre-training documents: per document, the sides it
carries (a document of two sides is `input <SEP> output`, or `output <SEP> input` in the
paired-reversed form). The form is also what `lab probe`
scores. A *setting* is an arm: the form it injects and where the injected samples come from:
the benchmark's test split (a contaminated arm), nowhere (the control), or, for a *placebo*,
train/valid samples that the audit finds neither exactly nor near-duplicated in the test split:
the same number of documents, in the same form, with the same repeat as its base setting, so
that the arm-vs-placebo contrast isolates memorising the test samples from exposure to the
task's format and languages.

The table sits in the data layer (scripts/architecture.py), below the injector: the corpus
reader (lab.corpora.shards.verify_corpus) checks an arm's documents against the setting its
manifest names, with this table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.common import LabError
from lab.contamination import paired_document

SIDES = ("input", "output")
# The side label of a document joining both sides (`input <SEP> output`), as its corpus line's
# `side` field gives it.
PAIRED_SIDE = "paired"

# form -> per injected document, the sample sides it joins (in this order).
FORMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "input": (("input",),),
    "output": (("output",),),
    "unpaired": (("input",), ("output",)),
    "paired": (("input", "output"),),
    # The later study's own order for summarisation (its replication package writes
    # `summary <SEP> code`): the output first, so a model reads the reference before the input
    # it is asked about; fine-tuning still trains `input <SEP> output`.
    "paired-reversed": (("output", "input"),),
}
# Each side a document of its own: how code sits on the web, so an outside model is audited so
SIDES_APART = next(form for form, docs in FORMS.items() if docs == tuple((s,) for s in SIDES))
PLACEBO_SUFFIX = "-placebo"


@dataclass(frozen=True)
class Setting:
    """One arm's injection. Everything else is derived from `form`, `placebo` and `base`."""

    name: str
    form: str | None = None    # the form injected and probed; None: nothing injected (control)
    placebo: bool = False      # documents from train/valid samples disjoint from the test split
    base: str | None = None    # a placebo's contaminated setting (same form, count and repeat)

    def __post_init__(self) -> None:
        if self.form is not None and self.form not in FORMS:
            raise ValueError(f"setting {self.name}: unknown form {self.form!r}")
        if self.placebo != (self.base is not None) or (self.placebo and self.form is None):
            raise ValueError(f"setting {self.name}: a placebo needs a form and a base setting")

    @property
    def layout(self) -> tuple[tuple[str, ...], ...]:
        """Per injected document, the sample sides it carries (empty for the control)."""
        return FORMS[self.form] if self.form else ()

    @property
    def documents_per_sample(self) -> int:
        return len(self.layout)

    @property
    def sides(self) -> tuple[str, ...]:
        """The sample sides the arm's documents expose."""
        return tuple(side for side in SIDES if any(side in doc for doc in self.layout))

    @property
    def needs_output(self) -> bool:
        """Its injected samples need a reference (output) side: refused where it is empty."""
        return "output" in self.sides

    @property
    def injects(self) -> bool:
        """Adds documents (and removes as many base documents)."""
        return self.form is not None

    @property
    def injects_test(self) -> bool:
        """Adds test samples: its models are probed on their own injected samples."""
        return self.injects and not self.placebo

    def documents(self, sample: Any) -> list[tuple[str, str]]:
        """(side label, text) of the documents one sample contributes: the side's name for a
        one-side document, `paired` for `input <SEP> output`."""
        return form_documents(self.form, sample) if self.form else []


def _placebo(base: Setting) -> Setting:
    return Setting(base.name + PLACEBO_SUFFIX, base.form, placebo=True, base=base.name)


CONTROL = Setting("control")
_CONTAMINATED = (
    Setting("input-only", "input"),
    Setting("output-only", "output"),
    Setting("unpaired", "unpaired"),
    Setting("paired", "paired"),
    Setting("paired-reversed", "paired-reversed"),
)
# The study's own paired setting (`input <SEP> output`): what a made-up study shows.
PAIRED = next(s for s in _CONTAMINATED if s.layout == (SIDES,))
SETTINGS: dict[str, Setting] = {
    s.name: s for s in (CONTROL, *_CONTAMINATED, *(_placebo(s) for s in _CONTAMINATED))
}


def names() -> tuple[str, ...]:
    return tuple(SETTINGS)


def get(name: str) -> Setting:
    setting = SETTINGS.get(name)
    if setting is None:
        raise LabError(f"unknown setting '{name}' (choose from {', '.join(SETTINGS)})")
    return setting


def find(name: str | None) -> Setting | None:
    """The setting of that name, or None (an unknown name in an old manifest)."""
    return SETTINGS.get(name) if name else None


def form_sides(form: str) -> tuple[str, ...]:
    return tuple(side for side in SIDES if any(side in doc for doc in FORMS[form]))


def form_documents(form: str, sample: Any) -> list[tuple[str, str]]:
    """(side label, text) of the documents a sample becomes in a form."""
    documents = []
    for sides in FORMS[form]:
        if len(sides) == 2:
            first, second = (getattr(sample, side) for side in sides)
            documents.append((PAIRED_SIDE, paired_document(first, second)))
        else:
            (side,) = sides
            documents.append((side, getattr(sample, side)))
    return documents


def document_sides(setting: Setting, kept_side: str | None = None) -> tuple[str, ...]:
    """The `side` field of each document one copy of a sample becomes under a setting: the
    side's name, PAIRED_SIDE for `input <SEP> output`, or `kept_side` in its place where the
    contamination form keeps one side of a paired document (cross-language)."""
    return tuple((kept_side or PAIRED_SIDE) if len(sides) > 1 else sides[0]
                 for sides in setting.layout)


def probed_form(name: str | None) -> str | None:
    """The form in which an arm's corpus carries its test samples (None: no test samples)."""
    setting = find(name)
    return setting.form if setting and setting.injects_test else None


def placebo_of(name: str) -> str | None:
    """The placebo setting of a contaminated setting, if there is one."""
    return next((s.name for s in SETTINGS.values() if s.base == name), None)
