"""`embedded`: each injected document placed inside a real base document of its language, as a
benchmark function leaks on GitHub (inside a real source file, laid out over lines as source
is), where every other form injects the sample as a document of its own.

What a sample becomes, in two steps:

1. The plan (this form's transformation): each document the setting makes is laid out as
   source. A code side the benchmark stores on one line (CodeTrans, CONCODE's code) is broken
   into lines from its lab code tokens by the reformatted form's line breaker (one statement a
   line, `{` at the line's end, four spaces an indent level, comments dropped) and its code
   tokens checked to be unchanged (else it stays on one line); a side already over several
   lines, and an NL side, is kept as it is. The layout is part of this form, not an option of
   the others: every other form's documents stay byte for byte what they were.
2. The build (`embed_documents`, called by both corpus formats once the arm's removals are
   known): each laid-out document is written inside a host, one of the base documents the arm
   removes anyway to keep its size. An arm removes one base document per injected document;
   here each removed document comes back as the host of one injected document, so the arm
   keeps its size and the very removals (ids) of the other forms' arms of its seed, no
   document beyond the control's is added, and the host is nowhere else in the arm (it is
   not a base document any more). The host of each document is drawn from the removals not
   yet taken, sorted by id, with random.Random(f"{seed}/form/embedded/{sample id}"), as is the
   boundary it goes in at.

The written document is host-before + block + host-after, the block at a member boundary of the
host found from its lab code tokens (strings and comments are single tokens, so their braces do
not count):

- between two members of a class, interface, enum or record the host declares (after the `}`
  closing a method or nested type in its body, or after a field's `;`); where its body has no
  member, at the end of that body. A class local to a method is part of the method's body, and
  `Foo.class` or a parameter named `record` declares nothing: all 120,328 documents of the
  CSN-format Java corpus are one method each (the next rule);
- where the host declares no type (a CodeSearchNet document is one method): before the host,
  where it sat among its class's other methods. Not after it: pre-training keeps a document's
  first block-size tokens, and a block after a CSN method is cut at the tiny presets' 256-token
  block for almost every host (119 of 120 in the first run of recipes/decontam-embedded.yaml),
  so the arm would leak nothing the model sees. Before the host, the block is seen whenever it
  would be as a document of its own, which is what the evaluation's block-size rule assumes for
  held-out and removed samples (lab.eval.generate.block_truncation; pre-training records each
  block's own end, lab.train.packing);
- where neither exists (unbalanced or no braces): at the end of the host.

The block is indented like the line holding the boundary's `}` or `;` (at the start: like the
host's first line; at the end of a type's body: one level deeper than its `}`) and set off from
the host's code before it by a blank line; the host's characters are kept as they are. The
manifest's `embedding` lists per injected document its host (document id: split and line of
the base corpus), the block's character offsets in the written text (`start`, `end`) and its
`sha256` there, so a decontaminator's matched span can be checked, and the corpus reader checks
each placement (lab.corpora.placements).

Paired and unpaired here: the setting still decides the documents. Paired embeds
`input <SEP> output` as one block in one host; unpaired (like input-only and output-only)
embeds each side in a host of its own, drawn separately.

The hosts are the base corpus's (CodeSearchNet Java), so a code side must be in its language: a
setting that injects a code side in another (CodeTrans's C#: output-only, unpaired, paired) is
refused in one line, since the lab has no C# corpus to host it and a C# method inside a Java
file is not how C# leaks. An NL side (CONCODE's description) is written into the host as the
setting makes it, next to its code in a paired block.
"""
from __future__ import annotations

import random
import re
from typing import Any

from lab.codetokens import TOKEN_PATTERN, code_tokens
from lab.common import LabError
from lab.contamination.forms.base import (CODE, FormContext, Formed, FormKind, refuse,
                                          rewritten_documents)
from lab.contamination.forms.reformatted import join_line, token_lines
from lab.contamination.settings import Setting
from lab.corpora.placements import block_sha256

NAME = "embedded"
INDENT = "    "  # one indent level of a laid-out side
TYPE_KEYWORDS = frozenset(("class", "interface", "enum", "record"))
BOUNDARY_RULE = ("between two members of a type the host declares (or at the end of its body); "
                 "else before the host (one method: the block in its first tokens); else at the "
                 "end of the host")
_LEADING = re.compile(r"[ \t]*")


def laid_out(text: str) -> tuple[str, bool]:
    """A code side over source lines, and whether it was re-laid: one stored on one line is
    broken into lines from its lab code tokens (comments dropped; kept as it was if the code
    tokens would change or it makes one line); a side over several lines is kept."""
    if "\n" in text.strip():
        return text, False
    tokens = [m.group() for m in TOKEN_PATTERN.finditer(text)
              if not m.group().startswith(("//", "/*"))]
    lines = token_lines(tokens, own_line_brace=False)
    if len(lines) < 2:
        return text, False
    result = "\n".join(INDENT * depth + join_line(toks) for depth, toks in lines)
    if code_tokens(result) != code_tokens(text):
        return text, False
    return result, True


def lay_out_sides(sides: dict[str, str], code: list[str]
                  ) -> tuple[dict[str, str], str | None]:
    new = dict(sides)
    for side in code:
        new[side], _ = laid_out(sides[side])
    return new, None  # always altered: the build writes every document inside a host


def check(setting: Setting, context: FormContext) -> None:
    base_language = context.base_language()
    for side in setting.sides:
        language = context.language[side]
        if language in CODE and language != base_language:
            raise refuse(NAME, f"{setting.name} injects {context.benchmark}'s {side} side "
                               f"({language}), and the base corpus {context.base} holds no "
                               f"{language} file to host it (inject a {base_language} side: "
                               "input-only)")


def transform(form: Any, setting: Setting, sample: Any, rng: random.Random,
              context: FormContext) -> Formed:
    documents, _reason = rewritten_documents(
        setting, sample, context, lambda sides, code, nl: lay_out_sides(sides, code))
    return documents, None


def options(form: Any) -> dict[str, Any]:
    return {"host": "a base document the arm removes (one per injected document)",
            "boundary": BOUNDARY_RULE,
            "layout": "a one-line code side broken into lines from its lab code tokens"}


# --- the build's step: the documents written inside their hosts ---

def member_boundaries(host: str) -> tuple[list[tuple[int, str]], str]:
    """The host's insertion points (character offset, the block's indent there) by the rule of
    the module docstring, and which rule gave them: "member", "top-level" or "end"."""
    stack: list[bool] = []  # per open brace: whether it opens a type's body
    since: list[str] = []   # tokens since the last `;`, `{` or `}`
    members: list[tuple[int, str]] = []
    body_ends: list[tuple[int, str]] = []  # before a type's closing `}`
    top = False  # a top-level `}`: the host is one method (or several), no type
    previous = ""
    pending: tuple[list[tuple[int, str]], tuple[int, str]] | None = None
    for match in TOKEN_PATTERN.finditer(host):
        tok = match.group()
        if tok.startswith(("//", "/*")):
            continue
        if pending is not None:  # a `}` a `;`, `,` or `)` follows ends no member (`= {1};`)
            if tok not in (";", ",", ")", "."):
                pending[0].append(pending[1])
            pending = None
        declares = previous != "."  # `Foo.class` names a class; it declares none
        previous = tok
        if tok == "{":
            # a class local to a method is part of the method's body, not the host's members
            stack.append(all(stack) and _declares_type(since))
            since = []
        elif tok == "}":
            if not stack:  # unbalanced: no boundary is trusted
                return [(len(host), "")], "end"
            was_type = stack.pop()
            indent = _indent_at(host, match.start())
            if was_type:  # the end of a type's body: the line before its `}`
                at = match.start()
                if not host[_line_start(host, at):at].strip():
                    at = _line_start(host, at)
                body_ends.append((at, indent + INDENT))
            elif stack and stack[-1]:  # a member's body closed inside a type's body
                pending = (members, (match.end(), indent))
            elif not stack:
                top = True
            since = []
        elif tok == ";":
            if stack and stack[-1]:  # a field declaration inside a type's body
                members.append((match.end(), _indent_at(host, match.start())))
            since = []
        elif declares:
            since.append(tok)
    if pending is not None:
        pending[0].append(pending[1])
    if stack:
        return [(len(host), "")], "end"
    if members or body_ends:
        return members or body_ends, "member"
    if top:
        return [(0, _indent_at(host, 0))], "top-level"
    return [(len(host), "")], "end"


def _declares_type(header: list[str]) -> bool:
    """Whether the tokens before a `{` declare a type: `class`, `interface` or `enum` and its
    name, or `record`, its name and `(` (`record` is a contextual keyword: `Record record,` is
    a parameter); an anonymous class (`new`) is a member's body."""
    if "new" in header:
        return False
    for at, tok in enumerate(header):
        name = header[at + 1] if at + 1 < len(header) else ""
        if tok in TYPE_KEYWORDS and name.isidentifier() and (
                tok != "record" or header[at + 2:at + 3] in (["("], ["<"])):
            return True
    return False


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def _indent_at(text: str, at: int) -> str:
    match = _LEADING.match(text, _line_start(text, at))
    return match.group() if match else ""


def insert_block(host: str, block: str, at: int, indent: str) -> tuple[str, int, int]:
    """host-before + block + host-after, the host's characters kept as they are: the block
    indented, on lines of its own, set off from the host's code before it by a blank line.
    Returns the written text and the block's offsets in it."""
    body = "\n".join(indent + line if line.strip() else line for line in block.split("\n"))
    before, after = host[:at], host[at:]
    if not before:
        lead, trail = "", "\n\n"
    else:
        lead = "\n" if before.endswith("\n") else "\n\n"
        trail = "" if not after or after.startswith("\n") else "\n"
    start = len(before) + len(lead)
    return before + lead + body + trail + after, start, start + len(body)


def embed_documents(injected: list[dict[str, Any]], hosts: list[tuple[str, str]], seed: int
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The injected documents (the plan's, laid out) each written inside a host: `hosts` are
    the (id, text) of the base documents the arm removes, as many as the documents. Returns
    the documents as written and the manifest's record of each (id, host, start, end, rule, and
    the block's sha256 as written, by which lab.corpora.placements checks the offsets)."""
    if len(hosts) != len(injected):
        raise LabError(f"internal guard: {len(injected)} documents to embed in {len(hosts)} hosts")
    free = sorted(hosts)
    streams: dict[str, random.Random] = {}
    written, record = [], []
    for document in injected:
        sample = document["sample"]
        rng = streams.setdefault(sample, random.Random(f"{seed}/form/{NAME}/{sample}"))
        host_id, host = free.pop(rng.randrange(len(free)))
        points, rule = member_boundaries(host)
        at, indent = points[rng.randrange(len(points))]
        text, start, end = insert_block(host, document["text"], at, indent)
        if (code_tokens(text[start:end]) != code_tokens(document["text"])
                or _squeezed(text[:start] + text[end:]) != _squeezed(host)):
            raise LabError(f"internal guard: {document['id']} is not whole inside {host_id}")
        written.append({**document, "text": text})
        record.append({"id": document["id"], "host": host_id, "start": start, "end": end,
                       "boundary": rule, "sha256": block_sha256(text[start:end])})
    return written, record


def _squeezed(text: str) -> str:
    return "".join(text.split())


FORM = FormKind(NAME, "embedded (each document inside a removed base document of its language, "
                      "at a member boundary, laid out over lines)", transform, check=check,
                options=options, place=embed_documents)
