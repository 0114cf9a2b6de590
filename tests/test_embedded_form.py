"""The `embedded` contamination form (lab.contamination.forms.embedded): each injected document
written inside a base document the arm removes, at a member boundary, laid out over lines. On
a tiny arm: every injected document is found at its recorded offsets inside its host, the arm
keeps the control's size and the other forms' removals, no host is also a base document, the
same seed gives the same bytes in both corpus formats' own runs, and what it refuses."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from lab.codetokens import code_tokens
from lab.common import LabError
from lab.contamination import settings as settings_table
from lab.contamination.forms.embedded import (embed_documents, insert_block, laid_out,
                                              member_boundaries)
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.soft import check_form, parse_form
from lab.corpora import load_documents, load_samples
from lab.corpora.shards import read_corpus, verify_corpus

CLASS = """public class Host {
    private int[] xs = {1, 2};

    void first() {
        Runnable r = new Runnable() { public void run() {} };
    }

    void second() {
    }
}"""
METHOD = "protected void run(int x) {\n        call(x);\n    }"  # a CSN document
BLOCK = "int added() {\n    return 1;\n}"


def squeezed(text: str) -> str:
    return "".join(text.split())


def test_boundaries_are_between_members_else_around_a_method_else_the_end():
    points, rule = member_boundaries(CLASS)
    assert rule == "member"
    for at, indent in points:
        text, start, end = insert_block(CLASS, BLOCK, at, indent)
        assert code_tokens(text[start:end]) == code_tokens(BLOCK)
        assert squeezed(text[:start] + text[end:]) == squeezed(CLASS)  # the host kept whole
        # never inside a method, an anonymous class or an array initializer
        assert code_tokens(text).index("added") > code_tokens(text).index("xs")
        before = code_tokens(text[:start])
        assert before.count("{") - before.count("}") == 1, text
    assert [rule for _, rule in [member_boundaries(METHOD)]] == ["top-level"]
    # before the method: the block in the host's first tokens, which pre-training keeps
    assert [at for at, _ in member_boundaries(METHOD)[0]] == [0]
    literal = "boolean is(Object o) {\n    if (o.getClass() == Foo.class) {\n        f(o);\n    }\n}"
    assert member_boundaries(literal) == ([(0, "")], "top-level")  # `Foo.class` declares no type
    # a parameter named `record` declares no type, nor does a class local to the method
    local = ("void f(Record record) {\n    class Local {\n        int x;\n        void g() {}\n"
             "    }\n    record.use();\n}")
    assert member_boundaries(local) == ([(0, "")], "top-level")
    assert member_boundaries("record P(int x) {\n    int y() { return x; }\n}")[1] == "member"
    assert member_boundaries("void broken( {") == ([(14, "")], "end")


def test_a_one_line_side_is_laid_out_over_lines_with_its_code_tokens():
    line = "public int f(int a) {if (a > 0) {return a;} else {return -a;}}"
    text, relaid = laid_out(line)
    assert relaid and text.count("\n") >= 5 and code_tokens(text) == code_tokens(line)
    assert laid_out(METHOD) == (METHOD, False)  # already source: kept


def test_each_document_gets_its_own_host_drawn_per_sample():
    injected = [{"id": f"inject:s{i}:input:0", "sample": f"s{i}", "text": BLOCK}
                for i in range(5)]
    hosts = [(f"csn:{i}", METHOD.replace("run", f"run{i}")) for i in range(5)]
    written, record = embed_documents(injected, hosts, seed=3)
    assert sorted(r["host"] for r in record) == sorted(h for h, _ in hosts)
    again, _ = embed_documents(injected, list(reversed(hosts)), seed=3)
    assert again == written  # drawn from the hosts sorted by id: their order does not matter
    for document, where in zip(written, record):
        assert code_tokens(document["text"][where["start"]:where["end"]]) == code_tokens(BLOCK)
    with pytest.raises(LabError, match="internal guard"):
        embed_documents(injected, hosts[:4], seed=3)


@pytest.mark.parametrize("benchmark, setting, fits", [
    ("codetrans", "input-only", True), ("codetrans", "input-only-placebo", True),
    ("concode", "paired", True), ("concode", "unpaired", True),
    ("codetrans", "paired", False), ("codetrans", "unpaired", False),
    ("codetrans", "output-only", False),
])
def test_a_csharp_side_has_no_host_and_is_refused(benchmark, setting, fits):
    def check():
        check_form(parse_form("embedded"), benchmark, settings_table.get(setting))
    if fits:
        check()
    else:
        with pytest.raises(LabError, match=r"^--contamination-form embedded: .*no cs file"):
            check()


needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


def arm(tmp_path: Path, name: str, **overrides):
    options = dict(benchmark="concode", setting="unpaired", seed=4, out=tmp_path / name,
                   base_splits=("valid",), limit=200, samples=20, fraction=0.5, repeat=2)
    options.update(overrides)
    return run_inject(InjectConfig(**options))


@needs_corpora
@pytest.mark.parametrize("corpus_format", [1, 2])
def test_an_embedded_arm_holds_each_document_inside_its_host(tmp_path, corpus_format):
    more = {"corpus_format": corpus_format, "shard_size": 80} if corpus_format == 2 else {}
    manifest = arm(tmp_path, "embedded", contamination_form="embedded", **more)
    verbatim = arm(tmp_path, "verbatim", **more)
    verify_corpus(tmp_path / "embedded")
    records = list(read_corpus(tmp_path / "embedded"))
    if corpus_format == 1:  # the control: the base's 200 documents (format 2 keeps it cheap)
        control = arm(tmp_path, "control", setting="control")
        assert len(records) == control["counts"]["final_documents"]
    assert len(records) == 200
    assert manifest["removed_base_ids"] == verbatim["removed_base_ids"]  # the same removals
    base_ids = {r["id"] for r in records if not r["sample"]}
    hosts = {e["id"]: e for e in manifest["embedding"]["documents"]}
    assert {e["host"] for e in hosts.values()} == set(manifest["removed_base_ids"])
    assert not base_ids & set(manifest["removed_base_ids"])  # no host is also a base document
    text_of = {d.id: d.text for part in load_documents("csn-java", ("valid",))
               for d in part.records}
    samples = {s.id: s for s in load_samples("concode", "test").records}
    injected = [r for r in records if r["sample"]]
    assert len(injected) == 10 * 2 * 2 == len(hosts)
    for record in injected:
        where = hosts[record["id"]]
        block = record["text"][where["start"]:where["end"]]
        sample = samples[record["sample"]]
        assert code_tokens(block) == code_tokens(getattr(sample, record["side"]))
        rest = record["text"][:where["start"]] + record["text"][where["end"]:]
        assert squeezed(rest) == squeezed(text_of[where["host"]])
        assert record["form"] == "embedded"
    code = [r for r in injected if r["side"] == "output"]
    assert all("\n" in r["text"][hosts[r["id"]]["start"]:hosts[r["id"]]["end"]] for r in code)
    if corpus_format == 1:
        again = arm(tmp_path, "again", contamination_form="embedded")
        assert again["corpus_sha256"] == manifest["corpus_sha256"]
        assert again["embedding"] == manifest["embedding"]


@needs_corpora
def test_the_other_forms_are_untouched_by_the_embedded_form(tmp_path):
    """The verbatim arm as before (no `embedding`); the placement draws no number of any
    stream but its own."""
    manifest = arm(tmp_path, "reformatted", setting="paired", contamination_form="reformatted")
    assert "embedding" not in manifest
    state = random.getstate()
    arm(tmp_path, "embedded", contamination_form="embedded")
    assert random.getstate() == state
