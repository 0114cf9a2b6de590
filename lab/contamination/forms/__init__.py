"""The contamination forms, one module each, and their registry: FORMS holds one line per form,
in the order the option's help lists them. Adding a form is one module exposing
`FORM = FormKind(...)` (lab.contamination.forms.base) and one line here (docs/design.md, "A
contamination form"); lab.contamination.soft reads its names, help, checks and
transformations from this table.
"""
from __future__ import annotations

from lab.contamination.forms import (cross_language, embedded, nl_reworded, partial, reformatted,
                                     renamed, verbatim)
from lab.contamination.forms.base import FormContext, FormKind

FORMS: dict[str, FormKind] = {form.name: form for form in (
    verbatim.FORM,
    renamed.FORM,
    reformatted.FORM,
    partial.FORM,
    cross_language.FORM,
    nl_reworded.FORM,
    embedded.FORM,
)}

__all__ = ["FORMS", "FormContext", "FormKind"]

