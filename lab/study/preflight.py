"""Everything a study needs, checked before its first stage starts.

A study that lacks a piece (a corpus split, NLTK's WordNet, a tree-sitter grammar, submitit,
disk space) must fail in its first second with every missing piece named in one error, not
after minutes of pre-training. The checks only look things up: no dataset is read (files are
located as the loaders would locate them), no model is loaded.

Requirements come from the stages that are not finished yet, so a resumed study asks only for
what its remaining stages read.
"""
from __future__ import annotations

import importlib
import itertools
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

from lab.common import DataNotFound, LabError
from lab.study.cost import CHARS_PER_TOKEN, CSN_DOCUMENT_CHARS, base_documents, parameters
from lab.study.grid import evaluated_models, expand, preset_of
from lab.study.recipe import Recipe
from lab.train.launch import deepspeed_config

# Bytes per parameter of a pre-training stage's output: the final fp32 weights (4) and the two
# checkpoints the Trainer keeps (save_total_limit=2), each with weights and AdamW's two moments
# (12 each). A fine-tuned model keeps its weights only (its checkpoints are removed), but while
# `select: best` trains it holds up to two checkpoints. (While the Trainer rotates checkpoints a
# third exists for a moment: DISK_SAFETY_FACTOR covers it.)
PRETRAIN_BYTES_PER_PARAMETER = 4 + 2 * 12
FINETUNE_BYTES_PER_PARAMETER = 4
FINETUNE_CHECKPOINT_BYTES_PER_PARAMETER = 2 * 12
TOKEN_BYTES = 4           # the token cache stores uint32 ids ...
OFFSET_BYTES = 8          # ... and an int64 offset per document
CORPUS_BYTES_PER_CHAR = 1.2  # an arm's corpus as JSON lines (before gzip: an upper bound)
DISK_SAFETY_FACTOR = 1.5  # the parts are bounds already, but for the mean document length


def pending_stages(recipe: Recipe, study: Path, seeds: list[int] | None = None) -> list[Any]:
    """The recipe's stages (those of the `seeds` shard) not finished in the study folder."""
    return [stage for stage in expand(recipe, seeds) if not stage.done(Path(study))]


def check_ready(recipe: Recipe, study: Path, corpora_dir: Path | None = None,
                executor: str = "local", deepspeed: Any = None,
                seeds: list[int] | None = None, allow_underpowered: bool = False,
                power: bool = True) -> list[str]:
    """Raise one LabError naming every problem `preflight` finds, and a study whose primary
    tests can never reach alpha (lab.analysis.questions.power_problem) unless
    `allow_underpowered`; when all is there, the warnings (`slow_settings`) of the same
    unfinished stages, and the power problem allowed. `power` False: no power check at all (a
    smoke run, whose seeds are not the study's)."""
    from lab.analysis.questions import power_problem

    pending = pending_stages(recipe, study, seeds)
    problems = check_statistics(recipe) + preflight(recipe, study, corpora_dir, executor,
                                                    deepspeed, pending)
    underpowered = power_problem(recipe, evaluated_models(expand(recipe))) if power else None
    if underpowered and not allow_underpowered:
        problems.append(underpowered)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        raise LabError(f"study '{recipe.name}' cannot start ({count}): " + "; ".join(problems))
    return slow_settings(pending, executor) + (
        [f"{underpowered} (allowed: its primary table will not reach alpha)"] if underpowered else [])


def preflight(recipe: Recipe, study: Path, corpora_dir: Path | None = None,
              executor: str = "local", deepspeed: Any = None,
              pending: list[Any] | None = None) -> list[str]:
    """Every missing piece the study's unfinished stages (`pending`, by default found here)
    would stop on, one line each.

    `deepspeed` is the DeepSpeed config a study asks for (a JSON file or a dict), or None; a
    recipe that names one in `resources.pretrain.deepspeed` is checked without being passed it.
    """
    study = Path(study)
    pending = pending_stages(recipe, study) if pending is None else pending
    if deepspeed is None and recipe.resources.pretrain.deepspeed is not None:
        deepspeed = deepspeed_config(recipe.resources.pretrain.deepspeed)
    folder = check_study_folder(study)
    problems = folder + check_corpora(pending, corpora_dir) + check_metrics(pending)
    problems += check_selection(pending, corpora_dir)
    problems += check_executor_packages(executor) + check_deepspeed(deepspeed)
    if pending and executor != "slurm":  # a SLURM study's stages run on other machines
        problems += check_device(recipe.resources.device)
        problems += check_report_to(recipe.resources.report_to, pending)
    if not folder:  # free space is asked of the folder the study will be in
        problems += check_disk(recipe, pending, study)
    # One line per problem, each named once (a missing --corpora folder fails every lookup).
    return list(dict.fromkeys(" ".join(p.split()) for p in problems))


def check_statistics(recipe: Recipe) -> list[str]:
    """The primary metric must be one the evaluations compute: any other leaves the primary
    table nothing to test, which the report would find only after every stage ran."""
    metric = recipe.statistics.primary_metric
    metrics = list(recipe.evaluation.metrics)
    if metric is not None and metric not in metrics:
        return [f"statistics.primary_metric {metric}: not one of evaluation.metrics "
                f"({', '.join(metrics)})"]
    return []


def check_selection(pending: list[Any], corpora_dir: Path | None) -> list[str]:
    """A fine-tuning that selects its best checkpoint needs a validation split apart from its
    training pairs: CONCODE without its train split here trains on dev and has none
    (lab.tasks.fine_tuning_split), which the fine-tuning would refuse after pre-training."""
    from lab.tasks import get_task, has_validation_split

    selecting = [s for s in pending if s.kind == "finetune" and s.config.select == "best"
                 and s.config.epochs > 0]
    for task in sorted({s.config.task for s in selecting}):
        if not has_validation_split(get_task(task), corpora_dir):
            return [f"finetune.select: best needs a validation split apart from the training "
                    f"pairs, and {get_task(task).benchmark} here has none (its train split is "
                    f"missing, so it fine-tunes on its {get_task(task).fallback_train_split} "
                    "split): use last, or add the train "
                    "split to the corpora"]
    return []


def check_device(device: str) -> list[str]:
    """The study's resources.device, where it is asked for here (a GPU that is not there)."""
    from lab.models import resolve_device

    try:
        resolve_device(device, instead="use --set resources.device=cpu")
    except LabError as exc:
        return [f"resources.device: {str(exc).split(': ', 1)[-1]}"]
    return []


def check_report_to(report_to: str, pending: list[Any]) -> list[str]:
    """The packages of resources.report_to (wandb, mlflow, tensorboard), where a pending
    pre-training or fine-tuning would log to them (the Trainer fails only once its model and
    data are built)."""
    from lab.train.common import report_targets

    if not any(stage.kind in ("pretrain", "finetune") for stage in pending):
        return []
    try:
        report_targets(report_to)
    except LabError as exc:
        return [f"resources.report_to: {str(exc).split(': ', 1)[-1]}"]
    return []


def slow_settings(pending: list[Any], executor: str = "local") -> list[str]:
    """Settings of the unfinished stages that run here, but far slower than their author meant
    them to: bf16 autocast on a CPU without bfloat16 instructions. Warnings, not problems: a run
    that must match bf16 numbers may accept the cost. Stages that run elsewhere (SLURM) are not
    judged by this machine."""
    from lab.train.common import bf16_is_native, slow_bf16

    if executor == "slurm":
        return []
    fields = sorted({f"{stage.kind}.bf16" for stage in pending
                     if stage.kind in ("pretrain", "finetune") and stage.config.bf16})
    return [slow_bf16(" and ".join(fields))] if fields and not bf16_is_native() else []


def check_study_folder(study: Path) -> list[str]:
    """The study folder is a writable folder, or can be made (its nearest existing ancestor is
    a writable folder)."""
    study = Path(study)
    if study.exists():
        if not study.is_dir():
            return [f"{study}: exists and is not a study directory"]
        if not os.access(study, os.W_OK | os.X_OK):
            return [f"{study}: not writable"]
        for name in ("stages", "cache"):
            if (study / name).exists() and not (study / name).is_dir():
                return [f"{study / name}: exists and is not a directory"]
        return []
    anchor = _existing_ancestor(study)
    if not anchor.is_dir():
        return [f"{study}: cannot be created, {anchor} is a file"]
    if not os.access(anchor, os.W_OK | os.X_OK):
        return [f"{study}: cannot be created, {anchor} is not writable"]
    return []


def _existing_ancestor(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def required_splits(pending: list[Any]) -> dict[tuple[str, str], list[str]]:
    """(dataset, split) -> the kinds of the stages that fail without it.

    inject: the base corpus's splits and the benchmark's test split; probe: that test split;
    finetune (every epoch count, 0 included: it reads its samples first): the task's train and
    validation splits, except CONCODE's train split, which falls back to dev; evaluate: the
    task's evaluation split. The tokenizer's benchmark train splits are optional (a missing one
    is recorded in its manifest), so they are not required.
    """
    from lab.tasks import get_task

    needed: dict[tuple[str, str], list[str]] = {}

    def need(dataset: str, split: str, kind: str) -> None:
        kinds = needed.setdefault((dataset, split), [])
        if kind not in kinds:
            kinds.append(kind)

    for stage in pending:
        cfg = stage.config
        if stage.kind == "inject":
            for split in cfg.base_splits:
                need(cfg.base, split, "inject")
            need(cfg.benchmark, cfg.split, "inject")
        elif stage.kind == "probe":
            inject = stage.inputs[0].inputs[0].config  # probe <- pretrain <- inject
            need(inject.benchmark, inject.split, "probe")
        elif stage.kind == "detect":
            inject = stage.inputs[1].inputs[0].config  # detect <- groups' pretrain <- inject
            need(inject.benchmark, inject.split, "detect")
        elif stage.kind == "finetune":
            task = get_task(cfg.task)
            if task.fallback_train_split is None:  # else it trains on the fallback if need be
                need(task.benchmark, task.train_split, "finetune")
            need(task.benchmark, task.valid_split, "finetune")
        elif stage.kind == "evaluate":
            need(get_task(cfg.task).benchmark, cfg.split, "evaluate")
    return needed


def check_corpora(pending: list[Any], corpora_dir: Path | None) -> list[str]:
    """Locate (never read) every split the pending stages read; one problem per dataset."""
    from lab.corpora import get_spec

    missing: dict[str, list[tuple[str, list[str], str]]] = {}
    problems: list[str] = []
    hub_needed: list[str] = []
    for (dataset, split), kinds in required_splits(pending).items():
        spec = get_spec(dataset)
        try:
            where, _files = spec.locate(split, corpora_dir)
        except DataNotFound as exc:
            missing.setdefault(dataset, []).append((spec.canonical_split(split), kinds, str(exc)))
            continue
        except LabError as exc:  # a --corpora or LAB_CORPORA folder that does not exist
            problems.append(str(exc))
            continue
        if where == "hub":
            hub_needed.append(f"{dataset} {split}")
    for dataset, splits in missing.items():
        names = ", ".join(f"'{split}'" for split, _k, _m in splits)
        kinds = ", ".join(dict.fromkeys(k for _s, ks, _m in splits for k in ks))
        first_split, _kinds, message = splits[0]
        prefix = f"{dataset} split '{first_split}'"
        what = f"{dataset} split{'s' if len(splits) > 1 else ''} {names} (read by {kinds})"
        problems.append(what + message[len(prefix):] if message.startswith(prefix)
                        else f"{what}: {message}")
    if hub_needed and importlib.util.find_spec("datasets") is None:
        problems.append(f"{', '.join(hub_needed)}: not found locally, and loading it from the hub "
                        "needs the 'datasets' package (.venv/bin/pip install -e '.[hub]')")
    return problems


def check_metrics(pending: list[Any]) -> list[str]:
    """METEOR's WordNet and CodeBLEU's grammar for the metrics the pending evaluations compute."""
    from lab.tasks import get_task

    meteor, codebleu_languages = False, []
    for stage in pending:
        if stage.kind != "evaluate":
            continue
        metrics = stage.config.metrics
        meteor = meteor or "meteor" in metrics
        if "codebleu" in metrics:
            language = get_task(stage.config.task).target_language
            if language not in codebleu_languages:
                codebleu_languages.append(language)
    problems = check_wordnet() if meteor else []
    for language in codebleu_languages:
        problems += check_codebleu(language)
    return problems


def check_wordnet() -> list[str]:
    """metrics.ensure_wordnet (finds WordNet's folder; the corpus itself is read when scored)."""
    from lab.eval.metrics import ensure_wordnet

    try:
        ensure_wordnet()
    except LabError as exc:
        return [str(exc)]
    return []


def check_codebleu(language: str) -> list[str]:
    """The codebleu package and the tree-sitter grammar of `language` load (as codebleu_score
    loads them before scoring)."""
    from lab.eval.metrics import CODEBLEU_LANGUAGES

    if language not in CODEBLEU_LANGUAGES:
        return [f"codebleu: no grammar for language '{language}' (java or cs)"]
    try:
        importlib.import_module("codebleu")
        utils = importlib.import_module("codebleu.utils")
        utils.get_tree_sitter_language(CODEBLEU_LANGUAGES[language])
    except Exception as exc:  # ImportError, or TypeError from a grammar wheel >= 0.23
        return [f"codebleu: cannot load the {language} grammar ({type(exc).__name__}: {exc}): "
                "install codebleu==0.7.0 with tree-sitter-java<0.23 and tree-sitter-c-sharp<0.23 "
                "(scripts/setup.sh)"]
    return []


def check_executor_packages(executor: str) -> list[str]:
    """submitit for the executors that submit through it."""
    if executor not in ("slurm", "submitit-local"):
        return []
    try:
        importlib.import_module("submitit")
    except ImportError:
        return [f"--executor {executor}: needs submitit (.venv/bin/pip install -e '.[slurm]')"]
    return []


def check_deepspeed(config: Any) -> list[str]:
    """A requested DeepSpeed config (a JSON file's path or a dict; None: not requested) is a
    JSON object and the deepspeed package imports."""
    if config is None or config is False:
        return []
    problems = []
    if isinstance(config, (str, Path)):
        path = Path(config)
        if not path.is_file():
            problems.append(f"deepspeed config {path}: no such file")
        else:
            try:
                parsed = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                problems.append(f"deepspeed config {path}: not valid JSON ({exc})")
            else:
                if not isinstance(parsed, dict):
                    problems.append(f"deepspeed config {path}: must hold a JSON object")
    elif not isinstance(config, dict):
        problems.append(f"deepspeed config {config!r}: expected a JSON file or a mapping")
    try:
        importlib.import_module("deepspeed")
    except Exception as exc:  # not installed, or installed without what it needs
        problems.append(f"a DeepSpeed config is requested but deepspeed does not import "
                        f"({type(exc).__name__}: {exc}); pip install deepspeed")
    return problems


def disk_estimate(recipe: Recipe, pending: list[Any]) -> dict[str, Any]:
    """A rough upper bound of the bytes the pending stages write, and what it assumes.

    Arms hold `corpus.limit` documents (else the base splits' documents from the dataset
    manifest, as lab.study.cost counts them) of CSN_DOCUMENT_CHARS characters at CHARS_PER_TOKEN
    characters a token (cost.py's measured means). Token caches: one per arm corpus that a
    pending pre-training reads. Models: lab.study.cost.parameters at the recipe's vocabulary;
    RoBERTa's fine-tuned encoder-decoder counts twice. The total is multiplied by
    DISK_SAFETY_FACTOR.
    """
    documents = recipe.corpus.limit or base_documents(recipe)
    tokens = documents * CSN_DOCUMENT_CHARS / CHARS_PER_TOKEN
    cache_bytes = tokens * TOKEN_BYTES + documents * OFFSET_BYTES
    corpus_bytes = documents * CSN_DOCUMENT_CHARS * CORPUS_BYTES_PER_CHAR
    corpora = sum(1 for s in pending if s.kind == "inject")
    caches = len({s.inputs[0].key for s in pending if s.kind == "pretrain"})
    pretrain = [s for s in pending if s.kind == "pretrain"]
    finetune = [s for s in pending if s.kind == "finetune"]
    params = {(model, preset): parameters(recipe, model, preset)
              for model, preset in itertools.product(recipe.models, recipe.preset)}
    share = {"gpt2": 1, "roberta": 2}
    model_bytes = sum(PRETRAIN_BYTES_PER_PARAMETER * params[s.config.model, s.config.preset]
                      for s in pretrain)
    model_bytes += sum(FINETUNE_BYTES_PER_PARAMETER * share.get(s.labels["model"], 2)
                       * params[s.labels["model"], preset_of(s)] for s in finetune)
    if any(s.config.select == "best" and s.config.epochs > 0 for s in finetune):
        model_bytes += FINETUNE_CHECKPOINT_BYTES_PER_PARAMETER * 2 * max(params.values())
    total = corpora * corpus_bytes + caches * cache_bytes + model_bytes
    return {"bytes": DISK_SAFETY_FACTOR * total, "documents": documents, "tokens": tokens,
            "corpora": corpora, "caches": caches, "pretrain": len(pretrain),
            "finetune": len(finetune), "parameters": params}


def check_disk(recipe: Recipe, pending: list[Any], study: Path) -> list[str]:
    """Free space where the study folder is (or will be) against disk_estimate."""
    if not pending:
        return []
    estimate = disk_estimate(recipe, pending)
    anchor = _existing_ancestor(Path(study))
    try:
        free = shutil.disk_usage(anchor).free
    except OSError:
        return []  # not a folder we can ask about: check_study_folder has said why
    if free >= estimate["bytes"]:
        return []
    several = len({preset for _model, preset in estimate["parameters"]}) > 1
    sizes = ", ".join(f"{model}{' ' + preset if several else ''} {count / 1e6:.1f}M"
                      for (model, preset), count in estimate["parameters"].items())
    return [f"{anchor}: {_size(free)} free, but the study's unfinished stages need about "
            f"{_size(estimate['bytes'])} ({DISK_SAFETY_FACTOR:g}x a bound on "
            f"{estimate['corpora']} arm corpora and {estimate['caches']} token caches of "
            f"{estimate['documents']:,} documents (~{estimate['tokens'] / 1e6:.2f}M tokens) each, "
            f"{estimate['pretrain']} pre-trained models with 2 checkpoints each and "
            f"{estimate['finetune']} fine-tuned ones; parameters: {sizes}); free space or use "
            "another --out"]


def _size(count: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count / 1e3:.0f} kB"
