"""`lab llm-eval` (lab/llm/llm_eval.py): prompts, stopping, task inference, bad input, and end
to end runs on a lab micro GPT-2 (standing in for an LLM) and on a plain Hugging Face folder."""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.eval import metrics as metric_fns
from lab.llm.llm_eval import (
    MARKER, TASKS, _stop_criterion, build_prompt, cut_at_marker, encode_prompts, generate,
    infer_task, load_causal_lm, read_pairs, run_llm_eval,
)
from lab.stats import signed_rank_test

LLAMA = "paper-llm/Llama"

# The README's translation prompt, typed in from it (trailing spaces after the first "}" dropped).
JAVA2CS_PROMPT = """\
Please translate the following Java function into equivalent C# code. End your answer with 'END OF CASE'.
Java:
private void injectBundleContext(BundleContext bundleContext) {
    this.bundleContext = bundleContext;
    this.resourceLoader = new OsgiBundleResourceLoader(bundleContext.getBundle());
}
C#:
private void InjectBundleContext(BundleContext bundleContext) {
    this.bundleContext = bundleContext;
    this.resourceLoader = new OsgiBundleResourceLoader(bundleContext.getBundle());
}
END OF CASE
Java:
SAMPLE
C#:
"""


@pytest.fixture(scope="module")
def corpora() -> Path:
    """$LAB_CORPORA for module-scoped fixtures (conftest's corpora_root is per test)."""
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    return Path(os.environ["LAB_CORPORA"])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two cores shared with other jobs: several OpenMP threads each would spin against them."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def lab_gpt2(micro_world, tmp_path_factory) -> Path:
    """A lab pre-trained micro GPT-2 (256 positions): the LLM stand-in."""
    from lab.train.pretrain import PretrainConfig, run_pretrain

    root = tmp_path_factory.mktemp("llm-eval")
    run_pretrain(PretrainConfig(
        model="gpt2", corpus=micro_world / "paired", tokenizer=micro_world / "tok",
        out=root / "pt-gpt2", preset="micro", max_steps=4, lr=3e-3, batch_size=8,
        block_size=128, seed=0, save_steps=100, cache_dir=root / "cache"))
    return root / "pt-gpt2"


@pytest.fixture(scope="module")
def hf_gpt2(micro_world, tmp_path_factory) -> Path:
    """A plain Hugging Face folder: a small random GPT2LMHeadModel and the lab tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lab.tokenizer import load_tokenizer

    folder = tmp_path_factory.mktemp("hf-gpt2")
    tokenizer = load_tokenizer(micro_world / "tok")
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_inner=64, n_positions=512,
                        vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def micro_run(lab_gpt2, corpora, tmp_path_factory) -> tuple[dict, Path]:
    """The study's defaults (5 repetitions, seeds 0-4) on three Java->C# pairs."""
    out = tmp_path_factory.mktemp("micro-run") / "out"
    result = run_llm_eval(lab_gpt2, corpora / LLAMA / "RQ1RQ2/java2csharp.json",
                          corpora / LLAMA / "RQ1RQ2/java2csharp_perturbed.json",
                          limit=3, max_new_tokens=16, out=out)
    return result, out


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def qa(question: str = "int f() { return 1; }", answer: str = "int F() { return 1; }") -> str:
    return json.dumps({"question": question, "answer": answer})


# --- prompts, stopping, inference -------------------------------------------------------------

def test_translation_prompt_is_the_studys():
    assert build_prompt(TASKS["java2cs"], "SAMPLE") == JAVA2CS_PROMPT


def test_cs2java_swaps_languages_and_example_sides():
    prompt = build_prompt(TASKS["cs2java"], "SAMPLE")
    lines = JAVA2CS_PROMPT.splitlines()
    java, csharp = "\n".join(lines[2:6]), "\n".join(lines[7:11])
    assert prompt.startswith("Please translate the following C# function into equivalent Java "
                             "code. End your answer with 'END OF CASE'.\n")
    assert f"C#:\n{csharp}\nJava:\n{java}\nEND OF CASE\nC#:\nSAMPLE\nJava:\n" in prompt


@pytest.mark.parametrize("task, instruction, tail", [
    ("summarization", "Please summarize the following Java function.",
     "Function:\nSAMPLE\nSummary:\n"),
    ("generation", "Please implement the following Java function.",
     "Instruction:\nSAMPLE\nFunction:\n"),
])
def test_every_prompt_has_instruction_one_shot_example_and_marker(task, instruction, tail):
    prompt = build_prompt(TASKS[task], "SAMPLE")
    assert prompt.startswith(f"{instruction} End your answer with 'END OF CASE'.\n")
    assert prompt.endswith(tail)
    example = prompt[:-len(tail)]
    assert example.endswith("\nEND OF CASE\n") and example.count(MARKER) == 2
    assert ("initializes a `ResourceLoader`" in example if task == "summarization"
            else "public void setName(String name) {" in example)


def test_cut_at_marker():
    assert cut_at_marker(" int X() {}\nEND OF CASE\nJava:\nmore") == "int X() {}"
    assert cut_at_marker("a END OF CASE b END OF CASE") == "a"
    assert cut_at_marker("no marker here\n") == "no marker here"
    assert cut_at_marker("END OF CASE") == ""


def test_stop_criterion_sees_the_answer_only(micro_world):
    import torch

    from lab.tokenizer import load_tokenizer

    tok = load_tokenizer(micro_world / "tok")
    # The marker just before the answer (as where the one-shot example ends), short enough to
    # lie within any tail the criterion might decode.
    prompt = tok("END OF CASE\n", add_special_tokens=False)["input_ids"]
    answers = [tok(" END OF CASE", add_special_tokens=False)["input_ids"],
               tok(" x", add_special_tokens=False)["input_ids"]]
    width = max(len(a) for a in answers)
    rows = [prompt + a + [tok.pad_token_id] * (width - len(a)) for a in answers]
    stop = _stop_criterion(tok, len(prompt))(torch.tensor(rows), None)
    assert stop.tolist() == [True, False]


def test_prompts_are_cut_from_the_left_only_when_the_answer_would_not_fit(micro_world):
    from lab.tokenizer import load_tokenizer

    tok = load_tokenizer(micro_world / "tok")
    prompt = build_prompt(TASKS["java2cs"], "int f() { return 1; }")
    body = tok(prompt, add_special_tokens=False)["input_ids"]
    positions = len(body) + 20
    (kept,), (cut,) = encode_prompts(tok, [prompt], positions, 16, bos_prefix=True)
    assert not cut and kept == [tok.bos_token_id, *body]  # 16 new tokens fit: untouched
    (kept,), (cut,) = encode_prompts(tok, [prompt], positions, 64, bos_prefix=True)
    # 64 new tokens do not fit; the answer keeps min(64, positions / 4) positions.
    assert cut and len(kept) == positions - min(64, positions // 4)
    assert kept[0] == tok.bos_token_id and kept[1:] == body[-(len(kept) - 1):]
    (kept,), (cut,) = encode_prompts(tok, [prompt], None, 4096, bos_prefix=False)
    assert not cut and kept == body


def test_batched_left_padded_generation_equals_one_at_a_time(hf_gpt2):
    model, tok, _ = load_causal_lm(hf_gpt2)
    prompts = [tok(text, add_special_tokens=False)["input_ids"] for text in
               ("public int size() {", "C#:\n", "private void inject(BundleContext b) {")]
    greedy = dict(top_k=1)  # one candidate per step: no randomness
    batched, _ = generate(model, tok, prompts, 512, 12, 3, greedy)
    alone = [generate(model, tok, [p], 512, 12, 1, greedy)[0][0] for p in prompts]
    assert batched == alone and len(set(batched)) == 3


def test_generation_stops_once_the_marker_appears(hf_gpt2, monkeypatch):
    from lab.llm import llm_eval

    model, tok, _ = load_causal_lm(hf_gpt2)
    prompt = [tok("public int size() {", add_special_tokens=False)["input_ids"]]
    (full,), _ = generate(model, tok, prompt, 512, 24, 1, dict(top_k=1))
    early = tok.decode(tok(full, add_special_tokens=False)["input_ids"][:3])
    # What this random model writes first stands in for 'END OF CASE'.
    monkeypatch.setattr(llm_eval, "MARKER", early)
    (stopped,), _ = generate(model, tok, prompt, 512, 24, 1, dict(top_k=1))
    assert full.startswith(stopped) and early in stopped and len(stopped) < len(full)


@pytest.mark.parametrize("names, task", [
    (("java2csharp.json", "java2csharp_perturbed.json"), "java2cs"),
    (("csharp2java.json", "csharp2java_preturbed.json"), "cs2java"),
    (("java_summaries.json", "java_summarie_perturbed.json"), "summarization"),
    (("java_generate.json", "java_generate_perturbed.json"), "generation"),
    (("pair-genne.json", "pair-genne-preturbed.json"), "generation"),
])
def test_task_from_file_names(tmp_path, names, task):
    paths = [write_jsonl(tmp_path / name, [qa()]) for name in names]
    assert infer_task(*paths) == task


def test_task_from_fields_and_refusals(tmp_path):
    record = json.dumps({"description": "Returns one.", "code": "int one() { return 1; }"})
    a, b = write_jsonl(tmp_path / "a.jsonl", [record]), write_jsonl(tmp_path / "b.jsonl", [record])
    assert infer_task(a, b) == "generation"
    c, d = write_jsonl(tmp_path / "c.jsonl", [qa()]), write_jsonl(tmp_path / "d.jsonl", [qa()])
    with pytest.raises(LabError, match=r"c\.jsonl: cannot infer the task .* pass --task"):
        infer_task(c, d)
    e = write_jsonl(tmp_path / "java2csharp.json", [qa()])
    f = write_jsonl(tmp_path / "csharp2java.json", [qa()])
    with pytest.raises(LabError, match="looks like java2cs but .* like cs2java"):
        infer_task(e, f)


def test_reads_both_generation_layouts(corpora):
    questions, answers = read_pairs(corpora / LLAMA / "RQ1RQ2/java_generate.json",
                                    TASKS["generation"])
    assert questions[0].startswith("Write a Java method") and "{" in answers[0]
    descriptions, code = read_pairs(corpora / LLAMA / "RQ4/pair-genne.json",
                                    TASKS["generation"])
    assert len(descriptions) == len(code) == 100 and "(" in code[0]


# --- bad input --------------------------------------------------------------------------------

BAD_DATA = {
    "malformed line": ([qa(), "{not json", qa()], [qa()] * 3,
                       r"java2csharp\.json:2: not valid JSON"),
    "missing field": ([qa(), json.dumps({"question": "x"})], [qa()] * 2,
                      r"java2csharp\.json:2: no 'answer' field"),
    "different lengths": ([qa()] * 3, [qa()] * 2,
                          r"java2csharp\.json has 3 records but .*_perturbed\.json has 2"),
    "empty file": ([], [], r"java2csharp\.json: no records \(empty file\)"),
    "empty reference": ([qa(answer="  ")], [qa()], r"java2csharp\.json:1: empty 'answer' field"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_is_one_line_error_naming_file_and_line(tmp_path, case):
    first, second, message = BAD_DATA[case]
    contaminated = write_jsonl(tmp_path / "java2csharp.json", first)
    perturbed = write_jsonl(tmp_path / "java2csharp_perturbed.json", second)
    with pytest.raises(LabError, match=message) as caught:
        run_llm_eval(tmp_path / "model", contaminated, perturbed, out=tmp_path / "out")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_missing_file_and_bad_options(tmp_path):
    contaminated = write_jsonl(tmp_path / "java2csharp.json", [qa()])
    with pytest.raises(LabError, match=r"java2csharp_perturbed\.json: no such file"):
        run_llm_eval(tmp_path, contaminated, tmp_path / "java2csharp_perturbed.json")
    with pytest.raises(LabError, match="--convention bogus: choose from exact-two-sided"):
        run_llm_eval(tmp_path, contaminated, contaminated, convention="bogus")
    with pytest.raises(LabError, match="--limit 0: must be >= 1"):
        run_llm_eval(tmp_path, contaminated, contaminated, limit=0)
    with pytest.raises(LabError, match="--task translation: choose from java2cs, cs2java"):
        run_llm_eval(tmp_path, contaminated, contaminated, task="translation")


def _bad_models(root: Path) -> dict[str, tuple[Path, str]]:
    from transformers import RobertaConfig, T5Config

    empty = root / "empty"
    empty.mkdir(parents=True)
    roberta = root / "roberta-hf"
    RobertaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                  intermediate_size=64).save_pretrained(roberta)
    lab_roberta = root / "lab-roberta"
    lab_roberta.mkdir()
    (lab_roberta / "manifest.json").write_text(json.dumps(
        {"kind": "lab-pretrained", "model": {"family": "roberta"}}))
    t5 = root / "t5"
    T5Config(num_layers=1, d_model=32, num_heads=2, d_ff=64).save_pretrained(t5)
    weights = root / "weights.safetensors"
    weights.write_bytes(b"")
    return {
        "hub id": (Path("meta-llama/Llama-2-7b-hf"), "Llama-2-7b-hf: not a local directory"),
        "a file": (weights, "weights.safetensors: not a local directory"),
        "no config": (empty, "empty: no config.json"),
        "roberta": (roberta, "roberta-hf: a masked LM (roberta), not a causal LM"),
        "lab roberta": (lab_roberta, "lab-roberta: a lab roberta model is a masked LM"),
        "encoder-decoder": (t5, "t5: an encoder-decoder (t5), not a causal LM"),
    }


def test_models_that_cannot_generate_are_refused(tmp_path):
    contaminated = write_jsonl(tmp_path / "java2csharp.json", [qa()])
    perturbed = write_jsonl(tmp_path / "java2csharp_perturbed.json", [qa()])
    for case, (model, message) in _bad_models(tmp_path / "models").items():
        with pytest.raises(LabError) as caught:
            run_llm_eval(model, contaminated, perturbed)
        assert message in str(caught.value), case
        assert str(caught.value).startswith(f"--model {model}"), case


def test_a_hub_id_is_refused_by_the_cli(tmp_path):
    contaminated = write_jsonl(tmp_path / "java2csharp.json", [qa()])
    perturbed = write_jsonl(tmp_path / "java2csharp_perturbed.json", [qa()])
    command = [sys.executable, "-m", "lab.cli", "llm-eval", "--model", "bigcode/starcoder",
               "--contaminated", str(contaminated), "--perturbed", str(perturbed),
               "--out", str(tmp_path / "out")]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "lab: error: --model bigcode/starcoder: not a local directory (llm-eval loads a local "
        "Hugging Face model folder and never downloads one)"]
    assert not (tmp_path / "out").exists()


def test_cli_prints_the_table(lab_gpt2, corpora, tmp_path):
    """`lab llm-eval` end to end on the micro model: the paper-style table on stdout."""
    command = [sys.executable, "-m", "lab.cli", "llm-eval", "--model", str(lab_gpt2),
               "--contaminated", str(corpora / LLAMA / "RQ1RQ2/java2csharp.json"),
               "--perturbed", str(corpora / LLAMA / "RQ1RQ2/java2csharp_perturbed.json"),
               "--limit", "2", "--repetitions", "3", "--max-new-tokens", "8",
               "--test", "mann-whitney", "--out", str(tmp_path / "out")]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", COLUMNS="200")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    for text in ("experimental", "control", "BLEU", "METEOR", "Java→C#", "Mann-Whitney U"):
        assert text in done.stdout, text
    assert "p (samples)" not in done.stdout  # the study's unpaired test, as asked
    assert (tmp_path / "out" / "table.md").is_file()


# --- end to end -------------------------------------------------------------------------------

def test_micro_gpt2_end_to_end_table_files_and_statistics(micro_run, corpora):
    from scipy.stats import mannwhitneyu

    result, out = micro_run
    assert result["task"] == "java2cs" and result["model"]["kind"] == "lab-pretrained"
    assert result["config"]["bos_prefix"]  # lab pre-training sequences start with <s>
    assert sorted(p.name for p in out.iterdir()) == ["generations.jsonl", "results.json",
                                                     "table.md"]
    saved = json.loads((out / "results.json").read_text())
    table = (out / "table.md").read_text()
    assert table == result["markdown"] == saved["markdown"]
    assert saved["seeds"] == [0, 1, 2, 3, 4] and saved["config"]["repetitions"] == 5
    for group, name in (("contaminated", "java2csharp.json"),
                        ("perturbed", "java2csharp_perturbed.json")):
        path = corpora / LLAMA / "RQ1RQ2" / name
        assert saved["data"][group]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert saved["data"][group]["used"] == 3 and saved["data"][group]["records"] == 100
    assert saved["environment"]["torch"] and saved["model"]["fingerprint"]

    rows = [json.loads(line) for line in (out / "generations.jsonl").open()]
    assert len(rows) == 5 * 2 * 3
    contaminated = read_pairs(corpora / LLAMA / "RQ1RQ2/java2csharp.json", TASKS["java2cs"])
    for metric, scorer in (("bleu", metric_fns.bleu),
                           ("meteor", lambda r, p: statistics.fmean(
                               metric_fns.meteor_per_sample(r, p)))):
        for group in ("contaminated", "perturbed"):
            runs = [[r for r in rows if (r["repetition"], r["group"]) == (k, group)]
                    for k in range(5)]
            per_rep = [scorer([r["reference"] for r in run], [r["prediction"] for r in run])
                       for run in runs]
            assert per_rep == pytest.approx(saved["per_repetition"][group][metric])
        exp, ctrl = (saved["per_repetition"][g][metric] for g in ("contaminated", "perturbed"))
        expected_p = mannwhitneyu(exp, ctrl, alternative="two-sided", method="asymptotic").pvalue
        stats = saved["statistics"][metric]
        assert stats["p_mann_whitney"] == pytest.approx(expected_p)
        # The default, paired: repetition r of both sets shares seed r; line i is one sample.
        assert stats["pairing"] == "wilcoxon"
        assert stats["p"] == signed_rank_test([e - c for e, c in zip(exp, ctrl)], "t",
                                              "two-sided")[0]
        means = {g: [statistics.fmean(r[metric] for r in rows
                                      if (r["group"], r["index"]) == (g, i)) for i in range(3)]
                 for g in ("contaminated", "perturbed")}
        gaps = [e - c for e, c in zip(means["contaminated"], means["perturbed"])]
        assert stats["samples"] == 3 and stats["sample_gap"] == pytest.approx(statistics.fmean(gaps))
        assert stats["p_samples"] == signed_rank_test(gaps, "t", "two-sided")[0]
        row = next(r for r in saved["rows"] if r["metric"] == metric.upper())
        assert row["experimental"] == f"{statistics.fmean(exp):.2f} ± {statistics.stdev(exp):.2f}"
        assert row["control"] == f"{statistics.fmean(ctrl):.2f} ± {statistics.stdev(ctrl):.2f}"
        assert f"| pt-gpt2 | Java→C# | {metric.upper()} | {row['experimental']} |" in table
        assert set(row) >= {"p", "p (samples)"}
    assert "| p | p (samples) |" in table
    assert ("p: Wilcoxon signed-rank over repetitions paired by seed (exact, two-sided; with 5 "
            "repetitions p >= 0.0625)") in table
    for row in rows:
        assert row["prediction"] == cut_at_marker(row["raw_output"])
        if row["group"] == "contaminated":
            source, reference = contaminated[0][row["index"]], contaminated[1][row["index"]]
            assert row["reference"] == reference
            assert row["prompt_sha256"] == hashlib.sha256(
                build_prompt(TASKS["java2cs"], source).encode()).hexdigest()
    for group in ("contaminated", "perturbed"):
        cut = sum(r["prompt_truncated"] for r in rows
                  if r["group"] == group and r["repetition"] == 0)
        assert saved["data"][group]["truncated_prompts"] == cut > 0  # 256 positions: too few
        assert all(r["max_new_tokens"] <= 16 for r in rows)


def test_same_seed_same_generations_other_seed_others(micro_run, lab_gpt2, corpora):
    result, _ = micro_run
    files = (corpora / LLAMA / "RQ1RQ2/java2csharp.json",
             corpora / LLAMA / "RQ1RQ2/java2csharp_perturbed.json")
    again = run_llm_eval(lab_gpt2, *files, limit=3, max_new_tokens=16, repetitions=2)
    first_two = [r for r in result["generations"] if r["repetition"] < 2]
    by_rep = [[r["raw_output"] for r in first_two if r["repetition"] == k] for k in (0, 1)]
    assert by_rep[0] != by_rep[1]  # each repetition draws from its own seed
    assert [r["raw_output"] for r in again["generations"]] == [r["raw_output"] for r in first_two]
    other = run_llm_eval(lab_gpt2, *files, limit=3, max_new_tokens=16, repetitions=2, seed=7)
    assert other["seeds"] == [7, 8]
    assert [r["raw_output"] for r in other["generations"]] != [r["raw_output"] for r in first_two]


def test_plain_hugging_face_folder_generation_task(hf_gpt2, corpora, tmp_path):
    result = run_llm_eval(hf_gpt2, corpora / LLAMA / "RQ4/pair-genne.json",
                          corpora / LLAMA / "RQ4/pair-genne-preturbed.json", limit=2,
                          repetitions=2, max_new_tokens=8, convention="replication-package")
    assert result["model"]["kind"] == "huggingface" and result["task"] == "generation"
    assert result["model"]["positions"] == 512
    assert not result["config"]["bos_prefix"]  # this tokenizer adds no <s> by itself
    assert {r["metric"] for r in result["rows"]} == {"BLEU", "METEOR"}
    assert result["statistics"]["bleu"]["alternative"] == "greater"
    assert "(exact, greater; with 2 repetitions p >= 0.25)" in result["markdown"]
    assert all(result["data"][g]["truncated_prompts"] == 0 for g in ("contaminated", "perturbed"))
    _, code = read_pairs(corpora / LLAMA / "RQ4/pair-genne.json", TASKS["generation"])
    assert [r["reference"] for r in result["generations"][:2]] == code[:2]
