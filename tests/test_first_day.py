"""What a newcomer meets on the first day (issue 59, item 6): `lab --version`, shell
completion, progress bars that show on a terminal and stay out of logs, a saved model's
tokenizer that truncates to the model's length, and the notebook's default study folder."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lab
from lab import progress
from lab.cli import COMPLETE_VARIABLE, main

REPO = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    return stop.value.code, out, err


# --- lab --version and completion ------------------------------------------------------------

def test_version_prints_the_package_version_and_the_checkout_commit(capsys):
    from lab.common import git_commit

    code, out, err = run_cli(["--version"], capsys)
    assert code == 0 and not err
    assert out.startswith(f"lab {lab.__version__}")
    commit = git_commit()
    assert (f"(git {commit})" in out) if commit else out.strip() == f"lab {lab.__version__}"


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o default -F"),
                                           ("zsh", "#compdef lab"),
                                           ("fish", "complete --command lab")])
def test_completion_prints_a_script_that_asks_lab(shell, marker, capsys):
    code, out, _ = run_cli(["completion", shell], capsys)
    assert code == 0
    assert marker in out and f"{COMPLETE_VARIABLE}=complete_{shell}" in out


def test_completion_answers_commands_and_options():
    """What the bash script runs on TAB: `lab` with the words so far in the environment."""
    def candidates(words: str) -> list[str]:
        env = dict(os.environ, COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1),
                   **{COMPLETE_VARIABLE: "complete_bash"})
        proc = subprocess.run([sys.executable, "-m", "lab.cli"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert candidates("lab pre") == ["pretrain"]
    assert "--max-steps" in candidates("lab pretrain --max")


# --- progress: one decision, and every long step asks it --------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch) -> _Terminal:
    """stderr as a terminal, outside CI and without --quiet: where bars show. Called in the
    test itself: pytest puts its own capture back on sys.stderr after a fixture's setup."""
    for name in (progress.QUIET_VARIABLE, "CI"):
        monkeypatch.delenv(name, raising=False)
    screen = _Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    return screen


def test_progress_shows_on_a_terminal_only(monkeypatch):
    on_terminal(monkeypatch)
    assert progress.showing()
    monkeypatch.setenv("CI", "true")
    assert not progress.showing()
    monkeypatch.setenv("CI", "false")
    assert progress.showing()
    monkeypatch.setenv(progress.QUIET_VARIABLE, "1")
    assert not progress.showing()
    monkeypatch.delenv(progress.QUIET_VARIABLE)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log file, captured test output
    assert not progress.showing()


def test_library_bars_are_off_in_a_log_without_importing_the_libraries():
    """In a log, the hub's and transformers' bars are off once they are imported, and a command
    that never needs them (most refusals) does not import them to say so (2 s a command)."""
    script = (
        "import io, os, sys\n"
        "os.environ.pop('HF_HUB_DISABLE_PROGRESS_BARS', None)\n"
        "sys.stderr = io.StringIO()\n"
        "from lab.progress import quiet_libraries\n"
        "quiet_libraries()\n"
        "imported = 'transformers' in sys.modules\n"
        "from transformers.utils import logging\n"
        "from huggingface_hub.utils import are_progress_bars_disabled\n"
        "print(imported, logging.is_progress_bar_enabled(), are_progress_bars_disabled())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert done.stdout.split() == ["False", "False", "True"], done.stdout + done.stderr


def test_quiet_flag_reaches_the_environment(capsys, monkeypatch):
    """`lab --quiet CMD` is quiet in this process and in every stage or rank it starts."""
    on_terminal(monkeypatch)
    assert progress.showing()
    code, _, _ = run_cli(["--quiet", "completion", "bash"], capsys)
    assert code == 0 and os.environ.get(progress.QUIET_VARIABLE) == "1"
    assert not progress.showing()
    # the libraries' own bars too (transformers' "Writing model shards")
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils.logging import is_progress_bar_enabled

    assert are_progress_bars_disabled() and not is_progress_bar_enabled()


def test_a_stage_log_gets_no_library_bars(tmp_path):
    """A study's stage writes to its log: transformers' own bars stay out of it."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    from lab.study.execution import _output_to

    enable_progress_bars()
    transformers_logging.enable_progress_bar()
    with _output_to(tmp_path / "stage.log"):
        assert are_progress_bars_disabled() and not transformers_logging.is_progress_bar_enabled()


def test_training_shows_the_trainers_bar_on_a_terminal_only(monkeypatch, tmp_path):
    from lab.train.common import training_arguments

    on_terminal(monkeypatch)
    assert training_arguments(tmp_path / "a").disable_tqdm is False
    monkeypatch.setenv("CI", "1")
    assert training_arguments(tmp_path / "b").disable_tqdm is True


# --- a saved model's tokenizer knows the model's length -----------------------------------------

def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from lab.tokenizer import BOS, EOS, MASK, PAD, SPECIAL_TOKENS, UNK

    bpe = Tokenizer(models.BPE(unk_token=UNK))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["int add(int a, int b) { return a + b; }"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK, mask_token=MASK)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Micro GPT-2 and RoBERTa saved with their tokenizers as pre-training saves them."""
    import torch

    from lab.models import build_config, build_model
    from lab.tokenizer import fit_to_model

    root = tmp_path_factory.mktemp("saved")
    torch.manual_seed(0)
    for family in ("gpt2", "roberta"):
        tokenizer = _tokenizer()
        model = build_model(family, build_config(family, "micro", tokenizer, 64))
        model.save_pretrained(str(root / family))
        fit_to_model(tokenizer, model.config).save_pretrained(str(root / family))
    return root


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_a_saved_models_tokenizer_truncates_to_the_models_positions(saved_models, family):
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from lab.models import PRESETS

    folder = saved_models / family
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    positions = PRESETS["micro"].max_positions  # 256; RoBERTa's config says 258 (offset 2)
    assert tokenizer.model_max_length == positions
    text = "return a + b ; " * 2500  # 10,000 tokens
    assert len(tokenizer(text)["input_ids"]) >= 10_000
    ids = tokenizer(text, truncation=True, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == positions
    loader = AutoModelForCausalLM if family == "gpt2" else AutoModelForMaskedLM
    with torch.no_grad():
        logits = loader.from_pretrained(str(folder)).eval()(input_ids=ids).logits
    assert logits.shape[1] == positions


def test_an_encoder_decoders_length_is_the_shorter_side():
    from transformers import EncoderDecoderConfig, GPT2Config, RobertaConfig

    from lab.tokenizer import fit_to_model

    config = EncoderDecoderConfig.from_encoder_decoder_configs(
        RobertaConfig(max_position_embeddings=514), GPT2Config(n_positions=300))
    assert fit_to_model(_tokenizer(), config).model_max_length == 300


def test_pretraining_saves_a_tokenizer_of_the_models_length(micro_world, tmp_path):
    """The model folder `lab pretrain` writes (what `lab export` copies): truncation works, to
    the positions pre-training trained (its block size), not the model's (issue 70)."""
    from transformers import AutoTokenizer

    from lab.models import WEIGHTS_SUBDIR
    from lab.train.pretrain import PretrainConfig, run_pretrain

    run_pretrain(PretrainConfig(model="gpt2", corpus=micro_world / "paired",
                                tokenizer=micro_world / "tok", out=tmp_path / "pt", preset="micro",
                                max_steps=2, batch_size=4, block_size=64, seed=0,
                                cache_dir=tmp_path / "cache"))
    config = json.loads((tmp_path / "pt" / WEIGHTS_SUBDIR / "config.json").read_text())
    trained = json.loads((tmp_path / "pt" / "manifest.json").read_text())["config"]["block_size"]
    assert trained < config["n_positions"]  # else the check below cannot tell them apart
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "pt" / WEIGHTS_SUBDIR))
    assert tokenizer.model_max_length == trained
    ids = tokenizer("x = x + 1 ; " * 3000, truncation=True)["input_ids"]
    assert len(ids) == trained


def test_generation_and_scoring_draw_bars_on_a_terminal_only(saved_models, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.detect.context import _causal_stats
    from lab.eval.generate import generate
    from lab.tasks import Decoding

    folder = saved_models / "gpt2"
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    docs = [tokenizer("int add(int a, int b)")["input_ids"]] * 3

    terminal = on_terminal(monkeypatch)
    generate(model, tokenizer, "causal-lm", ["int a"] * 3, Decoding(), 16, 2, batch_size=2)
    _causal_stats(model, docs, batch_size=2)
    drawn = terminal.getvalue()
    # the total, not the count reached: tqdm redraws at most every 0.1 s, so how far a bar is
    # drawn before it closes depends on the machine's speed
    assert "generating" in drawn and "/2 [" in drawn and "scoring" in drawn

    captured = io.StringIO()  # not a terminal: nothing drawn
    monkeypatch.setattr(sys, "stderr", captured)
    generate(model, tokenizer, "causal-lm", ["int a"] * 3, Decoding(), 16, 2, batch_size=2)
    _causal_stats(model, docs, batch_size=2)
    assert captured.getvalue() == ""


# --- the notebook's default study folder ----------------------------------------------------------

def _notebook_path_cell() -> str:
    notebook = json.loads((REPO / "notebooks" / "contamination_decay.ipynb").read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    (cell,) = [c for c in cells if "STUDY =" in c]
    assert "read_csv" not in cell  # the cell only finds the folder
    return cell


@pytest.mark.parametrize("start", [".", "notebooks"])
def test_notebook_finds_the_checkouts_study_from_the_root_or_notebooks(start, monkeypatch):
    monkeypatch.delenv("LAB_STUDY", raising=False)
    monkeypatch.chdir(REPO / start)
    scope: dict = {}
    exec(_notebook_path_cell(), scope)
    assert scope["STUDY"] == REPO / "runs" / "quickstart"
    # a relative LAB_STUDY as `lab study --out` took it, from the root, works from notebooks/ too
    monkeypatch.setenv("LAB_STUDY", "runs/elsewhere")
    exec(_notebook_path_cell(), scope)
    assert scope["STUDY"] == REPO / "runs" / "elsewhere"
    monkeypatch.setenv("LAB_STUDY", "/abs/elsewhere")
    exec(_notebook_path_cell(), scope)
    assert scope["STUDY"] == Path("/abs/elsewhere")


# --- the README's first commands ------------------------------------------------------------------

def test_readme_puts_its_two_commands_and_the_smoke_test_above_the_results():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    results_table = text.index("| study | headline |")
    first_block = text.index("```bash")
    assert first_block < results_table
    block = text[first_block:text.index("```", first_block + 7)]
    assert "lab study recipes/quickstart.yaml" in block and "bash scripts/test.sh" in block
    smoke = text.index("--smoke")
    assert smoke < results_table and "smoke run" in text[:results_table]
