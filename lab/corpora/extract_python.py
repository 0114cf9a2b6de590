"""The Python functions of one source file for `lab corpora extract`, by CSN's Python rules
(function_parser's python_parser.py, read against the Java corpus's rules in
codesearchnet-java/PROVENANCE.md): the standard library's ast finds them, tokenize gives their
code tokens. The rules shared with Java (10-13, 17-20) are lab.corpora.extract's.

- Functions (`def`, `async def`) at module level and directly in a top-level class
  (`Class.name`); others (nested functions, methods of nested classes, functions under an `if`)
  are not extracted. Decorators are not part of the function's text (CSN's tree-sitter
  function_definition without its decorated_definition).
- Dropped: no docstring; dunder names (`__init__`, `__str__`: CSN's "constructors and
  standard extension methods"); names containing `test`; an empty body (nothing but the
  docstring, or one `pass`, `...` or `raise`: CSN's is_function_empty); fewer than 3 lines.
- `docstring`: ast.get_docstring(clean=False), stripped: the string's value with its
  indentation, as CSN takes the literal (CSN keeps the escapes as written and an `r` prefix).
  The summary is cut from it unstripped, as CSN's (a blank line before the closing quotes
  makes the whole docstring the first paragraph).
- `original_string`: the function as written; `code`: the same without the docstring's
  statement (CSN's released `code` keeps the docstring; here, as for Java, the summary is not
  in the code); `code_tokens`: the tokens of `code` (comments kept whole, as CSN's leaf
  traversal keeps them; strings and f-strings whole; no NEWLINE/INDENT/DEDENT).
"""
from __future__ import annotations

import ast
import io
import keyword
import shutil
import sysconfig
import tokenize
import warnings
from pathlib import Path
from typing import Any, Iterator

SUFFIX = ".py"
FILTERS = ("not_top_level", "no_docstring", "blacklisted_name", "name_contains_test",
           "empty_body", "lt3_lines")
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
# What of the standard library's folder is not its library: tests, IDLE, 2to3, bundled wheels,
# demos, installed packages.
STDLIB_LEFT_OUT = frozenset({"test", "idlelib", "lib2to3", "ensurepip", "turtledemo",
                             "site-packages", "__phello__", "__pycache__"})


def versions() -> dict[str, str]:
    return {}  # the standard library's ast and tokenize: the Python version says it


def is_identifier(token: str) -> bool:
    return token.isidentifier() and not keyword.iskeyword(token)


class _Offsets:
    """Character offsets in the text of ast's (line, UTF-8 byte column) and tokenize's (line,
    character column) positions."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def of_ast(self, line: int, byte_column: int) -> int:
        text = self.lines[line - 1]
        if not text.isascii():
            byte_column = len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))
        return self.starts[line - 1] + byte_column

    def of_token(self, position: tuple[int, int]) -> int:
        return self.starts[position[0] - 1] + position[1]


def _tokens(text: str, offsets: _Offsets) -> list[tuple[int, int, str]]:
    """(start, end, text) of every token but the layout ones; an f-string (split from Python
    3.12 on) is one token, as a string is."""
    found: list[tuple[int, int, str]] = []
    depth, opened = 0, 0
    start_type = getattr(tokenize, "FSTRING_START", None)
    end_type = getattr(tokenize, "FSTRING_END", None)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in LAYOUT:
            continue
        start, end = offsets.of_token(token.start), offsets.of_token(token.end)
        if token.type == start_type:
            depth += 1
            opened = start if depth == 1 else opened
        elif token.type == end_type:
            depth -= 1
            if depth == 0:
                found.append((opened, end, text[opened:end]))
        elif depth == 0:
            found.append((start, end, token.string))
    return found


def _empty(body: list[ast.stmt]) -> bool:
    if len(body) != 1:
        return not body
    only = body[0]
    return isinstance(only, (ast.Pass, ast.Raise)) or (
        isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant)
        and only.value.value is Ellipsis)


def _without(text: str, start: int, end: int) -> tuple[int, int]:
    """The span to cut for the statement at text[start:end]: its whole lines when nothing else
    is on them, else the statement alone."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if text[line_start:start].strip() or text[end:line_end].strip():
        return start, end
    return line_start, min(line_end + 1, len(text))


def methods_of(text: str) -> Iterator[dict[str, Any] | str]:
    """Each function defined in `text`, in source order: a filter's name (the first of
    FILTERS it fails) or its fields (func_name, code, original_string, code_tokens,
    docstring, docstring_raw: the text its summary is cut from, lines: its first and last
    line, 1-based; its newlines are LF, as CSN's). A file that does not parse raises
    SyntaxError (or ValueError)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # CSN read files as text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning: invalid escape sequences and the like
        tree = ast.parse(text)
    owners: dict[int, str | None] = {}
    for node in tree.body:
        if isinstance(node, FUNCTIONS):
            owners[id(node)] = None
        elif isinstance(node, ast.ClassDef):
            owners.update((id(child), node.name) for child in node.body
                          if isinstance(child, FUNCTIONS))
    functions = sorted((n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)),
                       key=lambda n: (n.lineno, n.col_offset))
    offsets, tokens = _Offsets(text), None
    for node in functions:
        raw = ast.get_docstring(node, clean=False) or ""
        docstring = raw.strip()
        if id(node) not in owners:
            yield "not_top_level"
        elif not docstring:
            yield "no_docstring"
        elif node.name.startswith("__") and node.name.endswith("__"):
            yield "blacklisted_name"
        elif "test" in node.name.lower():
            yield "name_contains_test"
        elif _empty(node.body[1:]):
            yield "empty_body"
        elif node.end_lineno - node.lineno + 1 < 3:
            yield "lt3_lines"
        else:
            if tokens is None:
                tokens = _tokens(text, offsets)
            start = offsets.of_ast(node.lineno, node.col_offset)
            end = offsets.of_ast(node.end_lineno, node.end_col_offset)
            statement = node.body[0]
            cut = _without(text, offsets.of_ast(statement.lineno, statement.col_offset),
                           offsets.of_ast(statement.end_lineno, statement.end_col_offset))
            owner = owners[id(node)]
            yield {"func_name": node.name if owner is None else f"{owner}.{node.name}",
                   "original_string": text[start:end],
                   "code": (text[start:cut[0]] + text[cut[1]:end]).rstrip(),
                   "code_tokens": [t for a, b, t in tokens if start <= a and b <= end
                                   and not (cut[0] <= a and b <= cut[1])],
                   "docstring": docstring, "docstring_raw": raw,
                   "lines": (node.lineno, node.end_lineno)}



def standard_library_tree(folder: Path) -> Path:
    """A copy of the running interpreter's standard library as a folder of repositories for
    `lab corpora extract --from`: each top-level module or package in a sub-folder of its own
    (`json/json/decoder.py`, `os/os.py`), STDLIB_LEFT_OUT left out."""
    library = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(library.iterdir()):
        if path.stem in STDLIB_LEFT_OUT or path.name.startswith("."):
            continue
        if (path / "__init__.py").is_file():
            shutil.copytree(path, folder / path.name / path.name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        elif path.suffix == ".py" and path.is_file():
            (folder / path.stem).mkdir(parents=True)
            shutil.copy2(path, folder / path.stem / path.name)
    return folder
