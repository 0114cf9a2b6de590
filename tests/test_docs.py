"""The documentation holds together: README.md stays a map (at most 300 lines), every fenced
code block of README.md, docs/ and results/ parses in its language, every `lab` command line in
a shell block names a command and options the CLI has, and every relative link (and its
#anchor) leads somewhere.

The CLI is introspected (the click command typer builds), not run per line, so the module takes
a second or two.
"""
from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_docker import _join_continuations

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_LINES = 300
SHELL = {"bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|", "&", ">", ">>", "<", "(", ")"}
FENCE = re.compile(r"^( *)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def doc_files() -> list[Path]:
    """README.md, docs/*.md and results/**/*.md: every page with code blocks the checks read."""
    return [README, *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "results").rglob("*.md"))]


def linked_files() -> list[Path]:
    """The pages whose relative links must resolve (results/ too: its pages link to docs/)."""
    return doc_files()


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def code_blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line of the opening fence) of every fenced block; the language is the
    info string's first word, lower-cased ('' when there is none)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = len(match.group(1)), match.group(2), match.group(3).lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line)
            j += 1
        blocks.append((lang, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return blocks


def console_commands(body: str) -> str:
    """The commands of a console block: lines after a '$ ' prompt (and their continuation
    lines); output lines are dropped."""
    kept, continuing = [], False
    for line in body.splitlines():
        if line.startswith("$ "):
            kept.append(line[2:])
        elif continuing:
            kept.append(line)
        else:
            continue
        continuing = line.rstrip().endswith("\\")
    return "\n".join(kept) + "\n"


def shell_text(lang: str, body: str) -> str:
    return console_commands(body) if lang == "console" else body


def parse_error(lang: str, body: str) -> str | None:
    """Why a block does not parse in its language, or None (also for languages not checked:
    none, text, ...)."""
    try:
        if lang in SHELL:
            proc = subprocess.run(["bash", "-n"], input=shell_text(lang, body), text=True,
                                  capture_output=True, timeout=30)
            return proc.stderr.strip() or f"bash -n exit {proc.returncode}" if proc.returncode else None
        if lang in ("yaml", "yml"):
            list(yaml.safe_load_all(body))
        elif lang == "json":
            json.loads(body)
        elif lang in ("python", "py"):
            compile(body, "<block>", "exec")
    except (yaml.YAMLError, ValueError, SyntaxError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.lru_cache(maxsize=None)
def cli():
    """The click command typer builds from lab.cli.app."""
    import typer

    from lab.cli import app
    return typer.main.get_command(app)


def command_options(command) -> set[str]:
    options = {"--help"}
    for param in command.params:
        options.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    return options


def resolve(words: list[str]):
    """(command path, the click command, the words after it) for `lab WORDS...`, descending
    into groups (`lab corpora verify`, `lab tokenizer train`); the command is None when the
    words name no command."""
    command, path = cli(), []
    while hasattr(command, "commands"):
        if not words or words[0] not in command.commands:
            return " ".join(path), None, words
        path.append(words[0])
        command, words = command.commands[words[0]], words[1:]
    return " ".join(path), command, words


def shell_lines(text: str) -> list[str]:
    """Logical lines of a shell text: continuations joined, blank lines dropped."""
    return [line for line in _join_continuations(text.splitlines()) if line.strip()]


def lab_invocation_problems(line: str) -> list[str]:
    """What is wrong with each `lab ...` (also `.venv/bin/lab ...`, `-m lab.cli ...`,
    `--module lab.cli ...`) on one shell line: an unknown command or an option it lacks."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens, problems = list(lexer), []
    for i, token in enumerate(tokens):
        is_lab = token == "lab" or token.endswith("/bin/lab") or (
            token == "lab.cli" and i > 0 and tokens[i - 1] in ("-m", "--module"))
        if not is_lab:
            continue
        rest = []
        for t in tokens[i + 1:]:
            if t in SEPARATORS:
                break
            rest.append(t)
        path, command, args = resolve(rest)
        if command is None:
            problems.append(f"`lab {' '.join(rest[:len(path.split()) + 1])}` is no lab command")
            continue
        known = command_options(command)
        missing = sorted({a.split("=", 1)[0] for a in args if a.startswith("--")}
                         - known)
        if missing:
            problems.append(f"`lab {path}` has no {', '.join(missing)}")
    return problems


def heading_slugs(text: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown page (lower case, punctuation dropped,
    spaces to hyphens, -1, -2 ... for repeats)."""
    slugs, seen, fenced = set(), {}, False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().rstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def without_code(text: str) -> str:
    """The page with fenced blocks and code spans blanked, so links are only real links."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else CODE_SPAN.sub("code", line))
    return "\n".join(out)


def link_problems(page: Path, text: str) -> list[str]:
    """Relative links of a page whose file (or #anchor in a Markdown file) does not exist."""
    problems = []
    for target in LINK.findall(without_code(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_slugs(dest.read_text(encoding="utf-8")):
            problems.append(f"{target}: no heading #{anchor} in {dest.name}")
    return problems


def test_readme_is_a_map():
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n") + (not text.endswith("\n"))
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"
    shell = "\n".join(body for lang, body, _ in code_blocks(text) if lang in SHELL)
    for command in (
            "bash scripts/setup.sh && LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 "
            ".venv/bin/lab study recipes/quickstart.yaml",
            "LAB_CORPORA=../shared/corpora bash scripts/test.sh\n",
            "LAB_CORPORA=../shared/corpora bash scripts/test.sh --long\n"):
        assert command in shell, f"README.md no longer shows `{command.strip()}`"


def test_readme_indexes_every_command():
    text = README.read_text(encoding="utf-8")
    missing = [name for name in cli().commands if not re.search(rf"`lab {re.escape(name)}\b", text)]
    assert not missing, f"README.md's command index lacks: {', '.join(missing)}"


@pytest.mark.parametrize("page", doc_files(), ids=_rel)
def test_code_blocks_parse(page):
    problems = []
    for lang, body, line in code_blocks(page.read_text(encoding="utf-8")):
        error = parse_error(lang, body)
        if error:
            problems.append(f"{_rel(page)}:{line} ({lang}): {error}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", doc_files(), ids=_rel)
def test_lab_commands_and_options_exist(page):
    problems = []
    for lang, body, line in code_blocks(page.read_text(encoding="utf-8")):
        if lang in SHELL:
            for command in shell_lines(shell_text(lang, body)):
                problems += [f"{_rel(page)}:{line}: {p}" for p in lab_invocation_problems(command)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", linked_files(), ids=_rel)
def test_relative_links_resolve(page):
    problems = link_problems(page, page.read_text(encoding="utf-8"))
    assert not problems, f"{_rel(page)}:\n" + "\n".join(problems)


# `pip install 'lab[EXTRA]'` installs PyPI's unrelated package named lab; the extras are this
# checkout's: .venv/bin/pip install -e '.[EXTRA]'.
PYPI_LAB = re.compile(r"pip\s+install\s+[\"']?lab\[")


def test_extras_are_installed_from_the_checkout_not_pypi():
    pages = [*doc_files(), *(REPO / "recipes").rglob("*.yaml"), *(REPO / "scripts").glob("*"),
             *(REPO / "lab").rglob("*.py")]
    wrong = [_rel(p) for p in pages if p.is_file() and PYPI_LAB.search(p.read_text(errors="replace"))]
    assert not wrong, wrong
    assert PYPI_LAB.search("(`pip\n  install 'lab[slurm]'`)")


def test_the_docs_working_assumptions_are_the_safe_ones():
    """commands.md's examples assume HF_HUB_OFFLINE=1 beside LAB_CORPORA (without it a missing
    local split costs a hub look-up first), and the folders its examples write into (runs/ for
    studies and models, exports/ for `lab export`) are git-ignored: no model is committed by
    following the docs."""
    assumption = next(line for line in (REPO / "docs" / "commands.md").read_text().splitlines()
                      if line.startswith("All examples assume"))
    assert "LAB_CORPORA=" in assumption and "HF_HUB_OFFLINE=1" in assumption
    for written in ("runs/pt/gpt2-paired-s1/model.safetensors", "exports/gpt2-paired-s1/config.json"):
        ignored = subprocess.run(["git", "check-ignore", "-q", written], cwd=REPO)
        assert ignored.returncode == 0, f"{written} is not git-ignored"


def test_the_checks_catch_bad_docs():
    """Each check above fails on a bad case (else a broken check would pass everything)."""
    assert parse_error("bash", "if then; fi (\n")
    assert parse_error("console", "$ echo 'unclosed\noutput line\n")
    assert parse_error("console", "$ lab study x\nan output line with a ( parenthesis\n") is None
    assert parse_error("yaml", "a: [1, 2\n")
    assert parse_error("json", "{\"a\": }\n")
    assert parse_error("python", "def f(:\n")
    assert parse_error("text", "if then (\n") is None
    assert lab_invocation_problems("lab nonesuch --x") == ["`lab nonesuch` is no lab command"]
    assert lab_invocation_problems("lab corpora nonesuch") == ["`lab corpora nonesuch` is no lab command"]
    assert lab_invocation_problems(".venv/bin/lab study r.yaml --nonesuch 1 --dry-run") == [
        "`lab study` has no --nonesuch"]
    assert lab_invocation_problems("torchrun -m lab.cli pretrain --nonesuch=2") == [
        "`lab pretrain` has no --nonesuch"]
    assert lab_invocation_problems("lab tokenizer train --vocab-size 8 && lab corpora verify x") == []
    page = REPO / "docs" / "page.md"
    assert link_problems(page, "[a](nonesuch.md) [b](commands.md#nonesuch) `[c](nonesuch)`") == [
        "nonesuch.md: no such file", "commands.md#nonesuch: no heading #nonesuch in commands.md"]
    assert link_problems(page, "[a](commands.md#bad-input) [b](../README.md) [c](https://x.org/y)") == []
