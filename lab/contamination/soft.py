"""Soft-contamination forms: how the injected samples are altered before they enter the corpus,
an axis beside the setting (`lab inject --contamination-form`, recipe
`injection.contamination_form`). The setting says which sides of a sample become which
documents (lab.contamination.settings); the contamination form says what those sides look like:

- `verbatim` (the default): the sample as the benchmark holds it; no other code runs, so a
  verbatim arm is byte for byte the arm made before forms existed.
- `renamed`: consistent identifier renaming of the code sides with lab perturb's renamer
  (lab.llm.perturb.perturb_record: one map per sample shared by the code sides the setting
  injects, sub-token synonyms from its word table, then WordNet; keywords, API names, member
  accesses, literals and comments kept; an injected NL side gets the same renames where a
  renamed name occurs as a word). A sample the renamer cannot rename is injected unchanged and
  listed in the manifest.

Every form alters only the sides its setting injects (output-only: the C#, not the Java), and a
sample counts as altered (the manifest's altered_samples) only when its injected documents
differ from the ones the verbatim form writes.
- `reformatted`: layout, comments and whitespace changed, code tokens kept: each code side is
  re-laid out from its lab code tokens (lab.codetokens, comments excluded) in a seeded style
  (indent unit, brace placement, blank lines, one added comment line); its code token sequence
  is checked to be unchanged (else the side stays as it was, listed in the manifest).
- `partial` / `partial:F`: each injected document is a contiguous fraction F (default 0.5) of
  the document the verbatim form writes (characters), at a seeded start.
- `cross-language`: for a benchmark with two code languages (CodeTrans Java->C#) and a setting
  whose document joins both sides (paired), the document holds only the side in the language
  other than the base corpus's (CSN Java: the C#). Its documents are the texts output-only
  injects, with output-only's removals and order; it differs in what the arm claims: a paired
  arm (probed in the paired form) whose pairs the model saw in one language only, so against
  paired verbatim it measures what seeing the translation alone inflates.
- `nl-reworded`: for a benchmark with an NL side (CONCODE), the words of the NL description
  (before CONCODE's `concode_field_sep` class context) replaced by synonyms as lab perturb picks
  them (its word table first, then WordNet; one map per sample); the code is untouched.

Every choice comes from random.Random(f"{seed}/form/{name}/{sample id}"): the same recipe and
seed give byte-identical corpora, and a placebo arm's own samples get the same transformation.
The entry point is `formed_documents`; `check_form` refuses a form a benchmark and setting
cannot take, in one line.
"""
from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lab.codetokens import TOKEN_PATTERN, code_tokens
from lab.common import LabError
from lab.contamination.settings import SIDES, Setting, form_documents
from lab.corpora import get_spec
from lab.corpora.shards import cross_language_side

VERBATIM = "verbatim"
FORM_NAMES = (VERBATIM, "renamed", "reformatted", "partial", "cross-language", "nl-reworded")
DEFAULT_FRACTION = 0.5
# The least fraction partial:F keeps: below it a document of the benchmark's typical few hundred
# characters shrinks to a handful (1e-9 kept one character each), a copy of nothing measurable.
MIN_FRACTION = 0.01
# Code languages of the benchmarks' sides (lab.contamination.overlap.CODE_LANGUAGES's).
CODE = ("java", "cs")
# lab perturb's own default: the largest relative change of a side's characters or sub-tokens.
RENAME_TOLERANCE = 0.1
# CONCODE's NL side: the description, then the class context from this marker on.
CONCODE_CONTEXT = " concode_field_sep"
_ADDED_COMMENTS = ("// TODO", "// note", "// ---", "/* see above */")
_WORD = re.compile(r"(?<![\w$])[A-Za-z]+(?![\w$])")
FORM_HELP = ("how the injected samples are altered: verbatim, renamed (identifiers, lab perturb's "
             "renamer), reformatted (layout, comments, whitespace; code tokens kept), partial[:F] "
             f"(a contiguous fraction F of each document, default {DEFAULT_FRACTION}), "
             "cross-language (a paired document's side in the other code language only: "
             "CodeTrans's C#), nl-reworded (NL description words by synonyms: CONCODE)")


@dataclass(frozen=True)
class ContaminationForm:
    name: str = VERBATIM
    fraction: float | None = None   # partial: the share of each document kept

    @property
    def verbatim(self) -> bool:
        return self.name == VERBATIM

    def record(self) -> dict[str, Any]:
        """The form and its options, as the manifest states them."""
        options: dict[str, Any] = {"name": self.name}
        if self.name == "partial":
            options.update(fraction=self.fraction, unit="characters",
                           start="seeded, uniform over the positions that fit")
        if self.name in ("renamed", "nl-reworded"):
            options.update(source="lab perturb (lab.llm.perturb): synonym_groups.txt, then "
                                  "WordNet 3.0", wordnet=True)
        if self.name == "renamed":
            options["tolerance"] = RENAME_TOLERANCE
        if self.name == "reformatted":
            options["kept"] = "lab code tokens (lab.codetokens.code_tokens, comments excluded)"
        return options


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
    """`verbatim`, `renamed`, `reformatted`, `partial`, `partial:F`, `cross-language` or
    `nl-reworded`; LabError in one line otherwise."""
    name, colon, value = str(spec).partition(":")
    if name not in FORM_NAMES:
        raise LabError(f"--contamination-form {spec}: unknown form (choose from "
                       f"{', '.join(FORM_NAMES)})")
    if name != "partial":
        if colon:
            raise LabError(f"--contamination-form {spec}: only partial takes a value (partial:F)")
        return ContaminationForm(name)
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
    return ContaminationForm(name, fraction)


def base_fields(spec: str) -> dict[str, str]:
    """What a base document of an arm carries beside lab.corpora.shards.BASE_FIELDS: in an arm
    of a non-verbatim form every line has a `form` field (a base document's ""; an injected
    one's the form's name), so every shard keeps one schema; a verbatim arm's lines are as
    they always were."""
    return {} if parse_form(spec).verbatim else {"form": ""}


def check_form(form: ContaminationForm, benchmark: str, setting: Setting,
               base: str = "csn-java") -> None:
    """Refuse, in one line, a form the benchmark and setting cannot take: one that would leave
    every injected document as verbatim writes it, or has nothing to act on."""
    if form.verbatim:
        return
    spec = get_spec(benchmark)
    what = f"--contamination-form {form.name}"
    if not setting.injects:
        raise LabError(f"{what}: the {setting.name} setting injects nothing to alter")
    language = {"input": spec.input_language, "output": spec.output_language}
    code_sides = [s for s in setting.sides if language[s] in CODE]
    if form.name in ("renamed", "reformatted") and not code_sides:
        raise LabError(f"{what}: {setting.name} injects no code side of {benchmark}")
    if form.name == "nl-reworded":
        if not any(language[s] not in CODE for s in SIDES):
            raise LabError(f"{what}: {benchmark} has no NL side (its sides are "
                           f"{language['input']} and {language['output']})")
        if not any(language[s] not in CODE for s in setting.sides):
            raise LabError(f"{what}: {setting.name} injects no NL side of {benchmark}")
    if form.name == "cross-language":
        other = [s for s in SIDES if language[s] in CODE and language[s] != _language(base)]
        if not all(language[s] in CODE for s in SIDES) or len(other) != 1:
            raise LabError(f"{what}: {benchmark} does not have two code languages (its sides "
                           f"are {language['input']} and {language['output']})")
        if ("input", "output") not in setting.layout:
            raise LabError(f"{what}: keeps one side of a paired document; {setting.name} has "
                           "none (output-only already injects the other language alone)")


def _language(base: str) -> str:
    return get_spec(base).input_language


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
        if self.contamination.name in ("partial", "cross-language"):
            return self.documents(sample)
        return self.plain().documents(sample)


def length_documents(setting: Setting, sample: Any) -> list[tuple[str, str]]:
    """The documents a sample is measured by when a placebo is matched on length."""
    if isinstance(setting, FormedSetting):
        return setting.length_documents(sample)
    return setting.documents(sample)


@lru_cache(maxsize=1 << 16)
def formed_documents(form: ContaminationForm, setting: Setting, sample: Any, seed: int,
                     benchmark: str, base: str = "csn-java") -> tuple[list[tuple[str, str]],
                                                                      str | None]:
    """The entry point: the (side label, text) documents a sample contributes under a setting
    in a contamination form, and why it was left as verbatim writes it (None when altered).
    Cached: the injector asks for one sample's documents more than once."""
    if form.verbatim:
        return setting.documents(sample), None
    spec = get_spec(benchmark)
    language = {"input": spec.input_language, "output": spec.output_language}
    rng = random.Random(f"{seed}/form/{form.name}/{sample.id}")
    if form.name == "partial":
        documents = []
        for side, text in setting.documents(sample):
            keep = max(1, round(form.fraction * len(text)))
            start = rng.randrange(len(text) - keep + 1)
            documents.append((side, text[start:start + keep]))
        return documents, None
    if form.name == "cross-language":
        other = cross_language_side(benchmark, base)
        return [(other, getattr(sample, other)) if sides == ("input", "output")
                else (sides[0], getattr(sample, sides[0])) for sides in setting.layout], None
    sides = {s: getattr(sample, s) for s in SIDES}
    # Only the sides the setting injects are altered, and they alone decide whether the sample
    # was: output-only's C# renamed with a map drawn from its Java too left the C# as it was
    # while the manifest counted the sample altered (issue 70, row 8).
    code = [s for s in setting.sides if language[s] in CODE and sides[s].strip()]
    nl = [s for s in setting.sides if language[s] not in CODE and sides[s].strip()]
    if form.name == "renamed":
        new, reason = renamed(sides, code, nl, rng)
    elif form.name == "reformatted":
        new, reason = dict(sides), None
        for side in code:
            new[side], why = reformatted(sides[side], rng)
            reason = reason or why
    else:  # nl-reworded
        new, reason = dict(sides), None
        for side in nl:
            new[side] = reworded(sides[side], rng)
        if all(new[s] == sides[s] for s in nl):
            reason = "no word of the NL description has a synonym"
    documents = form_documents(setting.form, dataclasses.replace(sample, **new))
    if documents == setting.documents(sample):
        reason = reason or "unchanged"
    return documents, reason


def renamed(sides: dict[str, str], code: list[str], nl: list[str],
            rng: random.Random) -> tuple[dict[str, str], str | None]:
    """lab perturb's consistent renaming of one sample (both code sides share one map)."""
    from lab.llm.perturb import perturb_record

    try:
        new, _renames, reason = perturb_record(sides, code, nl, rng, RENAME_TOLERANCE)
    except AssertionError as exc:  # the renamer's own guarantees failed: keep the sample
        return dict(sides), f"renaming broke a guarantee ({exc})"
    return new, reason


def reformatted(text: str, rng: random.Random) -> tuple[str, str | None]:
    """One code side re-laid out from its code tokens in a seeded style: indent unit, brace
    placement (end of line or own line), a blank line after some statements, existing comments
    dropped and one comment line added. The code tokens are checked to be the same."""
    tokens = [m.group() for m in TOKEN_PATTERN.finditer(text)
              if not m.group().startswith(("//", "/*"))]
    if not tokens:
        return text, "no code token"
    indent_unit = rng.choice(("  ", "    ", "\t"))
    own_line_brace = rng.random() < 0.5
    blank_rate = rng.choice((0.0, 0.15, 0.3))
    comment = rng.choice(_ADDED_COMMENTS)
    lines: list[tuple[int, list[str]]] = []  # (depth, tokens)
    current: list[str] = []
    depth = paren = line_depth = 0
    for i, tok in enumerate(tokens):
        if tok == "}":
            depth = max(0, depth - 1)
        if current and (tok == "}" or (tok == "{" and own_line_brace)):
            lines.append((line_depth, current))
            current = []
        if not current:
            line_depth = depth
        current.append(tok)
        paren += (tok == "(") - (tok == ")")
        depth += tok == "{"
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if nxt is not None and (tok == "{" or (tok == ";" and paren <= 0) or (
                tok == "}" and nxt not in ("else", "catch", "finally", "while", ")", ";", ",",
                                           "."))):
            lines.append((line_depth, current))
            current = []
    if current:
        lines.append((line_depth, current))
    rendered = [indent_unit * d + _join(toks) for d, toks in lines]
    at = rng.randrange(len(lines))  # the added comment goes above this line
    rendered.insert(at, indent_unit * (lines[at][0] + (lines[at][1][0] == "}")) + comment)
    out = []
    for line in rendered:
        out.append(line)
        if line.endswith(";") and rng.random() < blank_rate:
            out.append("")
    result = "\n".join(out).rstrip("\n")
    if code_tokens(result) != code_tokens(text):
        return text, "re-laid out tokens would lex differently"
    return result, None


_TIGHT_AFTER = frozenset("(.[!~@")
_TIGHT_BEFORE = frozenset(").,;[]")


def _join(body: list[str]) -> str:
    """One line's tokens: spaces between them except around brackets, dots and separators."""
    text = ""
    for k, tok in enumerate(body):
        prev = body[k - 1] if k else None
        tight = prev is not None and (prev in _TIGHT_AFTER or tok in _TIGHT_BEFORE or (
            tok == "(" and prev[-1:].isalnum()) or tok in ("++", "--") and prev[-1:].isalnum())
        text += ("" if tight or prev is None else " ") + tok
    return text


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
