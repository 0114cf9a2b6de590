"""What a contamination form is, to the registry (lab.contamination.forms.FORMS): a name, its
part of the option's help, the check that refuses a benchmark and setting it cannot act on, and
its transformation of one sample's injected documents. lab.contamination.soft dispatches on it;
each form is one module beside this one.

A form's transformation receives the seeded stream of that sample
(random.Random(f"{seed}/form/{name}/{sample id}")) and returns the (side label, text) documents
the sample contributes, with why it stayed as verbatim writes it (None: altered).
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Callable

from lab.common import LabError
from lab.contamination.settings import SIDES, Setting, form_documents
from lab.corpora import get_spec

# Code languages of the benchmarks' sides (lab.contamination.overlap.CODE_LANGUAGES's).
CODE = ("java", "cs")

Documents = list[tuple[str, str]]
Formed = tuple[Documents, "str | None"]


@dataclass(frozen=True)
class FormContext:
    """The benchmark and base corpus an arm's form acts in: its sides' languages."""

    benchmark: str
    base: str
    language: dict[str, str]  # side (input, output) -> its language

    @classmethod
    def of(cls, benchmark: str, base: str) -> "FormContext":
        spec = get_spec(benchmark)
        return cls(benchmark, base, {"input": spec.input_language,
                                     "output": spec.output_language})

    def base_language(self) -> str:
        """The base corpus's code language (asked only by a form that needs it)."""
        return get_spec(self.base).input_language

    def code_sides(self, sides: tuple[str, ...] = SIDES) -> list[str]:
        return [s for s in sides if self.language[s] in CODE]

    def nl_sides(self, sides: tuple[str, ...] = SIDES) -> list[str]:
        return [s for s in sides if self.language[s] not in CODE]


def no_check(setting: Setting, context: FormContext) -> None:
    """A form any injecting setting of any benchmark can take."""


def no_options(form: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class FormKind:
    """One contamination form, as its module declares it (`FORM = FormKind(...)`)."""

    name: str
    help: str  # its entry in FORM_HELP, e.g. "renamed (identifiers, lab perturb's renamer)"
    # (form, setting, sample, seeded rng, context) -> (documents, why it stayed verbatim)
    transform: Callable[[Any, Setting, Any, random.Random, FormContext], Formed]
    # Raises LabError (refuse) in one line for a setting or benchmark the form cannot act on.
    check: Callable[[Setting, FormContext], None] = no_check
    # The form's options as the manifest states them, beside its name.
    options: Callable[[Any], dict[str, Any]] = no_options
    # (spec, colon, text after it) -> the form's value (partial:F's fraction); None: takes none.
    parse_value: Callable[[str, str, str], float] | None = None
    # Whether a length-matched placebo is measured on the formed documents (the form changes
    # what is measured) rather than the verbatim ones (lab.contamination.soft.length_documents).
    measured_formed: bool = False
    # (the plan's injected documents, the (id, text) of the base documents the arm removes,
    # seed) -> the documents as written and the manifest's record of where each went: a form
    # that writes its documents inside base documents (embedded); None for every other form.
    place: Callable[[list[dict[str, Any]], list[tuple[str, str]], int],
                    tuple[list[dict[str, Any]], list[dict[str, Any]]]] | None = None


def refuse(name: str, why: str) -> LabError:
    """The one-line refusal of `--contamination-form NAME`."""
    return LabError(f"--contamination-form {name}: {why}")


def rewritten_documents(setting: Setting, sample: Any, context: FormContext,
                        rewrite: Callable[[dict[str, str], list[str], list[str]],
                                          tuple[dict[str, str], str | None]]) -> Formed:
    """The documents of a form that rewrites a sample's sides (renamed, reformatted,
    nl-reworded): `rewrite(sides, code, nl)` gets every side's text and the code and NL sides
    the setting injects (non-empty ones), and returns the new sides and a reason. Only the sides
    the setting injects are altered, and they alone decide whether the sample was: output-only's
    C# renamed with a map drawn from its Java too left the C# as it was while the manifest
    counted the sample altered (issue 70, row 8)."""
    sides = {s: getattr(sample, s) for s in SIDES}
    code = [s for s in context.code_sides(setting.sides) if sides[s].strip()]
    nl = [s for s in context.nl_sides(setting.sides) if sides[s].strip()]
    new, reason = rewrite(sides, code, nl)
    documents = form_documents(setting.form, dataclasses.replace(sample, **new))
    if documents == setting.documents(sample):
        reason = reason or "unchanged"
    return documents, reason


def check_code_side(name: str) -> Callable[[Setting, FormContext], None]:
    """The check of a form that alters code sides: the setting must inject one."""
    def check(setting: Setting, context: FormContext) -> None:
        if not context.code_sides(setting.sides):
            raise refuse(name, f"{setting.name} injects no code side of {context.benchmark}")
    return check
