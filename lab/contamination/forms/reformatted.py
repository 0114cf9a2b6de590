"""`reformatted`: layout, comments and whitespace changed, code tokens kept: each code side is
re-laid out from its lab code tokens (lab.codetokens, comments excluded) in a seeded style
(indent unit, brace placement, blank lines, one added comment line); its code token sequence is
checked to be unchanged (else the side stays as it was, listed in the manifest)."""
from __future__ import annotations

import random
from typing import Any

from lab.codetokens import TOKEN_PATTERN, code_tokens
from lab.contamination.forms.base import (FormContext, Formed, FormKind, check_code_side,
                                          rewritten_documents)
from lab.contamination.settings import Setting

NAME = "reformatted"
_ADDED_COMMENTS = ("// TODO", "// note", "// ---", "/* see above */")
_TIGHT_AFTER = frozenset("(.[!~@")
_TIGHT_BEFORE = frozenset(").,;[]")


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
    lines = token_lines(tokens, own_line_brace)
    rendered = [indent_unit * d + join_line(toks) for d, toks in lines]
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


def token_lines(tokens: list[str], own_line_brace: bool) -> list[tuple[int, list[str]]]:
    """Code tokens broken into source lines, each with its brace depth: a line ends after `{`,
    after a `;` outside parentheses and after a `}` that no else/catch/finally/while or
    separator follows; `}` starts its own line, and so does `{` where own_line_brace (the
    embedded form lays one-line code out with it too, lab.contamination.forms.embedded)."""
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
    return lines


def join_line(body: list[str]) -> str:
    """One line's tokens: spaces between them except around brackets, dots and separators."""
    text = ""
    for k, tok in enumerate(body):
        prev = body[k - 1] if k else None
        tight = prev is not None and (prev in _TIGHT_AFTER or tok in _TIGHT_BEFORE or (
            tok == "(" and prev[-1:].isalnum()) or tok in ("++", "--") and prev[-1:].isalnum())
        text += ("" if tight or prev is None else " ") + tok
    return text


def reformat_sides(sides: dict[str, str], code: list[str],
                   rng: random.Random) -> tuple[dict[str, str], str | None]:
    new, reason = dict(sides), None
    for side in code:
        new[side], why = reformatted(sides[side], rng)
        reason = reason or why
    return new, reason


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    return rewritten_documents(setting, sample, context,
                               lambda sides, code, nl: reformat_sides(sides, code, rng))


def options(form: Any) -> dict[str, Any]:
    return {"kept": "lab code tokens (lab.codetokens.code_tokens, comments excluded)"}


FORM = FormKind(NAME, "reformatted (layout, comments, whitespace; code tokens kept)", transform,
                check=check_code_side(NAME), options=options)
