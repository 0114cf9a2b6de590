"""`partial` / `partial:F`: each injected document is a contiguous fraction F (default 0.5) of
the document the verbatim form writes (characters), at a seeded start."""
from __future__ import annotations

import random
from typing import Any

from lab.common import LabError
from lab.contamination.forms.base import FormContext, Formed, FormKind
from lab.contamination.settings import Setting

NAME = "partial"
DEFAULT_FRACTION = 0.5
# The least fraction partial:F keeps: below it a document of the benchmark's typical few hundred
# characters shrinks to a handful (1e-9 kept one character each), a copy of nothing measurable.
MIN_FRACTION = 0.01


def parse_fraction(spec: str, colon: str, value: str) -> float:
    """F of partial:F (the default where none is given); LabError in one line otherwise."""
    if colon and not value.strip():  # `partial:` ran as 0.5 but was recorded as `partial:`
        raise LabError(f"--contamination-form {spec}: nothing after the colon (give partial:F, "
                       f"or partial alone for {DEFAULT_FRACTION})")
    try:
        fraction = float(value) if value else DEFAULT_FRACTION
    except ValueError:
        raise LabError(f"--contamination-form {spec}: the fraction must be a number in (0, 1)") \
            from None
    if not MIN_FRACTION <= fraction < 1:
        raise LabError(f"--contamination-form {spec}: the fraction must be in "
                       f"[{MIN_FRACTION}, 1) (1 is verbatim; less keeps a few characters of a "
                       "document)")
    return fraction


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    documents = []
    for side, text in setting.documents(sample):
        keep = max(1, round(form.fraction * len(text)))
        start = rng.randrange(len(text) - keep + 1)
        documents.append((side, text[start:start + keep]))
    return documents, None


def options(form: Any) -> dict[str, Any]:
    return {"fraction": form.fraction, "unit": "characters",
            "start": "seeded, uniform over the positions that fit"}


FORM = FormKind(NAME, f"partial[:F] (a contiguous fraction F of each document, default "
                      f"{DEFAULT_FRACTION})", transform, options=options,
                parse_value=parse_fraction, measured_formed=True)
