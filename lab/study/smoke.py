"""`lab study RECIPE --smoke`: a recipe's whole shape on toy sizes, on a CPU, in minutes.

What to run before sending a study to a cluster. The smoke study has every arm, model, stage
kind and swept value of the recipe (fine-tuning epochs and sizes, presets, doses, timing levels,
contamination forms, decontaminators, weight decays, continued pre-training, probes, detectors),
every declared question and the report, and runs through the code of the real run: no mocks,
no skipped stage. Only sizes shrink, by RULES, which is the one statement of them. The run
prints the rules and study.json records them. The smoke study is named NAME-smoke. Its folder
is marked (study.json `smoke`) and every report table says so at its top (the mark:
lab.analysis.study_record). `lab merge` refuses it, and so does results/: its numbers measure
nothing.
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Callable

from lab.contamination import timing as timing_table
from lab.models import PRESETS, check_block_size
from lab.study.recipe import Recipe, injected_documents, recipe_dict, recipe_from_dict

SUFFIX = "-smoke"
GROUP = 4              # test samples in each group a study compares
BASE_DOCUMENTS = 40    # base documents beside the injected ones
TRAIN_PAIRS = 8        # fine-tuning pairs of the smallest train size
VALID_PAIRS = 8        # validation pairs (select: best scores them each epoch)
VOCAB = 1000           # the tokenizer's vocabulary, at most
NEW_TOKENS = 16        # tokens generated per sample, at most
PRETRAIN_EPOCHS = 1.0  # pre-training epochs, at most
PRETRAIN_BATCH = 4     # sequences per pre-training step, at most
PROBE_NAMES = 4        # identifiers filled per probed sample, at most
DETECT_DRAWS = 2       # sampled outputs (CDD) and renamed twins (neighbourhood), at most

# (field, what it becomes): RULES' statements, in the order smoke_recipe applies them.
Rule = tuple[str, str, Callable[[dict[str, Any], Recipe, Path | None], None]]
RULES: list[Rule] = []


def _rule(field: str) -> Callable[[Callable[..., None]], Any]:
    """Register a shrink rule, shrink(data, recipe, corpora_dir); its docstring is its
    statement."""
    def register(shrink: Callable[..., None]) -> Any:
        RULES.append((field, " ".join((shrink.__doc__ or "").split()), shrink))
        return shrink
    return register


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@_rule("name")
def _name(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """NAME-smoke: the default folder (runs/NAME-smoke) and every table title say so."""
    data["name"] = recipe.name + SUFFIX


@_rule("seeds")
def _seeds(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """its first: every stage and question runs on one seed (a test over seeds prints its
    effect without an interval); tests/test_study.py runs the tests over two seeds end to end."""
    data["seeds"] = recipe.seeds[:1]


@_rule("preset")
def _preset(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """the smallest presets, one for each that the recipe sweeps, in its order of size (micro;
    micro and tiny for a sweep of two)."""
    by_size = list(reversed(PRESETS))  # PRESETS runs from the largest to the smallest
    ranked = sorted(recipe.preset, key=by_size.index)
    data["preset"] = [by_size[ranked.index(p)] for p in recipe.preset]


def _smoke_samples(recipe: Recipe) -> int:
    injection = recipe.injection
    injected = GROUP * max(1, len(injection.timing))  # each timing level a group of its own
    if injection.doses:
        return injected * len(injection.doses)
    share = injection.fraction
    if share is None or share >= 1:
        return injected
    return max(math.ceil(injected / share), math.ceil(GROUP / (1 - share)))


@_rule("injection.samples")
def _samples(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """enough for 4 samples in each group the study compares: each timing level and dose level,
    injected and held out."""
    data["injection"]["samples"] = _smoke_samples(recipe)


@_rule("corpus.limit")
def _limit(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """the most documents an arm injects, plus 40 base documents, or more where the recipe's
    corpus is less injected: its share of injected documents is kept (timing windows hold
    their copies' visits as the recipe's do)."""
    documents = injected_documents(recipe, _smoke_samples(recipe))[0]
    limit = documents + BASE_DOCUMENTS
    if recipe.corpus.limit and recipe.injection.samples:
        share = injected_documents(recipe, recipe.injection.samples)[0] / recipe.corpus.limit
        if share > 0:
            limit = max(limit, math.ceil(documents / share))
    data["corpus"]["limit"] = limit


@_rule("tokenizer.vocab_size")
def _vocabulary(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """at most 1000."""
    data["tokenizer"]["vocab_size"] = min(recipe.tokenizer.vocab_size, VOCAB)


def _pretrain_section(section: dict[str, Any], block_limit: int, epochs: float) -> None:
    for name, most in (("epochs", epochs), ("batch_size", PRETRAIN_BATCH),
                       ("block_size", block_limit)):
        if section.get(name) is not None:
            section[name] = min(section[name], most)
    if section.get("warmup_steps"):
        section["warmup_steps"] = 0


@_rule("pretrain")
def _pretrain(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """epochs at most 1 (kept where injected copies are timed: the timing windows must hold
    their visits), batches at most 4, no warm-up, blocks at most what the smoke presets hold;
    by_model's too."""
    block_limit = min(_positions(model, preset) for model in recipe.models
                      for preset in data["preset"])
    timed = tuple(recipe.injection.timing) != timing_table.DEFAULT
    epochs = math.inf if timed else PRETRAIN_EPOCHS
    _pretrain_section(data["pretrain"], block_limit, epochs)
    for override in data.get("by_model", {}).values():
        _pretrain_section(override.get("pretrain") or {}, block_limit, epochs)


def _positions(model: str, preset: str) -> int:
    return check_block_size(model, preset, 16)


def _train_sizes(sizes: list[Any]) -> list[int]:
    order = sorted(range(len(sizes)), key=lambda i: math.inf if sizes[i] is None else sizes[i])
    shrunk = [0] * len(sizes)
    for rank, i in enumerate(order):
        shrunk[i] = TRAIN_PAIRS * (rank + 1)
    return shrunk


@_rule("finetune.train_sizes")
def _train(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """8, 16, ... pairs in the recipe's order of size (null, the whole split, the largest);
    by_model's too."""
    data["finetune"]["train_sizes"] = _train_sizes(recipe.finetune.train_sizes)
    for override in data.get("by_model", {}).values():
        sizes = (override.get("finetune") or {}).get("train_sizes")
        if sizes is not None:
            override["finetune"]["train_sizes"] = _train_sizes(sizes)


def _epoch_ranks(data: dict[str, Any]) -> dict[int, int]:
    """Every fine-tuning epoch count the recipe names, to its rank among them (0 stays 0)."""
    named = set(_as_list(data["finetune"]["epochs"]))
    for override in data.get("by_model", {}).values():
        named.update(_as_list((override.get("finetune") or {}).get("epochs") or []))
    named.update(data.get("detect", {}).get("epochs") or [])
    return {e: rank for rank, e in enumerate(sorted(named | {0}))}


@_rule("finetune.epochs")
def _epochs(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """each count named (here, by_model's and detect.epochs) becomes its rank among them, 0
    staying 0: [0, 1, 5, 10, 25, 50] runs as [0, 1, 2, 3, 4, 5], [50] as [1]. Every count and
    its order are kept (direct inference, the decay from the fewest to the most), not the
    minutes a 50-epoch fine-tuning of a toy model spends checkpointing each epoch."""
    ranks = _epoch_ranks(data)

    def shrink(value: Any) -> Any:
        return [ranks[e] for e in value] if isinstance(value, list) else ranks[value]

    data["finetune"]["epochs"] = shrink(data["finetune"]["epochs"])
    for override in data.get("by_model", {}).values():
        if (override.get("finetune") or {}).get("epochs") is not None:
            override["finetune"]["epochs"] = shrink(override["finetune"]["epochs"])
    if data.get("detect", {}).get("epochs"):
        data["detect"]["epochs"] = shrink(data["detect"]["epochs"])


@_rule("finetune.select")
def _select(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """last where this machine's data has no validation split apart from the training pairs
    (CONCODE without its train split, whose real run is refused before any stage); else
    kept."""
    from lab.tasks import get_task, has_validation_split, task_for_benchmark

    if has_validation_split(get_task(task_for_benchmark(recipe.benchmark)), corpora):
        return
    data["finetune"]["select"] = "last"
    for override in data.get("by_model", {}).values():
        if (override.get("finetune") or {}).get("select") is not None:
            override["finetune"]["select"] = "last"


@_rule("finetune.valid_size")
def _valid(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """8 validation pairs (select: best scores them each epoch)."""
    data["finetune"]["valid_size"] = VALID_PAIRS


@_rule("evaluation")
def _evaluation(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """max_samples: the samples taking part (every one injected or held out); max_new_tokens at
    most 16. Decoding and metrics are kept."""
    data["evaluation"]["max_samples"] = _smoke_samples(recipe)
    tokens = recipe.evaluation.max_new_tokens
    data["evaluation"]["max_new_tokens"] = NEW_TOKENS if tokens is None else min(tokens, NEW_TOKENS)


@_rule("probe, detect")
def _probes(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """max_samples: the samples taking part; probe.max_names at most 4; detect.cdd_samples and
    detect.neighbours at most 2. The detectors are kept."""
    samples = _smoke_samples(recipe)
    data["probe"]["max_samples"] = samples
    data["probe"]["max_names"] = min(recipe.probe.max_names, PROBE_NAMES)
    data["detect"]["max_samples"] = samples
    data["detect"]["cdd_samples"] = min(recipe.detect.cdd_samples, DETECT_DRAWS)
    data["detect"]["neighbours"] = min(recipe.detect.neighbours, DETECT_DRAWS)


@_rule("resources")
def _resources(data: dict[str, Any], recipe: Recipe, corpora: Path | None) -> None:
    """device cpu; 1 thread a stage (toy models gain nothing from a second one, and lose much
    to a busy machine); a pre-training in one rank on one node, started as the recipe starts it
    (its launcher and DeepSpeed config: no DeepSpeed where it is not installed); several ranks
    meeting and sharding are tests/test_distributed.py's."""
    resources = data["resources"]
    resources["device"] = "cpu"
    resources["threads"] = 1
    launch = resources["pretrain"]
    launch["nodes"] = 1
    launch["processes"] = 1
    if launch.get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        launch["deepspeed"] = None


KEPT = ("benchmark, arms, models, fine-tuning epoch counts (as ranks), doses, repeat, fraction, "
        "timing levels, contamination forms, decontaminators, weight decays, continued "
        "pre-training, decoding, metrics, detectors and statistics")


def smoke_recipe(recipe: Recipe, corpora_dir: Path | None = None) -> Recipe:
    """The recipe with its sizes shrunk by RULES (validated like any recipe), for the data in
    `corpora_dir` (lab.corpora's default folders where None)."""
    data = recipe_dict(recipe)
    data["preset"] = _as_list(data["preset"])
    for _field, _statement, shrink in RULES:
        shrink(data, recipe, corpora_dir)
    return recipe_from_dict(data)


def smoke_record() -> dict[str, Any]:
    """What study.json records of a smoke study: the rules it was shrunk by, and what it kept."""
    return {"rules": {field: statement for field, statement, _ in RULES}, "kept": KEPT,
            "note": "a smoke run (lab study --smoke): the recipe's shape on toy sizes; its "
                    "numbers measure nothing"}


def smoke_lines() -> list[str]:
    """The rules as the run prints them."""
    return (["smoke run: the recipe's whole shape on toy sizes (lab.study.smoke.RULES):"]
            + [f"  {field}: {statement}" for field, statement, _ in RULES]
            + [f"  kept: {KEPT}"])
