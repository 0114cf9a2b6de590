"""`verbatim` (the default form): the sample as the benchmark holds it. No other code runs
(lab.contamination.soft returns the setting's own documents before any form is asked), so a
verbatim arm is byte for byte the arm made before forms existed."""
from __future__ import annotations

import random
from typing import Any

from lab.contamination.forms.base import FormContext, Formed, FormKind
from lab.contamination.settings import Setting

NAME = "verbatim"


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    return setting.documents(sample), None


FORM = FormKind(NAME, "verbatim", transform)
