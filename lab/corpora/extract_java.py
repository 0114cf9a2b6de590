"""The Java methods of one source file for `lab corpora extract`, by the shared CSN-style
corpus's rules (codesearchnet-java/PROVENANCE.md, "Extraction and filtering rules"; the rule
numbers below are its): which declarations count (3-8), the cleaned Javadoc (9) and the code
fields (14-16). The rules shared with Python (10-13, 17-20) are lab.corpora.extract's."""
from __future__ import annotations

import functools
from typing import Any, Iterator

SUFFIX = ".java"
# Why a declaration is dropped here, in the order they are tried (each counted once, at the
# first it fails): not a direct member of a top-level class (3), a constructor (3), then 4-8.
FILTERS = ("not_top_level_class", "constructor", "no_javadoc", "blacklisted_name",
           "name_contains_test", "no_or_oneline_body", "lt3_lines", "parse_error")
BLACKLISTED = frozenset({"toString", "hashCode", "equals", "finalize", "notify", "notifyAll",
                         "clone"})  # rule 5: CSN's "standard extension methods"
# Rule 17's keywords: a code token that is one of them is no identifier (the literals too).
KEYWORDS = frozenset("""abstract assert boolean break byte case catch char class const continue
    default do double else enum extends final finally float for goto if implements import
    instanceof int interface long native new package private protected public return short
    static strictfp super switch synchronized this throw throws transient try void volatile
    while true false null""".split())
WHOLE = ("string_literal", "character_literal")  # rule 15: literals are one token each
DECLARATIONS = ("[(method_declaration) (constructor_declaration) "
                "(compact_constructor_declaration)] @declaration")


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"tree_sitter": version("tree_sitter"), "tree_sitter_java": version("tree_sitter_java")}


@functools.lru_cache(maxsize=1)
def _grammar() -> Any:
    import tree_sitter_java
    from tree_sitter import Language, Parser

    language = Language(tree_sitter_java.language())
    return Parser(language), language.query(DECLARATIONS)


def is_identifier(token: str) -> bool:
    return (token[:1].isalpha() or token[:1] in "_$") and all(
        c.isalnum() or c in "_$" for c in token) and token not in KEYWORDS


def clean_comment(comment: str) -> str:
    """Rule 9 (CSN's comment cleaning): per line trimmed, a trailing `*/` removed, one leading
    `*` (else a leading `/**` or `//`) removed, trimmed again. Not trimmed as a whole: the
    summary is cut from this (CSN's), so a blank line before the closing `*/` ends a first
    paragraph that is the whole comment, and `@` no longer cuts it; `docstring` is it
    trimmed."""
    lines = []
    for line in comment.split("\n"):
        line = line.strip()
        if line.endswith("*/"):
            line = line[:-2]
        if line.startswith("*"):
            line = line[1:]
        elif line.startswith("/**"):
            line = line[3:]
        elif line.startswith("//"):
            line = line[2:]
        lines.append(line.strip())
    return "\n".join(lines)


def _top_level_member(node: Any) -> bool:
    """Rule 3: a direct member of the body of a class declared at the top of the file."""
    body = node.parent
    owner = body.parent if body is not None else None
    return (body is not None and body.type == "class_body" and owner is not None
            and owner.type == "class_declaration" and owner.parent is not None
            and owner.parent.type == "program")


def _tokens(node: Any, data: bytes) -> list[str]:
    """Rule 15: the leaves in source order, string and character literals whole."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if current.type in WHOLE or not current.children:
            if current.end_byte > current.start_byte:
                found.append(data[current.start_byte:current.end_byte].decode("utf-8"))
        else:
            stack.extend(reversed(current.children))
    return found


def methods_of(text: str) -> Iterator[dict[str, Any] | str]:
    """Each method or constructor declared in `text`, in source order: a filter's name (the
    first of FILTERS it fails) or the method's fields (func_name, code, original_string,
    code_tokens, docstring, docstring_raw: the text its summary is cut from, lines: its first
    and last line, 1-based)."""
    parser, query = _grammar()
    data = text.encode("utf-8")
    tree = parser.parse(data)
    for node, _ in query.captures(tree.root_node):
        if not _top_level_member(node):
            yield "not_top_level_class"
            continue
        if node.type != "method_declaration":
            yield "constructor"
            continue
        comment = node.prev_sibling
        if comment is None or comment.type not in ("block_comment", "comment") or \
                not comment.text.startswith(b"/**"):
            yield "no_javadoc"
            continue
        name_node = node.child_by_field_name("name")
        name = name_node.text.decode("utf-8") if name_node is not None else ""
        body = node.child_by_field_name("body")
        owner = node.parent.parent.child_by_field_name("name")  # the top-level class's
        if name in BLACKLISTED:
            yield "blacklisted_name"
        elif "test" in name.lower():
            yield "name_contains_test"
        elif body is None or body.start_point[0] == body.end_point[0]:
            yield "no_or_oneline_body"
        elif node.end_point[0] - node.start_point[0] + 1 < 3:
            yield "lt3_lines"
        elif node.has_error or owner is None:
            yield "parse_error"
        else:
            docstring = clean_comment(comment.text.decode("utf-8"))
            code = data[node.start_byte:node.end_byte].decode("utf-8")
            yield {"func_name": f"{owner.text.decode('utf-8')}.{name}", "code": code,
                   "original_string": code, "code_tokens": _tokens(node, data),
                   "docstring": docstring.strip(), "docstring_raw": docstring,
                   "lines": (node.start_point[0] + 1, node.end_point[0] + 1)}
