"""`lab llm-eval`: the study's LLM arm, one-shot prompting on a contaminated set and its twin.

The study (Sections II-E, II-F) prompts LLaMA and StarCoder with a one-shot example per task
(prompts from its replication package's README), samples with temperature 0.8, top-p 0.95 and
top-k 50, keeps the first answer (up to 'END OF CASE'), repeats five times and compares the five
corpus scores of the contaminated set with those of its perturbed control by Mann-Whitney U
(`--test mann-whitney`). The repetitions are paired (both sets of repetition r share its seed)
and so are the samples (line i of both files), so the default is a paired test (`--test wilcoxon`).

Any local causal LM directory works; a lab micro GPT-2 stands in for an LLM in tests.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lab.common import (
    LLM_RESULTS, MANIFEST, SEED_MAX, LabError, atomic_output_dir, check_numbers, check_output,
    environment_record, loading, param, sha256_file, sha256_text, write_json_atomic, write_jsonl,
)
from lab.eval import metrics as metric_fns
from lab.eval.generate import padded
from lab.tasks import Decoding, check_sampling
from lab.models import (WEIGHTS_SUBDIR, architecture_of, check_placement,
                        device_param, dtype_param, load_lab_model, place_model)
from lab.train.artefacts import read_model
from lab.stats import ALPHA, CONVENTIONS, compare, signed_rank_test, starred_p

MARKER = "END OF CASE"
METRICS = ("bleu", "meteor")
GROUPS = ("contaminated", "perturbed")  # experimental, control

# The README's one-shot examples. Its Java example ends "}" plus spaces and no-break spaces,
# a Markdown rendering artefact, dropped here.
_BODY = ("    this.bundleContext = bundleContext;\n"
         "    this.resourceLoader = new OsgiBundleResourceLoader(bundleContext.getBundle());\n}")
JAVA_EXAMPLE = "private void injectBundleContext(BundleContext bundleContext) {\n" + _BODY
CSHARP_EXAMPLE = "private void InjectBundleContext(BundleContext bundleContext) {\n" + _BODY
SUMMARY_FUNCTION = ("private void injectBundleContext(BundleContext bundleContext) {\n"
                    "    this.bundleContext = bundleContext; this.resourceLoader = new "
                    "OsgiBundleResourceLoader(bundleContext.getBundle());\n}")
SUMMARY = ("This Java function injects a `BundleContext` object, stores it, and initializes a "
           "`ResourceLoader` with the associated bundle.")
INSTRUCTION = "Write a Java method that sets a `name` field to the provided parameter value."
SET_NAME = "public void setName(String name) {\n    this.name = name;\n}"


@dataclass(frozen=True)
class LlmTask:
    name: str
    label: str  # as the study's tables write it
    instruction: str
    input_header: str
    output_header: str
    example_input: str
    example_output: str
    fields: tuple[tuple[str, str], ...]  # accepted (input, reference) field pairs


QA = ("question", "answer")
TASKS = {t.name: t for t in (
    LlmTask("java2cs", "Java→C#", "Please translate the following Java function into equivalent "
            "C# code.", "Java:", "C#:", JAVA_EXAMPLE, CSHARP_EXAMPLE, (QA,)),
    # The study prompts only Java->C#; for C#->Java the languages and example sides swap.
    LlmTask("cs2java", "C#→Java", "Please translate the following C# function into equivalent "
            "Java code.", "C#:", "Java:", CSHARP_EXAMPLE, JAVA_EXAMPLE, (QA,)),
    LlmTask("summarization", "Java→NL", "Please summarize the following Java function.",
            "Function:", "Summary:", SUMMARY_FUNCTION, SUMMARY, (QA,)),
    # RQ1RQ2's java_generate files hold {question, answer}; RQ4's pair-genne {description, code}.
    LlmTask("generation", "NL→Java", "Please implement the following Java function.",
            "Instruction:", "Function:", INSTRUCTION, SET_NAME, (("description", "code"), QA)),
)}
# File-name fragments of the paper-llm layout (upstream spellings included), first match wins.
NAME_HINTS = (("java2csharp", "java2cs"), ("csharp2java", "cs2java"), ("summar", "summarization"),
              ("generate", "generation"), ("genne", "generation"))


def build_prompt(task: LlmTask, source: str) -> str:
    """The study's prompt: instruction, the one-shot example, then the sample, ending where the
    answer starts (the README's generation block shows a blank line after its last header; it
    is read as the same single newline as the other two prompts and the example itself)."""
    return (f"{task.instruction} End your answer with '{MARKER}'.\n"
            f"{task.input_header}\n{task.example_input}\n{task.output_header}\n"
            f"{task.example_output}\n{MARKER}\n"
            f"{task.input_header}\n{source}\n{task.output_header}\n")


def cut_at_marker(text: str) -> str:
    """The first answer: everything before 'END OF CASE' (all of it when the marker is missing)."""
    return text.split(MARKER, 1)[0].strip()


def _task_from_name(path: Path) -> str | None:
    name = path.name.lower()
    return next((task for hint, task in NAME_HINTS if hint in name), None)


def _first_keys(path: Path) -> set[str]:
    """Keys of the first record, to pick the field pair; malformed input is reported later."""
    first = next((line for line in metric_fns.read_text_file(path).split("\n") if line.strip()), "")
    try:
        record = orjson.loads(first)
    except orjson.JSONDecodeError:
        return set()
    return set(record) if isinstance(record, dict) else set()


def infer_task(contaminated: Path, perturbed: Path) -> str:
    """The task from the file names (java2csharp, csharp2java, *summar*, *generate*, *genne*),
    else `generation` for {description, code} records; a conflict or no clue is an error."""
    names = {p: _task_from_name(p) for p in (contaminated, perturbed)}
    found = {t for t in names.values() if t}
    if len(found) > 1:
        raise LabError(f"{contaminated} looks like {names[contaminated]} but {perturbed} like "
                       f"{names[perturbed]}: pass --task")
    if found:
        return found.pop()
    if {"description", "code"} <= _first_keys(contaminated):
        return "generation"
    raise LabError(f"{contaminated}: cannot infer the task from the file name or fields: pass "
                   f"--task ({', '.join(TASKS)})")


def read_pairs(path: Path, task: LlmTask) -> tuple[list[str], list[str]]:
    """(inputs, references) of a JSON-lines file; every problem names file:line."""
    keys = _first_keys(Path(path))  # also reports a missing or unreadable file
    fields = next((pair for pair in task.fields if set(pair) <= keys), task.fields[-1])
    columns, numbers = metric_fns.read_jsonl_fields(path, fields)
    if not numbers:
        raise LabError(f"{path}: no records (empty file)")
    for field in fields:
        empty = [n for n, value in zip(numbers, columns[field]) if not value.strip()]
        if empty:
            raise LabError(f"{path}:{empty[0]}: empty '{field}' field")
    return columns[fields[0]], columns[fields[1]]


def load_causal_lm(path: Path) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, description) of a local causal LM: a Hugging Face model folder or a
    lab pre-trained (or fine-tuned causal) GPT-2, whose weights are in its model/ folder."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    path = Path(path)
    if not path.is_dir():
        raise LabError(f"--model {path}: not a local directory (llm-eval loads a local Hugging "
                       "Face model folder and never downloads one)")
    kind, hf_dir = "huggingface", path
    manifest_path = path / MANIFEST
    architecture = None
    if manifest_path.is_file():
        manifest = read_model(path, "--model")  # its weights and membership checked
        architecture = architecture_of(manifest) if isinstance(manifest, dict) else None
        if architecture == "masked-lm":
            raise LabError(f"--model {path}: a lab {manifest['model'].get('family')} model is a "
                           "masked LM, not a causal LM that can generate")
        if architecture not in (None, "causal-lm"):
            raise LabError(f"--model {path}: a lab {architecture} model, not a causal LM")
        if architecture is not None:
            kind, hf_dir = manifest["kind"], path / WEIGHTS_SUBDIR
    if not (hf_dir / "config.json").is_file():
        raise LabError(f"--model {path}: no config.json in {hf_dir} (not a Hugging Face model "
                       "directory)")
    # Never trust_remote_code: a model that needs its own code is refused here.
    with loading(hf_dir / "config.json", "--model"):
        config = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    model_type = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        raise LabError(f"--model {path}: an encoder-decoder ({model_type}), not a causal LM")
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        raise LabError(f"--model {path}: a masked LM ({model_type}), not a causal LM that can "
                       "generate")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise LabError(f"--model {path}: model type '{model_type}' has no causal LM in "
                       "transformers")
    if architecture is not None:
        model, tokenizer = load_lab_model(path, architecture)
    else:
        with loading(hf_dir, "--model"):
            tokenizer = AutoTokenizer.from_pretrained(str(hf_dir), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(hf_dir), local_files_only=True)
        model.eval()
    weights = sorted(p for p in hf_dir.iterdir() if p.name == "config.json"
                     or p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    # File names and sizes, not contents: hashing tens of GB of LLM weights would take minutes.
    listing = "\n".join(f"{p.name}\t{p.stat().st_size}" for p in weights)
    info = {"path": str(path), "weights_dir": str(hf_dir), "kind": kind, "model_type": model_type,
            "positions": _positions(config), "files": [p.name for p in weights],
            "fingerprint": sha256_text(sha256_file(hf_dir / "config.json") + "\n" + listing),
            "parameters": sum(p.numel() for p in model.parameters())}
    return model, tokenizer, info


def _positions(config: Any) -> int | None:
    """Positions the model can attend over (None: no fixed limit in its config)."""
    for attribute in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length"):
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def encode_prompts(tokenizer: Any, prompts: list[str], positions: int | None, max_new_tokens: int,
                   bos_prefix: bool) -> tuple[list[list[int]], list[bool]]:
    """Token ids of every prompt, and whether it was cut. A prompt is cut from the left (the
    instruction and the example go first) only when it would leave fewer than
    min(max_new_tokens, positions / 4) positions for the answer: a last resort for tiny models."""
    reserve = min(max_new_tokens, positions // 4) if positions else 0
    encoded, cut = [], []
    for prompt in prompts:
        body = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        prefix = [tokenizer.bos_token_id] if bos_prefix else []
        room = max(1, positions - reserve - len(prefix)) if positions else len(body)
        cut.append(len(body) > room)
        encoded.append(prefix + body[len(body) - room:] if cut[-1] else prefix + body)
    return encoded, cut


def _wants_bos(tokenizer: Any, lab_model: bool) -> bool:
    """Start with BOS when the tokenizer adds it itself (as the study's HF calls did) or the
    model is a lab GPT-2 (its pre-training sequences start with <s>)."""
    bos = tokenizer.bos_token_id
    return bos is not None and (lab_model or tokenizer("x")["input_ids"][:1] == [bos])


def _stop_criterion(tokenizer: Any, width: int) -> Any:
    import torch
    from transformers import StoppingCriteria

    class StopAtMarker(StoppingCriteria):
        """Per row: stop once the answer (never the prompt's example) holds the marker."""

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            # The marker spans at most len(MARKER) tokens; a few more cover merges.
            tails = input_ids[:, max(width, input_ids.shape[1] - 2 * len(MARKER)):]
            texts = tokenizer.batch_decode(tails, skip_special_tokens=True)
            return torch.tensor([MARKER in t for t in texts], device=input_ids.device)

    return StopAtMarker()


def generate(model: Any, tokenizer: Any, prompts: list[list[int]], positions: int | None,
             max_new_tokens: int, batch_size: int, sampling: dict[str, Any]
             ) -> tuple[list[str], list[int]]:
    """Sampled answers (raw text) in input order and each one's token budget: batches of similar
    length, left padding so every answer starts right after its prompt."""
    import torch
    from transformers import StoppingCriteriaList

    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad = 0 if pad is None else pad
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    outputs, budgets = [""] * len(prompts), [0] * len(prompts)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        ids, mask = padded([prompts[i] for i in batch], pad, left=True)
        width = ids.shape[1]
        budget = min(max_new_tokens, positions - width) if positions else max_new_tokens
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=True,
                num_beams=1, num_return_sequences=1, max_new_tokens=budget, pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id, use_cache=True,
                stopping_criteria=StoppingCriteriaList([_stop_criterion(tokenizer, width)]),
                **sampling)
        for row, i in enumerate(batch):
            outputs[i] = tokenizer.decode(generated[row, width:], skip_special_tokens=True)
            budgets[i] = budget
    return outputs, budgets


def _mean_std(values: list[float]) -> str:
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.2f}{spread}"


# How lab llm-eval compares the contaminated set with its perturbed twin (--test).
TESTS = {
    "wilcoxon": "Wilcoxon signed-rank, paired: repetition r of both sets draws with seed SEED + r, "
              "and line i of both files is one sample in two forms",
    "mann-whitney": "Mann-Whitney U over the repetitions taken as independent (the study's)",
}
REPETITIONS_PAIRED = "Wilcoxon signed-rank over repetitions paired by seed"
SAMPLES_PAIRED = "Wilcoxon signed-rank over samples paired by line (mean over repetitions)"


def markdown_table(rows: list[dict[str, str]], note: str) -> str:
    header = [h for h in ("model", "task", "metric", "experimental", "control", "p",
                          "p (samples)") if h in rows[0]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row[h] for h in header) + " |" for row in rows]
    return "\n".join(lines) + f"\n\n{note}\n"


def _check_options(task: str | None, repetitions: int, temperature: float, top_p: float,
                   top_k: int, max_new_tokens: int, batch_size: int, limit: int | None,
                   convention: str, test: str) -> None:
    checks = [(repetitions >= 1, f"--repetitions {repetitions}: must be >= 1"),
              (max_new_tokens >= 1, f"--max-new-tokens {max_new_tokens}: must be >= 1"),
              (batch_size >= 1, f"--batch-size {batch_size}: must be >= 1"),
              (limit is None or limit >= 1, f"--limit {limit}: must be >= 1"),
              (convention in CONVENTIONS,
               f"--convention {convention}: choose from {', '.join(CONVENTIONS)}"),
              (test in TESTS, f"--test {test}: choose from {', '.join(TESTS)}"),
              (task is None or task in TASKS, f"--task {task}: choose from {', '.join(TASKS)}")]
    for ok, message in checks:
        if not ok:
            raise LabError(message)
    check_sampling(temperature, top_p, top_k)


def compare_sets(scores: dict[str, dict[str, list[float]]],
                 sample_scores: dict[str, dict[str, list[float]]], convention: str, test: str,
                 model_name: str, task: LlmTask
                 ) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Per metric: contaminated (experimental) vs perturbed (control), as statistics and as
    table rows (p starred at alpha; '(lower)' when the control is ahead). `scores`: corpus
    scores per repetition; `sample_scores`: per-sample scores, line by line, averaged over the
    repetitions. test 'wilcoxon': Wilcoxon signed-rank over the repetitions and over the samples,
    with the convention's alternative; 'mann-whitney': the study's unpaired test."""
    alternative = CONVENTIONS[convention][0]
    stats: dict[str, Any] = {}
    rows: list[dict[str, str]] = []
    for metric in METRICS:
        exp, ctrl = scores["contaminated"][metric], scores["perturbed"][metric]
        result = compare(exp, ctrl, convention)
        entry = {**result.__dict__, "lift_ci": list(result.lift_ci) if result.lift_ci else None,
                 "std_experimental": statistics.stdev(exp) if len(exp) > 1 else None,
                 "std_control": statistics.stdev(ctrl) if len(ctrl) > 1 else None,
                 "test": result.convention(), "convention": convention, "pairing": test}
        row = {"model": model_name, "task": task.label, "metric": metric.upper(),
               "experimental": _mean_std(exp), "control": _mean_std(ctrl)}
        if test == "wilcoxon":
            p_runs, runs_test = signed_rank_test(
                [e - c for e, c in zip(exp, ctrl)], f"{REPETITIONS_PAIRED}, {alternative}",
                alternative)
            per_sample = [e - c for e, c in zip(sample_scores["contaminated"][metric],
                                                sample_scores["perturbed"][metric])]
            p_samples, samples_test = signed_rank_test(
                per_sample, f"{SAMPLES_PAIRED}, {alternative}", alternative)
            entry.update(p_mann_whitney=result.p, p=p_runs, test=runs_test,
                         p_samples=p_samples, samples_test=samples_test,
                         samples=len(per_sample),
                         sample_gap=sum(per_sample) / len(per_sample) if per_sample else None)
            row.update(p=starred_p(p_runs, result.lift),
                       **{"p (samples)": starred_p(p_samples, entry["sample_gap"])})
        else:
            row["p"] = starred_p(result.p, result.lift)
        stats[metric] = entry
        rows.append(row)
    return stats, rows


def sample_means(generations: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per set and metric: each line's per-sample score averaged over the repetitions."""
    totals: dict[str, dict[str, dict[int, list[float]]]] = {
        g: {m: {} for m in METRICS} for g in GROUPS}
    for row in generations:
        for metric in METRICS:
            totals[row["group"]][metric].setdefault(row["index"], []).append(row[metric])
    return {g: {m: [statistics.fmean(v) for _i, v in sorted(by_index.items())]
                for m, by_index in metrics.items()} for g, metrics in totals.items()}


@dataclass
class LlmEvalConfig:
    """One LLM-arm run. Every option of `lab llm-eval` is declared here, once."""
    model: Path = param(help="A local causal LM folder (Hugging Face: config.json + weights) or a "
                             "lab pre-trained GPT-2; never downloaded.")
    contaminated: Path = param(help="JSON lines: the contaminated set (experimental).")
    perturbed: Path = param(help="JSON lines: its perturbed twin, line i for line i (control).")
    task: str | None = param(None, "java2cs, cs2java, summarization or generation (default: from "
                                   "the file names java2csharp / csharp2java / *summar* / "
                                   "*generate* / *genne*, else {description, code} records mean "
                                   "generation).")
    repetitions: int = param(5, "Sampling runs per set; seeds SEED .. SEED+N-1.")
    seed: int = param(0, "Seed of the first repetition.")
    temperature: float = param(Decoding.temperature, "Sampling temperature.")
    top_p: float = param(Decoding.top_p, "Sampling top-p.")
    top_k: int = param(Decoding.top_k, "Sampling top-k.")
    max_new_tokens: int = param(256, "Longest answer; it ends earlier at 'END OF CASE'.")
    batch_size: int = param(8, "Prompts per generation batch.")
    limit: int | None = param(None, "Only the first N pairs.")
    device: str = device_param("auto")
    dtype: str = dtype_param()
    test: str = param("wilcoxon",
                      "; ".join(f"{name}: {what}" for name, what in TESTS.items()) + ".")
    convention: str = param("study-tables", "Sides and exactness: study-tables (the study's "
                                            "tables: two-sided), " + ", ".join(
                                                c for c in CONVENTIONS if c != "study-tables")
                            + "; the paired test takes its alternative.")
    out: Path | None = param(None, "Write generations.jsonl, results.json and table.md here.")
    force: bool = param(False, "Replace an existing output directory.")


def run_llm_eval(model: Path, contaminated: Path, perturbed: Path, **options: Any) -> dict[str, Any]:
    """Entry point of `lab llm-eval`: generations, per-repetition BLEU/METEOR of both sets, the
    Mann-Whitney comparison per metric, and the paper-style table (also written to --out)."""
    cfg = LlmEvalConfig(model=Path(model), contaminated=Path(contaminated), perturbed=Path(perturbed),
                        **options)
    from transformers import set_seed

    started = time.perf_counter()
    _check_options(cfg.task, cfg.repetitions, cfg.temperature, cfg.top_p, cfg.top_k,
                   cfg.max_new_tokens, cfg.batch_size, cfg.limit, cfg.convention, cfg.test)
    check_numbers(seed=cfg.seed)
    device = check_placement(cfg.device, cfg.dtype)
    if cfg.seed + cfg.repetitions - 1 > SEED_MAX:  # repetition r runs with seed + r
        raise LabError(f"--seed {cfg.seed} with --repetitions {cfg.repetitions}: the last "
                       f"repetition's "
                       f"seed would exceed {SEED_MAX}")
    inputs = [model, contaminated, perturbed]
    if cfg.out is not None:
        check_output(Path(cfg.out), cfg.force, "lab-llm-eval", inputs)
    contaminated, perturbed = Path(contaminated), Path(perturbed)
    spec = TASKS[cfg.task or infer_task(contaminated, perturbed)]
    data = {g: read_pairs(p, spec) for g, p in zip(GROUPS, (contaminated, perturbed))}
    sizes = {g: len(inputs) for g, (inputs, _) in data.items()}
    if sizes["contaminated"] != sizes["perturbed"]:
        raise LabError(f"{contaminated} has {sizes['contaminated']} records but {perturbed} has "
                       f"{sizes['perturbed']}: line i of the perturbed file must be the twin of "
                       "line i of the contaminated file")
    data = {g: (inputs[:cfg.limit], refs[:cfg.limit]) for g, (inputs, refs) in data.items()}
    metric_fns.ensure_wordnet()  # fail before any generation

    lm, tokenizer, model_info = load_causal_lm(Path(model))
    lm = place_model(lm, cfg.device, cfg.dtype)
    positions = model_info["positions"]
    bos = _wants_bos(tokenizer, model_info["kind"] != "huggingface")
    prompts = {g: [build_prompt(spec, s) for s in inputs] for g, (inputs, _) in data.items()}
    encoded = {g: encode_prompts(tokenizer, p, positions, cfg.max_new_tokens, bos)
               for g, p in prompts.items()}
    sampling = dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
    seeds = [cfg.seed + r for r in range(cfg.repetitions)]
    scores: dict[str, dict[str, list[float]]] = {g: {m: [] for m in METRICS} for g in GROUPS}
    generations: list[dict[str, Any]] = []
    gen_started = time.perf_counter()
    for repetition, rep_seed in enumerate(seeds):
        for group in GROUPS:
            set_seed(rep_seed)  # both sets of a repetition draw from the same seed
            raw, budgets = generate(lm, tokenizer, encoded[group][0], positions, cfg.max_new_tokens,
                                    cfg.batch_size, sampling)
            predictions = [cut_at_marker(text) for text in raw]
            references = data[group][1]
            corpus, per_sample = metric_fns.score(references, predictions, METRICS)
            for metric in METRICS:
                scores[group][metric].append(corpus[metric])
            for i, text in enumerate(raw):
                generations.append({
                    "repetition": repetition, "seed": rep_seed, "group": group, "index": i,
                    "prompt_sha256": sha256_text(prompts[group][i]),
                    "prompt_truncated": encoded[group][1][i], "max_new_tokens": budgets[i],
                    "raw_output": text, "stopped_at_marker": MARKER in text,
                    "prediction": predictions[i], "reference": references[i],
                    **{m: per_sample[m][i] for m in METRICS}})
    gen_seconds = time.perf_counter() - gen_started

    stats, rows = compare_sets(scores, sample_means(generations), cfg.convention, cfg.test,
                               Path(model).name, spec)
    truncated = {g: sum(encoded[g][1]) for g in GROUPS}
    alternative = CONVENTIONS[cfg.convention][0]
    if cfg.test == "wilcoxon":
        floor = 2.0 ** -cfg.repetitions * (2 if alternative == "two-sided" else 1)
        tests = (f"p: {REPETITIONS_PAIRED} (exact, {alternative}; with {cfg.repetitions} "
                 f"repetitions p >= {floor:.3g}); p (samples): {SAMPLES_PAIRED}, per-sample BLEU "
                 f"(smoothed sentence BLEU) and METEOR ({alternative}). Unpaired Mann-Whitney U "
                 "(the study's) with --test mann-whitney")
    else:
        methods = "/".join(sorted({s["method"] for s in stats.values()}))
        tests = (f"p: Mann-Whitney U over repetitions as unpaired (the study's), {alternative}, "
                 f"{methods} (convention {cfg.convention}); the repetitions are paired by seed: "
                 "--test wilcoxon tests them as such")
    note = (f"Experimental: the contaminated set ({contaminated.name}), control: its perturbed "
            f"twin ({perturbed.name}); {len(data['contaminated'][0])} samples each. Corpus "
            f"BLEU-4 (CodeXGLUE) and METEOR, mean ± std over {cfg.repetitions} repetitions (seeds "
            f"{seeds[0]}-{seeds[-1]}; sampling temperature {cfg.temperature}, top-p {cfg.top_p}, top-k "
            f"{cfg.top_k}; one-shot prompt, answer cut at '{MARKER}'). {tests}; * p <= {ALPHA}.")
    if any(truncated.values()):
        note += (f" Prompts cut from the left to fit the model's {positions} positions: "
                 f"{truncated['contaminated']} contaminated, {truncated['perturbed']} perturbed.")
    table = markdown_table(rows, note)
    record = {
        "kind": "lab-llm-eval", "task": spec.name, "task_label": spec.label, "model": model_info,
        "config": {"repetitions": cfg.repetitions, "seed": cfg.seed, "temperature": cfg.temperature,
                   "top_p": cfg.top_p, "top_k": cfg.top_k, "max_new_tokens": cfg.max_new_tokens,
                   "batch_size": cfg.batch_size, "limit": cfg.limit, "convention": cfg.convention,
                   "test": cfg.test,
                   "bos_prefix": bos, "device": device},
        "seeds": seeds,
        "data": {g: {"path": str(p), "sha256": sha256_file(p), "records": sizes[g],
                     "used": len(data[g][0]), "truncated_prompts": truncated[g]}
                 for g, p in zip(GROUPS, (contaminated, perturbed))},
        "per_repetition": scores, "statistics": stats, "rows": rows, "note": note,
        "markdown": table, "generation_seconds": round(gen_seconds, 2),
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    if cfg.out is not None:
        with atomic_output_dir(Path(cfg.out), force=cfg.force, kind="lab-llm-eval", inputs=inputs) as tmp:
            write_jsonl(tmp / "generations.jsonl", generations)
            write_json_atomic(tmp / LLM_RESULTS, record)
            (tmp / "table.md").write_text(table, encoding="utf-8")
        record["out"] = str(cfg.out)
    record["generations"] = generations  # in memory only: generations.jsonl holds them
    return record
