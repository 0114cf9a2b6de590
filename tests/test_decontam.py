"""`lab decontam`: decontaminators run over a real paired arm (CSN-format Java with CodeTrans
test samples injected by `lab inject`) and judged on its ground truth; hand-made documents for
what a renamed copy does to each method; the bad inputs (one line, exit 2, nothing written)."""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.corpora import Sample
from lab.decontam import DECONTAMINATORS
from lab.decontam.base import Options, Reference
from lab.decontam.ngram import janitor_removes, words

METHODS = ("exact", "ngram13", "datatrove", "minhash", "audit", "winnow")


@pytest.fixture(scope="module")
def arm(tmp_path_factory) -> Path:
    """A paired CodeTrans arm over 300 CSN-format documents: of the test split's first 12
    samples, 6 injected once (dose 1, repeat 1), 6 held out (dose 0)."""
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    from lab.contamination.inject import InjectConfig, run_inject

    out = tmp_path_factory.mktemp("decontam") / "paired"
    run_inject(InjectConfig(benchmark="codetrans", setting="paired", seed=0, out=out,
                            base_splits=("valid",), limit=300, samples=12, doses=(0, 1)))
    return out


def decontam(arm: Path, out: Path, **options):
    from lab.decontam.run import DecontamConfig, run_decontam

    return run_decontam(DecontamConfig(corpus=arm, out=out, **options))


def rows_of(out: Path) -> list[dict[str, str]]:
    with open(out / "decontam.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def row(rows: list[dict[str, str]], method: str, dose: int) -> dict[str, str]:
    return next(r for r in rows if r["method"] == method and r["dose"] == str(dose))


def test_exact_finds_every_verbatim_copy_and_the_csv_has_a_row_per_method_and_dose(arm, tmp_path):
    result = decontam(arm, tmp_path / "out", methods=METHODS)
    rows = rows_of(tmp_path / "out")
    assert [(r["method"], r["dose"]) for r in rows] == [(m, d) for m in METHODS for d in ("0", "1")]
    exact = row(rows, "exact", 1)
    assert (exact["injected_samples"], exact["samples_found"], exact["recall"]) == ("6", "6", "1.0")
    assert exact["injected_documents_flagged"] == exact["injected_documents"] == "6"
    assert exact["precision"] == "1.0" and exact["flagged_other"] == "0"
    assert row(rows, "exact", 0)["recall"] == ""  # held out: nothing injected to find
    for r in rows:
        assert (r["benchmark"], r["split"], r["setting"], r["form"]) == (
            "codetrans", "test", "paired", "verbatim")
        assert r["documents"] == "300"
        assert int(r["flagged_injected"]) + int(r["flagged_natural_overlap"]) + int(
            r["flagged_other"]) == int(r["flagged_documents"]) == int(r["documents_removed"])
    # the lab's audit finds verbatim copies too, and the datatrove step is run for real
    assert row(rows, "audit", 1)["recall"] == "1.0"
    assert int(row(rows, "datatrove", 1)["samples_found"]) > 0
    assert row(rows, "datatrove", 1)["flagged_other"] == "0"
    timing = (tmp_path / "out" / "decontam_timing.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in timing[1:]] == list(METHODS)
    assert result["methods"]["exact"]["samples_found"] == 6


def test_ngram13_finds_every_sample_it_can_and_all_with_short_sides_whole(arm, tmp_path):
    """lm-eval's rule never matches a side of fewer than 13 words (punctuation deleted), and
    most CodeTrans functions are that short: recall is the share of injected samples with a
    side of 13 words or more; `--ngram-short whole` matches short sides whole: recall 1.0."""
    from lab.corpora import load_samples
    from lab.corpora.shards import read_manifest

    decontam(arm, tmp_path / "lm-eval", methods=("ngram13",))
    decontam(arm, tmp_path / "whole", methods=("ngram13",), ngram_short="whole")
    injected = set(read_manifest(arm)["injected_ids"])
    samples = [s for s in load_samples("codetrans", "test").records if s.id in injected]
    findable = sum(max(len(words(s.input)), len(words(s.output))) >= 13 for s in samples)
    lm_eval = row(rows_of(tmp_path / "lm-eval"), "ngram13", 1)
    assert lm_eval["samples_found"] == str(findable)
    assert lm_eval["parameters"] == "n=13 rule=any short=skip"
    whole = row(rows_of(tmp_path / "whole"), "ngram13", 1)
    assert (whole["samples_found"], whole["recall"], whole["precision"]) == ("6", "1.0", "1.0")


def test_threshold_curves_over_n_and_min_count(arm, tmp_path):
    """thresholds.csv: a row per (n, min-count); at min-count 1 and n = 13 it is the ngram13
    method's recall; a longer n or a higher min-count never finds more; 5-grams find every
    verbatim copy here where 13-grams find the few long samples."""
    decontam(arm, tmp_path / "out", methods=("ngram13",), curve_n=(5, 13, 50),
             curve_min_count=(1, 3))
    with open(tmp_path / "out" / "thresholds.csv", newline="") as handle:
        curve = {(int(r["n"]), int(r["min_count"])): r for r in csv.DictReader(handle)}
    assert sorted(curve) == [(n, m) for n in (5, 13, 50) for m in (1, 3)]
    method = row(rows_of(tmp_path / "out"), "ngram13", 1)
    assert curve[(13, 1)]["samples_found"] == method["samples_found"]
    assert curve[(13, 1)]["flagged_documents"] == method["flagged_documents"]
    found = {key: int(r["samples_found"]) for key, r in curve.items()}
    for n in (5, 13, 50):
        assert found[(n, 3)] <= found[(n, 1)]
    for m in (1, 3):
        assert found[(50, m)] <= found[(13, m)] <= found[(5, m)]
    assert curve[(5, 1)]["recall"] == "1.0" and found[(13, 1)] < 6
    share = curve[(5, 1)]
    assert float(share["removed_share"]) == int(share["flagged_documents"]) / 300


def test_the_csv_is_the_same_bytes_for_the_same_inputs(arm, tmp_path):
    decontam(arm, tmp_path / "a", methods=("exact", "ngram8", "minhash"))
    decontam(arm, tmp_path / "b", methods=("exact", "ngram8", "minhash"))
    assert (tmp_path / "a" / "decontam.csv").read_bytes() == (
        tmp_path / "b" / "decontam.csv").read_bytes()


def test_a_renamed_arm_hides_most_samples_from_exact(tmp_path):
    """An arm injected in the renamed form (lab inject --contamination-form renamed): the form
    is read from its manifest; exact finds the samples the renamer left unchanged and misses
    the renamed ones."""
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    from lab.contamination.inject import InjectConfig, run_inject

    arm = tmp_path / "renamed"
    manifest = run_inject(InjectConfig(benchmark="codetrans", setting="paired", seed=0, out=arm,
                                       base_splits=("valid",), limit=300, samples=12,
                                       doses=(0, 1), contamination_form="renamed"))
    decontam(arm, tmp_path / "out", methods=("exact",))
    exact = row(rows_of(tmp_path / "out"), "exact", 1)
    assert exact["form"] == "renamed"
    unchanged = {u["id"] for u in manifest["contamination_form"]["unchanged"]}
    kept = len(unchanged & set(manifest["injected_ids"]))
    assert kept <= int(exact["samples_found"]) < int(exact["injected_samples"]) == 6


# --- hand-made documents: a renamed copy ----------------------------------------------------

JAVA = """public static int countMatchingItems(List<String> items, String prefix, int limit) {
    int count = 0;
    for (String item : items) {
        if (item != null && item.startsWith(prefix)) {
            count++;
            if (count >= limit) {
                return limit;
            }
        }
    }
    return count;
}"""
RENAMES = {"countMatchingItems": "tally", "items": "values", "prefix": "head", "limit": "cap",
           "count": "n", "item": "v"}
RENAMED = re.sub(r"\b(" + "|".join(RENAMES) + r")\b", lambda m: RENAMES[m.group(1)], JAVA)
OTHER = "public void close() throws IOException { if (stream != null) { stream.close(); } }"
DOCUMENTS = [JAVA, "/** Counts. */\n" + "\n\n".join(JAVA.split("\n")), RENAMED, OTHER]
REFERENCE = Reference([Sample("bench:test:0", "test", 0, JAVA, "")], "java", "cs")


@pytest.mark.parametrize("method, options, flags", [
    ("exact", Options(), [True, True, False, False]),
    ("ngram13", Options(), [True, True, False, False]),
    ("datatrove", Options(), [True, True, False, False]),
    ("audit", Options(), [True, True, False, False]),
    # shingles of 5 tokens: the renamed copy's Jaccard with the sample is 0.03
    ("minhash", Options(), [True, True, False, False]),
    ("minhash", Options(jaccard=0.3), [True, True, False, False]),
    # single tokens: its Jaccard is 0.68 (keywords and punctuation are kept)
    ("minhash", Options(shingle=1, jaccard=0.5), [True, True, True, False]),
    # code-token fingerprints: names kept miss the renamed copy, names abstracted (the
    # default) find it
    ("winnow", Options(winnow_names="keep"), [True, True, False, False]),
    ("winnow", Options(), [True, True, True, False]),
])
def test_a_renamed_copy(method, options, flags):
    """Measured: every method finds the verbatim and the re-laid-out copy and none the
    unrelated method; only winnow with names abstracted, and MinHash over single tokens at
    Jaccard 0.5, find the copy whose identifiers were renamed."""
    assert DECONTAMINATORS[method].flag(DOCUMENTS, REFERENCE, options) == flags


def test_winnow_finds_a_renamed_relaid_function_inside_a_longer_file():
    """The leak as it occurs: the sample's function, its names changed and its layout redone
    (Allman braces, tabs, a comment), placed between two methods of a real-looking class.
    winnow (names abstracted) scores it by the share of the sample's fingerprints found, so the
    host's size does not dilute it; minhash's whole-document Jaccard does. An unrelated class
    of the same size is not flagged."""
    relaid = RENAMED.replace(" {\n", "\n{\n").replace("    ", "\t").replace(
        "int n = 0;", "int n = 0; // start")
    before = "\n".join(f"    public int get{i}() {{ return this.values[{i}] + offset; }}"
                        for i in range(25))
    after = "\n".join(f"    public void set{i}(int v) {{ this.values[{i}] = v - offset; }}"
                       for i in range(25))
    host = "package org.example;\n\nimport java.util.List;\n\npublic class Registry {\n"
    embedded = f"{host}{before}\n\n{relaid}\n\n{after}\n}}\n"
    unrelated = f"{host}{before}\n\n{OTHER}\n\n{after}\n}}\n"
    assert len(embedded) > 8 * len(JAVA)
    abstract = Options(winnow_names="abstract")
    assert DECONTAMINATORS["winnow"].flag([embedded, unrelated], REFERENCE, abstract) == [
        True, False]
    assert DECONTAMINATORS["minhash"].flag([embedded], REFERENCE, Options()) == [False]


def test_winnow_renaming_must_be_consistent_and_whole():
    """A renamed match is verified token by token: two of the sample's names read as one name
    of the document break the run (a shape, not a renaming). A side shorter than
    ABSTRACT_MIN_TOKENS is matched abstracted only where it is all a document holds: inside a
    larger class, a getter's shape is every getter's."""
    from lab.decontam import winnow
    winnow_flag = DECONTAMINATORS["winnow"].flag
    merged = re.sub(r"\bhead\b", "v", RENAMED)  # prefix and item both read as v
    assert winnow.best_containment([RENAMED], REFERENCE, Options())[0][0] == 1.0
    assert winnow.best_containment([merged], REFERENCE, Options())[0][0] < 0.8
    getter = "public int getSize() { return size; }"
    short = Reference([Sample("bench:test:1", "test", 1, getter, "")], "java", "cs")
    renamed = "public int getCount()\n{\n    return count;\n}"
    inside = "class A {\n  void f() { g(); }\n  " + renamed + "\n}"
    merged_short = "public int size() { return size; }"  # getSize and size read as one name
    paired = "int n = 0; <SEP> " + renamed
    assert winnow_flag([getter, renamed, inside, merged_short, paired], short,
                       Options()) == [True, True, False, False, True]
    assert winnow_flag([renamed], short, Options(winnow_names="keep")) == [False]


def test_winnow_short_sides_and_fragments():
    """A side shorter than k is matched whole, as written; a fragment of a sample standing alone
    (its first and last tokens cut by characters) scores by the share of its own k-grams one
    sample holds, across the paired setting's `<SEP>` too; a whole method that merely shares
    some of a sample's k-grams does not."""
    short_side = "int f(int x) { return x; }"   # 10 tokens: one k-gram at k = 10; 9 below
    tiny = "return x + y;"                      # 5 tokens: below MIN_SHORT_TOKENS
    reference = Reference([Sample("bench:test:0", "test", 0, JAVA, "int g(){return 1;}"),
                           Sample("bench:test:1", "test", 1, tiny, "")], "java", "cs")
    flags = DECONTAMINATORS["winnow"].flag
    host = "class A { void h() { log(); } int g(){return 1;} }"
    assert flags([host, "class B { int g() { return 2; } }", "z = return x + y;"],
                 reference, Options()) == [True, False, False]
    fragment = JAVA[40:len(JAVA) // 2 + 40]
    paired = JAVA[len(JAVA) // 2:] + " <SEP> int g(){ret"
    unrelated = OTHER + "\n" + JAVA[:60]
    assert flags([fragment, paired, unrelated], reference, Options()) == [True, True, False]
    assert flags([short_side], Reference([Sample("b:t:0", "test", 0, short_side, "")],
                                         "java", "cs"), Options(winnow_names="keep")) == [True]


def test_winnow_threshold_curve(arm, tmp_path):
    """winnow_thresholds.csv: one point per --curve-containment threshold, recall falling as
    the threshold rises, every verbatim copy found at the default threshold."""
    result = decontam(arm, tmp_path / "out", methods=("winnow",), curve_containment=(0.5, 1.0))
    with open(tmp_path / "out" / "winnow_thresholds.csv", newline="") as handle:
        points = list(csv.DictReader(handle))
    assert [p["containment"] for p in points] == ["0.5", "1.0"]
    assert [p["recall"] for p in points] == ["1.0", "1.0"]
    assert result["files"]["winnow_thresholds"] == "winnow_thresholds.csv"
    assert row(rows_of(tmp_path / "out"), "winnow", 1)["samples_found"] == "6"


def test_the_janitor_rule():
    """lm-eval's Janitor: a document is left whole-less when it has more than 10 matches, or
    when no piece of at least 200 characters survives the 200-character windows."""
    long_text = "x" * 1000
    assert not janitor_removes(long_text, [])
    assert not janitor_removes(long_text, [(10, 20)])           # 780 characters after the cut
    assert janitor_removes("y" * 300, [(100, 120)])             # nothing long enough is left
    assert janitor_removes(long_text * 10, [(i * 900, i * 900 + 5) for i in range(11)])
    assert not janitor_removes(long_text * 10, [(i * 900, i * 900 + 5) for i in range(10)])
    janitor = Options(ngram_rule="janitor")
    assert DECONTAMINATORS["ngram13"].flag([JAVA], REFERENCE, janitor) == [True]


# --- bad input ---------------------------------------------------------------------------------

def run_lab(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def lab_in_process(args: list[str], capsys) -> tuple[int, str, str]:
    from lab.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return stopped.value.code, captured.out, captured.err


@pytest.mark.parametrize("extra, fragment", [
    (["--methods", "exact,bogus"], "--methods bogus: unknown method (choose from exact"),
    (["--methods", ""], "--methods: give at least one method"),
    (["--ngram-n", "0"], "--ngram-n 0: must be >= 1"),
    (["--ngram-n", "-2"], "--ngram-n -2: must be >= 1"),
    (["--jaccard", "1.5"], "--jaccard 1.5: must be in (0, 1]"),
    (["--ngram-rule", "sometimes"], "--ngram-rule sometimes: choose from any, janitor"),
    (["--curve-n", "0,13"], "--curve-n 0,13: give distinct values >= 1"),
    (["--curve-min-count", "2,2"], "--curve-min-count 2,2: give distinct values >= 1"),
    (["--methods", "winnow", "--winnow-names", "fuzzy"],
     "--winnow-names fuzzy: choose from keep, abstract"),
    (["--methods", "winnow", "--containment", "0"], "--containment 0.0: must be in (0, 1]"),
    (["--methods", "exact", "--containment", "0.3"], "--containment 0.3: no method in --methods"),
])
def test_bad_options(arm, tmp_path, capsys, extra, fragment):
    out = tmp_path / "out"
    code, stdout, stderr = lab_in_process(["decontam", "--corpus", arm, "--out", out, *extra],
                                          capsys)
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("lab: error: ") and fragment in stderr
    assert not out.exists() and not any(p.name.startswith("out") for p in tmp_path.iterdir())


def test_a_folder_without_a_manifest(tmp_path):
    """In a process of its own: one line, exit 2, no traceback, no output folder."""
    folder = tmp_path / "not-a-corpus"
    folder.mkdir()
    (folder / "part-00000.jsonl.gz").write_bytes(b"")
    out = tmp_path / "out"
    result = run_lab(["decontam", "--corpus", folder, "--out", out], tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"lab: error: {folder}: not a lab corpus directory (no manifest.json; make one with "
        "lab inject)"]
    assert not out.exists()


def test_the_documented_new_decontaminator_runs_as_written(arm, tmp_path, monkeypatch):
    """docs/design.md's example decontaminator: its module and its DECONTAMINATORS line as the
    page shows them, judged by lab decontam on the arm: it finds every verbatim copy."""
    import types

    from lab import decontam as methods

    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    part = text.split("\n## Extending", 1)[1].split("**A decontaminator**", 1)[1].split("\n**", 1)[0]
    module, line = [b.split("\n", 1)[1] for b in part.split("```")[1::2] if b.startswith("python\n")]
    example = types.ModuleType("first_line")
    exec(compile(module, "first_line.py", "exec"), example.__dict__)
    method = eval(line, {"Decontaminator": methods.Decontaminator, "first_line": example})
    monkeypatch.setitem(methods.DECONTAMINATORS, method.name, method)
    decontam(arm, tmp_path / "out", methods=(method.name,))
    found = row(rows_of(tmp_path / "out"), method.name, 1)
    assert (found["injected_samples"], found["recall"]) == ("6", "1.0")
