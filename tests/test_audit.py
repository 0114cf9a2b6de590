"""Audit: exact matching, the near-duplicate criterion, and the prefix filter's recall."""
from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

from lab.codetokens import fingerprint_tokens, normalize
from lab.contamination.audit import run_audit
from lab.contamination.overlap import OverlapIndex


def _jaccards(a: list[str], b: list[str]) -> tuple[float, float]:
    sa, sb = set(a), set(b)
    ca, cb = Counter(a), Counter(b)
    inter = sum((ca & cb).values())
    union = sum((ca | cb).values())
    return len(sa & sb) / len(sa | sb), inter / union


METHOD = """public int countMatches(List<String> names, String prefix) {
    int total = 0;
    for (String candidate : names) {
        if (candidate.startsWith(prefix)) { total += weightOf(candidate); }
    }
    return total;
}"""


def test_normalize_ignores_whitespace_and_comments():
    squeezed = "public int countMatches(List<String> names, String prefix) {int total = 0;" \
               "for (String candidate : names) {if (candidate.startsWith(prefix)) " \
               "{ total += weightOf(candidate); }} /* done */ return total; // end\n}"
    assert normalize(METHOD) == normalize(squeezed)
    assert normalize(METHOD) != normalize(METHOD.replace("prefix", "suffix"))


def test_exact_and_near_matches():
    renamed = METHOD.replace("total", "sum")  # one identifier of nine renamed
    unrelated = "void close() { stream.close(); handle = null; flushed = true; }"
    index = OverlapIndex([("a", METHOD), ("b", renamed), ("c", unrelated)])
    match = index.match(" ".join(METHOD.split()), near=True)
    assert match.exact == ["a"]
    near_ids = [doc for doc, _s, _m in match.near]
    assert "a" in near_ids and "b" in near_ids and "c" not in near_ids
    set_j, multiset_j = _jaccards(fingerprint_tokens(METHOD), fingerprint_tokens(renamed))
    reported = dict((d, (s, m)) for d, s, m in match.near)["b"]
    assert reported == (round(set_j, 4), round(multiset_j, 4))
    assert set_j >= 0.8 and multiset_j >= 0.7


def test_short_fragments_are_not_near_duplicates():
    index = OverlapIndex([("a", "return alpha + beta;")])
    assert index.match("return alpha + beta + gamma;", near=True).near == []


def test_paired_document_sides_match_separately():
    doc = "int f(int a) { return a; } <SEP> public int F(int a) { return a; }"
    index = OverlapIndex([("p", doc)])
    assert index.match("int f(int a) {return a;}", near=False).exact == ["p"]
    assert index.match("public int F(int a){ return a; }", near=False).exact == ["p"]


def test_prefix_filter_finds_every_pair_brute_force_finds():
    rng = random.Random(7)
    vocabulary = [f"id{i}" for i in range(60)]
    docs = []
    base = [rng.choices(vocabulary, k=rng.randint(5, 14)) for _ in range(40)]
    for i, tokens in enumerate(base):
        docs.append((f"d{i}", " ".join(tokens)))
        for j in range(4):  # mutated neighbours, some above and some below the thresholds
            mutated = list(tokens)
            for _ in range(rng.randint(0, 3)):
                mutated[rng.randrange(len(mutated))] = rng.choice(vocabulary)
            if rng.random() < 0.5:
                mutated.append(rng.choice(vocabulary))
            docs.append((f"d{i}m{j}", " ".join(mutated)))
    index = OverlapIndex(docs)
    found_pairs = 0
    for qid, qtext in docs:
        got = {d for d, _s, _m in index.match(qtext, near=True).near}
        expected = set()
        for did, dtext in docs:
            s, m = _jaccards(qtext.split(), dtext.split())
            if s >= 0.8 - 1e-12 and m >= 0.7 - 1e-12:
                expected.add(did)
        assert got == expected, qid
        found_pairs += len(expected) - 1
    assert found_pairs > 20  # the check compared real near-duplicate pairs, not only self-matches


@pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
def test_codetrans_test_against_train_reports_the_benchmark_own_overlap():
    root = Path(os.environ["LAB_CORPORA"]) / "codetrans"
    train = {line.rstrip("\n") for line in open(root / "train.java-cs.txt.java", encoding="utf-8")}
    test = [line.rstrip("\n") for line in open(root / "test.java-cs.txt.java", encoding="utf-8")]
    verbatim = sum(line in train for line in test)
    summary = run_audit("codetrans", ["test"], against="codetrans:train")
    counts = summary["counts"]["test"]
    # Normalised exact matching finds at least every verbatim copy (42 distinct lines, 43 samples).
    assert verbatim == 43
    assert counts["input_exact"] >= verbatim
    assert counts["leaked"] >= counts["exact"] >= counts["input_exact"]
    for row in summary["rows"]:
        if row["sides"]["input"]["exact"]:
            doc = row["sides"]["input"]["exact"][0]
            assert doc.startswith("codetrans:train:")

