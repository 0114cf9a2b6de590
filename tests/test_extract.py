"""`lab corpora extract`: the shared CSN-style Java corpus's own records rebuilt into source
files come back field for field, each rule's distractor is dropped and counted under its rule,
Python follows CSN's Python rules, and the output is split by repository, deterministic, whole
and readable by the lab's CSN reader."""
from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.corpora.base import read_json_lines
from lab.corpora.csn import find_local
from lab.common import EXTRACT_MANIFEST
from lab.corpora.extract import (FIELDS, SPLITS, ExtractConfig, docstring_summary,
                                 run_extract)

GOVERNATOR = "governator-legacy/src/main/java/com/netflix/governator/"
CHOSEN = {  # (repository, path): records of the test split's shard, every one of the path's
    ("Netflix/governator", GOVERNATOR + "configuration/ColumnPrinter.java"): 4,
    ("Netflix/governator", GOVERNATOR + "configuration/ConfigurationColumnWriter.java"): 3,
    ("Netflix/governator", GOVERNATOR + "guice/Grapher.java"): 3,
    ("apache/incubator-druid",
     "processing/src/main/java/org/apache/druid/segment/join/MapJoinableFactory.java"): 1,
}
COMPARED = ("func_name", "code", "code_tokens", "docstring", "docstring_tokens",
            "original_string", "language")

DISTRACTORS = """package com.netflix.governator.guice;

import java.util.ArrayList;
import java.util.List;

public class Distractors {
    /**
     * Builds distractors from the given names.
     */
    public Distractors(List<String> names) {
        this.names = new ArrayList<String>(names);
        this.count = names.size();
    }

    /**
     * Describes these distractors for a log line.
     */
    @Override
    public String toString() {
        return "Distractors(" + names + ", " + count + ", " + names.size() + ")";
    }

    /**
     * Returns the number of names held.
     */
    public int size() { return names.size(); }

    /**
     * Checks the names against the expected ones.
     */
    public boolean testNames(List<String> expected) {
        return names.equals(expected) && count == expected.size() && names.size() == count;
    }

    public List<String> undocumented(List<String> extra) {
        List<String> all = new ArrayList<String>(names);
        all.addAll(extra);
        names = all;
        return all;
    }

    /**
     * Clears every name held so far.
     */
    public void clear() {
    }

    /**
     * Adds a name in a broken way.
     */
    public void broken(String name) {
        names.add(name) +;
        count = count + names.size() + name.length() + extra.size();
    }

    /**
     * Runs.
     */
    public List<String> run(List<String> extra) {
        List<String> all = new ArrayList<String>(names);
        all.addAll(extra);
        return all;
    }

    /**
     * Reads the names listed at http://example.com/names for this holder.
     */
    public List<String> fetch(List<String> extra) {
        List<String> all = new ArrayList<String>(names);
        all.addAll(extra);
        return all;
    }

    /**
     * Gibt die Namen zur\u00fcck, die in der Liste stehen und nicht leer sind.
     */
    public List<String> namen(List<String> extra) {
        List<String> all = new ArrayList<String>(names);
        all.addAll(extra);
        return all;
    }

    /**
     * Returns the first name held here.
     */
    public String first() {
        return names.get(0);
    }

    /** The nested holder. */
    static class Holder {
        /**
         * Returns the names held by this holder.
         */
        public List<String> held(List<String> names) {
            List<String> all = new ArrayList<String>(names);
            all.addAll(names);
            return all;
        }
    }
}
"""

INTERFACE = """package com.netflix.governator.guice;

import java.util.List;

public interface Documented {
    /**
     * Describes the names of this object in one line.
     */
    default String describe(List<String> names) {
        return String.join(", ", names) + " (" + names.size() + " names)";
    }
}
"""

TEST_FILE = """package com.netflix.governator;

public class ColumnPrinterUse {
    /**
     * Prints a few columns for a reader.
     */
    public void columns(ColumnPrinter printer, String columnName, String value) {
        printer.addColumn(columnName);
        printer.addValue(columnName, value);
    }
}
"""


def _corpus_records(corpora: Path) -> dict[tuple[str, str], list[dict]]:
    shard = corpora / "codesearchnet-java/java/final/jsonl/test/java_test_0.jsonl.gz"
    if not shard.is_file():
        pytest.skip(f"{shard} is missing")
    found: dict[tuple[str, str], list[dict]] = {key: [] for key in CHOSEN}
    with gzip.open(shard, "rt", encoding="utf-8") as lines:
        for line in lines:
            if '"Netflix/governator"' in line or '"apache/incubator-druid"' in line:
                record = json.loads(line)
                if (record["repo"], record["path"]) in found:
                    found[record["repo"], record["path"]].append(record)
    assert {key: len(records) for key, records in found.items()} == CHOSEN
    return found


def _javadoc(docstring: str, indent: str, blank_last: bool = False) -> list[str]:
    lines = [indent + "/**"] + [(indent + " * " + line).rstrip() if line else indent + " *"
                                for line in docstring.split("\n")]
    return lines + ([indent + " *"] if blank_last else []) + [indent + " */"]


def _indent(code: str) -> str:
    last = code.split("\n")[-1]  # the closing brace: the method's own indentation
    return last[:len(last) - len(last.lstrip())]


def _method(record: dict, blank_last: bool = False, code: str | None = None) -> list[str]:
    indent = _indent(record["code"])
    return _javadoc(record["docstring"], indent, blank_last) + [indent + (code or record["code"]),
                                                                ""]


def _source(package: str, records: list[dict], blank_last: bool = False) -> str:
    """A source file holding `records`' methods, each under a Javadoc rebuilt from its
    cleaned `docstring`, indented as the code's last line (its closing brace) is."""
    lines = [f"package {package};", "", f"public class {records[0]['func_name'].split('.')[0]} {{",
             ""]
    for record in records:
        lines += _method(record, blank_last)
    return "\n".join(lines + ["}", ""])


def test_java_agrees_with_the_shared_corpus(corpora_root, tmp_path):
    """Every record of three governator files comes back field for field, and each rule's
    distractor is dropped and counted under its rule.

    MapJoinableFactory.getSingleResult shows where the summary is cut from: its Javadoc ended
    with a blank ` *` line, so the comment not yet trimmed holds a blank line and its first
    paragraph is the whole comment (CSN cuts the summary before trimming). Its `docstring`
    (trimmed) keeps no trace of that line; rebuilt without it, the summary would end at the
    first `@` (`... from two {`), as in 2 of the test split's 11,438 records. All the split's
    other records round-trip with tree-sitter-java 0.21.0, although the corpus was built with
    0.23.5 (checked when this test was written)."""
    corpus = _corpus_records(corpora_root)
    tree = tmp_path / "repos"
    for (repo, path), records in corpus.items():
        druid = repo == "apache/incubator-druid"
        package = path.split("/java/", 1)[1].rsplit("/", 1)[0].replace("/", ".")
        target = tree / repo.replace("/", "+") / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_source(package, records, blank_last=druid), encoding="utf-8")
    governator = tree / "Netflix+governator"
    (governator / GOVERNATOR / "guice/Distractors.java").write_text(DISTRACTORS, encoding="utf-8")
    (governator / GOVERNATOR / "guice/Documented.java").write_text(INTERFACE, encoding="utf-8")
    (governator / "governator-legacy/src/test/java").mkdir(parents=True)
    (governator / "governator-legacy/src/test/java/ColumnPrinterUse.java").write_text(
        TEST_FILE, encoding="utf-8")
    printer = corpus["Netflix/governator", GOVERNATOR + "configuration/ColumnPrinter.java"]
    add_column, generate = printer[0], printer[3]
    near = generate["code"].replace("{\n", "{\n        int unusedCounter = 0;\n", 1)
    assert near != generate["code"]
    copies = ["package com.netflix.governator.zz;", "", "public class Copies {",
              *_method(add_column), *_method(generate, code=near), "}", ""]
    (governator / GOVERNATOR / "zz").mkdir()
    (governator / GOVERNATOR / "zz/Copies.java").write_text("\n".join(copies), encoding="utf-8")

    out = tmp_path / "csn"
    manifest = run_extract(ExtractConfig(language="java", from_dir=tree, out=out))

    got = [record for split in SPLITS for path in find_local(out, split)
           for record in map(json.loads, gzip.open(path, "rt", encoding="utf-8"))]
    expected = [record for records in corpus.values() for record in records]

    def key(record: dict) -> tuple[str, ...]:
        return (record["repo"].replace("/", "+"), record["path"], record["func_name"],
                record["code"])

    assert [key(r) for r in sorted(got, key=key)] == [key(r) for r in sorted(expected, key=key)]
    for mine, theirs in zip(sorted(got, key=key), sorted(expected, key=key)):
        assert list(mine) == list(FIELDS)
        assert {f: mine[f] for f in COMPARED} == {f: theirs[f] for f in COMPARED}
    single = corpus[next(k for k in CHOSEN if k[0] == "apache/incubator-druid")][0]
    assert docstring_summary(single["docstring"]).endswith("from two {")  # cut without the line
    assert single["docstring_tokens"][-3:] == ["an", "exception", "."]  # and so are ours
    assert manifest["files"] == {"files": 8, "test_path": 1, "file_not_utf8": 0,
                                 "file_syntax_error": 0}
    assert manifest["filters"] == {
        "not_top_level_class": 2, "constructor": 1, "no_javadoc": 1, "blacklisted_name": 1,
        "name_contains_test": 1, "no_or_oneline_body": 1, "lt3_lines": 1, "parse_error": 1,
        "doc_lt3_tokens": 1, "doc_gt256_tokens": 0, "doc_special_tokens": 1,
        "doc_not_english": 1, "lt10_identifier_tokens": 1, "exact_duplicate": 1,
        "near_duplicate": 1}
    assert manifest["records"] == len(expected) == 11
    assert len({r["url"] for r in got}) == len(got)
    for split in SPLITS:  # the lab's own reader of CSN's layout
        for path in find_local(out, split):
            codes = [code for (code,) in read_json_lines(path, ("code",))]
            assert len(codes) == manifest["splits"][split]["records"]


PYTHON_CORE = '''"""Paths and stores."""
import os


def join_paths(base, *parts):
    """Join path parts onto a base folder.

    Empty parts are skipped.
    """
    # skip the empty ones
    kept = [part for part in parts if part]

    def inner(x):
        """An inner function, never extracted."""
        return x

    return os.path.join(base, *kept)


def no_docs(first, second):
    total = first + second
    return total


def tiny(x): """Return the value doubled here."""; return 2 * x


class Store:
    """A store of values."""

    def __init__(self, path):
        """Open the store at a path."""
        self.path = path
        self.items = {}

    @checked
    def get_value(self, key, default=None):
        """Return the value stored under a key, or the default."""
        value = self.items.get(key, default)
        if value is None and default is None:
            raise KeyError(key)
        return value

    def test_roundtrip(self, key, value):
        """Check that a value survives a round trip."""
        self.items[key] = value
        assert self.items.get(key) == value

    def keys(self):
        """The keys, in subclasses."""
        raise NotImplementedError

    def size(self):
        """Number of items."""
        return len(self.items)
'''

def _span(text, first, last):
    """`text` from the first `first` to the end of the first `last` after it."""
    start = text.index(first)
    return text[start:text.index(last, start) + len(last)]


PYTHON_EXPECTED = [
    {"repo": "pkg-1.0", "path": "pkg/core.py", "func_name": "join_paths",
     "original_string": _span(PYTHON_CORE, "def join_paths", "*kept)"),
     "language": "python",
     "code": "def join_paths(base, *parts):\n    # skip the empty ones\n"
             "    kept = [part for part in parts if part]\n\n    def inner(x):\n"
             '        """An inner function, never extracted."""\n        return x\n\n'
             "    return os.path.join(base, *kept)",
     "code_tokens": ["def", "join_paths", "(", "base", ",", "*", "parts", ")", ":",
                     "# skip the empty ones", "kept", "=", "[", "part", "for", "part", "in",
                     "parts", "if", "part", "]", "def", "inner", "(", "x", ")", ":",
                     '"""An inner function, never extracted."""', "return", "x", "return",
                     "os", ".", "path", ".", "join", "(", "base", ",", "*", "kept", ")"],
     "docstring": "Join path parts onto a base folder.\n\n    Empty parts are skipped.",
     "docstring_tokens": ["Join", "path", "parts", "onto", "a", "base", "folder", "."],
     "url": "pkg-1.0/pkg/core.py#L5-L17", "partition": "train"},
    {"repo": "pkg-1.0", "path": "pkg/core.py", "func_name": "Store.get_value",
     "original_string": _span(PYTHON_CORE, "def get_value", "return value"),
     "language": "python",
     "code": "def get_value(self, key, default=None):\n"
             "        value = self.items.get(key, default)\n"
             "        if value is None and default is None:\n"
             "            raise KeyError(key)\n        return value",
     "code_tokens": ["def", "get_value", "(", "self", ",", "key", ",", "default", "=", "None",
                     ")", ":", "value", "=", "self", ".", "items", ".", "get", "(", "key", ",",
                     "default", ")", "if", "value", "is", "None", "and", "default", "is",
                     "None", ":", "raise", "KeyError", "(", "key", ")", "return", "value"],
     "docstring": "Return the value stored under a key, or the default.",
     "docstring_tokens": ["Return", "the", "value", "stored", "under", "a", "key", "or", "the",
                          "default", "."],
     "url": "pkg-1.0/pkg/core.py#L37-L42", "partition": "train"},
]


def test_python_follows_csn_python_rules(tmp_path):
    """Module functions and top-level classes' methods with a docstring; `code` without the
    docstring (CSN's keeps it; its code_tokens do not), comments kept as tokens (CSN's leaf
    traversal), decorators not part of the function (CSN's function_definition)."""
    repo = tmp_path / "repos" / "pkg-1.0"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/core.py").write_text(PYTHON_CORE, encoding="utf-8")
    (repo / "pkg/legacy.py").write_text('def shout(text):\n    """Shout it."""\n'
                                        '    print "%s!" % text\n', encoding="utf-8")
    (repo / "pkg/latin.py").write_bytes(b'def caf\xe9():\n    """Caf\xe9."""\n    return 1\n')
    (repo / "tests").mkdir()
    (repo / "tests/helpers.py").write_text(PYTHON_CORE, encoding="utf-8")
    out = tmp_path / "csn"
    manifest = run_extract(ExtractConfig(language="python", from_dir=tmp_path / "repos", out=out))
    shard = out / "python/final/jsonl/train/python_train_0.jsonl.gz"
    records = [json.loads(line) for line in gzip.open(shard, "rt", encoding="utf-8")]
    sha = hashlib.sha256(PYTHON_CORE.encode()).hexdigest()
    assert records == [{**expected, "sha": sha} for expected in PYTHON_EXPECTED]
    assert [list(r) for r in records] == [list(FIELDS)] * 2
    assert manifest["files"] == {"files": 4, "test_path": 1, "file_not_utf8": 1,
                                 "file_syntax_error": 1}
    assert manifest["filters"] == {
        "not_top_level": 1, "no_docstring": 1, "blacklisted_name": 1, "name_contains_test": 1,
        "empty_body": 1, "lt3_lines": 1, "doc_lt3_tokens": 0, "doc_gt256_tokens": 0,
        "doc_special_tokens": 0, "doc_not_english": 0, "lt10_identifier_tokens": 1,
        "exact_duplicate": 0, "near_duplicate": 0}


def _python_tree(folder: Path, repositories: int = 12) -> Path:
    """Repositories of 1 to 6 distinct functions each (no two near-duplicates)."""
    for r in range(repositories):
        functions = []
        for k in range(1 + (r * 5) % 6):
            name = f"r{r}k{k}"
            functions.append(
                f"def compute_{name}(first_{name}, second_{name}):\n"
                f'    """Compute the value number {k} of repository {r}."""\n'
                f"    total_{name} = first_{name} + second_{name} * factor_{name}\n"
                f"    scaled_{name} = helper_{name}(total_{name}, first_{name})\n"
                f"    return finish_{name}(scaled_{name}, second_{name}, offset_{name})\n")
        (folder / f"owner+repo{r}").mkdir(parents=True)
        (folder / f"owner+repo{r}" / "module.py").write_text("\n\n".join(functions),
                                                            encoding="utf-8")
    return folder


def _shards(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for p in sorted(out.rglob("*.jsonl.gz"))}


def test_splits_are_by_repository_and_deterministic(tmp_path):
    tree = _python_tree(tmp_path / "repos")
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        config = ExtractConfig(language="python", from_dir=tree, out=tmp_path / name, seed=seed,
                               shares=(0.5, 0.25, 0.25))
        runs[name] = run_extract(config)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    assert _shards(tmp_path / "a") != _shards(tmp_path / "c")
    for name in "ac":
        manifest = runs[name]
        seen: dict[str, str] = {}
        for split in SPLITS:
            shard = tmp_path / name / f"python/final/jsonl/{split}/python_{split}_0.jsonl.gz"
            for record in map(json.loads, gzip.open(shard, "rt", encoding="utf-8")):
                assert record["partition"] == split
                assert seen.setdefault(record["repo"], split) == split  # one split per repository
        by_split = {s: sorted(r for r, v in seen.items() if v == s) for s in SPLITS}
        assert all(by_split.values()), by_split
        assert {s: len(v) for s, v in by_split.items()} == {
            s: manifest["splits"][s]["repositories"] for s in SPLITS}
        assert sum(b["records"] for b in manifest["splits"].values()) == manifest["records"] == 42
    partition = {n: {r: v["split"] for r, v in runs[n]["repositories"].items()} for n in "abc"}
    assert partition["a"] == partition["b"] != partition["c"]


def test_bad_options_are_one_line_errors(tmp_path):
    tree = _python_tree(tmp_path / "repos", repositories=2)
    good = dict(language="python", from_dir=tree, out=tmp_path / "out")
    cases = [({"language": "cobol"}, "--language cobol"), ({"from_dir": None}, "--from"),
             ({"from_dir": tmp_path / "nowhere"}, "--from"), ({"out": None}, "--out"),
             ({"shares": (0.8, 0.1, 0.2)}, "--shares"), ({"shares": (0.5, 0.5)}, "--shares"),
             ({"out": tree / "owner+repo0" / "out"}, "inside an input")]
    for change, fragment in cases:
        with pytest.raises(LabError) as error:
            run_extract(ExtractConfig(**{**good, **change}))
        assert fragment in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()

    run_extract(ExtractConfig(**good))
    with pytest.raises(LabError, match="--force"):
        run_extract(ExtractConfig(**good))
    manifest = json.loads((tmp_path / "out" / EXTRACT_MANIFEST).read_text(encoding="utf-8"))
    assert manifest["kind"] == "lab-corpora-extract" and manifest["records"] == 7
    assert manifest["input"] == str(tree.resolve())
    run_extract(ExtractConfig(**good, force=True))  # its own earlier output: replaced
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with pytest.raises(LabError, match="not a previous lab-corpora-extract output"):
        run_extract(ExtractConfig(**{**good, "out": foreign}, force=True))

    result = subprocess.run([sys.executable, "-m", "lab.cli", "corpora", "extract", "--language",
                             "cobol", "--from", str(tree), "--out", str(tmp_path / "cli")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "lab: error: --language cobol: unknown; choose java or python"]


def test_a_failed_run_leaves_nothing_half_written(tmp_path, monkeypatch):
    import lab.corpora.extract as extract

    tree = _python_tree(tmp_path / "repos", repositories=2)
    config = ExtractConfig(language="python", from_dir=tree, out=tmp_path / "out")

    def fail(*args, **kwargs):
        raise RuntimeError("disk trouble")

    monkeypatch.setattr(extract, "_write_split", fail)
    with pytest.raises(RuntimeError):
        run_extract(config)
    assert [p.name for p in tmp_path.iterdir()] == ["repos"]


@pytest.mark.long
def test_the_standard_library_extracts(tmp_path):
    """`--from stdlib`: the running interpreter's standard library, each top-level module or
    package one repository (extract_python.standard_library_tree): ~25 s on two cores; named
    so in the manifest, not by the temporary tree it was copied to; Python's only."""
    from lab.corpora.extract_python import standard_library_tree

    tree = standard_library_tree(tmp_path / "stdlib")
    assert (tree / "json" / "json" / "decoder.py").is_file() and not (tree / "test").exists()
    manifest = run_extract(ExtractConfig(language="python", from_dir=Path("stdlib"),
                                         out=tmp_path / "out"))
    assert manifest["input"].startswith("stdlib: ") and "lab-stdlib-" not in manifest["input"]
    assert manifest["records"] > 1000
    assert all(manifest["splits"][s]["records"] > 0 for s in SPLITS)
    assert manifest["files"]["file_syntax_error"] == 0
    with pytest.raises(LabError, match="--from stdlib: the standard library is Python's"):
        run_extract(ExtractConfig(language="java", from_dir=Path("stdlib"), out=tmp_path / "j"))
