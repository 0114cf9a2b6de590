"""Model cards (Hugging Face format: YAML metadata, then Markdown) and `lab export`.

Every pre-trained and fine-tuned model folder gets README.md, rendered from its manifest: what
the model is, what it was trained on, which benchmark test samples were deliberately injected
into its pre-training corpus, and, once `lab evaluate` has scored it, its metrics. The card's
`model-index` metadata is where evaluations accumulate (each evaluation replaces its own entry),
so the card is re-rendered whole every time and never edited in place.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from lab.common import LabError, param, write_text_atomic
from lab.models import LOADERS, WEIGHTS_SUBDIR, architecture_of
from lab.train.finetune import pretraining_record, read_stage_manifest

CARD = "README.md"
# Files of a model folder that an exported copy keeps (the rest is lab bookkeeping).
EXPORTED_EXTRA = ("manifest.json",)
PIPELINE = {"causal-lm": "text-generation", "masked-lm": "fill-mask",
            "encoder-decoder": "text2text-generation"}
METRIC_NAMES = {"bleu": "BLEU", "meteor": "METEOR", "em": "Exact match", "codebleu": "CodeBLEU",
                "bleu_sentence": "Sentence BLEU"}


def ids_sha256(ids: list[str]) -> str:
    """A short fingerprint of a set of sample ids (sorted, one per line)."""
    return hashlib.sha256("".join(f"{i}\n" for i in sorted(ids)).encode()).hexdigest()[:16]


def contamination_statement(corpus: dict[str, Any]) -> str:
    """One plain paragraph: was this model deliberately contaminated, with what."""
    injected = corpus.get("injected_ids") or []
    benchmark, split = corpus.get("benchmark"), corpus.get("benchmark_split", "test")
    setting = corpus.get("setting") or "unknown"
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


def _metadata(manifest: dict[str, Any], results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    corpus = pretraining_record(manifest).get("corpus") or {}
    contaminated = bool(corpus.get("injected_ids"))
    datasets = ["code_search_net"] + ([corpus["benchmark"]] if corpus.get("benchmark") else [])
    return {
        "library_name": "transformers",
        "pipeline_tag": PIPELINE[architecture_of(manifest)],
        "tags": ["code", "java", "contamination-study", "lab",
                 "deliberately-contaminated" if contaminated else "contamination-control"],
        "datasets": datasets,
        "model-index": [{"name": name, "results": results}],
    }


def _evaluation_section(results: list[dict[str, Any]]) -> str:
    if not results:
        return "Not evaluated yet (`lab evaluate` adds its metrics here)."
    lines = ["| Task | Dataset | Split | Metric | Value | By |", "|---|---|---|---|---|---|"]
    for result in results:
        for metric in result["metrics"]:
            lines.append(f"| {result['task']['name']} | {result['dataset']['name']} | "
                         f"{result['dataset']['split']} | {metric['name']} | {metric['value']} | "
                         f"{(result.get('source') or {}).get('name', '')} |")
    return "\n".join(lines) + ("\n\nScores on all samples of the split; the study's injected / "
                               "held-out breakdown is in the evaluation's metrics.json.")


def render_card(manifest: dict[str, Any], results: list[dict[str, Any]] | None = None,
                name: str | None = None) -> str:
    """The model card of a lab model from its manifest and its evaluations (model-index
    results)."""
    results = results or []
    pretraining = pretraining_record(manifest)
    config, corpus = pretraining.get("config") or {}, pretraining.get("corpus") or {}
    model = pretraining.get("model") or {}
    architecture = architecture_of(manifest)
    finetuned = manifest.get("kind") == "lab-finetuned"
    family = model.get("family", "?")
    name = name or (f"lab-{family}-{model.get('preset', '')}-{corpus.get('setting', 'arm')}"
                    f"-seed{pretraining.get('seed')}" + ("-finetuned" if finetuned else ""))
    environment = manifest.get("environment") or {}
    sections = [
        f"# {name}",
        contamination_statement(corpus),
        "## Model\n\n" + _rows([
            ("Family", {"gpt2": "GPT-2 (causal LM)", "roberta": "RoBERTa (masked LM)"}.get(
                family, family)),
            ("Architecture of this folder", architecture
             + (" (RoBERTa encoder with a new Transformer decoder)" if finetuned
                and architecture == "encoder-decoder" else "")),
            ("Size preset", model.get("preset")),
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
        ]))
    sections += [
        "## Evaluation\n\n" + _evaluation_section(results),
        "## Use\n\n```python\nfrom transformers import AutoTokenizer, "
        f"{LOADERS[architecture]}\n\ntokenizer = AutoTokenizer.from_pretrained(FOLDER)\n"
        f"model = {LOADERS[architecture]}.from_pretrained(FOLDER)\n```\n\n"
        "FOLDER is the folder that `lab export` wrote (weights, tokenizer and this card).",
        "## Provenance\n\n" + _rows([
            ("Made by", f"lab {environment.get('lab_version', '')}".strip()),
            ("Git commit", environment.get("git_commit")),
            ("transformers / torch", f"{environment.get('transformers')} / "
                                     f"{environment.get('torch')}"),
        ]) + "\n\nThe full record (every setting, hash and the injected ids) is manifest.json.",
    ]
    metadata = yaml.safe_dump(_metadata(manifest, results, name), sort_keys=False,
                              allow_unicode=True)
    return f"---\n{metadata}---\n\n" + "\n\n".join(sections) + "\n"


def read_card_results(folder: Path) -> list[dict[str, Any]]:
    """The model-index results of a folder's card ([] without a card or results)."""
    path = Path(folder) / CARD
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return []
    try:
        metadata = yaml.safe_load(text[4:text.index("\n---\n", 4)]) or {}
        results = metadata["model-index"][0]["results"]
    except (ValueError, yaml.YAMLError, KeyError, IndexError, TypeError, AttributeError):
        return []  # not a card the lab wrote, or one edited out of shape: its results are lost
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []


def write_model_card(folder: Path, manifest: dict[str, Any],
                     results: list[dict[str, Any]] | None = None) -> Path:
    path = Path(folder) / CARD
    write_text_atomic(path, render_card(manifest, results))
    return path


@contextmanager
def _card_lock(folder: Path) -> Iterator[None]:
    # Two evaluations of one model (a study's splits or decodings) may finish at once. The lock
    # is on the model's manifest (always there, never rewritten): no lock file is left behind.
    with open(Path(folder) / "manifest.json", "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def evaluation_result(evaluation: dict[str, Any]) -> dict[str, Any]:
    """A lab evaluation (metrics.json) as one model-index result; its source names the
    decoding, so that each decoding of a split keeps its own result."""
    from lab.eval.generate import Decoding

    decoding = Decoding(**evaluation["decoding"]).description()
    return {
        "task": {"type": "translation" if evaluation["task"] == "translation"
                 else "text-generation", "name": evaluation["task"]},
        "dataset": {"type": evaluation["benchmark"], "name": evaluation["benchmark"],
                    "split": evaluation["split"]},
        "metrics": [{"type": metric, "value": round(float(value), 4),
                     "name": METRIC_NAMES.get(metric, metric)}
                    for metric, value in sorted(evaluation["metrics"].items())
                    if isinstance(value, (int, float))],
        "source": {"name": f"lab evaluate, {decoding}"},
    }


def record_evaluation(model_folder: Path, evaluation: dict[str, Any]) -> None:
    """Re-render a model's card with this evaluation's metrics (replacing an earlier result of
    the same task, dataset, split and decoding). Folders without a lab manifest are skipped."""
    folder = Path(model_folder)
    if not (folder / "manifest.json").is_file():
        return
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("kind") not in ("lab-pretrained", "lab-finetuned"):
        return
    new = evaluation_result(evaluation)
    key = ("task", "dataset", "source")
    with _card_lock(folder):
        results = [r for r in read_card_results(folder)
                   if [r.get(k) for k in key] != [new[k] for k in key]] + [new]
        write_model_card(folder, manifest, results)


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


def export_model(cfg: ExportConfig) -> dict[str, Any]:
    """Entry point of `lab export`: a folder that plain transformers loads (weights, config,
    tokenizer, the model card and the lab manifest), optionally uploaded to the hub."""
    model, out, force = Path(cfg.model), Path(cfg.out), cfg.force
    push_to_hub, private = cfg.push_to_hub, cfg.private
    manifest = read_stage_manifest(model, "MODEL")
    if manifest.get("kind") not in ("lab-pretrained", "lab-finetuned"):
        raise LabError(f"MODEL {model}: not a lab pre-trained or fine-tuned model")
    weights = model / WEIGHTS_SUBDIR
    if not (weights / "config.json").is_file():
        raise LabError(f"MODEL {model}: no {WEIGHTS_SUBDIR}/config.json (an incomplete model?)")
    if out.exists() and not force:
        raise LabError(f"--out {out}: exists (use --force to replace it)")
    if out.resolve() == model.resolve() or model.resolve() in out.resolve().parents:
        raise LabError(f"--out {out}: must be outside MODEL")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(weights, tmp)
        for name in EXPORTED_EXTRA:
            shutil.copy2(model / name, tmp / f"lab_{name}")
        write_model_card(tmp, manifest, read_card_results(model))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    record = {"out": str(out), "files": sorted(p.name for p in out.iterdir()),
              "architecture": architecture_of(manifest)}
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
