"""`renamed`: consistent identifier renaming of the code sides with lab perturb's renamer
(lab.llm.perturb.perturb_record: one map per sample shared by the code sides the setting
injects, sub-token synonyms from its word table, then WordNet; keywords, API names, member
accesses, literals and comments kept; an injected NL side gets the same renames where a renamed
name occurs as a word). A sample the renamer cannot rename is injected unchanged and listed in
the manifest."""
from __future__ import annotations

import random
from typing import Any

from lab.contamination.forms.base import (FormContext, Formed, FormKind, check_code_side,
                                          rewritten_documents)
from lab.contamination.settings import Setting

NAME = "renamed"
# lab perturb's own default: the largest relative change of a side's characters or sub-tokens.
RENAME_TOLERANCE = 0.1


def renamed(sides: dict[str, str], code: list[str], nl: list[str],
            rng: random.Random) -> tuple[dict[str, str], str | None]:
    """lab perturb's consistent renaming of one sample (both code sides share one map)."""
    from lab.llm.perturb import perturb_record

    try:
        new, _renames, reason = perturb_record(sides, code, nl, rng, RENAME_TOLERANCE)
    except AssertionError as exc:  # the renamer's own guarantees failed: keep the sample
        return dict(sides), f"renaming broke a guarantee ({exc})"
    return new, reason


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    return rewritten_documents(setting, sample, context,
                               lambda sides, code, nl: renamed(sides, code, nl, rng))


def options(form: Any) -> dict[str, Any]:
    return {"source": "lab perturb (lab.llm.perturb): synonym_groups.txt, then WordNet 3.0",
            "wordnet": True, "tolerance": RENAME_TOLERANCE}


FORM = FormKind(NAME, "renamed (identifiers, lab perturb's renamer)", transform,
                check=check_code_side(NAME), options=options)
