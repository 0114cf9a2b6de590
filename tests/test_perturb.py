"""lab perturb: consistent sub-token renaming, its guarantees, errors, and the study's twins."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lab.codetokens import KEYWORDS, code_tokens
from lab.common import LabError
from lab.llm.perturb import (
    _SUBTOKEN, cyclomatic, perturbed_count, renamed_identifiers, run_perturb, table_tokens,
)

JAVA = """@Override
protected TokenStreamComponents createComponents(String fieldName) {
    Tokenizer tokenizer = new KeywordTokenizer(); // tokenizer for fieldName
    String label = "fieldName count";
    if (fieldName.length() > 3 && tokenizer.fieldName != null) {
        System.out.println(label + fieldName.toString());
    }
    return new TokenStreamComponents(tokenizer, tokenizer);
}"""
CSHARP = """protected override TokenStreamComponents CreateComponents(string fieldName)
{
    Tokenizer tokenizer = new KeywordTokenizer(); // tokenizer for fieldName
    string label = "fieldName count";
    if (fieldName.Length > 3 && tokenizer.fieldName != null)
    {
        Console.WriteLine(label + fieldName.ToString());
    }
    return new TokenStreamComponents(tokenizer, tokenizer);
}"""

LOOP_JAVA = """public int sumValues(int[] inputValues, int limit) {
    int total = 0;
    for (int index = 0; index < inputValues.length; index++) {
        total += inputValues[index] > limit ? limit : inputValues[index];
    }
    return total;
}"""
LOOP_CSHARP = """public int SumValues(int[] inputValues, int limit)
{
    int total = 0;
    for (int index = 0; index < inputValues.Length; index++)
    {
        total += inputValues[index] > limit ? limit : inputValues[index];
    }
    return total;
}"""
# Nothing declared but an API override: there is nothing the tool may rename.
FROZEN = 'public String toString() { return "frozen"; }'
MIXED = [{"question": JAVA, "answer": CSHARP}, {"question": FROZEN, "answer": FROZEN}]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _translation_file(tmp_path: Path, n: int = 6) -> Path:
    records = [{"question": JAVA, "answer": CSHARP} if i % 2 == 0
               else {"question": LOOP_JAVA, "answer": LOOP_CSHARP} for i in range(n)]
    return _write(tmp_path / "java2csharp.json", records)


def _changed(before: str, after: str) -> list[tuple[str, str]]:
    a, b = code_tokens(before), code_tokens(after)
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def _case_pattern(name: str) -> list[str]:
    return ["upper" if p.isupper() and len(p) > 1 else "title" if p[0].isupper() else "lower"
            for p in _SUBTOKEN.findall(name)]


def test_table_tokens_split_identifiers_into_sub_tokens():
    assert table_tokens("fieldName = HTTPResponse2;") == ["field", "Name", "=", "HTTP", "Response", "2", ";"]
    assert table_tokens('s = "a bC";') == ["s", "=", '"a bC"', ";"]  # literals stay whole


def test_cyclomatic_counts_decisions():
    # 1 + if + && + for + ?: = 5
    assert cyclomatic("void f() { if (a && b) {} for (;;) {} x = c ? 1 : 2; }") == 5


def test_perturbed_count_aligns_or_diffs():
    assert perturbed_count(["a", "b", "c"], ["a", "x", "c"]) == 1
    assert perturbed_count(["a", "b", "c"], ["a", "x", "y", "c"]) == 2  # one replaced by two
    assert renamed_identifiers("int count = 0;", "int total = 0;") == {"count"}


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    src = _translation_file(tmp_path)
    outs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / f"{name}.json"
        run_perturb(src, seed=seed, out=out)
        outs[name] = out.read_bytes()
    assert outs["a"] == outs["b"]
    assert outs["a"] != outs["c"]
    assert outs["a"] != src.read_bytes()


def test_java_and_csharp_get_one_consistent_map(tmp_path):
    report = run_perturb(_translation_file(tmp_path, 1), seed=0)
    renames = report["samples"][0]["renames"]
    assert renames, "the sample declares several renamable names"
    # createComponents / CreateComponents are one group: the same new words, each in its casing.
    new_java, new_cs = renames["createComponents"], renames["CreateComponents"]
    assert new_cs == new_java[0].upper() + new_java[1:]
    out = tmp_path / "out.json"
    run_perturb(tmp_path / "java2csharp.json", seed=0, out=out, force=True)
    record = json.loads(out.read_text().splitlines()[0])
    java_pairs, cs_pairs = _changed(JAVA, record["question"]), _changed(CSHARP, record["answer"])
    for old, new in java_pairs + cs_pairs:
        assert renames[old] == new
        assert _case_pattern(old) == _case_pattern(new)
        assert len(_SUBTOKEN.findall(old)) == len(_SUBTOKEN.findall(new))
    # A name of both sides got the same new name on both sides; the type beside the local did not.
    assert dict(java_pairs)["fieldName"] == dict(cs_pairs)["fieldName"] == renames["fieldName"]
    assert "Tokenizer" not in renames and record["question"].count("Tokenizer ") == 1


def test_keywords_api_names_literals_and_comments_are_untouched(tmp_path):
    src = _write(tmp_path / "in.json", MIXED)
    out = tmp_path / "out.json"
    report = run_perturb(src, seed=1, out=out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    api = {"String", "Tokenizer", "KeywordTokenizer", "TokenStreamComponents", "System", "out", "println",
           "length", "toString", "Console", "WriteLine", "Length", "ToString", "Override", "string"}
    for before, after in ((JAVA, rows[0]["question"]), (CSHARP, rows[0]["answer"])):
        toks, new_toks = code_tokens(before), code_tokens(after)
        changed = [i for i, (x, y) in enumerate(zip(toks, new_toks)) if x != y]
        assert changed
        for i in changed:
            assert toks[i] not in KEYWORDS and toks[i] not in api and not toks[i].startswith('"')
            assert toks[i - 1] != "."  # `tokenizer.fieldName` is another object's member
        assert '"fieldName count"' in after  # string literal contents stay
        assert "// tokenizer for fieldName" in after  # so do comments
    assert rows[1] == {"question": FROZEN, "answer": FROZEN}
    assert [(u["index"], u["line"]) for u in report["unperturbed"]] == [(1, 2)]


def test_token_count_and_complexity_kept_and_length_within_tolerance(tmp_path):
    src = _translation_file(tmp_path)
    for tolerance in (0.0, 0.1):
        out = tmp_path / f"out-{tolerance}.json"
        report = run_perturb(src, seed=2, tolerance=tolerance, out=out)
        originals = [json.loads(line) for line in src.read_text().splitlines()]
        perturbed = [json.loads(line) for line in out.read_text().splitlines()]
        assert report["keep_lab_tokens"] == len(originals)
        for before, after in zip(originals, perturbed):
            for field in ("question", "answer"):
                assert len(code_tokens(before[field])) == len(code_tokens(after[field]))
                assert cyclomatic(before[field]) == cyclomatic(after[field])
                assert abs(len(after[field]) - len(before[field])) <= tolerance * len(before[field])
        assert report["perturbed"] > 0


def test_nl_side_gets_the_same_renames_verbatim(tmp_path):
    record = {"description": "Overrides `createComponents` and ignores the field name.", "code": JAVA}
    out = tmp_path / "out.json"
    report = run_perturb(_write(tmp_path / "gen.json", [record]), seed=0, out=out)
    assert report["code_fields"] == ["code"] and report["nl_fields"] == ["description"]
    row = json.loads(out.read_text())
    assert list(row) == ["description", "code"]  # field order kept
    new = report["samples"][0]["renames"]["createComponents"]
    assert row["description"] == record["description"].replace("createComponents", new)


def test_outputs_and_sidecar(tmp_path):
    src = _translation_file(tmp_path, 4)
    out = tmp_path / "perturbed.json"
    report = run_perturb(src, seed=0, out=out)
    assert len(out.read_text().splitlines()) == 4
    sidecar = json.loads((tmp_path / "perturbed.json.report.json").read_text())
    assert sidecar["input_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert sidecar["seed"] == 0 and len(sidecar["samples"]) == 4
    assert sidecar["fields"] == report["fields"]
    with pytest.raises(LabError, match="exists"):
        run_perturb(src, seed=0, out=out)
    assert not list(tmp_path.glob("*.tmp"))


def _one_line_error(match: str, *args, **kwargs) -> str:
    with pytest.raises(LabError, match=match) as info:
        run_perturb(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_errors_name_file_line_and_field(tmp_path):
    assert "nope.json" in _one_line_error("no such file", tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"question": JAVA, "answer": CSHARP}) + "\n\n{broken\n")
    assert str(bad) in _one_line_error("line 3: not valid JSON", bad)
    missing = _write(tmp_path / "missing.json", [{"question": JAVA, "answer": CSHARP}, {"question": JAVA}])
    _one_line_error("line 2: record has no field 'answer'", missing)
    _one_line_error("unknown field 'code'", missing, code_fields=["code"])


def test_strict_refuses_a_sample_it_cannot_perturb(tmp_path):
    src = _write(tmp_path / "in.json", MIXED)
    message = _one_line_error("sample 1", src, strict=True)
    assert str(src) in message and "line 2" in message
    run_perturb(src, strict=False)  # reported, not refused


def test_compare_twin_must_match(tmp_path):
    src = _translation_file(tmp_path, 4)
    twin = _write(tmp_path / "twin.json", [{"question": JAVA, "answer": CSHARP}])
    _one_line_error("1 records", src, compare=twin)


# The study's own files. Tolerance for the manual ratio vs Table I: 1 point. The study counted
# model tokens; our sub-token count reproduces its ratios to within 0.2 points on this file
# (15.16% vs 15.33%, 15.62% vs 15.49%), so 1 point leaves room but still catches a clearly
# wrong token definition (a whitespace split gives ~30% on these pairs).
def test_paper_llm_llama_java2csharp(corpora_root):
    folder = corpora_root / "paper-llm" / "Llama" / "RQ1RQ2"
    report = run_perturb(folder / "java2csharp.json", seed=0,
                         compare=folder / "java2csharp_perturbed.json")
    compare = report["compare"]
    by_field = {row["field"]: row for row in compare["fields"]}
    for field, table_ratio in (("question", 15.33), ("answer", 15.49)):
        row = by_field[field]
        assert row["table_i"]["ratio"] == table_ratio
        assert abs(row["manual_ratio"] - table_ratio) <= 1.0
        assert 8.0 <= row["auto_ratio"] <= 30.0
    assert compare["auto_keep_lab_tokens"] == 100
    assert 90 <= compare["manual_keep_lab_tokens"] <= 100
    assert report["perturbed"] >= 90
    # Most names the tool renames are names the authors renamed too.
    assert compare["identifiers"]["manual_covers_auto"] >= 0.6
    assert compare["identifiers"]["auto_covers_manual"] >= 0.4
