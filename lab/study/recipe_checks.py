"""What a recipe may not ask for: the checks that refuse, on load, a recipe whose values have the
right types but cannot run, each error naming the recipe's field (`finetune.epochs[2]: ...`).

A recipe is checked as each model runs it (its by_model fields in place): first the study's own
fields, then each stage section as its stage's config checks it (the config's __post_init__,
which `lab COMMAND` runs too: the recipe states no rule of its own about one stage), then what
only stages together can refuse (sizes against the datasets' manifests, the placebo pool, the
positions pre-training trained). The placebo plan is here because the checks need it and the
grid follows it.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.common import SEED_MAX, LabError, option_name
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination.inject import placebo_splits
from lab.models import DTYPES
from lab.stats import CONVENTIONS, DOSE_TREND_SIDES, PLANNING_SHAPES, SCORES
from lab.study.recipe_schema import (SWEEPS, Recipe, ResourcesSection, for_model, overridden,
                                     stage_sections)
from lab.train.common import REPORT_TARGETS
from lab.train.continued import CONTINUED_ORDERS
from lab.train.launch import LAUNCHERS, deepspeed_config

EXCERPT = 80      # longest excerpt of a value in an error message


def excerpt(value: Any) -> str:
    """repr of a value for an error message, cut to EXCERPT characters."""
    text = repr(value)
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"... ({len(text)} characters)"


def check_recipe(recipe: Recipe) -> None:
    """Values that have the right type but cannot be run, as each model runs them (its
    by_model fields in place; an error in one of those names it by_model.MODEL.FIELD)."""
    from lab.models import MODELS

    if not recipe.models:
        raise LabError("models: needs at least one model")
    if len(set(recipe.models)) != len(recipe.models):
        raise LabError("models: values repeat")
    for i, model in enumerate(recipe.models):
        if model not in MODELS:
            raise LabError(f"models[{i}]: unknown model '{model}' (choose from {', '.join(MODELS)})")
    for model in recipe.models:
        paths = overridden(recipe, model)
        try:
            _check_view(for_model(recipe, model))
        except LabError as exc:
            if any(str(exc).startswith((f"{p}:", f"{p}[")) for p in paths):
                raise LabError(f"by_model.{model}.{exc}") from None
            raise


def _check_view(recipe: Recipe) -> None:
    """A recipe as one model runs it: the study's own fields, each stage's fields, then what
    only stages together can refuse."""
    _check_study(recipe)
    for name in stage_sections():
        _check_as_config(name, getattr(recipe, name))
    _check_across_stages(recipe)


def _fail(path: str, message: str) -> None:
    raise LabError(f"{path}: {message}")


def _check_study(recipe: Recipe) -> None:
    """The study's own fields: its name, benchmark, arms, seeds, sizes, statistics and
    resources."""
    from lab.corpora import get_spec
    from lab.models import PRESETS

    name = recipe.name
    if (not name or name in (".", "..") or ".." in name or "/" in name or "\\" in name
            or Path(name).is_absolute() or name.startswith(("~", "-", "."))
            or not all(c.isalnum() or c in "._-+=@," for c in name)):
        _fail("name", f"{excerpt(name)}: must be a plain folder name (letters, digits and ._-+=@, "
              "not starting with . - or ~, no path separator, no '..'): the study folder is "
              "runs/NAME")
    for path, values in (("arms", recipe.arms), ("models", recipe.models)):
        if len(set(values)) != len(values):
            _fail(path, "values repeat")
    for i, seed in enumerate(recipe.seeds):
        if not 0 <= seed <= SEED_MAX:
            _fail(f"seeds[{i}]", f"expected int in 0..{SEED_MAX}, got {seed}")
    spec = get_spec(recipe.benchmark)
    if spec.kind != "benchmark":
        _fail("benchmark", f"'{recipe.benchmark}' is not a benchmark")
    if not recipe.seeds:
        _fail("seeds", "needs at least one seed")
    if len(set(recipe.seeds)) != len(recipe.seeds):
        _fail("seeds", "seeds repeat")
    if not recipe.arms:
        _fail("arms", "needs at least one arm")
    for i, arm in enumerate(recipe.arms):
        setting = settings_table.find(arm)
        if setting is None:
            _fail(f"arms[{i}]", f"unknown arm '{arm}' (choose from {', '.join(settings_table.names())})")
        if setting.needs_output and not spec.output_language:
            _fail(f"arms[{i}]", f"{recipe.benchmark} has no output side for '{arm}'")
        if setting.placebo and setting.base not in recipe.arms:
            # Its models are probed on the base arm's injected samples, and compared with it.
            _fail(f"arms[{i}]", f"'{arm}' is the placebo of '{setting.base}': list "
                  f"'{setting.base}' in arms too")
    if not recipe.preset:
        _fail("preset", "needs at least one preset")
    if len(set(recipe.preset)) != len(recipe.preset):
        _fail("preset", "values repeat")
    for i, preset in enumerate(recipe.preset):
        if preset not in PRESETS:
            _fail(f"preset[{i}]" if len(recipe.preset) > 1 else "preset",
                  f"unknown preset '{preset}' (choose from {', '.join(PRESETS)})")
    continued = recipe.continued
    if continued.order is not None and continued.order not in CONTINUED_ORDERS:
        _fail("continued.order", f"choose from {', '.join(CONTINUED_ORDERS)} (or null)")
    if continued.order is not None:
        if not continued.clean_epochs or len(set(continued.clean_epochs)) != len(continued.clean_epochs):
            _fail("continued.clean_epochs", "give distinct values")
        if any(e <= 0 for e in continued.clean_epochs):
            _fail("continued.clean_epochs", f"values must be > 0, got {continued.clean_epochs}")
    decays = recipe.pretrain.weight_decay
    if not decays:
        _fail("pretrain.weight_decay", "needs at least one value")
    if len(set(decays)) != len(decays):
        _fail("pretrain.weight_decay", "values repeat")
    if any(d < 0 for d in decays):
        _fail("pretrain.weight_decay", f"values must be >= 0, got {decays}")
    if not 0 < recipe.statistics.alpha < 1:
        _fail("statistics.alpha", f"expected a number in (0, 1), got {recipe.statistics.alpha}")
    if recipe.statistics.convention not in CONVENTIONS:
        _fail("statistics.convention", f"choose from {', '.join(CONVENTIONS)}")
    if recipe.statistics.score not in SCORES:
        _fail("statistics.score", f"choose from {', '.join(SCORES)}")
    if recipe.statistics.dose_trend not in DOSE_TREND_SIDES:
        _fail("statistics.dose_trend", f"choose from {', '.join(DOSE_TREND_SIDES)}")
    if not recipe.statistics.smallest_effect > 0:
        _fail("statistics.smallest_effect", f"expected a number > 0, got "
              f"{recipe.statistics.smallest_effect}")
    if not recipe.statistics.planning_sd > 0:
        _fail("statistics.planning_sd", f"expected a number > 0, got {recipe.statistics.planning_sd}")
    if recipe.statistics.planning_shape not in PLANNING_SHAPES:
        _fail("statistics.planning_shape", f"choose from {', '.join(PLANNING_SHAPES)}")
    if not 0 <= recipe.statistics.planning_correlation <= 1:
        _fail("statistics.planning_correlation", f"expected a number from 0 to 1, got "
              f"{recipe.statistics.planning_correlation}")
    planned = recipe.statistics.planned_seeds
    if planned is not None and planned < 1:
        _fail("statistics.planned_seeds", f"expected int >= 1 or null, got {planned}")
    _check_resources(recipe.resources)
    if recipe.detect.enabled and not any(settings_table.get(arm).injects_test
                                         for arm in recipe.arms):
        _fail("detect.enabled", "no arm injects test samples (arms: "
              f"{', '.join(recipe.arms)}), so no model has members for the detectors to find")
    stray = [e for e in recipe.detect.epochs if e not in recipe.finetune.epochs]
    if stray:
        _fail("detect.epochs", f"{stray[0]} is not one of finetune.epochs "
                               f"({', '.join(map(str, recipe.finetune.epochs))})")
    launch = recipe.resources.pretrain
    if recipe.pretrain.loop == "plain" and (launch.processes * launch.nodes > 1
                                            or launch.deepspeed is not None):
        _fail("pretrain.loop", "plain runs one process without DeepSpeed; resources.pretrain "
                               "asks for " + ("DeepSpeed" if launch.deepspeed else "several ranks")
              + " (use trainer or null)")


def _check_resources(resources: ResourcesSection) -> None:
    if resources.threads is not None and resources.threads < 1:
        _fail("resources.threads", f"expected int >= 1 or null, got {resources.threads}")
    if resources.stages_per_gpu is not None and not 1 <= resources.stages_per_gpu <= 64:
        _fail("resources.stages_per_gpu", f"expected int 1..64 or null, got "
                                          f"{resources.stages_per_gpu}")
    launch = resources.pretrain
    for path, value in (("resources.pretrain.processes", launch.processes),
                        ("resources.pretrain.nodes", launch.nodes)):
        if not 1 <= value <= 4096:
            _fail(path, f"expected int in 1..4096, got {value}")
    device = resources.device
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        _fail("resources.device", f"{excerpt(device)}: choose cpu, cuda or cuda:N")
    if resources.dtype not in DTYPES:
        _fail("resources.dtype", f"{excerpt(resources.dtype)}: choose from {', '.join(DTYPES)}")
    if launch.save_steps < 1:
        _fail("resources.pretrain.save_steps", f"expected int >= 1, got {launch.save_steps}")
    if launch.launcher not in LAUNCHERS:
        _fail("resources.pretrain.launcher", f"{excerpt(launch.launcher)}: choose from "
              f"{', '.join(LAUNCHERS)}")
    if launch.deepspeed is not None:
        try:
            deepspeed_config(launch.deepspeed)
        except LabError as exc:
            _fail("resources.pretrain.deepspeed", str(exc))
    targets = [t.strip() for t in resources.report_to.split(",") if t.strip()]
    unknown = [t for t in targets if t not in (*REPORT_TARGETS, "none")] or (
        ["none"] if "none" in targets and len(targets) > 1 else [])
    if not targets or unknown:  # whether its package is installed: preflight, where it runs
        _fail("resources.report_to", f"{excerpt(resources.report_to)}: choose "
              f"{', '.join(REPORT_TARGETS)}, a comma-separated list of them, or none")


def _check_contamination_form(recipe: Recipe) -> None:
    """injection.contamination_form against the benchmark and every arm that injects (the
    grid gives the control verbatim): the refusal lab inject would make, before any stage."""
    forms = recipe.injection.contamination_form
    for name, values in (("contamination_form", forms),
                         ("decontaminate_with", recipe.injection.decontaminate_with)):
        if not values:
            _fail(f"injection.{name}", "needs at least one value")
        if len(set(values)) != len(values):
            _fail(f"injection.{name}", "values repeat")
    for j, written in enumerate(forms):
        form = soft.parse_form(written)
        where = f"injection.contamination_form[{j}]" if len(forms) > 1 else \
            "injection.contamination_form"
        for i, arm in enumerate(recipe.arms):
            setting = settings_table.get(arm)
            if not setting.injects:
                continue
            try:
                soft.check_form(form, recipe.benchmark, setting, recipe.corpus.base)
            except LabError as exc:
                reason = str(exc).split(": ", 1)[-1]
                _fail(where, f"arms[{i}] {arm}: {reason}")


def _check_as_config(name: str, section: Any) -> None:
    """A section's fields as its stage's config checks them when it is made (its __post_init__,
    which `lab COMMAND` runs too): the recipe states no rule of its own about one stage. The
    error names the recipe's field (`tokenizer.vocab_size: must be >= 262, got 100`, where
    `lab tokenizer train` says `--vocab-size 100: must be >= 262`); a swept field's element
    by its index (`finetune.epochs[1]`)."""
    config = type(section).stage_config
    sweeps = SWEEPS.get(name, {})
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)
              if f.name in config.__dataclass_fields__ and f.name not in sweeps}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    # The fields without a default are the paths a stage is given when it runs.
    given = {f.name: Path() for f in dataclasses.fields(config)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    swept = {field_name: getattr(section, field_name) for field_name in sweeps}
    # Every element of every swept field is checked once, beside the section's other fields.
    rounds = max((len(elements) for elements in swept.values()), default=1) or 1
    for i in range(rounds):
        chosen = {sweeps[f]: (elements[min(i, len(elements) - 1)], f, min(i, len(elements) - 1))
                  for f, elements in swept.items() if elements}
        try:
            config(**{**given, **values,
                      **{target: value for target, (value, _, _) in chosen.items()}})
        except LabError as exc:
            message = str(exc)
            for target, option in ((f, option_name(config.__dataclass_fields__[f]))
                                   for f in [*values, *chosen]):
                if not message.startswith((option + " ", option + ":")):
                    continue
                reason = message.split(": ", 1)[-1]
                if target in chosen:
                    value, field_name, index = chosen[target]
                    # one value of a field that takes one (weight_decay: 0.1): named as written
                    alone = len(swept[field_name]) == 1 and \
                        section.__dataclass_fields__[field_name].metadata.get("scalar")
                    _fail(f"{name}.{field_name}" if alone else f"{name}.{field_name}[{index}]",
                          f"{reason}, got {excerpt(value)}")
                if message.startswith(option + ":"):
                    _fail(f"{name}.{target}", reason)
                value = values[target]
                if isinstance(value, tuple):  # a list of the recipe: name the element refused
                    shown = message[len(option) + 1:].split(": ", 1)[0]
                    for index, element in enumerate(value):
                        if str(element) == shown:
                            _fail(f"{name}.{target}[{index}]", f"{reason}, got {excerpt(element)}")
                    value = list(value)
                _fail(f"{name}.{target}", f"{reason}, got {excerpt(value)}")
            _fail(name, message)


def _check_across_stages(recipe: Recipe) -> None:
    """What no single stage's config can refuse: fields of several stages (and arms) together,
    and against the datasets' recorded sizes."""
    from lab.corpora import dataset_manifest, get_spec
    from lab.models import check_block_size

    spec = get_spec(recipe.benchmark)
    if recipe.evaluation.split not in spec.splits:
        _fail("evaluation.split", f"unknown split '{recipe.evaluation.split}' of "
              f"{recipe.benchmark} (choose from {', '.join(spec.splits)})")
    if "roberta" in recipe.models:
        for i, epochs in enumerate(recipe.finetune.epochs):
            if epochs == 0:
                _fail(f"finetune.epochs[{i}]", "0 (direct inference) is defined for GPT-2 only")
    injection, doses = recipe.injection, recipe.injection.doses
    placebo_from = injection.placebo_from
    if placebo_from is not None:
        if not any(settings_table.get(arm).placebo for arm in recipe.arms):
            _fail("injection.placebo_from", "no arm is a placebo (list one in arms, or leave it out)")
        try:
            placebo_splits(recipe.benchmark, "test", tuple(placebo_from))
        except LabError as exc:
            _fail("injection.placebo_from", str(exc).removeprefix("--placebo-from").lstrip(": "))
    _check_contamination_form(recipe)
    test_samples = ((dataset_manifest(recipe.benchmark) or {}).get("expected_records") or {}) \
        .get("test")
    if injection.samples and test_samples and injection.samples > test_samples:
        _fail("injection.samples", f"{injection.samples}: {recipe.benchmark}'s test split "
              f"holds {test_samples} samples")
    _check_placebo_pool(recipe, injection.samples or test_samples)
    _check_corpus_limit(recipe)
    for model, preset in itertools.product(recipe.models, recipe.preset):
        try:
            check_block_size(model, preset, recipe.pretrain.block_size)
        except LabError as exc:
            _fail("pretrain.block_size", str(exc).split(": ", 1)[-1])
    _check_generated_length(recipe)
    # A split-half arm is evaluated on the samples it split, each injected or held out.
    splits = injection.fraction is not None or bool(doses)
    if splits and any(arm != "control" for arm in recipe.arms):
        if recipe.evaluation.split != "test":
            _fail("evaluation.split", f"'{recipe.evaluation.split}': a split-half arm "
                  "(injection.fraction or doses) splits the test samples; evaluate the test split")
        evaluated, split = recipe.evaluation.max_samples, injection.samples
        if split is not None and (evaluated is None or evaluated > split):
            _fail("evaluation.max_samples", f"{'null' if evaluated is None else evaluated}: a "
                  f"split-half arm splits the first "
                  f"{split} test samples (injection.samples); evaluate at most those")


def _check_placebo_pool(recipe: Recipe, injected: int | None) -> None:
    """A placebo stands for every test sample its arm injects: a ladder's injecting levels
    (equal groups), else the fraction. Its pool (placebo_plan): the eligible samples the dataset
    manifest records per split (lab.contamination.placebo.placebo_pool, against the whole test
    split), else the split's records; lab inject counts exactly, and names missing splits."""
    placebo_arm = next((i for i, arm in enumerate(recipe.arms)
                        if settings_table.get(arm).placebo), None)
    if placebo_arm is None or not injected:
        return
    from lab.corpora import dataset_manifest

    if not (dataset_manifest(recipe.benchmark) or {}).get("expected_records"):
        return  # no counts known before reading it (a corpus `lab corpora extract` wrote)
    plan = placebo_plan(recipe, injected)
    if plan.needed > plan.available:
        field_name = ("injection.placebo_from" if recipe.injection.placebo_from is not None
                      else f"arms[{placebo_arm}]")
        _fail(field_name, f"'{recipe.arms[placebo_arm]}' needs {plan.needed} placebo "
              f"samples, but {recipe.benchmark} {' + '.join(plan.splits)} holds "
              f"{'' if plan.exact else 'at most '}{plan.available} disjoint from its test split: "
              "lower injection.samples or injection.fraction, or use a benchmark with a larger "
              "pool (corpora/*.json: placebo_eligible)")


@dataclass(frozen=True)
class PlaceboPlan:
    """Where a study's placebos draw from and what its fine-tuning leaves out (the grid's).

    splits: the pool's splits (given to every placebo arm's `placebo_from`); fine_tuned: the
    splits any model of the study fine-tunes on (the task's train split; its validation split
    too where a model selects its checkpoint on it, or trains on it for want of a train split);
    exclude: every fine-tuning of a seed leaves out the pairs that seed's placebos injected
    (FinetuneConfig.exclude_injected), for every arm alike; how: a line saying why."""
    splits: tuple[str, ...]
    fine_tuned: tuple[str, ...]
    exclude: bool
    needed: int
    available: int
    exact: bool
    how: str


def placebo_needed(recipe: Recipe, injected: int) -> int:
    """Placebo samples a placebo arm injects: as many as its base arm's test samples."""
    doses = recipe.injection.doses
    if doses:
        return round(injected * sum(1 for dose in doses if dose) / len(doses))
    return max(1, round(injected * (recipe.injection.fraction or 1)))


def fine_tuned_splits(recipe: Recipe) -> tuple[str, ...]:
    """The benchmark splits (canonical names of the recipe's benchmark) whose pairs any model of
    the study fine-tunes on or selects its checkpoint with (lab.tasks.fine_tuning_split)."""
    from lab.corpora import get_spec
    from lab.tasks import get_task, has_train_split, task_for_benchmark

    task = get_task(task_for_benchmark(recipe.benchmark))
    used = [task.train_split]
    if task.fallback_train_split is not None and not has_train_split(task, None):
        used.append(task.fallback_train_split)  # offline CONCODE fine-tunes on dev
    if any(for_model(recipe, model).finetune.select == "best" for model in recipe.models):
        used.append(task.valid_split)
    spec, named = get_spec(recipe.benchmark), []
    for split in used:
        try:
            named.append(spec.canonical_split(split))
        except LabError:  # a subset without that split (codetrans-paper: no train)
            pass
    return tuple(dict.fromkeys(named))


def placebo_plan(recipe: Recipe, injected: int | None = None) -> PlaceboPlan:
    """The study's placebo pool. An explicit injection.placebo_from is used as given (its
    overlap with fine-tuning is recorded, never removed). By default the pool is the splits no
    model fine-tunes on where their eligible samples (corpora/*.json: placebo_eligible) cover
    the placebo's count; else every non-test split, and each fine-tuning of a seed leaves out
    the pairs its placebos injected. Either way no model pre-trains on its fine-tuning pairs."""
    from lab.corpora import dataset_manifest

    if injected is None:
        test = ((dataset_manifest(recipe.benchmark) or {}).get("expected_records") or {}).get("test")
        injected = recipe.injection.samples or test or 0
    needed = placebo_needed(recipe, injected) if injected else 0
    facts = dataset_manifest(recipe.benchmark) or {}
    eligible, records = facts.get("placebo_eligible") or {}, facts.get("expected_records") or {}

    def holds(splits: tuple[str, ...]) -> tuple[int, bool]:
        counts = [eligible.get(split, records.get(split)) for split in splits]
        return (sum(c or 0 for c in counts), bool(splits) and set(splits) <= set(eligible))

    fine_tuned = fine_tuned_splits(recipe)
    chosen = recipe.injection.placebo_from
    if chosen is not None:
        splits = placebo_splits(recipe.benchmark, "test", tuple(chosen))
        return PlaceboPlan(splits, fine_tuned, False, needed, *holds(splits),
                           "injection.placebo_from, as given")
    every = placebo_splits(recipe.benchmark, "test")
    free = tuple(s for s in every if s not in fine_tuned)
    available, exact = holds(free)
    known = all(eligible.get(s, records.get(s)) is not None for s in free)
    if free and known and available >= needed:
        return PlaceboPlan(free, fine_tuned, False, needed, available, exact,
                           f"{' + '.join(free)}: no model fine-tunes on it, and it holds "
                           f"{available} eligible samples for {needed}")
    return PlaceboPlan(every, fine_tuned, True, needed, *holds(every),
                       f"{' + '.join(free) or 'no split'} apart from fine-tuning holds "
                       f"{available if free else 0} eligible samples for {needed}: the pool is "
                       f"{' + '.join(every)}, and every fine-tuning of a seed leaves out the "
                       "pairs its placebos injected")


def injected_documents(recipe: Recipe, samples: int) -> tuple[int, str, str, int]:
    """(documents, how they are counted, the widest arm, its documents per sample): the most
    documents an arm of the recipe injects when `samples` test samples take part."""
    share, doses = recipe.injection.fraction or 1.0, recipe.injection.doses
    widest = max(recipe.arms, key=lambda arm: settings_table.get(arm).documents_per_sample)
    per_sample = settings_table.get(widest).documents_per_sample
    if doses:  # about samples / levels per level (duplicates kept together may shift a few)
        documents = math.floor(samples / len(doses) * sum(doses)) * per_sample
        how = "injection.samples / levels x the sum of injection.doses"
    else:
        documents = math.ceil(samples * share) * recipe.injection.repeat * per_sample
        how = "injection.samples x fraction x repeat"
    return documents, how, widest, per_sample


def _check_corpus_limit(recipe: Recipe) -> None:
    """Every injected document replaces a base document: an arm cannot inject more documents
    than it holds (unpaired injects two per sample)."""
    limit, samples = recipe.corpus.limit, recipe.injection.samples
    if limit is None or samples is None:
        return
    documents, how, widest, per_sample = injected_documents(recipe, samples)
    if documents >= limit:
        _fail("corpus.limit", f"{limit} documents cannot take {documents} injected ones ({how} "
              f"x {per_sample} documents per sample of '{widest}'); raise the limit")


def _check_generated_length(recipe: Recipe) -> None:
    """Fine-tuning and evaluation never reach past the positions pre-training trained (the
    block size): the study fine-tunes targets of evaluation.max_new_tokens tokens beside a
    source of FinetuneConfig's default length, fitted (lab.train.finetune.fitted_lengths).
    null: the fine-tuning fits its default target and evaluation generates that many."""
    from lab.train.finetune import FinetuneConfig, fitted_lengths, longest_kept_target

    target, block = recipe.evaluation.max_new_tokens, recipe.pretrain.block_size
    source = FinetuneConfig.__dataclass_fields__["max_source_length"].default
    for model in recipe.models if target is not None else []:
        kept = longest_kept_target(model, block, source)
        if target <= kept:
            continue
        if model == "gpt2":
            _fail("evaluation.max_new_tokens", f"{target}: gpt2 fine-tunes `<s> source <SEP> "
                  f"target </s>` within pretrain.block_size {block} (positions past it were "
                  f"never pre-trained): source + target + 3 <= {block}, the source keeping at "
                  f"least {fitted_lengths(model, block, source, 10 ** 9)[0]} tokens (a quarter "
                  f"of {block - 3}); the target fits in at most {kept}")
        _fail("evaluation.max_new_tokens", f"{target}: larger than pretrain.block_size {block}, "
              f"the positions {model} was pre-trained on (at most {kept} here)")
