"""`cross-language`: for a benchmark with two code languages (CodeTrans Java->C#) and a setting
whose document joins both sides (paired), the document holds only the side in the language
other than the base corpus's (CSN Java: the C#). Its documents are the texts output-only
injects, with output-only's removals and order; it differs in what the arm claims: a paired arm
(probed in the paired form) whose pairs the model saw in one language only, so against paired
verbatim it measures what seeing the translation alone inflates."""
from __future__ import annotations

import random
from typing import Any

from lab.contamination.forms.base import FormContext, Formed, FormKind, refuse
from lab.contamination.settings import SIDES, Setting
from lab.corpora.shards import cross_language_side

NAME = "cross-language"


def check(setting: Setting, context: FormContext) -> None:
    language = context.language
    other = [s for s in context.code_sides() if language[s] != context.base_language()]
    if len(context.code_sides()) != len(SIDES) or len(other) != 1:
        raise refuse(NAME, f"{context.benchmark} does not have two code languages (its sides "
                           f"are {language['input']} and {language['output']})")
    if not any(len(sides) == 2 for sides in setting.layout):
        raise refuse(NAME, f"keeps one side of a paired document; {setting.name} has none "
                           "(output-only already injects the other language alone)")


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    other = cross_language_side(context.benchmark, context.base)
    return [(other, getattr(sample, other)) if len(sides) == 2
            else (sides[0], getattr(sample, sides[0])) for sides in setting.layout], None


FORM = FormKind(NAME, "cross-language (a paired document's side in the other code language "
                      "only: CodeTrans's C#)", transform, check=check, measured_formed=True)
