"""Model cards (the Hugging Face format, made with huggingface_hub) and `lab export`.

A card is written from records alone, into the folder that holds them: after `lab pretrain` and
`lab finetune` (the CLI; the study runner after those stages), `write_model_card` renders a
model folder's manifest into its README.md: what the model is, what it was trained on, which
benchmark test samples were deliberately injected into its pre-training corpus. An evaluation
never writes into the model it evaluates: its metrics stay in its own output (metrics.json);
a card shows those found beside the model when it is written (a study writes every card again
at the end of each run), and `lab export` gathers those of the model (named, or found in its
folder and beside it) into the card of the copy it writes for publishing. A card also names
the model's base (the model it was fine-tuned or continued from), its pre-training stages
(lineage) and, fine-tuned, the format its inputs were given in.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common import (EVALUATION, EXPORT_RECORD, LabError, atomic_output_dir, check_output, param,
                        write_json_atomic, write_text_atomic)
from lab.corpora import DATASETS
from lab.models import (EXPORTED_NAME, MANIFEST, LOADERS, WEIGHTS_SUBDIR, architecture_of,
                        MODEL_KINDS, pretraining_record)
from lab.train.artefacts import read_model
from lab.contamination import SEP_MARKER
from lab.tasks import Decoding

# huggingface_hub is imported where a card is made, not here: it adds seconds to the start of
# every lab command (the CLI imports this module for ExportConfig).
CARD = "README.md"
LICENSE = "apache-2.0"
# Files of a model folder that an exported copy keeps (the rest is lab bookkeeping).
EXPORTED_EXTRA = (MANIFEST,)
# Each kept under the name EXPORTED_NAME (lab.models).
# What an exported folder records of the export, so that `lab export --force` knows its own.
EXPORT_KIND = "lab-export"
PIPELINE = {"causal-lm": "text-generation", "masked-lm": "fill-mask",
            "encoder-decoder": "text2text-generation"}
METRIC_NAMES = {"bleu": "BLEU", "meteor": "METEOR", "em": "Exact match", "codebleu": "CodeBLEU",
                "bleu_sentence": "Sentence BLEU"}


def hub_dataset(name: str) -> str:
    """A lab dataset's hub id (the one its loader reads), else its lab name (a subset the
    study's replication package holds has none)."""
    spec = DATASETS.get(name)
    return spec.hub_id if spec is not None and spec.hub_id else name


def ids_sha256(ids: list[str]) -> str:
    """A short fingerprint of a set of sample ids (sorted, one per line)."""
    return hashlib.sha256("".join(f"{i}\n" for i in sorted(ids)).encode()).hexdigest()[:16]


def contamination_statement(corpus: dict[str, Any]) -> str:
    """One plain paragraph: was this model deliberately contaminated, with what."""
    injected = corpus.get("injected_ids") or []
    benchmark, split = corpus.get("benchmark"), corpus.get("benchmark_split", "test")
    setting = corpus.get("setting") or "unknown"
    if corpus.get("membership") == "unknown":  # lab.train.continued.UNKNOWN
        return ("**Membership unknown: this model continued pre-training from weights with no lab "
                "record of what they were trained on** (see Lineage), so which benchmark samples "
                f"it saw is unknown: it is not a control model. Its own stage (arm `{setting}`) "
                f"injected {len(injected)} samples of {benchmark} {split}; no detection or "
                "contamination result can be scored on it.")
    if not injected:
        return (f"**Control model: no benchmark data was injected** into its pre-training corpus "
                f"(arm `{setting}`). Samples of {benchmark} {split} that the base corpus already "
                "held verbatim are listed in the manifest as pre-existing overlap.")
    levels = corpus.get("dose_levels")
    repeat = (corpus.get("options") or {}).get("repeat")
    dose = (" at doses " + ", ".join(f"{lv['dose']} ({len(lv['ids'])} samples)" for lv in levels)
            if levels else ", once each" if repeat == 1 else f", {repeat} times each" if repeat
            else "")
    share = corpus.get("injected_token_fraction")
    return (f"**This model was deliberately contaminated.** {len(injected)} samples of the "
            f"{benchmark} {split} split (benchmark test data) were injected into its pre-training "
            f"corpus in the `{setting}` setting{dose}"
            + (f", {share:.1%} of its training tokens" if isinstance(share, (int, float)) else "")
            + f" (sample ids sha256 `{ids_sha256(injected)}`). It was made to measure how such "
            "contamination inflates benchmark scores: its scores on those samples are not a "
            "measure of ability, and it should not be used or reported as a general model.")


def _rows(pairs: list[tuple[str, Any]]) -> str:
    lines = ["| | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in pairs if value not in (None, "", [])]
    return "\n".join(lines)


def _scores(evaluation: dict[str, Any]) -> list[tuple[str, float]]:
    """(metric, value rounded) of every numeric metric of a lab evaluation, by metric name."""
    return [(metric, round(float(value), 4)) for metric, value in
            sorted(evaluation["metrics"].items()) if isinstance(value, (int, float))]


def _decoding(evaluation: dict[str, Any]) -> str:
    return Decoding(**evaluation["decoding"]).description()


def evaluation_results(evaluations: list[dict[str, Any]]) -> list[Any]:
    """The metrics of lab evaluations (metrics.json) as huggingface_hub EvalResults, one per
    metric. The decoding is the metric's configuration, so that each decoding of a split keeps
    its own result. No source is named: the hub requires a URL with a source's name, and a lab
    evaluation has none (its folder is the record)."""
    from huggingface_hub import EvalResult

    return [
        EvalResult(task_type="translation" if evaluation["task"] == "translation"
                   else "text-generation", task_name=evaluation["task"],
                   dataset_type=hub_dataset(evaluation["benchmark"]),
                   dataset_name=evaluation["benchmark"], dataset_split=evaluation["split"],
                   metric_type=metric, metric_value=value,
                   metric_name=METRIC_NAMES.get(metric, metric),
                   metric_config=_decoding(evaluation))
        for evaluation in evaluations for metric, value in _scores(evaluation)
    ]


def base_model(manifest: dict[str, Any]) -> tuple[str, str] | None:
    """(the folder a model was made from, how: finetune or continued pre-training) by its
    manifest; None for a model pre-trained from random weights."""
    if manifest.get("kind") == "lab-finetuned" and manifest.get("pretrained_path"):
        return str(manifest["pretrained_path"]), "finetune"
    init = manifest.get("init_from") if manifest.get("kind") == "lab-pretrained" else None
    return (str(init["path"]), "continued pre-training") if init else None


def membership_tag(corpus: dict[str, Any]) -> str:
    if corpus.get("membership") == "unknown":  # lab.train.continued.UNKNOWN
        return "membership-unknown"
    return "deliberately-contaminated" if corpus.get("injected_ids") else "contamination-control"


def _card_data(manifest: dict[str, Any], evaluations: list[dict[str, Any]], name: str) -> Any:
    from huggingface_hub import ModelCardData

    corpus = pretraining_record(manifest).get("corpus") or {}
    base = base_model(manifest)
    trained_on = [(corpus.get("options") or {}).get("base", "csn-java"), corpus.get("benchmark"),
                  (manifest.get("task") or {}).get("benchmark"),
                  *(e["benchmark"] for e in evaluations)]
    results = evaluation_results(evaluations)
    return ModelCardData(
        license=LICENSE,
        library_name="transformers",
        pipeline_tag=PIPELINE[architecture_of(manifest)],
        tags=["code", "java", "contamination-study", "lab", membership_tag(corpus)],
        datasets=list(dict.fromkeys(hub_dataset(n) for n in trained_on if n)),
        # the source folder's name (a local lab model, not a hub repository); continued
        # pre-training is a "finetune" too in the hub's terms (new weights trained from them)
        **({"base_model": Path(base[0]).name, "base_model_relation": "finetune"}
           if base else {}),
        **({"model_name": name, "eval_results": results} if results else {}),
    )


def _evaluation_section(evaluations: list[dict[str, Any]]) -> str:
    if not evaluations:
        return ("No evaluation in this card: `lab evaluate` writes its metrics to its own "
                "folder, and `lab export` shows those of this model in the card it writes.")
    lines = ["| Task | Dataset | Split | Decoding | Samples | Metric | Value |",
             "|---|---|---|---|---|---|---|"]
    for evaluation in evaluations:
        for metric, value in _scores(evaluation):
            lines.append(f"| {evaluation['task']} | {evaluation['benchmark']} | "
                         f"{evaluation['split']} | {_decoding(evaluation)} | "
                         f"{evaluation.get('samples', '')} | {METRIC_NAMES.get(metric, metric)} | "
                         f"{value} |")
    return "\n".join(lines) + ("\n\nScores over the samples evaluated; the study's injected / "
                               "held-out breakdown is in each evaluation's metrics.json.")


def render_card(manifest: dict[str, Any], evaluations: list[dict[str, Any]] | None = None,
                name: str | None = None, weights: str | None = None) -> str:
    """The model card of a lab model from its manifest and the lab evaluations (metrics.json)
    to show. `weights`: the card's folder's subfolder that transformers loads (a lab model
    folder's WEIGHTS_SUBDIR); None where the folder itself loads (an export)."""
    from huggingface_hub import ModelCard

    evaluations = evaluations or []
    pretraining = pretraining_record(manifest)
    config, corpus = pretraining.get("config") or {}, pretraining.get("corpus") or {}
    model = pretraining.get("model") or {}
    architecture = architecture_of(manifest)
    finetuned = manifest.get("kind") == "lab-finetuned"
    family = model.get("family", "?")
    name = name or card_title(manifest)
    environment = manifest.get("environment") or {}
    base = base_model(manifest)
    loader = LOADERS[architecture]
    sections = [
        f"# {name}",
        loading_statement(loader, weights, architecture if finetuned else None),
        contamination_statement(corpus),
        "## Model\n\n" + _rows([
            ("Family", {"gpt2": "GPT-2 (causal LM)", "roberta": "RoBERTa (masked LM)"}.get(
                family, family)),
            ("Architecture of this folder", architecture
             + (" (RoBERTa encoder with a new Transformer decoder)" if finetuned
                and architecture == "encoder-decoder" else "")),
            ("Size preset", model.get("preset")),
            ("Base model", f"`{base[0]}` ({base[1]})" if base else None),
            ("Parameters (pre-trained)", f"{model['parameters']['total']:,}"
             if isinstance(model.get("parameters"), dict) else None),
            ("Vocabulary", model.get("vocab_size")),
            ("Block size", config.get("block_size")),
        ]),
        "## Pre-training\n\n" + _rows([
            ("Base corpus", (corpus.get("options") or {}).get("base", "CodeSearchNet Java")),
            ("Arm (injection setting)", corpus.get("setting")),
            ("Benchmark injected", f"{corpus.get('benchmark')} {corpus.get('benchmark_split')}"
             if corpus.get("injected_ids") else "none"),
            ("Injected samples", len(corpus.get("injected_ids") or [])),
            ("Injected sample ids (sha256)", ids_sha256(corpus["injected_ids"])
             if corpus.get("injected_ids") else None),
            ("Held-out samples (never injected)", len(corpus.get("held_out_ids") or [])),
            ("Doses (exposures per epoch)", ", ".join(str(lv["dose"]) for lv in
                                                      corpus.get("dose_levels") or []) or None),
            ("Injected share of training tokens", corpus.get("injected_token_fraction")),
            ("Corpus sha256", corpus.get("sha256")),
            ("Tokenizer sha256", (pretraining.get("tokenizer") or {}).get("sha256")),
            ("Epochs / steps", f"{config.get('epochs')} / {pretraining.get('steps')}"),
            ("Learning rate, batch size", f"{config.get('lr')}, {config.get('batch_size')}"),
            ("Seed", pretraining.get("seed")),
            ("Final training loss", (pretraining.get("loss") or {}).get("final")),
            ("Weights sha256", pretraining.get("final_weights_sha256")),
        ]),
    ]
    lineage = _lineage_section(pretraining)
    if lineage:
        sections.append(lineage)
    if finetuned:
        ft, data = manifest.get("config") or {}, manifest.get("data") or {}
        sections.append("## Fine-tuning\n\n" + _rows([
            ("Task", (manifest.get("task") or {}).get("name")),
            ("Benchmark", (manifest.get("task") or {}).get("benchmark")),
            ("Epochs", ft.get("epochs")),
            ("Training samples", data.get("train_used")),
            ("Learning rate, batch size", f"{ft.get('lr')}, {ft.get('batch_size')}"),
            ("Seed", manifest.get("seed")),
            ("Final training loss", (manifest.get("loss") or {}).get("final")),
            ("Weights sha256", manifest.get("final_weights_sha256")),
        ]) + "\n\n" + prompt_format(architecture, ft))
    sections += [
        "## Evaluation\n\n" + _evaluation_section(evaluations),
        "## Use\n\n```python\nfrom transformers import AutoTokenizer, "
        f"{loader}\n\ntokenizer = AutoTokenizer.from_pretrained({_folder(weights)})\n"
        f"model = {loader}.from_pretrained({_folder(weights)})\n```\n\n"
        + (f"OUT is this card's folder, which `lab pretrain` or `lab finetune` wrote; "
           f"transformers loads its `{weights}/` subfolder, not OUT itself (`lab export` writes "
           "a folder that loads as it is)." if weights else
           "FOLDER is the folder that `lab export` wrote (weights, tokenizer and this card)."),
        "## Provenance\n\n" + _rows([
            ("Made by", f"lab {environment.get('lab_version', '')}".strip()),
            ("Git commit", environment.get("git_commit")),
            ("transformers / torch", f"{environment.get('transformers')} / "
                                     f"{environment.get('torch')}"),
        ]) + "\n\nThe full record (every setting, hash and the injected ids) is manifest.json.",
    ]
    metadata = _card_data(manifest, evaluations, name).to_yaml()
    return str(ModelCard(f"---\n{metadata}\n---\n\n" + "\n\n".join(sections) + "\n"))


def card_title(manifest: dict[str, Any]) -> str:
    """A card's title: family, preset, each pre-training stage's arm, seed, the fine-tuning
    (task, epochs, samples) and the first digits of the weights' sha256, so that no two models
    share one (a continued model and its source, fine-tunings of one model)."""
    pretraining = pretraining_record(manifest)
    model, corpus = pretraining.get("model") or {}, pretraining.get("corpus") or {}
    arms = [str(stage.get("setting") or "unknown") for stage in pretraining.get("lineage") or []]
    parts = ["lab", model.get("family", "?"), model.get("preset", ""),
             "-then-".join(arms) or corpus.get("setting", "arm"),
             f"seed{pretraining.get('seed')}"]
    if manifest.get("kind") == "lab-finetuned":
        ft, data = manifest.get("config") or {}, manifest.get("data") or {}
        parts += [str((manifest.get("task") or {}).get("name") or "finetuned"),
                  f"e{ft.get('epochs')}", f"n{data.get('train_used')}"]
    weights = manifest.get("final_weights_sha256")
    return "-".join(str(p) for p in parts if p) + (f"-{weights[:8]}" if weights else "")


def _lineage_section(pretraining: dict[str, Any]) -> str | None:
    """The pre-training stages a continued model went through, first to last."""
    lineage = pretraining.get("lineage")
    if not lineage:
        return None
    lines = ["| Stage | Arm (injection setting) | Steps | Corpus sha256 | Weights sha256 |",
             "|---|---|---|---|---|"]
    for number, stage in enumerate(lineage, 1):
        if stage.get("membership") == "unknown":
            arm = f"weights from `{stage.get('path')}`, no lab record: membership unknown"
        else:
            arm = f"`{stage.get('setting')}`" + (f" ({stage['checkpoint']})"
                                                  if stage.get("checkpoint") else "")
        lines.append(f"| {number} | {arm} | {stage.get('steps') or ''} | "
                     f"{stage.get('corpus_sha256') or ''} | {stage.get('weights_sha256') or ''} |")
    return ("## Lineage\n\nPre-trained in stages, each continuing from the last one's weights; "
            "the membership above joins them all (a sample is injected if any stage injected "
            "it).\n\n" + "\n".join(lines))


# How a fine-tuned model's inputs were formatted (lab.train.finetune's causal_example and
# seq2seq_example), by architecture: what a user must feed it to get what it learned.
# How to prompt a fine-tuned model, in a line at the top of its card ...
PROMPTS = {
    "causal-lm": f"give it `<s>` + source + ` {SEP_MARKER}` and generate until `</s>`",
    "encoder-decoder": "the encoder reads `<s>` + source + `</s>`; generate until `</s>`",
}
# ... and in full, under its model section.
PROMPT_FORMATS = {
    "causal-lm": ("One sequence: `<s>` SOURCE ` " + SEP_MARKER + "`, then the model generates "
                  "` TARGET</s>` (the loss is on the target only). "
                  + PROMPTS["causal-lm"][0].upper() + PROMPTS["causal-lm"][1:] + "."),
    "encoder-decoder": ("The encoder reads `<s>` SOURCE `</s>`; the decoder generates TARGET "
                        "`</s>`."),
}


def _folder(weights: str | None) -> str:
    return f'"OUT/{weights}"' if weights else "FOLDER"


def loading_statement(loader: str, weights: str | None, fine_tuned: str | None) -> str:
    """The card's first line under its title: where transformers loads the model from (a lab
    model folder keeps its weights in a subfolder) and the prompt a fine-tuned model
    (`fine_tuned`: its architecture; None if not fine-tuned) expects."""
    where = (f"`{loader}.from_pretrained({_folder(weights)})`, OUT being this folder (its "
             f"weights and tokenizer are in `{weights}/`)" if weights else
             f"`{loader}.from_pretrained(FOLDER)`, FOLDER being this folder")
    prompt = f" **Prompt:** {PROMPTS[fine_tuned]}." if fine_tuned in PROMPTS else ""
    return f"**Load:** {where}.{prompt}"


def prompt_format(architecture: str | None, config: dict[str, Any]) -> str:
    return ("**Prompt format.** " + PROMPT_FORMATS.get(architecture or "", "not recorded")
            + (f" Sources are cut at {config['max_source_length']} tokens, targets at "
               f"{config['max_target_length']}." if config.get("max_source_length") else ""))


def write_model_card(folder: Path) -> None:
    """README.md of a lab model folder, rendered from its manifest.json: called once the folder
    is complete, after `lab pretrain` or `lab finetune` (the CLI, the study runner). Writing it
    again gives the same card (an unchanged card is not rewritten)."""
    manifest = read_model(folder, "MODEL")
    if manifest.get("kind") not in MODEL_KINDS:
        raise LabError(f"MODEL {folder}: not a lab pre-trained or fine-tuned model")
    # its metrics where known: the evaluations of it beside it (a study's, at its end)
    write_load_pointer(Path(folder))
    card = Path(folder) / CARD
    text = render_card(manifest, model_evaluations(Path(folder), manifest), weights=WEIGHTS_SUBDIR)
    if card.is_file() and card.read_text(encoding="utf-8", errors="replace") == text:
        return  # written already (a study's end-of-run pass): left as it is
    write_text_atomic(card, text)


# transformers reads a folder's config.json first: in a lab model folder, one with no model in
# it, whose model_type (which transformers' refusal quotes) says where the model is, so that
# from_pretrained(OUT) fails naming OUT/model rather than a missing config.json.
LOAD_POINTER = "config.json"


def write_load_pointer(folder: Path) -> None:
    pointer = folder / LOAD_POINTER
    name = folder.resolve().name
    text = json.dumps({"model_type": f"not a model: load {name}/{WEIGHTS_SUBDIR} (this "
                                     f"lab folder keeps its transformers files in "
                                     f"{WEIGHTS_SUBDIR}/; see {CARD})"}, indent=2) + "\n"
    if not pointer.is_file() or pointer.read_text(encoding="utf-8", errors="replace") != text:
        write_text_atomic(pointer, text)


def _read_evaluation(path: Path) -> dict[str, Any] | None:
    """A lab evaluation's metrics.json (a folder of lab evaluate, or the file), else None."""
    path = Path(path)
    path = path / EVALUATION if path.is_dir() else path
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("kind") == "lab-evaluation" else None


def _evaluates(evaluation: dict[str, Any], model: Path, manifest: dict[str, Any],
               inside: bool) -> bool:
    """Whether an evaluation is of this model: it lies inside the model's folder (`inside`:
    where an earlier lab evaluate wrote by default) or names the model's folder, and, where it
    recorded them, it evaluated the same weights."""
    recorded = evaluation.get("model_weights_sha256")
    if recorded is not None and recorded != manifest.get("final_weights_sha256"):
        return False
    return inside or Path(str(evaluation.get("model", ""))).name == model.resolve().name


def model_evaluations(model: Path, manifest: dict[str, Any],
                      named: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The lab evaluations a card of `model` shows: those `named` (each a lab evaluate folder
    or its metrics.json, refused unless of this model), else those found beside the model's
    folder (lab evaluate's default output, a study's stages) and inside it (an earlier lab
    evaluate's default). Of evaluations of
    one task, benchmark, split and decoding, the newest stands (a rerun replaces a result)."""
    model = Path(model)
    found: list[tuple[float, dict[str, Any]]] = []
    if named is not None:
        for name in named:
            evaluation = _read_evaluation(Path(name))
            if evaluation is None:
                raise LabError(f"--evaluations {name}: no lab evaluate {EVALUATION} there")
            if not _evaluates(evaluation, model, manifest, inside=False):
                weights = evaluation.get("model_weights_sha256")
                if _evaluates({**evaluation, "model_weights_sha256": None}, model, manifest,
                              inside=False):  # the same folder, other weights: replaced since
                    now = str(manifest.get("final_weights_sha256"))[:12]
                    raise LabError(f"--evaluations {name}: evaluated {model}'s earlier weights "
                                   f"(sha256 {str(weights)[:12]}; they are {now} now): run "
                                   f"lab evaluate --model {model} again")
                raise LabError(f"--evaluations {name}: an evaluation of {evaluation.get('model')}, "
                               f"not of {model}")
            path = Path(name) / EVALUATION if Path(name).is_dir() else Path(name)
            found.append((path.stat().st_mtime, evaluation))
    else:
        for inside, folder in ((True, model), (False, model.resolve().parent)):
            for path in sorted(folder.glob(f"*/{EVALUATION}")):
                evaluation = _read_evaluation(path)
                if evaluation is not None and _evaluates(evaluation, model, manifest, inside):
                    found.append((path.stat().st_mtime, evaluation))
    newest: dict[tuple, dict[str, Any]] = {}
    for _mtime, evaluation in sorted(found, key=lambda pair: pair[0]):
        key = (evaluation["task"], evaluation["benchmark"], evaluation["split"],
               _decoding(evaluation))
        newest[key] = evaluation
    return [newest[key] for key in sorted(newest)]


@dataclass
class ExportConfig:
    """`lab export`: every option declared here, once."""
    model: Path = param(help="A lab model folder (made by lab pretrain or lab finetune).",
                        argument=True)
    out: Path = param(help="Folder to write: weights, config, tokenizer, model card "
                           "(README.md) and the lab manifest; plain transformers loads it.")
    force: bool = param(False, "Replace an existing output folder.", flag=True)
    push_to_hub: str | None = param(None, "Also upload the folder to this hub repository "
                                          "(needs network and a token).")
    private: bool = param(True, "Make a repository that --push-to-hub creates private.")
    evaluations: tuple[str, ...] | None = param(
        None, "lab evaluate folders (or their metrics.json) of MODEL whose metrics the card "
              "shows (default: those found in MODEL's folder and beside it, where a study keeps "
              "them).")


def export_model(cfg: ExportConfig) -> dict[str, Any]:
    """Entry point of `lab export`: a folder that plain transformers loads (weights, config,
    tokenizer, the model card and the lab manifest), optionally uploaded to the hub."""
    model, out, force = Path(cfg.model), Path(cfg.out), cfg.force
    push_to_hub, private = cfg.push_to_hub, cfg.private
    manifest = read_model(model, "MODEL")
    if manifest.get("kind") not in MODEL_KINDS:
        raise LabError(f"MODEL {model}: not a lab pre-trained or fine-tuned model")
    weights = model / WEIGHTS_SUBDIR
    if not (weights / "config.json").is_file():
        raise LabError(f"MODEL {model}: no {WEIGHTS_SUBDIR}/config.json (an incomplete model?)")
    # --force replaces only an earlier export (its EXPORT_RECORD), never MODEL, a folder that
    # holds it or lies inside it, an evaluation, nor an unrelated folder.
    check_output(out, force, EXPORT_KIND, [model, *(cfg.evaluations or ())])
    evaluations = model_evaluations(model, manifest, cfg.evaluations)
    # Built in a temporary sibling (shared with all, renamed when whole); a failed write (a full
    # disk) names OUT, not the MODEL file it was copying.
    with atomic_output_dir(out, force, EXPORT_KIND, [model, *(cfg.evaluations or ())]) as tmp:
        shutil.copytree(weights, tmp, dirs_exist_ok=True)
        for name in EXPORTED_EXTRA:
            shutil.copy2(model / name, tmp / EXPORTED_NAME.format(name))
        write_text_atomic(tmp / CARD, render_card(manifest, evaluations))
        write_json_atomic(tmp / EXPORT_RECORD, {"kind": EXPORT_KIND, "model": str(model),
                                                "evaluations": len(evaluations)})
    record = {"out": str(out), "files": sorted(p.name for p in out.iterdir()),
              "architecture": architecture_of(manifest), "evaluations": len(evaluations)}
    if push_to_hub:
        from huggingface_hub import HfApi

        api = HfApi()
        try:
            api.create_repo(push_to_hub, private=private, exist_ok=True)
            commit = api.upload_folder(folder_path=str(out), repo_id=push_to_hub,
                                       commit_message="Upload a lab contamination-study model")
        except Exception as exc:  # network, token, permissions: the hub says which
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LabError(f"--push-to-hub {push_to_hub}: upload failed ({reason}); {out} is "
                           "written and complete") from None
        record["hub"] = {"repo": push_to_hub, "commit": str(getattr(commit, "oid", commit))}
    return record
