"""Training curves (TensorBoard), model cards, `lab export` and the modes of micro models."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.common import LabError
from lab.modelcard import CARD, ExportConfig, export_model, ids_sha256, write_model_card
from lab.train.common import THROUGHPUT_KEYS
from lab.train.finetune import FinetuneConfig, run_finetune
from lab.train.pretrain import PretrainConfig, run_pretrain

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


@pytest.fixture(scope="module")
def models(micro_world, tmp_path_factory):
    """Micro GPT-2 and RoBERTa pre-trained on the paired arm, GPT-2 also on the control arm,
    and a fine-tuned model of each family (one epoch on 16 samples), each with the card that
    `lab pretrain` and `lab finetune` write once the stage is done."""
    root = tmp_path_factory.mktemp("cards")
    for model, arm in (("gpt2", "paired"), ("roberta", "paired"), ("gpt2", "control")):
        run_pretrain(PretrainConfig(
            model=model, corpus=micro_world / arm, tokenizer=micro_world / "tok",
            out=root / f"pt-{model}-{arm}", preset="micro", max_steps=6, lr=3e-3, batch_size=8,
            block_size=128, seed=0, save_steps=100, log_steps=2, cache_dir=root / "cache"))
        write_model_card(root / f"pt-{model}-{arm}")
    for model in ("gpt2", "roberta"):
        run_finetune(FinetuneConfig(
            pretrained=root / f"pt-{model}-paired", task="translation", epochs=1,
            out=root / f"ft-{model}", train_size=16, batch_size=4, lr=3e-3, log_steps=1,
            max_target_length=48, decoder_layers=1))
        write_model_card(root / f"ft-{model}")
    return root


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


@pytest.mark.parametrize("name", ["pt-gpt2-paired", "pt-roberta-paired", "ft-gpt2", "ft-roberta"])
def test_training_curves_are_tensorboard_event_files_of_the_logged_history(models, name):
    manifest = json.loads((models / name / "manifest.json").read_text())
    scalars = _scalars(models / name / "tensorboard")
    history = [h for h in manifest["loss"]["history"] if "loss" in h]
    assert len(history) >= 3
    # The event files hold the losses the manifest records, at the same steps.
    assert [v for _step, v in scalars["train/loss"]] == pytest.approx([h["loss"] for h in history])
    assert [step for step, _v in scalars["train/loss"]] == [h["step"] for h in history]
    assert len(scalars["train/learning_rate"]) == len(scalars["train/grad_norm"]) == len(history)
    # Throughput after the first log: samples (and, for a pre-training's fixed blocks, tokens)
    # per second, kept out of the manifest's history (timing is not reproducible).
    rates = scalars["train/throughput_samples_per_second"]
    assert len(rates) == len(history) - 1 and all(v > 0 for _s, v in rates)
    assert ("train/throughput_tokens_per_second" in scalars) == name.startswith("pt-")
    assert not any(key in h for h in manifest["loss"]["history"] for key in THROUGHPUT_KEYS)


def test_report_to_a_package_that_is_not_installed_fails_before_any_work(tmp_path, monkeypatch):
    import importlib.util

    from lab.train.common import report_targets

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert report_targets("tensorboard") == ["tensorboard"] and report_targets("none") == []
    with pytest.raises(LabError, match=r"--report-to tensorboard,wandb: the wandb package is not "
                                       r"installed \(pip install wandb\)"):
        report_targets("tensorboard,wandb")


def test_report_to_none_writes_no_event_files_and_unknown_targets_fail(micro_world, tmp_path):
    config = dict(model="gpt2", corpus=micro_world / "control", tokenizer=micro_world / "tok",
                  preset="micro", max_steps=2, batch_size=4, block_size=128,
                  cache_dir=tmp_path / "cache")
    run_pretrain(PretrainConfig(**config, out=tmp_path / "quiet", report_to="none"))
    assert not (tmp_path / "quiet" / "tensorboard").exists()
    with pytest.raises(LabError, match="--report-to tensorbored: unknown target 'tensorbored'"):
        run_pretrain(PretrainConfig(**config, out=tmp_path / "typo", report_to="tensorbored"))
    assert not (tmp_path / "typo").exists() and not (tmp_path / "typo.partial").exists()


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / CARD).read_text()
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def test_model_cards_state_the_contamination_and_the_training(models, micro_world):
    corpus = json.loads((micro_world / "paired" / "manifest.json").read_text())
    injected = corpus["injected_ids"]
    for name, pipeline in (("pt-gpt2-paired", "text-generation"), ("pt-roberta-paired", "fill-mask"),
                           ("ft-gpt2", "text-generation"), ("ft-roberta", "text2text-generation")):
        meta, body = _card(models / name)
        manifest = json.loads((models / name / "manifest.json").read_text())
        assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == pipeline
        assert "deliberately-contaminated" in meta["tags"] and meta["license"] == "apache-2.0"
        # The datasets by the hub ids their loaders read: CSN (the base corpus) and CodeTrans.
        assert meta["datasets"] == ["google/code_x_glue_ct_code_to_text",
                                    "google/code_x_glue_cc_code_to_code_trans"]
        assert "**This model was deliberately contaminated.**" in body
        assert f"{len(injected)} samples of the codetrans test split" in body
        assert ids_sha256(injected) in body and "`paired` setting, once each" in body
        record = manifest.get("pretrained", manifest)
        assert record["final_weights_sha256"] in body and f"| Seed | {record['seed']} |" in body
        assert "model-index" not in meta  # evaluations are shown by lab export
        if name.startswith("ft-"):
            assert "## Fine-tuning" in body and "| Training samples | 16 |" in body
            assert manifest["final_weights_sha256"] in body
    meta, body = _card(models / "pt-gpt2-control")
    assert "contamination-control" in meta["tags"]
    assert "**Control model: no benchmark data was injected**" in body
    assert "deliberately contaminated" not in body


def test_fine_tuned_cards_name_their_base_model_and_prompt_format(models):
    for name, fragment in (("ft-gpt2", "One sequence: `<s>` SOURCE ` <SEP>`"),
                           ("ft-roberta", "The encoder reads `<s>` SOURCE `</s>`")):
        meta, body = _card(models / name)
        assert meta["base_model"] == "pt-" + name[3:] + "-paired"
        assert meta["base_model_relation"] == "finetune"
        assert f"| Base model | `{models / ('pt-' + name[3:] + '-paired')}` (finetune) |" in body
        assert "**Prompt format.** " + fragment in body
        lengths = json.loads((models / name / "manifest.json").read_text())["config"]
        assert (f"Sources are cut at {lengths['max_source_length']} tokens, targets at "
                f"{lengths['max_target_length']}.") in body
    meta, body = _card(models / "pt-gpt2-paired")
    assert "base_model" not in meta and "Prompt format" not in body


def test_a_model_folder_names_the_subfolder_transformers_loads(models):
    """A lab model folder OUT keeps its transformers files in OUT/model: its card says so in
    the line under its title (with a fine-tuned model's prompt), and from_pretrained(OUT)
    refuses it naming OUT/model, where it loads."""
    import transformers

    for name, auto, prompt in (
            ("ft-gpt2", "AutoModelForCausalLM",
             " **Prompt:** give it `<s>` + source + ` <SEP>` and generate until `</s>`."),
            ("pt-roberta-paired", "AutoModelForMaskedLM", "")):
        first = _card(models / name)[1].lstrip().split("\n\n")[1]
        assert first == (f'**Load:** `{auto}.from_pretrained("OUT/model")`, OUT being this '
                         f"folder (its weights and tokenizer are in `model/`).{prompt}")
        loader = getattr(transformers, auto)
        with pytest.raises(ValueError, match=f"not a model: load {name}/model "):
            loader.from_pretrained(str(models / name))
        loader.from_pretrained(str(models / name / "model"))


def test_no_two_cards_share_a_title(models):
    titles = {name: _card(models / name)[1].lstrip().split("\n", 1)[0] for name in MODELS}
    assert len(set(titles.values())) == len(MODELS), titles
    assert titles["ft-gpt2"].startswith("# lab-gpt2-micro-paired-seed0-translation-e1-n16-")


def _continued_manifest(source_corpus: dict, membership: dict) -> dict:
    """A pre-training manifest as continued_records leaves it: `pt-a` (paired) continued on the
    control corpus, or from weights with no lab record."""
    lineage = [{"setting": "paired", "steps": 6, "corpus_sha256": "c1" * 32,
                "weights_sha256": "a1" * 32},
               {"setting": "control", "steps": 4, "corpus_sha256": "c2" * 32,
                "weights_sha256": "b2" * 32}]
    if membership:
        lineage[0] = {"setting": None, "steps": None, "corpus_sha256": None,
                      "weights_sha256": "a1" * 32, "path": "/models/plain", **membership}
    return {"kind": "lab-pretrained", "model": {"family": "gpt2", "preset": "micro"},
            "config": {"block_size": 128}, "seed": 0, "steps": 4,
            "final_weights_sha256": "b2" * 32,
            "corpus": {**source_corpus, **membership}, "lineage": lineage,
            "init_from": {"path": "/models/pt-a", "kind": "lab", "weights_sha256": "a1" * 32,
                          "steps": 6}}


def test_a_continued_model_card_states_its_joined_membership_and_lineage():
    from lab.modelcard import render_card

    paired = {"setting": "paired", "benchmark": "codetrans", "benchmark_split": "test",
              "injected_ids": ["codetrans:test:1", "codetrans:test:2"],
              "held_out_ids": ["codetrans:test:3"]}
    text = render_card(_continued_manifest(paired, {}))
    head, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(head)
    assert "deliberately-contaminated" in meta["tags"] and meta["base_model"] == "pt-a"
    assert body.lstrip().startswith("# lab-gpt2-micro-paired-then-control-seed0-b2b2b2b2\n")
    assert "**This model was deliberately contaminated.** 2 samples" in body
    assert "| Base model | `/models/pt-a` (continued pre-training) |" in body
    assert "## Lineage" in body and "| 1 | `paired` | 6 |" in body and "| 2 | `control` | 4 |" in body

    control = {**paired, "setting": "control", "injected_ids": [], "held_out_ids": []}
    text = render_card(_continued_manifest(control, {"membership": "unknown"}))
    head, body = text[4:].split("\n---\n", 1)
    assert "membership-unknown" in yaml.safe_load(head)["tags"]
    assert "**Membership unknown" in body and "Control model" not in body
    assert "| 1 | weights from `/models/plain`, no lab record: membership unknown |" in body


MODELS = ("pt-gpt2-paired", "pt-roberta-paired", "pt-gpt2-control", "ft-gpt2", "ft-roberta")


@pytest.mark.parametrize("name", MODELS)
def test_every_card_loads_with_huggingface_hub(models, name):
    """The hub's own reader takes every card (an evaluation's source once had a name without
    the URL the hub requires with it) and finds its license."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(models / name / CARD)
    assert card.data.license == "apache-2.0" and card.data.library_name == "transformers"
    assert card.data.eval_results is None


def test_writing_a_card_again_leaves_it_as_it_is(models):
    """A study writes every finished model's card again at the end of each run (lab.study.
    execution.finish): an unchanged card is not rewritten, a missing or stale one is."""
    card = models / "pt-gpt2-paired" / CARD
    text, stamp = card.read_text(), card.stat().st_mtime_ns
    write_model_card(card.parent)
    assert card.stat().st_mtime_ns == stamp
    card.write_text("stale")
    write_model_card(card.parent)
    assert card.read_text() == text


@pytest.mark.parametrize("name", ["pt-gpt2-paired", "ft-gpt2"])
def test_a_models_files_are_readable_by_all(models, tmp_path, name):
    """Like every other output: safetensors saves the weights 0600 (a private temporary file),
    which the lab opens up when it publishes the folder; an export copies them so."""
    export = Path(export_model(ExportConfig(model=models / name, out=tmp_path / "export"))["out"])
    for folder in (models / name, export):
        assert list(folder.rglob("model.safetensors"))
        for path in (folder, *folder.rglob("*")):
            mode = stat.S_IMODE(path.stat().st_mode)
            wanted = 0o755 if path.is_dir() else 0o644
            assert mode & wanted == wanted, (path, oct(mode))


def test_evaluations_stay_in_their_folders_and_export_shows_them(models, tmp_path):
    """lab evaluate never writes into the model it evaluates; lab export shows the evaluations
    of the model found beside it (as a study keeps them; the newest of a split and decoding
    stands) or those named, as huggingface_hub EvalResults."""
    from huggingface_hub import ModelCard

    from lab.eval.generate import run_evaluate

    model = models / "ft-gpt2"
    before = {p.relative_to(model): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    ids = tmp_path / "ids.txt"
    ids.write_text("codetrans:test:0\ncodetrans:test:1\n")
    options = dict(ids=ids, max_new_tokens=8, metrics=("bleu", "em"))
    for attempt in range(2):  # beside the model, as a study's stages are
        result = run_evaluate(model, "translation", **options, out=models / f"evaluate-{attempt}")
    beam = run_evaluate(model, "translation", **options, decoding="beam:2", out=tmp_path / "beam")
    after = {p.relative_to(model): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert after == before  # not a byte of the evaluated model's folder changed

    found = export_model(ExportConfig(model=model, out=tmp_path / "found"))
    assert found["evaluations"] == 1  # the rerun stands for the first; beam:2 lies elsewhere
    card = ModelCard.load(tmp_path / "found" / CARD)
    assert card.data.license == "apache-2.0"
    assert {(r.metric_type, r.metric_config, r.dataset_name, r.dataset_type, r.dataset_split)
            for r in card.data.eval_results} == {
        (m, "greedy", "codetrans", "google/code_x_glue_cc_code_to_code_trans", "test")
        for m in ("bleu", "em")}
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == pytest.approx(
        {k: result["metrics"][k] for k in ("bleu", "em")}, abs=1e-4)
    assert all(r.source_name is None and r.source_url is None for r in card.data.eval_results)
    assert "| translation | codetrans | test | greedy | 2 | BLEU |" in card.text

    named = export_model(ExportConfig(model=model, out=tmp_path / "named",
                                      evaluations=(str(models / "evaluate-0"), beam["out"])))
    assert named["evaluations"] == 2  # each decoding of a split is a result of its own
    card = ModelCard.load(tmp_path / "named" / CARD)
    assert {r.metric_config for r in card.data.eval_results} == {"greedy", "beam:2"}
    other = run_evaluate(models / "pt-gpt2-paired", "translation", **options,
                         out=tmp_path / "other")
    with pytest.raises(LabError, match=r"--evaluations .*other: an evaluation of .*pt-gpt2-paired, "
                                       r"not of .*ft-gpt2"):
        export_model(ExportConfig(model=model, out=tmp_path / "x", evaluations=(other["out"],)))
    with pytest.raises(LabError, match="--evaluations .*nothing: no lab evaluate metrics.json"):
        export_model(ExportConfig(model=model, out=tmp_path / "x",
                                  evaluations=(str(tmp_path / "nothing"),)))
    assert not (tmp_path / "x").exists()

    # The model's own card, written again (as a study does at the end of each run), shows the
    # metrics now known: those found beside it, as the export's card does.
    write_model_card(model)
    card = ModelCard.load(model / CARD)
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == pytest.approx(
        {k: result["metrics"][k] for k in ("bleu", "em")}, abs=1e-4)
    assert "| translation | codetrans | test | greedy | 2 | BLEU |" in card.text


LOAD_WITHOUT_LAB = """
import sys, json
sys.modules["lab"] = None  # loading must not need the lab
import torch, transformers
folder, auto = sys.argv[1], sys.argv[2]
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
model = getattr(transformers, auto).from_pretrained(folder)
ids = tokenizer("public int size() { return count; }", return_tensors="pt")
with torch.no_grad():
    if auto == "AutoModelForSeq2SeqLM":
        out = model(input_ids=ids["input_ids"], decoder_input_ids=ids["input_ids"][:, :3])
    else:
        out = model(**ids)
print(json.dumps({"class": type(model).__name__, "shape": list(out.logits.shape)}))
"""


@pytest.mark.parametrize("name, auto, cls", [
    ("pt-gpt2-paired", "AutoModelForCausalLM", "GPT2LMHeadModel"),
    ("pt-roberta-paired", "AutoModelForMaskedLM", "RobertaForMaskedLM"),
    ("ft-roberta", "AutoModelForSeq2SeqLM", "EncoderDecoderModel"),
])
def test_an_exported_model_loads_with_plain_transformers(models, tmp_path, name, auto, cls):
    record = export_model(ExportConfig(model=models / name, out=tmp_path / "export"))
    out = Path(record["out"])
    assert {CARD, "config.json", "lab_manifest.json", "tokenizer.json"} <= set(record["files"])
    assert not list(tmp_path.glob("export.tmp*"))  # no temporary sibling (OUT.tmp-PID@HOST-...)
    done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_LAB, str(out), auto],
                          capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["class"] == cls and loaded["shape"][-1] > 1000
    meta, body = _card(out)
    assert ".from_pretrained(FOLDER)`, FOLDER being this folder" in body and "OUT" not in body
    assert "deliberately contaminated" in body and meta["library_name"] == "transformers"
    assert meta["license"] == "apache-2.0"
    with pytest.raises(LabError, match="exists"):
        export_model(ExportConfig(model=models / name, out=out))


def test_export_force_replaces_only_an_earlier_export(models, tmp_path):
    """--force never deletes the folder holding MODEL, an unrelated folder or another command's
    output: only an earlier export, which records itself (lab_export.json)."""
    model = models / "ft-gpt2"
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "notes.txt").write_text("mine")
    for out, message in ((models, "contains an input of this command"),
                         (unrelated, "not a previous lab-export output"),
                         (models / "pt-gpt2-paired", "must be outside MODEL|not a previous")):
        with pytest.raises(LabError, match=message):
            export_model(ExportConfig(model=model, out=out, force=True))
    assert (unrelated / "notes.txt").read_text() == "mine" and (model / "manifest.json").is_file()
    assert (models / "pt-gpt2-paired" / "manifest.json").is_file()
    first = export_model(ExportConfig(model=model, out=tmp_path / "export"))
    again = export_model(ExportConfig(model=model, out=tmp_path / "export", force=True))
    assert again["files"] == first["files"] and "lab_export.json" in first["files"]


def test_push_to_hub_uploads_the_exported_folder(models, tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, private, exist_ok):
            calls.append(("create", repo_id, private, exist_ok))

        def upload_folder(self, folder_path, repo_id, commit_message):
            calls.append(("upload", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))
            return type("Commit", (), {"oid": "abc123"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    record = export_model(ExportConfig(model=models / "ft-gpt2", out=tmp_path / "push",
                                       push_to_hub="someone/lab-ft-gpt2"))
    assert calls[0] == ("create", "someone/lab-ft-gpt2", True, True)
    assert calls[1][0] == "upload" and CARD in calls[1][2] and "config.json" in calls[1][2]
    assert record["hub"] == {"repo": "someone/lab-ft-gpt2", "commit": "abc123"}


def test_push_to_hub_without_network_is_one_line_and_keeps_the_export(models, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lab.cli", "export", str(models / "ft-gpt2"), "--out",
         str(tmp_path / "out"), "--push-to-hub", "someone/lab-ft-gpt2"],
        capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("lab: error: --push-to-hub someone/lab-ft-gpt2: upload failed (")
    assert (tmp_path / "out" / "config.json").is_file() and not (tmp_path / "out.tmp").exists()


def test_export_refuses_what_is_not_a_lab_model(tmp_path):
    with pytest.raises(LabError, match="no manifest.json"):
        export_model(ExportConfig(model=tmp_path, out=tmp_path / "x"))
