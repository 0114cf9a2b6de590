"""Each decontaminator beside the code it says it follows, run as that code on the same
documents and sample sides (tests/test_decontam.py's 300-document paired CodeTrans arm):
lm-evaluation-harness's Janitor (installed --no-deps by `scripts/setup.sh --dev`), datatrove's
NGramsDecontFilter and datasketch's MinHashLSH. Where the lab says it follows its source
exactly, every document agrees; where it departs, each disagreement falls under a departure
docs/decontam.md names ("Faithful to which source, and where not"), counted here.
benchmarks/decontam_agreement.py prints the same table on a larger arm (and lm-eval's C++ path,
whose source is not in its wheel)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # benchmarks/ has no __init__.py: a namespace package
    sys.path.insert(0, str(REPO))

from benchmarks import decontam_agreement as agreement  # noqa: E402
from lab.corpora import Sample  # noqa: E402
from lab.decontam import DECONTAMINATORS  # noqa: E402
from lab.decontam.base import Options, Reference  # noqa: E402
from test_decontam import arm  # noqa: E402,F401 - the 300-document arm, built once here


@pytest.fixture(scope="module")
def janitor():
    try:
        return agreement.load_janitor()
    except SystemExit as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def documents(arm):  # noqa: F811 - the fixture imported above
    return agreement.arm_documents(arm)


def test_ngram13_normalises_and_matches_as_the_janitor_registers(janitor, documents):
    """The lab's words and n-grams are the Janitor's register side's (lower-case ASCII,
    punctuation deleted, split on whitespace), applied to the document: every document agrees."""
    result = agreement.compare_ngram_any(janitor, *documents)
    assert result.agree == result.documents == 300
    assert result.lab_flags == result.source_flags == 3


def test_the_janitors_python_path_departs_by_empty_words_and_short_texts(janitor, documents):
    """`Janitor.clean_python` at its defaults against `--ngram-rule janitor`: lm-eval's own cut
    (`_split_chunks`) agrees with the lab's on every document the lab matches; the documents that
    differ are the lab's matches lm-eval's Python path misses (a punctuation-only word leaves an
    empty word in the document's n-gram, never in a registered one: on this code it matches no
    13-gram at all) and the short clean documents it drops (the 200-character rule)."""
    texts, reference, samples = documents
    whole, cut = agreement.compare_janitor_python(janitor, *documents)
    assert cut.documents == whole.lab_flags > 0 and cut.agree == cut.documents
    cleaner = agreement.python_janitor(janitor, reference)
    assert sum(bool(agreement.python_dirty(janitor, cleaner, t)) for t in texts) == 0
    short = sum(len(t) < 200 for t in texts)
    assert dict(whole.departures) == {agreement.EMPTY_WORDS: whole.lab_flags,
                                      agreement.SHORT_TEXT: short}
    assert whole.source_flags == short and (whole.lab_flags, short) == (3, 43)


def test_the_empty_words_reproduction_in_the_docs(janitor):
    """docs/decontam.md's upstream-ready report, as written there."""
    line = ("public static int sum(int[] values) { int total = 0; for (int v : values) "
            "{ total += v; } return total; }")
    padding = "// " + "unrelated words of a long comment " * 16
    document = f"{padding}\n{line}\n{padding}\n"
    cleaner = janitor.Janitor()  # n = 13, the published settings
    cleaner.register_contaminant_python(line)
    assert len(cleaner.dirt_ngrams) == 4
    assert cleaner.clean_python(document) == [document]  # the function survives cleaning
    unpunctuated = document.replace(line, cleaner.normalize_string(line))
    assert len(cleaner.clean_python(unpunctuated)) == 2  # the same words without it: cut out
    reference = Reference([Sample("bench:test:0", "test", 0, line, "")], "java", "cs")
    assert len(agreement.lab_spans(reference)(document)) == 4
    flags = DECONTAMINATORS["ngram13"].flag([document], reference, Options(ngram_rule="janitor"))
    assert flags == [False]  # cut out, the comments kept: not removed
    assert DECONTAMINATORS["ngram13"].flag([document], reference, Options()) == [True]


def test_datatroves_filter_agrees_and_its_defaults_fail_here(documents):
    """The lab runs datatrove's filter in datatrove's executor; called directly on each
    document it flags the same ones. Its default hash and tokenizer are what fails here."""
    result = agreement.compare_datatrove(*documents)
    assert result.agree == result.documents == 300 and result.lab_flags == 5
    errors = agreement.datatrove_defaults_fail()
    assert "Strings must be encoded before hashing" in errors["hash (xxhash)"]
    assert "spacy" in errors["tokenizer (English)"]


def test_minhash_is_datasketchs_but_for_the_sides_and_the_estimate(documents):
    """datasketch used plainly (one sketch per whole document, LSH candidates as matches)
    against `minhash`: the documents that differ are paired copies the lab finds side by side
    (a whole paired copy's Jaccard with one side is about a half) and LSH candidates whose
    estimated Jaccard is below the threshold."""
    texts = documents[0]
    result = agreement.compare_minhash(*documents)
    assert set(result.departures) <= {agreement.SIDE_BY_SIDE, agreement.LSH_ONLY}
    assert dict(result.departures) == {agreement.SIDE_BY_SIDE: 6}
    paired = sum("<SEP>" in t for t in texts)
    assert result.departures[agreement.SIDE_BY_SIDE] <= paired
