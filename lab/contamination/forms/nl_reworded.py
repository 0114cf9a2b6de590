"""`nl-reworded`: for a benchmark with an NL side (CONCODE), the words of the NL description
(before CONCODE's `concode_field_sep` class context) replaced by synonyms as lab perturb picks
them (its word table first, then WordNet; one map per sample); the code is untouched."""
from __future__ import annotations

import random
import re
from typing import Any

from lab.contamination.forms.base import FormContext, Formed, FormKind, refuse, rewritten_documents
from lab.contamination.settings import Setting

NAME = "nl-reworded"
# CONCODE's NL side: the description, then the class context from this marker on.
CONCODE_CONTEXT = " concode_field_sep"
_WORD = re.compile(r"(?<![\w$])[A-Za-z]+(?![\w$])")


def check(setting: Setting, context: FormContext) -> None:
    language = context.language
    if not context.nl_sides():
        raise refuse(NAME, f"{context.benchmark} has no NL side (its sides are "
                           f"{language['input']} and {language['output']})")
    if not context.nl_sides(setting.sides):
        raise refuse(NAME, f"{setting.name} injects no NL side of {context.benchmark}")


def reworded(text: str, rng: random.Random) -> str:
    """The NL description's words (before CONCODE's class context) replaced by synonyms as lab
    perturb picks them: one seeded choice per word, the same for every occurrence."""
    from lab.llm.perturb import synonyms

    head, marker, context = text.partition(CONCODE_CONTEXT)
    chosen: dict[str, str] = {}

    def swap(match: re.Match[str]) -> str:
        word = match.group()
        if not (word.islower() or word[1:].islower()):  # camelCase: an identifier, kept
            return word
        key = word.lower()
        if key not in chosen:
            options = synonyms(key)
            chosen[key] = rng.choice(options) if options else key
        new = chosen[key]
        return new.capitalize() if word[0].isupper() else new

    return _WORD.sub(swap, head) + marker + context


def reword_sides(sides: dict[str, str], nl: list[str],
                 rng: random.Random) -> tuple[dict[str, str], str | None]:
    new, reason = dict(sides), None
    for side in nl:
        new[side] = reworded(sides[side], rng)
    if all(new[s] == sides[s] for s in nl):
        reason = "no word of the NL description has a synonym"
    return new, reason


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    return rewritten_documents(setting, sample, context,
                               lambda sides, code, nl: reword_sides(sides, nl, rng))


def options(form: Any) -> dict[str, Any]:
    return {"source": "lab perturb (lab.llm.perturb): synonym_groups.txt, then WordNet 3.0",
            "wordnet": True}


FORM = FormKind(NAME, "nl-reworded (NL description words by synonyms: CONCODE)", transform,
                check=check, options=options)
