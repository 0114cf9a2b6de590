"""Inference and scoring: generate outputs for a benchmark split and score them per sample.

Works on a fine-tuned model (lab finetune) or, for GPT-2, straight on a pre-trained one
(direct inference, the study's epoch 0). Every sample falls in one group (GROUPS, the first
that applies): seen in the fine-tuning data, pre-existing in the base corpus, injected but cut
at the pre-training block size, injected, held out, else unknown; so one split-half model
yields a seen-vs-unseen comparison of samples seen only where the arm put them, and `clean`
scores every sample not seen by other means (the arm-vs-control comparison).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lab import progress
from lab.codetokens import whitespace_hash
from lab.contamination import settings as settings_table
from lab.common import (EVALUATION, LabError, atomic_output_dir, beside, check_numbers,
                        check_output, corpora_param, environment_record, param, write_json_atomic)
from lab.corpora import Sample, corpora_inputs, get_spec, load_samples
from lab.corpora.base import read_sample_ids
from lab.eval import metrics as metric_fns
from lab.models import (check_placement, device_param, dtype_param, lab_architecture,
                        load_lab_model, place_model, positions_of, pretraining_record)
from lab.train.artefacts import read_model
from lab.tasks import Decoding, Task, fine_tuning_records, get_task, of_task, train_subset
from lab.train.finetune import causal_prompt, position_limit, seq2seq_source

# One group per evaluated sample: the first of these that applies, else "unknown".
#   in_finetune_data    its input or output occurs verbatim (whitespace-normalised) in the
#                       samples the model was fine-tuned on (none at E = 0)
#   pre_existing        a side of it was already in the arm's base corpus (inject's
#                       pre_existing_verbatim), whatever the arm injected
#   injected_truncated  injected, but its document was cut at the pre-training block size, so
#                       part of it (paired: the output's tail) was never trained on
#   held_out_truncated  held out, but its document in the arm's form would have been cut had it
#                       been injected: left out like injected_truncated, so that the within-model
#                       test compares halves of the same length range
#   injected, held_out  the arm's split of the test samples
# The within-model test compares `injected` with `held_out` only; `clean` (every sample outside
# in_finetune_data and pre_existing: seen, if at all, only where the arm put it) is the sample
# set of the arm-vs-control comparison.
GROUPS = ("in_finetune_data", "pre_existing", "injected_truncated", "held_out_truncated",
          "injected", "held_out")
UNKNOWN = "unknown"
EXCLUDED_FROM_CLEAN = ("in_finetune_data", "pre_existing")
CLEAN = "clean"


def generator_manifest(model_dir: Path) -> tuple[dict[str, Any], str]:
    """(manifest, architecture) of a lab model that can generate, checked without loading it."""
    manifest = read_model(model_dir, "--model")
    architecture = lab_architecture(manifest, model_dir)
    if architecture == "masked-lm":
        raise LabError(f"--model {model_dir}: a pre-trained {manifest['model']['family']} "
                       "cannot generate (masked LM); fine-tune it first (lab finetune)")
    return manifest, architecture


def load_generator(model_dir: Path) -> tuple[Any, Any, dict[str, Any], str]:
    """(model, tokenizer, manifest, architecture) of a lab model that can generate."""
    manifest, architecture = generator_manifest(model_dir)
    model, tokenizer = load_lab_model(model_dir, architecture)
    return model, tokenizer, manifest, architecture


def padded(rows: list[list[int]], pad: int, left: bool) -> tuple[Any, Any]:
    """(ids, attention mask) of token lists padded to the longest: on the left for a causal LM
    that generates (every prompt then ends where its output starts), else on the right."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
    return ids, mask


def generate(model: Any, tokenizer: Any, architecture: str, sources: list[str], decoding: Decoding,
             max_source: int, max_new_tokens: int, batch_size: int,
             positions: int | None = None) -> list[str]:
    """Batched generation with the KV cache, longest inputs first; outputs in input order.
    `positions` (default: the model's) bounds prompt and output: pass the pre-training block
    size, past which the position embeddings were never trained."""
    import torch

    positions = positions or positions_of(model.config if architecture == "causal-lm"
                                          else model.config.decoder)

    if architecture == "causal-lm":
        prompts = [causal_prompt(tokenizer, s, max_source) for s in sources]
    else:
        prompts = [seq2seq_source(tokenizer, s, max_source) for s in sources]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    outputs: list[str] = [""] * len(prompts)
    pad = tokenizer.pad_token_id
    for start in progress.steps(range(0, len(order), batch_size), "generating"):
        batch = order[start:start + batch_size]
        ids, mask = padded([prompts[i] for i in batch], pad, left=architecture == "causal-lm")
        ids, mask = ids.to(model.device), mask.to(model.device)
        width = ids.shape[1]
        # A causal model's prompt and output share its positions.
        room = positions - width if architecture == "causal-lm" else positions - 1
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max(1, min(max_new_tokens, room)),
                eos_token_id=tokenizer.eos_token_id, pad_token_id=pad, use_cache=True,
                **decoding.generate_kwargs(),
            )
        if architecture == "causal-lm":
            generated = generated[:, width:]
        for row, i in enumerate(batch):
            outputs[i] = tokenizer.decode(generated[row], skip_special_tokens=True).strip()
    return outputs


def default_source_length(model: Any, architecture: str, limit: int | None = None) -> int:
    """Direct inference on a pre-trained GPT-2: half its positions (at most `limit`, the
    pre-training block size) for the prompt."""
    positions = positions_of(model.config if architecture == "causal-lm" else model.config.encoder)
    positions = min(positions, limit) if limit else positions
    return (positions - 3) // 2 if architecture == "causal-lm" else positions


def _position_limit(model: Any, architecture: str, manifest: dict[str, Any]) -> int | None:
    """Positions prompt and output may use: the model's, never past the pre-training block
    size (None for a stand-in model without a config)."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    positions = positions_of(config if architecture == "causal-lm" else config.decoder)
    return position_limit(pretraining_record(manifest), positions)


def evaluation_benchmark(manifest: dict[str, Any], task: Task, requested: str | None = None) -> str:
    """The benchmark whose samples are evaluated: `requested`, else the one the pre-training
    corpus injected when it belongs to the task (a study's -paper subset, so that its injected
    ids are the evaluated ids), else the task's."""
    if requested is not None:
        if not of_task(requested, task):
            base = get_spec(task.benchmark)
            raise LabError(f"benchmark {requested}: not a benchmark of task {task.name} "
                           f"({base.input_language} -> {base.output_language})")
        return requested
    injected = pretraining_record(manifest).get("corpus", {}).get("benchmark")
    return injected if of_task(injected, task) else task.benchmark


def assigned_injected_ids(corpus: dict[str, Any]) -> list[str]:
    """The samples a pre-training corpus record assigned to be injected, in its order: those
    it injects, and for a decontaminated arm also those its decontaminator then removed
    (intended_injected_ids). The injected group of scoring, probing and the split-half lift;
    what a model saw is injected_ids."""
    return list(corpus.get("intended_injected_ids") or corpus.get("injected_ids") or [])


def pretraining_membership(manifest: dict[str, Any]) -> dict[str, set[str]]:
    """Group -> sample ids, from the pre-training corpus recorded in the model's manifest:
    injected / held-out ids, pre-existing overlap, and injected samples whose document was
    truncated at the block size (`corpus.truncated_ids`; absent from older manifests: none).
    A model of unknown membership (continued from weights with no lab record) has no held-out
    group."""
    from lab.train.continued import UNKNOWN

    corpus = pretraining_record(manifest).get("corpus", {})
    # Weights of unknown provenance may have seen any sample: none is scored as held out.
    unknown = corpus.get("membership") == UNKNOWN
    return {
        # By intention to treat: a decontaminated arm's injected group is the samples meant to
        # be injected, those its decontaminator removed too, so its lift over the held-out
        # group is what decontamination left of the lift (assigned_injected_ids).
        "injected": set(assigned_injected_ids(corpus)),
        "removed_by_decontamination": set(
            (corpus.get("decontamination") or {}).get("removed_injected_ids") or []),
        "held_out": set() if unknown else set(corpus.get("held_out_ids") or []),
        "pre_existing": {entry.rsplit("/", 1)[0] for entry in corpus.get("pre_existing_verbatim") or []},
        "injected_truncated": set(corpus.get("truncated_ids") or []),
    }


def finetuning_samples(manifest: dict[str, Any], model_dir: Path,
                       corpora_dir: Path | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """The samples a model was fine-tuned on, drawn again as lab finetune drew them (its train
    split, the seeded --train-size subset): none for direct inference (E = 0, or a pre-trained
    model). The split's files must be those the manifest recorded."""
    config = manifest.get("config") or {}
    if manifest.get("kind") != "lab-finetuned" or not int(config.get("epochs") or 0):
        return [], {"samples": 0, "note": "no fine-tuning (direct inference): no data seen"}
    data, task = manifest.get("data") or {}, manifest.get("task") or {}
    benchmark, split = task.get("benchmark"), data.get("train_split")
    if not benchmark or not split:
        raise LabError(f"--model {model_dir}: its manifest does not say which split it was "
                       "fine-tuned on (data.train_split)")
    loaded = load_samples(benchmark, split, corpora_dir, require_references=True)
    recorded = [f.get("sha256") for f in (data.get("train_files") or {}).get("files", [])]
    if recorded and all(recorded):
        found = [f["sha256"] for f in loaded.provenance()["files"]]
        if found != recorded:
            raise LabError(f"--model {model_dir}: {benchmark} split '{split}' here "
                           f"({loaded.where}) is not the one it was fine-tuned on (sha256 differs): "
                           "cannot tell which test samples it saw")
    records = loaded.records
    if data.get("train_available") is not None and len(records) != data["train_available"]:
        raise LabError(f"--model {model_dir}: {benchmark} split '{split}' holds {len(records)} "
                       f"samples here, {data['train_available']} when it was fine-tuned")
    size = config.get("train_size")
    if size is not None:
        records = train_subset(records, size, config.get("seed", 0))
    return records, {"benchmark": benchmark, "split": split, "train_size": size,
                     "seed": config.get("seed"), "samples": len(records)}


def finetune_overlap(samples: list[Sample], seen: list[Sample]) -> dict[str, list[str]]:
    """Sample id -> its sides (input, output) that occur, whitespace-normalised, as either side
    of a fine-tuning sample; samples without any are left out."""
    known = {whitespace_hash(text) for s in seen for text in (s.input, s.output) if text.strip()}
    found = {}
    for sample in samples:
        sides = [side for side, text in (("input", sample.input), ("output", sample.output))
                 if text.strip() and whitespace_hash(text) in known]
        if sides:
            found[sample.id] = sides
    return found


def arm_documents(record: dict[str, Any]) -> tuple[settings_table.Setting | None, str]:
    """The setting that writes a sample's documents as the model's arm injected them (in its
    contamination form), and how that is known. A form's choices are seeded by the arm's seed:
    the pre-training record's `corpus.seed`, else (a model made before it was copied) the arm's
    own manifest at `corpus.path`, used only if its corpus_sha256 is the record's. Without
    either, a non-verbatim form's documents are written verbatim, and the rule says so."""
    from lab.contamination import soft
    from lab.corpora.shards import verify_corpus

    corpus = record.get("corpus") or {}
    setting = settings_table.find(corpus.get("setting"))
    form = soft.parse_form(soft.recorded_form(corpus))
    if setting is None or form.verbatim:
        return setting, "verbatim documents"
    seed, source = corpus.get("seed"), "the model's corpus.seed"
    if seed is None and corpus.get("path"):
        arm = Path(corpus["path"])
        try:
            manifest = verify_corpus(arm)
        except LabError:
            manifest = {}
        if manifest.get("corpus_sha256") == corpus.get("sha256") and "seed" in manifest:
            seed, source = manifest["seed"], f"the arm's manifest ({arm}, corpus_sha256 checked)"
    if seed is None:
        return setting, (f"verbatim documents: the arm's seed is unknown, so its {form.name} "
                         "documents cannot be written again")
    base = (corpus.get("options") or {}).get("base") or "csn-java"
    return (soft.FormedSetting.of(setting, form, int(seed), corpus.get("benchmark") or "", base),
            f"{form.name} documents, seeded by {source}")


def block_truncation(samples: list[Sample], membership: dict[str, set[str]],
                     manifest: dict[str, Any], tokenizer: Any
                     ) -> tuple[set[str], set[str], dict[str, Any]]:
    """(injected_truncated, held_out_truncated, how) of a split-half arm: one rule for every
    sample it split, whether its document, in the arm's form and tokenised as pre-training
    tokenises it, exceeds what a block keeps. An injected sample in the corpus is truncated as
    pre-training recorded it (corpus.truncated_ids); a sample its decontaminator removed, and a
    held-out one, as the rule says it would have been, so that the injected and held-out
    halves compare the same length range on both sides of decontamination. `how` states the
    rule and checks it against what pre-training recorded for the samples it trained on."""
    record = pretraining_record(manifest)
    corpus = record.get("corpus", {})
    recorded = set(corpus.get("truncated_ids") or [])
    block = (record.get("config") or {}).get("block_size")
    setting, rule = arm_documents(record)
    if not (membership.get("injected") and membership.get("held_out")) or setting is None \
            or not setting.form or not block:
        return recorded, set(), {"rule": "as pre-training recorded (not a split-half arm)"}
    from lab.train.packing import longest_document

    limit = longest_document(int(block))
    seen = set(corpus.get("injected_ids") or [])
    split = membership["injected"] | membership["held_out"]
    considered = [s for s in samples if s.id in split]
    documents = [(s.id, text) for s in considered for _side, text in setting.documents(s)]
    lengths = (tokenizer([text for _id, text in documents], add_special_tokens=False)["input_ids"]
               if documents else [])
    over = {sample for (sample, _text), ids in zip(documents, lengths) if len(ids) > limit}
    trained = {s.id for s in considered} & seen & membership["injected"]
    differ = sorted((over ^ recorded) & trained)
    unseen_injected = membership["injected"] - seen
    if getattr(getattr(setting, "contamination", None), "name", None) == "embedded":
        rule += ("; embedded: the block alone, as it sits before a one-method host (pre-training "
                 "records where each injected block ends)")
    how = {"rule": rule, "tokens_kept": limit,
           "checked_on_trained_samples": len(trained), "differ_from_recorded": differ}
    return (recorded | (over & unseen_injected), over & membership["held_out"], how)


def dose_levels(manifest: dict[str, Any]) -> dict[str, int]:
    """Test sample id -> its dose, for a model pre-trained on a dose ladder (else empty)."""
    levels = pretraining_record(manifest).get("corpus", {}).get("dose_levels") or []
    return {sample: level["dose"] for level in levels for sample in level["ids"]}


def timing_levels(manifest: dict[str, Any]) -> dict[str, str]:
    """Test sample id -> its timing level (injection.timing), for a model pre-trained on timing
    levels (else empty)."""
    levels = pretraining_record(manifest).get("corpus", {}).get("timing_levels") or []
    return {sample: level["timing"] for level in levels for sample in level["ids"]}


def assign_groups(samples: list[Sample], membership: dict[str, set[str]]) -> dict[str, str]:
    """Sample id -> its group: the first of GROUPS whose ids hold it, else unknown."""
    return {s.id: next((g for g in GROUPS if s.id in membership.get(g, ())), UNKNOWN)
            for s in samples}


def check_split_half(samples: list[Sample], membership: dict[str, set[str]]) -> None:
    """Every evaluated sample of a split-half arm's own benchmark split must be injected, held
    out or pre-existing: any other means the evaluated ids are not those the arm split (a
    -paper subset evaluated on its base benchmark, samples past injection.samples)."""
    if not (membership.get("injected") and membership.get("held_out")):
        return  # not split-half (a control or placebo holds every sample out, injects none)
    stray = [s.id for s in samples
             if not any(s.id in membership.get(g, ()) for g in
                        ("injected", "held_out", "pre_existing", "injected_truncated"))]
    if stray:
        example = sorted(membership["held_out"])[0]
        split = len(samples) - len(stray)
        # An arm of `lab inject --samples N` split the split's first N samples: --max-samples N
        first = (f"--max-samples {split} (the arm split the first {split}) or "
                 if split and all(s.id not in stray for s in samples[:split]) else "")
        raise LabError(f"{len(stray)} of {len(samples)} evaluated samples are neither injected, "
                       f"held out nor pre-existing in the split-half pre-training corpus (which "
                       f"split samples like {example}): {', '.join(stray[:5])}"
                       f"{' ...' if len(stray) > 5 else ''}; evaluate the samples it split: "
                       f"give {first}--ids FILE (its corpus's injected_ids and held_out_ids)")


@dataclass
class EvaluateConfig:
    """One evaluation. Every option of `lab evaluate` is declared here, once; a recipe's
    `evaluation` section sets split, decoding, metrics and max_new_tokens."""
    model: Path = param(help="A lab finetune directory, or a lab pretrain GPT-2 directory.")
    task: str = param(help="translation or generation.")
    split: str = param("test", "Benchmark split to generate for.")
    ids: Path | None = param(None, "File of the sample ids to evaluate, one a line or "
                                   "comma-separated: BENCHMARK:SPLIT:N (codetrans:test:17) or N, "
                                   "as lab inject --test-ids reads them.")
    max_samples: int | None = param(None, "Evaluate only the split's first N samples (with "
                                          "--ids, the first N of those).")
    decoding: str = param("greedy", "greedy, beam:K or sample.")
    temperature: float = param(Decoding.temperature, "Sampling temperature.")
    top_p: float = param(Decoding.top_p, "Sampling top-p.")
    top_k: int = param(Decoding.top_k, "Sampling top-k.")
    batch_size: int = param(16, "Samples per generation batch.")
    max_new_tokens: int | None = param(None, "Longest output generated (default: the "
                                             "fine-tuning target length).")
    metrics: tuple[str, ...] = param(("bleu", "bleu_sentence", "meteor", "em", "codebleu"),
                                     "Of " + ", ".join(metric_fns.METRICS) + ".")
    seed: int = param(0, "Seed for sampling.")
    device: str = device_param()
    dtype: str = dtype_param()
    out: Path | None = param(None, "Default: MODEL-eval-TASK-SPLIT-DECODING, beside MODEL.")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()
    benchmark: str | None = param(None, "The benchmark whose split is evaluated (default: the "
                                        "one the model was injected with, if of the task).",
                                  cli=False)

    def __post_init__(self) -> None:
        # The rules of single options, checked where the config is made: by `lab evaluate` and
        # by a recipe's `evaluation` section alike (lab.study.recipe_checks names the recipe's field).
        self.decoding_plan()
        for name, value in (("--batch-size", self.batch_size),
                            ("--max-new-tokens", self.max_new_tokens),
                            ("--max-samples", self.max_samples)):
            if value is not None and value < 1:
                raise LabError(f"{name} {value}: must be >= 1")
        check_numbers(seed=self.seed)
        if not self.metrics:
            raise LabError("--metrics: give at least one metric")
        unknown_metrics = [m for m in self.metrics if m not in metric_fns.METRICS]
        if unknown_metrics:
            raise LabError(f"--metrics {unknown_metrics[0]}: unknown metric (choose from "
                           f"{', '.join(metric_fns.METRICS)})")

    def decoding_plan(self) -> Decoding:
        return Decoding.parse(self.decoding, temperature=self.temperature, top_p=self.top_p,
                              top_k=self.top_k)


def _baseline_scores(task: Task, samples: list[Sample], seen: list[Sample],
                     cfg: "EvaluateConfig", breakdown: Any) -> dict[str, Any]:
    """The trivial baselines (lab.eval.baselines) on the very samples and groups evaluated,
    retrieving from the model's fine-tuning samples (direct inference: the whole fine-tuning
    split, what a fine-tuned model of the study would see)."""
    from lab.eval.baselines import BASELINES, applicable, baseline_predictions

    pool, pool_note = seen, {"from": "the model's fine-tuning samples", "samples": len(seen)}
    if not pool:
        pool, note = fine_tuning_records(task, cfg.corpora_dir, None, 0)
        pool_note = {"from": f"{task.benchmark} {note['train_split']} (no fine-tuning data "
                             "seen: the whole fine-tuning split)", "samples": len(pool)}
    metrics = [m for m in cfg.metrics if m != "codebleu"]
    scores: dict[str, Any] = {"retrieval_pool": pool_note}
    for name in applicable(task.family):
        made = breakdown(baseline_predictions(name, task.family, samples, pool), metrics)
        scores[name] = {"definition": BASELINES[name], "metrics": made["metrics"],
                        "by_group": made["by_group"]}
    return scores


def run_evaluate(cfg: EvaluateConfig | Path, task: str | None = None, **options: Any
                 ) -> dict[str, Any]:
    """Entry point of `lab evaluate` and of a study's evaluate stages: predictions.jsonl and
    metrics.json for one split of `benchmark` (default: evaluation_benchmark).
    run_evaluate(model, task, **options) makes the EvaluateConfig of those fields."""
    if not isinstance(cfg, EvaluateConfig):
        cfg = EvaluateConfig(model=Path(cfg), task=task, **options)
    from transformers import set_seed

    started = time.perf_counter()
    task = get_task(cfg.task)
    plan = cfg.decoding_plan()
    device = check_placement(cfg.device, cfg.dtype)
    out = Path(cfg.out or beside(cfg.model, f"eval-{task.name}-{cfg.split}-{plan.label()}"))
    inputs = [cfg.model, cfg.ids, *corpora_inputs(cfg.corpora_dir)]
    check_output(out, cfg.force, "lab-evaluation", inputs)
    # The manifest, the samples and the ids are checked before the weights are loaded.
    manifest, _architecture = generator_manifest(cfg.model)
    trained_task = manifest.get("task", {}).get("name")
    if trained_task and trained_task != task.name:
        raise LabError(f"--model {cfg.model}: fine-tuned for {trained_task}, not {task.name}")
    benchmark = evaluation_benchmark(manifest, task, cfg.benchmark)
    samples: list[Sample] = load_samples(benchmark, cfg.split, cfg.corpora_dir,
                                         require_references=True).records
    if cfg.ids is not None:
        samples = [samples[i] for i in read_sample_ids(cfg.ids, "--ids", samples)]
    samples = samples[:cfg.max_samples]
    model, tokenizer, manifest, architecture = load_generator(cfg.model)
    model = place_model(model, cfg.device, cfg.dtype)
    corpus = pretraining_record(manifest).get("corpus", {})
    membership = pretraining_membership(manifest)
    split = cfg.split
    if of_task(corpus.get("benchmark"), task) and corpus.get("benchmark_split", split) == split:
        check_split_half(samples, membership)
    seen, seen_note = finetuning_samples(manifest, Path(cfg.model), cfg.corpora_dir)
    overlap = finetune_overlap(samples, seen)
    membership["in_finetune_data"] = set(overlap)
    membership["injected_truncated"], membership["held_out_truncated"], truncation = \
        block_truncation(samples, membership, manifest, tokenizer)
    differ = truncation.get("differ_from_recorded") or []
    if differ and "truncated_ids" in corpus:
        # The rule then judges held-out and removed samples otherwise than the injected ones
        # were cut, and the halves would not compare the same length range.
        raise LabError(
            f"--model {cfg.model}: the block-size rule ({truncation['rule']}) judges {len(differ)} "
            f"of {truncation['checked_on_trained_samples']} trained samples otherwise than "
            f"pre-training recorded (corpus.truncated_ids): {', '.join(differ[:5])}; the "
            "split-half groups cannot be formed alike on both halves")
    groups = assign_groups(samples, membership)
    # A sample's dose counts only where it is compared: injected or held out, not seen in the
    # fine-tuning data, pre-existing or cut at the block size.
    dose_of, timing_of = dose_levels(manifest), timing_levels(manifest)
    doses = {s.id: dose_of[s.id] for s in samples
             if s.id in dose_of and groups[s.id] in ("injected", "held_out")}
    timings = {s.id: timing_of[s.id] for s in samples
               if s.id in timing_of and groups[s.id] == "injected"}

    config = manifest.get("config", {})
    limit = _position_limit(model, architecture, manifest)
    max_source = int(config.get("max_source_length", 0)) or default_source_length(
        model, architecture, limit)
    if limit is not None:  # older fine-tuned models fitted their lengths to positions only
        max_source = min(max_source, limit - 3 if architecture == "causal-lm" else limit)
    max_new = cfg.max_new_tokens or int(config.get("max_target_length", 0)) or max_source

    set_seed(cfg.seed)
    gen_started = time.perf_counter()
    predictions = generate(model, tokenizer, architecture, [s.input for s in samples], plan,
                           max_source, max_new, cfg.batch_size, positions=limit)
    gen_seconds = time.perf_counter() - gen_started
    references = [s.output for s in samples]
    # The arm-vs-control sample set (CLEAN), with every metric (the same as the whole split's
    # when nothing is left out): always written, so that a study compares one set throughout.
    clean = [i for i, s in enumerate(samples) if groups[s.id] not in EXCLUDED_FROM_CLEAN]

    def breakdown(made: list[str], metrics: list[str]) -> dict[str, Any]:
        """Scores of predictions `made`: overall, per sample, per group and per dose."""
        overall, per_sample = metric_fns.score(references, made, metrics, task.target_language,
                                               task.family)  # em of its CodeXGLUE evaluator

        def scored(chosen: list[int], names: list[str]) -> dict[str, float]:
            return metric_fns.score([references[i] for i in chosen], [made[i] for i in chosen],
                                    names, task.target_language, task.family)[0]

        plain = [m for m in metrics if m != "codebleu"]
        by_group: dict[str, dict[str, Any]] = {}
        for group in GROUPS:
            chosen = [i for i, s in enumerate(samples) if groups[s.id] == group]
            if chosen:
                by_group[group] = {"samples": len(chosen), **scored(chosen, plain)}
        by_dose: dict[str, dict[str, Any]] = {}
        for dose in sorted(set(doses.values())):
            chosen = [i for i, s in enumerate(samples) if doses.get(s.id) == dose]
            by_dose[str(dose)] = {"samples": len(chosen), **scored(chosen, plain)}
        by_timing: dict[str, dict[str, Any]] = {}
        for timing in dict.fromkeys(timings.values()):  # in the ladder's order
            chosen = [i for i, s in enumerate(samples) if timings.get(s.id) == timing]
            by_timing[timing] = {"samples": len(chosen), **scored(chosen, plain)}
        by_group[CLEAN] = {"samples": len(clean),
                           **(overall if len(clean) == len(samples) else
                              scored(clean, metrics) if clean else {})}
        return {"metrics": overall, "per_sample": per_sample, "by_group": by_group,
                "by_dose": by_dose, "by_timing": by_timing}

    model_scores = breakdown(predictions, list(cfg.metrics))
    overall, per_sample = model_scores["metrics"], model_scores["per_sample"]
    by_group, by_dose = model_scores["by_group"], model_scores["by_dose"]
    by_timing = model_scores["by_timing"]
    baselines = _baseline_scores(task, samples, seen, cfg, breakdown)
    counts = {g: sum(1 for s in samples if groups[s.id] == g) for g in (*GROUPS, UNKNOWN)}
    result = {
        "kind": "lab-evaluation", "task": task.name, "benchmark": benchmark, "split": cfg.split,
        "model": str(cfg.model),
        # The weights evaluated: what tells this model's evaluations apart (lab export).
        "model_weights_sha256": manifest.get("final_weights_sha256"),
        "decoding": plan.__dict__, "samples": len(samples),
        "metrics": overall, "by_group": by_group, **({"by_dose": by_dose} if by_dose else {}),
        **({"by_timing": by_timing} if by_timing else {}),
        "baselines": baselines,
        "groups": {
            "precedence": [*GROUPS, UNKNOWN], "counts": counts,
            "clean": {"samples": len(clean), "excludes": list(EXCLUDED_FROM_CLEAN)},
            # Each reason on its own (a sample may have several; its group is the first).
            "reasons": {"in_finetune_data": len(overlap),
                        **{g: sum(1 for s in samples if s.id in membership[g])
                           for g in ("pre_existing", "injected_truncated", "held_out_truncated")}},
            "finetune_data": seen_note,
            "truncated_ids_recorded": "truncated_ids" in corpus,
            "truncation": truncation,
        },
        "placement": {"device": device, "dtype": cfg.dtype},
        "lengths": {"position_limit": limit, "max_source_length": max_source,
                    "max_new_tokens": max_new},
        "metric_definitions": {m: metric_fns.describe(task.family)[m] for m in cfg.metrics},
        "generation_seconds": round(gen_seconds, 2), "seed": cfg.seed,
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    with atomic_output_dir(out, force=cfg.force, kind="lab-evaluation", inputs=inputs) as tmp:
        with open(tmp / "predictions.jsonl", "wb") as handle:
            for i, sample in enumerate(samples):
                row = {"id": sample.id, "source": sample.input, "reference": sample.output,
                       "prediction": predictions[i], "group": groups[sample.id],
                       "injected": sample.id in membership["injected"]
                       and sample.id not in membership["removed_by_decontamination"],
                       **({"removed_by_decontamination": True}
                          if sample.id in membership["removed_by_decontamination"] else {}),
                       **({"dose": doses.get(sample.id)} if by_dose else {}),
                       **({"timing": timings.get(sample.id)} if by_timing else {}),
                       "in_finetune_data": overlap.get(sample.id, []),
                       "scores": {m: values[i] for m, values in per_sample.items()}}
                handle.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")
        write_json_atomic(tmp / EVALUATION, result)
    result["out"] = str(out)
    return result
