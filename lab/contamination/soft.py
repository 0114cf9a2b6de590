"""Soft-contamination forms: how the injected samples are altered before they enter the corpus,
an axis beside the setting (`lab inject --contamination-form`, recipe
`injection.contamination_form`). The setting says which sides of a sample become which
documents (lab.contamination.settings); the contamination form says what those sides look like.

Each form is one module of lab.contamination.forms with one line in its registry (FORMS):
verbatim (the default: the sample as the benchmark holds it; no other code runs, so a verbatim
arm is byte for byte the arm made before forms existed), renamed, reformatted, partial[:F],
cross-language, nl-reworded and embedded, each described in its module (embedded's documents
are written into their hosts by the builders: `placed_documents`). This module holds what every
form shares, read off the registry: the names and help of the option, parsing and checking a
form, the manifest's record of it, and the entry point that dispatches to a form's
transformation.

Every form alters only the sides its setting injects (output-only: the C#, not the Java), and a
sample counts as altered (the manifest's altered_samples) only when its injected documents
differ from the ones the verbatim form writes.

Every choice comes from random.Random(f"{seed}/form/{name}/{sample id}"): the same recipe and
seed give byte-identical corpora, and a placebo arm's own samples get the same transformation.
The entry point is `formed_documents`; `check_form` refuses a form a benchmark and setting
cannot take, in one line.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from lab.common import LabError
from lab.contamination.forms import FORMS
from lab.contamination.forms.base import CODE, FormContext
from lab.contamination.forms.nl_reworded import CONCODE_CONTEXT, reworded
from lab.contamination.forms.partial import DEFAULT_FRACTION, MIN_FRACTION
from lab.contamination.forms.reformatted import reformatted
from lab.contamination.forms.renamed import RENAME_TOLERANCE, renamed
from lab.contamination.forms.verbatim import NAME as VERBATIM
from lab.contamination.settings import Setting

__all__ = ["VERBATIM", "FORM_NAMES", "FORM_HELP", "DEFAULT_FRACTION", "MIN_FRACTION", "CODE",
           "RENAME_TOLERANCE", "CONCODE_CONTEXT", "ContaminationForm", "recorded_form",
           "parse_form", "base_fields", "check_form", "FormedSetting", "length_documents",
           "formed_documents", "placed_documents", "renamed", "reformatted", "reworded"]

# The registered forms' names and the option's help, in the registry's order.
FORM_NAMES = tuple(FORMS)
FORM_HELP = "how the injected samples are altered: " + ", ".join(
    form.help for form in FORMS.values())


@dataclass(frozen=True)
class ContaminationForm:
    name: str = VERBATIM
    fraction: float | None = None   # partial: the share of each document kept

    @property
    def verbatim(self) -> bool:
        return self.name == VERBATIM

    def record(self) -> dict[str, Any]:
        """The form and its options, as the manifest states them."""
        return {"name": self.name, **FORMS[self.name].options(self)}


def recorded_form(record: dict[str, Any]) -> str:
    """The contamination form (e.g. renamed, partial:0.5) a corpus record (an arm's manifest,
    or a model's copy of it) says its samples were injected in; verbatim where it states none
    (every arm made before the forms existed)."""
    form = record.get("contamination_form")
    spec = (record.get("options") or {}).get("contamination_form")
    if isinstance(form, str) and form:
        return form
    if isinstance(spec, str) and spec:
        return spec
    if isinstance(form, dict) and form.get("name"):
        return str(form["name"]) + (f":{form['fraction']}" if form.get("fraction") else "")
    return VERBATIM


def parse_form(spec: str) -> ContaminationForm:
    """A registered form's name (FORMS), with `:VALUE` for one that takes a value (`partial`,
    `partial:F`); LabError in one line otherwise."""
    name, colon, value = str(spec).partition(":")
    if name not in FORMS:
        raise LabError(f"--contamination-form {spec}: unknown form (choose from "
                       f"{', '.join(FORMS)})")
    parse_value = FORMS[name].parse_value
    if parse_value is None:
        if colon:
            valued = ", ".join(n for n, form in FORMS.items() if form.parse_value is not None)
            raise LabError(f"--contamination-form {spec}: only {valued} takes a value "
                           f"({valued}:F)")
        return ContaminationForm(name)
    return ContaminationForm(name, parse_value(spec, colon, value))


def base_fields(spec: str) -> dict[str, str]:
    """What a base document of an arm carries beside lab.corpora.shards.BASE_FIELDS: in an arm
    of a non-verbatim form every line has a `form` field (a base document's ""; an injected
    one's the form's name), so every shard keeps one schema; a verbatim arm's lines are as
    they always were."""
    return {} if parse_form(spec).verbatim else {"form": ""}


def check_form(form: ContaminationForm, benchmark: str, setting: Setting,
               base: str = "csn-java") -> None:
    """Refuse, in one line, a form the benchmark and setting cannot take: one that would leave
    every injected document as verbatim writes it, or has nothing to act on (the form's own
    check, FormKind.check)."""
    if form.verbatim:
        return
    context = FormContext.of(benchmark, base)
    if not setting.injects:
        raise LabError(f"--contamination-form {form.name}: the {setting.name} setting injects "
                       "nothing to alter")
    FORMS[form.name].check(setting, context)


@dataclass(frozen=True)
class FormedSetting(Setting):
    """A setting whose documents come in a non-verbatim contamination form: what the injector
    plans, counts and measures with in place of the plain setting (lab.contamination.inject)."""

    contamination: ContaminationForm = ContaminationForm()
    seed: int = 0
    benchmark: str = ""
    corpus: str = "csn-java"

    @classmethod
    def of(cls, setting: Setting, form: ContaminationForm, seed: int, benchmark: str,
           corpus: str) -> "FormedSetting":
        return cls(setting.name, setting.form, setting.placebo, setting.base, form, seed,
                   benchmark, corpus)

    def plain(self) -> Setting:
        return Setting(self.name, self.form, self.placebo, self.base)

    def documents(self, sample: Any) -> list[tuple[str, str]]:
        return self.formed(sample)[0]

    def formed(self, sample: Any) -> tuple[list[tuple[str, str]], str | None]:
        """The sample's documents in this form, and why it stayed as verbatim (None: altered)."""
        return formed_documents(self.contamination, self.plain(), sample, self.seed,
                                self.benchmark, self.corpus)

    def length_documents(self, sample: Any) -> list[tuple[str, str]]:
        """The documents a placebo is matched on: the formed ones where the form changes what
        is measured (partial, cross-language); else the verbatim ones, whose lab code tokens
        renaming and reformatting keep (and rewording keeps the words), so a large pool is
        not transformed whole only to be measured."""
        if FORMS[self.contamination.name].measured_formed:
            return self.documents(sample)
        return self.plain().documents(sample)


def length_documents(setting: Setting, sample: Any) -> list[tuple[str, str]]:
    """The documents a sample is measured by when a placebo is matched on length."""
    if isinstance(setting, FormedSetting):
        return setting.length_documents(sample)
    return setting.documents(sample)


def placed_documents(form: ContaminationForm, injected: list[dict[str, Any]],
                     removed: Callable[[], list[tuple[str, str]]], seed: int
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The injected documents as the arm writes them, once its removals are known: a form that
    places them inside base documents (FormKind.place: embedded) gets the removed documents'
    (id, text) from `removed` (asked only then) and returns them placed with its record of
    where; any other form's are the plan's, with no record."""
    place = FORMS[form.name].place
    if place is None:
        return injected, None
    return place(injected, removed(), seed)


@lru_cache(maxsize=1 << 16)
def formed_documents(form: ContaminationForm, setting: Setting, sample: Any, seed: int,
                     benchmark: str, base: str = "csn-java") -> tuple[list[tuple[str, str]],
                                                                      str | None]:
    """The entry point: the (side label, text) documents a sample contributes under a setting
    in a contamination form, and why it was left as verbatim writes it (None when altered).
    Cached: the injector asks for one sample's documents more than once."""
    if form.verbatim:
        return setting.documents(sample), None
    context = FormContext.of(benchmark, base)
    rng = random.Random(f"{seed}/form/{form.name}/{sample.id}")
    return FORMS[form.name].transform(form, setting, sample, rng, context)
