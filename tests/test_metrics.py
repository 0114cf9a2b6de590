"""Scoring: BLEU and EM against CodeXGLUE's evaluators (code-to-code: strict EM; text-to-code:
whitespace-token EM), METEOR offline, CodeBLEU on Java and C#, the `evaluate` modules loaded from
local folders, and `lab score` (happy path, --task and bad inputs)."""
from __future__ import annotations

import collections
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports huggingface_hub

from lab.common import LabError  # noqa: E402
from lab.eval import metrics  # noqa: E402

JAVA_REF = "public int add(int a, int b) { int total = a + b; return total; }"
JAVA_PRED = "public int add(int a, int b) { return a + b; }"
CS_REF = "public virtual int GetCount(){int n = items.Count; return n + offset;}"
CS_PRED = "public virtual int GetCount(){return items.Count;}"


@pytest.fixture
def codexglue_fixture() -> Path:
    """CodeXGLUE evaluator's sample files, next to the shared corpora ($LAB_CORPORA/..)."""
    value = os.environ.get("LAB_CORPORA")
    if not value:
        pytest.skip("LAB_CORPORA is not set")
    folder = Path(value).parent / "fixtures" / "codexglue-evaluator"
    if not (folder / "predictions.txt").is_file() or not (folder / "references.txt").is_file():
        pytest.skip(f"no CodeXGLUE evaluator fixture in {folder}")
    return folder


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as handle:  # as CodeXGLUE's evaluator reads them
        return [line.strip() for line in handle.readlines()]


def codexglue_bleu(references: list[str], predictions: list[str]) -> float:
    """CodeXGLUE's evaluator (its bleu.py, Google's compute_bleu with smooth=True), transcribed
    as an independent oracle: not lab code."""
    def ngrams(tokens, max_order=4):
        counts = collections.Counter()
        for order in range(1, max_order + 1):
            for i in range(0, len(tokens) - order + 1):
                counts[tuple(tokens[i:i + order])] += 1
        return counts

    matches, possible = [0] * 4, [0] * 4
    ref_len = hyp_len = 0
    for reference, prediction in zip(references, predictions):
        ref, hyp = reference.strip().split(), prediction.strip().split()
        ref_len += len(ref)
        hyp_len += len(hyp)
        overlap = ngrams(hyp) & ngrams(ref)
        for gram in overlap:
            matches[len(gram) - 1] += overlap[gram]
        for order in range(1, 5):
            if len(hyp) - order + 1 > 0:
                possible[order - 1] += len(hyp) - order + 1
    precisions = [(matches[i] + 1.0) / (possible[i] + 1.0) for i in range(4)]
    geo_mean = math.exp(sum(0.25 * math.log(p) for p in precisions))
    ratio = hyp_len / ref_len
    bp = 1.0 if ratio > 1.0 else math.exp(1 - 1.0 / ratio)
    return 100 * geo_mean * bp


def codexglue_code_to_code_acc(references: list[str], predictions: list[str]) -> float:
    """CodeXGLUE's code-to-code-trans evaluator's Acc (stripped lines compared with ==),
    restated as an independent oracle: not lab code."""
    hits = sum(1 for r, p in zip(references, predictions) if r.strip() == p.strip())
    return round(hits / len(references) * 100, 2)


def codexglue_text_to_code_em(references: list[str], predictions: list[str]) -> float:
    """CodeXGLUE's text-to-code evaluator's EM (whitespace tokens), restated likewise."""
    hits = sum(1 for r, p in zip(references, predictions) if p.strip().split() == r.split())
    return round(hits / len(references) * 100, 2)


# --- BLEU and EM -------------------------------------------------------------------------

def test_bleu_and_em_equal_codexglue_evaluator_on_its_fixture(codexglue_fixture: Path) -> None:
    predictions = read_lines(codexglue_fixture / "predictions.txt")
    references = read_lines(codexglue_fixture / "references.txt")
    assert round(metrics.bleu(references, predictions), 2) == 61.08
    corpus, _ = metrics.score(references, predictions, ["bleu", "em"])
    assert round(corpus["bleu"], 2) == 61.08
    assert round(corpus["em"], 2) == 50.0
    assert corpus["bleu"] == pytest.approx(codexglue_bleu(references, predictions), abs=1e-9)


def test_bleu_equals_the_transcribed_evaluator_on_random_corpora() -> None:
    rng = random.Random(5)
    vocabulary = "a b c d e f ( ) { } ; = return int".split()
    for _ in range(50):
        references = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 20))) for _ in range(8)]
        predictions = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 20))) for _ in range(8)]
        assert metrics.bleu(references, predictions) == pytest.approx(
            codexglue_bleu(references, predictions), abs=1e-9)


def test_bleu_edge_cases() -> None:
    reference = "int total = a + b ; return total ;"
    assert metrics.bleu([reference], [reference]) == pytest.approx(100.0)
    assert metrics.bleu([reference], [""]) == 0.0
    assert metrics.bleu_per_sample([reference], [""]) == [0.0]
    assert metrics.bleu_per_sample([reference], [reference]) == [pytest.approx(100.0)]
    # A correct prefix of half the length: every precision is 1, brevity penalty exp(1 - 2).
    half = " ".join(reference.split()[:5])
    assert metrics.bleu([reference], [half]) == pytest.approx(100 * math.exp(1 - 10 / 5))
    # Longer than the reference: no brevity penalty, only lower precisions.
    longer = reference + " extra tokens here"
    assert 0 < metrics.bleu([reference], [longer]) < 100
    # Whitespace does not matter; one empty prediction among others lowers, not zeroes.
    assert metrics.bleu([reference], ["  " + reference.replace(" ", "   ") + "\t"]) == \
        pytest.approx(100.0)
    assert 0 < metrics.bleu([reference, reference], [reference, ""]) < 100


def test_em_ignores_whitespace_only() -> None:
    assert metrics.exact_match_per_sample(["a  b\tc", "a b c"], ["a b c", "a b d"]) == [100.0, 0.0]
    assert metrics.exact_match_tokens_per_sample(["a  b\tc", "a b c"], ["a b c", "a b d"]) == \
        [100.0, 0.0]


# Each case: reference, prediction, EM for translation (strict), EM for generation (tokens).
EM_CASES = [
    ("int a = 1 ;", "int a = 1 ;", 100.0, 100.0),
    ("int a = 1 ;", "int a  = 1 ;", 0.0, 100.0),                  # inner space doubled
    ("int a = 1 ;", "int a =\t1 ;", 0.0, 100.0),                 # inner tab for a space
    ('s.Append("  size ");', 's.Append(" size ");', 0.0, 100.0),  # inside a string literal
    ("int a = 1 ;", "int a = 1 ;  \n", 100.0, 100.0),             # trailing spaces, newline
    ("int a = 1 ;\n", "\t int a = 1 ;\r\n", 100.0, 100.0),       # leading tab, CR LF
    ("int a = 1 ;", "int a=1 ;", 0.0, 0.0),                        # tokens differ
    ("int a = 1 ;", "int b = 1 ;", 0.0, 0.0),
]


@pytest.mark.parametrize("reference,prediction,strict,tokens", EM_CASES)
def test_em_follows_the_tasks_codexglue_evaluator(reference: str, prediction: str, strict: float,
                                                  tokens: float) -> None:
    assert metrics.exact_match_per_sample([reference], [prediction], "translation") == [strict]
    assert metrics.exact_match_per_sample([reference], [prediction], "generation") == [tokens]
    assert metrics.exact_match_strict_per_sample([reference], [prediction]) == [strict]
    assert metrics.exact_match_tokens_per_sample([reference], [prediction]) == [tokens]
    # The oracles (CodeXGLUE's two evaluators restated) agree with the table.
    assert codexglue_code_to_code_acc([reference], [prediction]) == strict
    assert codexglue_text_to_code_em([reference], [prediction]) == tokens


def test_score_em_by_task_and_em_tokens_whatever_the_task() -> None:
    references = [case[0] for case in EM_CASES]
    predictions = [case[1] for case in EM_CASES]
    strict = sum(case[2] for case in EM_CASES) / len(EM_CASES)
    tokens = sum(case[3] for case in EM_CASES) / len(EM_CASES)
    assert strict != tokens
    translation, per_sample = metrics.score(references, predictions, ["em", "em_tokens"],
                                            task="translation")
    assert translation == {"em": strict, "em_tokens": tokens}
    assert per_sample["em"] == [case[2] for case in EM_CASES]
    generation, _ = metrics.score(references, predictions, ["em", "em_tokens"], task="generation")
    assert generation == {"em": tokens, "em_tokens": tokens}
    default, _ = metrics.score(references, predictions, ["em"])  # lab score's default
    assert default == {"em": strict}


def test_em_definitions_name_the_evaluator() -> None:
    assert "strip()" in metrics.describe("translation")["em"]
    assert "split()" in metrics.describe("generation")["em"]
    assert "split()" in metrics.describe("translation")["em_tokens"]
    assert set(metrics.describe()) == set(metrics.METRICS)
    assert "split()" in metrics.describe("summarisation")["em"]
    with pytest.raises(LabError, match="--task 'summarization'"):
        metrics.describe("summarization")
    with pytest.raises(LabError, match="--task 'summarization'"):
        metrics.score(["a"], ["a"], ["em"], task="summarization")


def test_em_on_the_fixture_follows_each_evaluator(codexglue_fixture: Path) -> None:
    """On the CI fixture strict and token EM coincide (Acc 50.0); a copy whose exact hits get
    their inner whitespace doubled tells them apart, as CodeXGLUE's two evaluators do."""
    predictions = read_lines(codexglue_fixture / "predictions.txt")
    references = read_lines(codexglue_fixture / "references.txt")
    corpus, _ = metrics.score(references, predictions, ["em", "em_tokens"], task="translation")
    assert corpus == {"em": 50.0, "em_tokens": 50.0}
    spaced = [p.replace(" ", "  ") if p == r else p for p, r in zip(predictions, references)]
    assert sum(p != q for p, q in zip(spaced, predictions)) == 5
    translation, _ = metrics.score(references, spaced, ["em", "em_tokens"], task="translation")
    generation, _ = metrics.score(references, spaced, ["em"], task="generation")
    assert translation["em"] == codexglue_code_to_code_acc(references, spaced) == 0.0
    assert generation["em"] == translation["em_tokens"] == \
        codexglue_text_to_code_em(references, spaced) == 50.0


def test_evaluate_uses_the_em_of_its_task(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`lab evaluate` (and the study's evaluate stage) score em with their task's definition and
    record it in metrics.json."""
    from lab.corpora import Sample
    from lab.eval import generate as generate_mod

    references = ["int a = 1 ;", "return  b ;", "int c = 2 ;"]
    predictions = ["int a  = 1 ;", "return b ;", "int c = 2 ;"]
    samples = [Sample(f"x:test:{i}", "test", i, f"source {i}", r) for i, r in enumerate(references)]

    class Loaded:
        records = samples

    manifest = {"kind": "lab-finetuned", "config": {"max_source_length": 8,
                                                    "max_target_length": 8}}
    monkeypatch.setattr(generate_mod, "generator_manifest",
                        lambda model_dir: (manifest, "causal-lm"))
    monkeypatch.setattr(generate_mod, "load_generator",
                        lambda model_dir: (None, None, manifest, "causal-lm"))
    monkeypatch.setattr(generate_mod, "load_samples", lambda *args, **kwargs: Loaded())
    monkeypatch.setattr(generate_mod, "generate", lambda *args, **kwargs: list(predictions))
    for task, expected in (("translation", 100 / 3), ("generation", 100.0)):
        out = tmp_path / task
        result = generate_mod.run_evaluate(tmp_path / "model", task, metrics=("em", "em_tokens"),
                                           out=out)
        saved = json.loads((out / "metrics.json").read_text())
        assert saved["task"] == task
        assert saved["metrics"]["em"] == pytest.approx(expected)
        assert saved["metrics"]["em_tokens"] == pytest.approx(100.0)
        assert saved["metric_definitions"]["em"] == metrics.describe(task)["em"]
        assert result["metrics"] == saved["metrics"]
        rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert [r["scores"]["em"] for r in rows] == metrics.exact_match_per_sample(
            references, predictions, task)


def test_score_refuses_bad_inputs() -> None:
    with pytest.raises(LabError, match="2 predictions but 1 references"):
        metrics.score(["a"], ["a", "b"])
    with pytest.raises(LabError, match="reference 2 is empty"):
        metrics.score(["a", " "], ["a", "b"])
    with pytest.raises(LabError, match="unknown metric 'rouge'"):
        metrics.score(["a"], ["a"], ["rouge"])


# --- METEOR ------------------------------------------------------------------------------

@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt of NLTK to download fails the test."""
    import nltk
    import nltk.downloader

    def refuse(*args, **kwargs):
        raise AssertionError("METEOR tried to download NLTK data")

    monkeypatch.setattr(nltk, "download", refuse)
    monkeypatch.setattr(nltk.downloader, "download", refuse)
    monkeypatch.setattr(nltk.downloader.Downloader, "download", refuse)


def meteor(reference: str, prediction: str) -> float:
    return metrics.meteor_per_sample([reference], [prediction])[0]


def test_meteor_works_offline_with_sensible_values(no_download: None) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    sentence = "public int add ( int a , int b ) { return a + b ; }"
    assert meteor(sentence, sentence) == pytest.approx(100.0, abs=0.1)
    assert meteor("the cat sat on the mat", "the cat sat on the mat") > 99
    assert meteor("alpha beta gamma", "delta epsilon zeta") == 0.0
    # Stems count: 'cats'/'values' match 'cat'/'value', where unrelated words would not.
    stemmed = meteor("the cats sat on the values", "the cat sat on the value")
    exact_only = meteor("the cats sat on the values", "the dog sat on the thing")
    assert stemmed > 95 > exact_only
    # WordNet synonyms count: 'quick' for 'fast', 'begin' for 'start'.
    assert meteor("return the fast value", "return the quick value") > \
        meteor("return the fast value", "return the zzz value") + 30
    assert meteor("start the timer", "begin the timer") > 95


def test_meteor_equals_nltk_with_its_stock_wordnet(no_download: None) -> None:
    """The lab's faster WordNet (no OMW mapping, cached lookups) gives NLTK's own numbers."""
    from nltk.corpus import wordnet
    from nltk.translate.meteor_score import meteor_score

    metrics.ensure_wordnet()
    pairs = [
        ("the fast car starts the engine", "the quick automobile begins the engines"),
        ("return the largest value of the list", "returns the big values in a list"),
        ("public void close ( ) { stream . close ( ) ; }",
         "public void shut ( ) { stream . end ( ) ; }"),
        ("get the size of the buffer", "obtain the length of buffers"),
        ("show the dialog window", "display a dialogs window"),
    ]
    for reference, prediction in pairs:
        expected = 100 * meteor_score([reference.split()], prediction.split(), wordnet=wordnet)
        assert meteor(reference, prediction) == pytest.approx(expected, abs=1e-12)


def test_wordnet_installed_by_setup_is_lf(no_download: None) -> None:
    installed = Path(sys.prefix) / "nltk_data" / "corpora" / "wordnet"
    if not installed.is_dir():
        pytest.skip("WordNet not installed in this environment's nltk_data")
    with open(installed / "data.noun", "rb") as handle:
        assert b"\r" not in handle.read(1 << 20)


def test_missing_wordnet_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    def not_found(resource, *args, **kwargs):
        raise LookupError(resource)

    monkeypatch.setattr(nltk.data, "find", not_found)
    with pytest.raises(LabError, match="scripts/setup.sh"):
        metrics.ensure_wordnet()


# --- CodeBLEU ----------------------------------------------------------------------------

@pytest.mark.parametrize("language,reference,prediction",
                         [("java", JAVA_REF, JAVA_PRED), ("cs", CS_REF, CS_PRED)])
def test_codebleu_on_java_and_cs(language: str, reference: str, prediction: str) -> None:
    same = metrics.codebleu_score([reference], [reference], language)
    assert same["codebleu"] == pytest.approx(100.0)
    assert set(same) == {"codebleu", "ngram_match_score", "weighted_ngram_match_score",
                         "syntax_match_score", "dataflow_match_score"}
    different = metrics.codebleu_score([reference], [prediction], language)
    assert 10 < different["codebleu"] < 90
    assert 0 < different["syntax_match_score"] < 100


def test_codebleu_composite_is_the_reference_weighted_sum() -> None:
    """The codebleu package scores 25 where all four components are 0 (it counts a data-flow
    match of 0 as 1); CodeXGLUE's calc_code_bleu.py, and the lab, the weighted sum: 0."""
    from codebleu import calc_codebleu

    reference, unrelated = [JAVA_REF], ["zzz"]
    package = calc_codebleu(reference, unrelated, lang="java")
    assert package["codebleu"] == pytest.approx(0.25)  # the behaviour the lab corrects
    scores = metrics.codebleu_score(reference, unrelated, "java")
    assert {k: v for k, v in scores.items() if k != "codebleu"} == \
        {k: 0.0 for k in metrics.CODEBLEU_WEIGHTS}
    assert scores["codebleu"] == 0.0
    different = metrics.codebleu_score(reference, [JAVA_PRED], "java")
    assert different["dataflow_match_score"] > 0  # where data flow matches, nothing changes
    assert different["codebleu"] == pytest.approx(sum(
        0.25 * different[k] for k in metrics.CODEBLEU_WEIGHTS))


def test_codebleu_does_not_depend_on_the_callers_hash_seed(codexglue_fixture: Path) -> None:
    """codebleu's data-flow match follows set order; the lab fixes it (PYTHONHASHSEED=0)."""
    program = ("import json, sys\nfrom lab.eval.metrics import codebleu_score\n"
               "refs = [l.strip() for l in open(sys.argv[1], encoding='utf-8')]\n"
               "preds = [l.strip() for l in open(sys.argv[2], encoding='utf-8')]\n"
               "print(json.dumps(codebleu_score(refs, preds, 'java')))\n")
    results = []
    for seed in ("1", "2", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", program, codexglue_fixture / "references.txt",
                              codexglue_fixture / "predictions.txt"], env=env, check=True,
                             capture_output=True, text=True, timeout=120)
        results.append(json.loads(out.stdout))
    assert results[0] == results[1] == results[2]
    here = metrics.codebleu_score(read_lines(codexglue_fixture / "references.txt"),
                                  read_lines(codexglue_fixture / "predictions.txt"), "java")
    assert here == results[0]


def test_codebleu_refuses_unknown_language() -> None:
    with pytest.raises(LabError, match="no grammar for language 'python'"):
        metrics.codebleu_score(["a"], ["a"], "python")


def test_score_names_codebleu_components() -> None:
    corpus, _ = metrics.score([JAVA_REF], [JAVA_PRED], ["codebleu"], "java")
    assert sorted(corpus) == ["codebleu", "codebleu_dataflow_match_score",
                              "codebleu_ngram_match_score", "codebleu_syntax_match_score",
                              "codebleu_weighted_ngram_match_score"]


# --- evaluate modules --------------------------------------------------------------------

def test_evaluate_modules_ship_inside_the_package() -> None:
    from importlib.resources import files

    root = files("lab.eval.hf_metrics")
    for name in metrics.METRICS:
        source = (root / name / f"{name}.py").read_text(encoding="utf-8")
        # One call of the shared factory, no metric math here.
        assert f'= evaluate_module("{name}", ' in source
        assert "Counter" not in source and "log(" not in source and "def " not in source


@pytest.mark.parametrize("name", metrics.METRICS)
def test_evaluate_module_loads_offline_and_matches_lab(name: str) -> None:
    references = [JAVA_REF, "int x = 1 ;", "return the fast value ;"]
    predictions = [JAVA_PRED, "int x = 1 ;", "return the quick values ;"]
    module = metrics.load_evaluate_metric(name)
    kwargs = {"language": "java"} if name == "codebleu" else {}
    result = module.compute(predictions=predictions, references=references, **kwargs)
    expected, _ = metrics.score(references, predictions, [name], "java")
    assert result == expected
    assert name in result


def test_evaluate_modules_give_the_fixture_figures(codexglue_fixture: Path) -> None:
    predictions = read_lines(codexglue_fixture / "predictions.txt")
    references = read_lines(codexglue_fixture / "references.txt")
    bleu = metrics.load_evaluate_metric("bleu").compute(predictions=predictions,
                                                         references=references)
    em = metrics.load_evaluate_metric("em").compute(predictions=predictions, references=references)
    assert round(bleu["bleu"], 2) == 61.08
    assert round(em["em"], 2) == 50.0


def test_evaluate_em_module_takes_the_task() -> None:
    references, predictions = ["int a = 1 ;", "int b = 2 ;"], ["int a  = 1 ;", "int b = 2 ;"]
    em = metrics.load_evaluate_metric("em")
    assert em.compute(predictions=predictions, references=references) == {"em": 50.0}
    assert em.compute(predictions=predictions, references=references,
                      task="translation") == {"em": 50.0}
    assert em.compute(predictions=predictions, references=references,
                      task="generation") == {"em": 100.0}
    tokens = metrics.load_evaluate_metric("em_tokens")
    assert tokens.compute(predictions=predictions, references=references) == {"em_tokens": 100.0}


def test_evaluate_codebleu_needs_a_language() -> None:
    module = metrics.load_evaluate_metric("codebleu")
    with pytest.raises(LabError, match="language"):
        module.compute(predictions=["a"], references=["a"])


def test_load_evaluate_metric_refuses_unknown_names() -> None:
    with pytest.raises(LabError, match="unknown metric 'rouge'"):
        metrics.load_evaluate_metric("rouge")


# --- lab score ---------------------------------------------------------------------------

def run_score(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "lab.cli", "score", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=180)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lab: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout.strip() == ""


def test_lab_score_on_the_fixture(codexglue_fixture: Path, tmp_path: Path) -> None:
    out = tmp_path / "scores" / "metrics.json"
    result = run_score(["--pred", codexglue_fixture / "predictions.txt",
                        "--ref", codexglue_fixture / "references.txt", "--language", "java",
                        "--out", out], tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in result.stdout.splitlines() if line.count("│") == 3}
    assert rows["bleu"] == "61.08"
    assert rows["em"] == "50.00"  # CodeXGLUE's evaluator prints "BLEU: 61.08 ; Acc: 50.0"
    assert rows["em_tokens"] == "50.00"
    assert set(rows) >= {"bleu", "bleu_sentence", "meteor", "em", "em_tokens", "codebleu"}
    saved = json.loads(out.read_text())
    assert round(saved["metrics"]["bleu"], 2) == 61.08 and saved["samples"] == 10
    assert saved["task"] == "translation"
    assert saved["metric_definitions"]["em"] == metrics.describe("translation")["em"]


def score_rows(result: subprocess.CompletedProcess) -> dict[str, str]:
    assert result.returncode == 0, result.stderr
    return {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in result.stdout.splitlines() if line.count("│") == 3}


def test_lab_score_task_option(tmp_path: Path) -> None:
    """Plain files: code-to-code EM (strict) unless --task generation (whitespace tokens)."""
    (tmp_path / "r.txt").write_text("int a = 1 ;\nreturn b ;\nint c = 2 ;\nint d ;\n")
    (tmp_path / "p.txt").write_text("int a  = 1 ;\nreturn b ;  \nint c =\t2 ;\nint e ;\n")
    base = ["--pred", "p.txt", "--ref", "r.txt", "--metrics", "em,em_tokens"]
    default = score_rows(run_score(base + ["--out", "default.json"], tmp_path))
    assert default == {"em": "25.00", "em_tokens": "75.00"}
    translation = score_rows(run_score(base + ["--task", "translation"], tmp_path))
    assert translation == default
    generation = score_rows(run_score(base + ["--task", "generation", "--out", "gen.json"],
                                      tmp_path))
    assert generation == {"em": "75.00", "em_tokens": "75.00"}
    saved = json.loads((tmp_path / "default.json").read_text())
    assert saved["task"] == "translation" and "strip()" in saved["metric_definitions"]["em"]
    saved = json.loads((tmp_path / "gen.json").read_text())
    assert saved["task"] == "generation" and "split()" in saved["metric_definitions"]["em"]


def test_lab_score_defaults_to_the_code_to_code_evaluator(tmp_path: Path) -> None:
    """No --task: plain files get CodeXGLUE code-to-code's Acc (the java-cs model outputs'
    56.1, where whitespace tokens give 56.3): inner whitespace counts, trailing does not."""
    (tmp_path / "r.txt").write_text("int a = 1 ;\nreturn b ;\n")
    (tmp_path / "p.txt").write_text("int a  = 1 ;\nreturn b ;  \n")
    result = run_score(["--pred", "p.txt", "--ref", "r.txt", "--metrics", "em", "--out", "m.json"],
                       tmp_path)
    assert score_rows(result) == {"em": "50.00"}
    assert json.loads((tmp_path / "m.json").read_text())["metrics"]["em"] == 50.0
    corpus, _ = metrics.score(["int a = 1 ;", "return b ;"], ["int a  = 1 ;", "return b ;  "],
                              ["em"])
    assert corpus == {"em": 50.0}


def test_lab_score_takes_the_task_of_an_evaluation(tmp_path: Path) -> None:
    """A `lab evaluate` predictions.jsonl is scored with its own task's EM (its metrics.json);
    --task overrides it."""
    run = tmp_path / "eval-generation-test-greedy"
    run.mkdir()
    (run / "predictions.jsonl").write_text(
        json.dumps({"prediction": "int a  = 1 ;", "reference": "int a = 1 ;"}) + "\n")
    (run / "metrics.json").write_text(json.dumps({"kind": "lab-evaluation", "task": "generation"}))
    assert score_rows(run_score(["--pred", run / "predictions.jsonl", "--metrics", "em"],
                                tmp_path)) == {"em": "100.00"}
    assert score_rows(run_score(["--pred", run / "predictions.jsonl", "--metrics", "em",
                                 "--task", "translation"], tmp_path)) == {"em": "0.00"}
    (run / "metrics.json").write_text(json.dumps({"kind": "lab-evaluation", "task": "translation"}))
    assert score_rows(run_score(["--pred", run / "predictions.jsonl", "--metrics", "em"],
                                tmp_path)) == {"em": "0.00"}


def test_lab_score_bad_task(files: Path) -> None:
    base = ["--pred", "predictions.txt", "--ref", "references.txt"]
    assert_one_line_error(run_score(base + ["--task", "summarization"], files),
                          "--task 'summarization'", "translation or generation")


def test_lab_score_reads_predictions_jsonl(codexglue_fixture: Path, tmp_path: Path) -> None:
    predictions = read_lines(codexglue_fixture / "predictions.txt")
    references = read_lines(codexglue_fixture / "references.txt")
    jsonl = tmp_path / "predictions.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "prediction": p, "reference": r}) + "\n"
                             for i, (p, r) in enumerate(zip(predictions, references))))
    result = run_score(["--pred", jsonl, "--metrics", "bleu,em"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "61.08" in result.stdout and "50.00" in result.stdout
    assert "meteor" not in result.stdout


def test_lab_score_reads_lines_like_the_evaluator(tmp_path: Path) -> None:
    """CRLF files and a final newline or none: the same samples."""
    (tmp_path / "p.txt").write_bytes(b"int a = 1 ;\r\nreturn a ;")
    (tmp_path / "r.txt").write_bytes(b"int a = 1 ;\nreturn b ;\n")
    refs, preds = metrics.read_scoring_inputs(tmp_path / "p.txt", tmp_path / "r.txt")
    assert preds == ["int a = 1 ;", "return a ;"] and refs == ["int a = 1 ;", "return b ;"]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    lines = [f"int x{i} = {i} ;" for i in range(10)]
    (tmp_path / "references.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "predictions.txt").write_text("\n".join(lines[:9]) + "\n")
    return tmp_path


def test_lab_score_length_mismatch(files: Path) -> None:
    result = run_score(["--pred", "predictions.txt", "--ref", "references.txt"], files)
    assert_one_line_error(result, "predictions.txt has 9 lines, references.txt has 10")


def test_lab_score_empty_reference_names_its_line(files: Path) -> None:
    lines = (files / "references.txt").read_text().splitlines()
    lines[3] = "   "
    (files / "references.txt").write_text("\n".join(lines[:9]) + "\n")
    result = run_score(["--pred", "predictions.txt", "--ref", "references.txt"], files)
    assert_one_line_error(result, "references.txt:4: empty reference")


def test_lab_score_missing_files(files: Path) -> None:
    assert_one_line_error(run_score(["--pred", "nope.txt", "--ref", "references.txt"], files),
                          "nope.txt: no such file")
    assert_one_line_error(run_score(["--pred", "predictions.txt", "--ref", "gone.txt"], files),
                          "gone.txt: no such file")
    assert_one_line_error(run_score(["--pred", "predictions.txt"], files),
                          "--ref is required", "predictions.txt")


def test_lab_score_corrupt_json_line(files: Path) -> None:
    (files / "predictions.jsonl").write_text(
        '{"prediction": "a", "reference": "a"}\n{"prediction": "b", "refer\n')
    assert_one_line_error(run_score(["--pred", "predictions.jsonl"], files),
                          "predictions.jsonl:2: not valid JSON")
    (files / "predictions.jsonl").write_text('{"prediction": "a"}\n')
    assert_one_line_error(run_score(["--pred", "predictions.jsonl"], files),
                          "predictions.jsonl:1: no 'reference' field")


def test_lab_score_unknown_metric_and_language(files: Path) -> None:
    (files / "predictions.txt").write_text((files / "references.txt").read_text())
    base = ["--pred", "predictions.txt", "--ref", "references.txt"]
    assert_one_line_error(run_score(base + ["--metrics", "bleu,rouge"], files),
                          "unknown metric 'rouge'")
    assert_one_line_error(run_score(base + ["--metrics", "codebleu"], files),
                          "codebleu needs --language")
    assert_one_line_error(run_score(base + ["--language", "python"], files),
                          "--language 'python'")
