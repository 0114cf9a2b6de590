"""Scores of generated code against references: BLEU, sentence BLEU, METEOR, EM, CodeBLEU.

`bleu` is CodeXGLUE's evaluator definition (the one the study's tables use): corpus BLEU-4 over
whitespace tokens with add-one smoothing of every n-gram precision and the usual brevity
penalty. `bleu_sentence` is the replication package's variant, the mean of per-sample BLEU.

`em` follows the CodeXGLUE evaluator of the task: translation (code-to-code, its `Acc`) counts a
prediction equal to the reference after `strip()`; generation (text-to-code, CONCODE) compares
whitespace tokens (`pred.split() == gold.split()`). `em_tokens` is the whitespace-token
comparison whatever the task.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from lab.common import EVALUATION, LabError, read_jsonl, read_text_file
from lab.eval.smooth_bleu import MAX_ORDER, _ngram_counts, smooth_bleu_per_sample

METRICS = ("bleu", "bleu_sentence", "smooth_bleu", "meteor", "em", "em_tokens", "codebleu")
# The EM definition of each task's CodeXGLUE evaluator: code-to-code-trans/evaluator/evaluator.py
# (`r == p` on stripped lines: strict) and text-to-code/evaluator/evaluator.py
# (`pred.split() == gt.split()`: tokens). `lab score` takes translation unless told otherwise.
# Code-to-text's evaluator reports no EM: summarisation compares whitespace tokens too.
EM_DEFINITIONS = {"translation": "strict", "generation": "tokens", "summarisation": "tokens"}
DEFAULT_TASK = "translation"
CODEBLEU_LANGUAGES = {"java": "java", "cs": "c_sharp"}


def _bleu_from_stats(matches: list[int], possible: list[int], hyp_len: int, ref_len: int) -> float:
    precisions = [(matches[i] + 1.0) / (possible[i] + 1.0) for i in range(MAX_ORDER)]
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / MAX_ORDER)
    if ref_len == 0:
        return 0.0
    ratio = hyp_len / ref_len
    brevity = 1.0 if ratio > 1.0 else (math.exp(1 - 1 / ratio) if ratio > 0 else 0.0)
    return 100.0 * geo_mean * brevity


def _sentence_stats(reference: str, prediction: str) -> tuple[list[int], list[int], int, int]:
    ref, hyp = reference.split(), prediction.split()
    overlap = _ngram_counts(hyp) & _ngram_counts(ref)
    matches = [0] * MAX_ORDER
    for gram, count in overlap.items():
        matches[len(gram) - 1] += count
    possible = [max(0, len(hyp) - n + 1) for n in range(1, MAX_ORDER + 1)]
    return matches, possible, len(hyp), len(ref)


def bleu(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Corpus BLEU-4 as CodeXGLUE's evaluator computes it (0-100)."""
    matches, possible, hyp_len, ref_len = [0] * MAX_ORDER, [0] * MAX_ORDER, 0, 0
    for reference, prediction in zip(references, predictions):
        m, p, h, r = _sentence_stats(reference.strip(), prediction.strip())
        matches = [a + b for a, b in zip(matches, m)]
        possible = [a + b for a, b in zip(possible, p)]
        hyp_len, ref_len = hyp_len + h, ref_len + r
    return _bleu_from_stats(matches, possible, hyp_len, ref_len)


def bleu_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    return [_bleu_from_stats(*_sentence_stats(r.strip(), p.strip()))
            for r, p in zip(references, predictions)]


def exact_match_strict_per_sample(references: Sequence[str], predictions: Sequence[str]
                                  ) -> list[float]:
    """CodeXGLUE code-to-code (translation) `Acc`: equal after strip(); inner whitespace counts."""
    return [100.0 * (r.strip() == p.strip()) for r, p in zip(references, predictions)]


def exact_match_tokens_per_sample(references: Sequence[str], predictions: Sequence[str]
                                  ) -> list[float]:
    """CodeXGLUE text-to-code (CONCODE) `EM`: the same whitespace tokens."""
    return [100.0 * (r.split() == p.split()) for r, p in zip(references, predictions)]


def check_task(task: str) -> str:
    if task not in EM_DEFINITIONS:
        raise LabError(f"--task '{task}': choose {' or '.join(EM_DEFINITIONS)}")
    return task


def exact_match_per_sample(references: Sequence[str], predictions: Sequence[str],
                           task: str | None = None) -> list[float]:
    """EM of the task's CodeXGLUE evaluator (translation: strict, generation: tokens).

    Without a task: the whitespace-token comparison (what this function always did; the probe's
    extraction EM calls it so).
    """
    if task is not None and EM_DEFINITIONS[check_task(task)] == "strict":
        return exact_match_strict_per_sample(references, predictions)
    return exact_match_tokens_per_sample(references, predictions)


def ensure_wordnet() -> None:
    """Point NLTK at the WordNet that setup installed (offline); fail with the fix if absent.

    Never downloads: setup puts WordNet 3.0 in .venv/nltk_data (sys.prefix/nltk_data, a folder
    NLTK searches by itself); $NLTK_DATA and NLTK's other default folders also count.
    """
    try:
        import nltk
    except ImportError:
        raise LabError("METEOR needs the 'nltk' package: run scripts/setup.sh") from None
    for candidate in (os.environ.get("NLTK_DATA"), str(Path(sys.prefix) / "nltk_data")):
        if candidate and candidate not in nltk.data.path:
            nltk.data.path.append(candidate)
    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        raise LabError(
            "METEOR needs NLTK's WordNet: run scripts/setup.sh (installs it offline into "
            ".venv/nltk_data) or python -m nltk.downloader wordnet when online"
        ) from None


class _WordNetSynonyms:
    """What NLTK's METEOR asks of WordNet (`synsets(word)`), loaded on first use and cached.

    Results equal those of `nltk.corpus.wordnet`; two costs are avoided:
    - NLTK's reader, on construction, maps WordNet 3.0 onto the loaded WordNet for the
      multilingual (OMW) functions, re-reading index.sense twice (about 2.5 s of its 4 s load)
      even when the loaded WordNet is 3.0 itself. English synsets never use that map, so this
      reader skips it (and OMW, which METEOR never uses).
    - METEOR looks up every unmatched hypothesis token of every sample; code repeats the same
      identifiers, so each distinct token is looked up once per process.
    WordNet is not loaded at all when every hypothesis token matches exactly or by stem.
    """

    def __init__(self) -> None:
        self._reader: Any = None
        self._cache: dict[str, list] = {}

    def _load(self) -> Any:
        import warnings

        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader

        class EnglishWordNetReader(WordNetCorpusReader):
            def map_wn(self, version: str = "wordnet") -> None:  # OMW only; see above
                return None

        ensure_wordnet()
        root = nltk.data.find("corpora/wordnet")
        with warnings.catch_warnings():  # "multilingual functions are not available"
            warnings.simplefilter("ignore")
            try:
                reader = EnglishWordNetReader(root, None)
                usable = bool(reader.synsets("dog"))
            except Exception as exc:  # a damaged copy, e.g. CRLF files (wrong byte offsets)
                raise LabError(f"WordNet at {root} is unreadable ({exc}): re-run scripts/setup.sh "
                               "after removing that folder") from None
        if not usable:
            raise LabError(f"WordNet at {root} has no synsets for 'dog': re-run scripts/setup.sh "
                           "after removing that folder")
        return reader

    def synsets(self, word: str) -> list:
        found = self._cache.get(word)
        if found is None:
            if self._reader is None:
                self._reader = self._load()
            found = self._cache[word] = self._reader.synsets(word)
        return found

    def __getattr__(self, name: str) -> Any:  # anything else a future METEOR may ask for
        if name.startswith("_"):
            raise AttributeError(name)
        if self._reader is None:
            self._reader = self._load()
        return getattr(self._reader, name)


_WORDNET = _WordNetSynonyms()


def meteor_per_sample(references: Sequence[str], predictions: Sequence[str]) -> list[float]:
    """NLTK's METEOR on whitespace tokens (0-100), WordNet 3.0 read offline."""
    ensure_wordnet()
    from nltk.translate.meteor_score import meteor_score

    return [100.0 * meteor_score([r.split()], p.split(), wordnet=_WORDNET)
            for r, p in zip(references, predictions)]


# CodeBLEU's weights of its components (alpha, beta, gamma, theta): CodeXGLUE's default, which
# the codebleu package's calc_codebleu shares.
CODEBLEU_WEIGHTS = {"ngram_match_score": 0.25, "weighted_ngram_match_score": 0.25,
                    "syntax_match_score": 0.25, "dataflow_match_score": 0.25}
CODEBLEU_COMPOSITE = ("the weighted sum of its four components, as CodeXGLUE's calc_code_bleu.py "
                      "computes it (the codebleu package counts a data-flow match of 0 as 1)")


def codebleu_composite(components: dict[str, float]) -> float:
    """CodeBLEU from its four components: CODEBLEU_COMPOSITE. The codebleu package 0.7.0 adds
    `theta * (dataflow_match_score or 1)`, so wherever no data flow matches (or none is
    extracted from the references) it counts the data-flow match as a full 1: predictions
    sharing nothing with their references score 25 with all four components 0 (lab issue 59;
    asked upstream in k4black/codebleu#59). The reference implementation and the paper take
    the data-flow match as it is; so does the lab."""
    return sum(weight * components[name] for name, weight in CODEBLEU_WEIGHTS.items())


def codebleu_score(references: Sequence[str], predictions: Sequence[str], language: str
                   ) -> dict[str, float]:
    """CodeBLEU (0-100) and its four components, from the `codebleu` package; the composite
    as CodeXGLUE computes it (codebleu_composite)."""
    if language not in CODEBLEU_LANGUAGES:
        raise LabError(f"codebleu: no grammar for language '{language}' (java or cs)")
    try:
        from codebleu import calc_codebleu
        from codebleu.utils import get_tree_sitter_language

        get_tree_sitter_language(CODEBLEU_LANGUAGES[language])
    except (ImportError, TypeError) as exc:
        # TypeError "an integer is required": a grammar wheel >= 0.23 with tree-sitter 0.22.
        raise LabError(f"codebleu: cannot load the {language} grammar ({exc}): install "
                       "codebleu==0.7.0 with tree-sitter-java<0.23 and tree-sitter-c-sharp<0.23 "
                       "(scripts/setup.sh)") from None
    lang = CODEBLEU_LANGUAGES[language]
    if not sys.flags.hash_randomization:  # this process already runs with PYTHONHASHSEED=0
        scores = calc_codebleu(list(references), list(predictions), lang=lang)
    else:
        scores = _codebleu_with_fixed_hash_seed(list(references), list(predictions), lang)
    scores["codebleu"] = codebleu_composite(scores)
    return {key: 100.0 * value for key, value in scores.items()}


# The codebleu package's data-flow match depends on the iteration order of sets of variable
# names (`list(set(...))` in its DFG code; CodeXGLUE issue 152), which Python salts per process:
# on the 1,000 CodeTrans test samples the data-flow component moved by 2 points (CodeBLEU by 0.5)
# between runs. It is computed in a child with PYTHONHASHSEED=0 instead, which gives what the
# unmodified package gives under that seed (string hashing is the same for Python >= 3.11).
_CODEBLEU_CHILD = """
import json, sys
from codebleu import calc_codebleu
job = json.load(sys.stdin)
json.dump(calc_codebleu(job["references"], job["predictions"], lang=job["lang"]), sys.stdout)
"""


def _codebleu_with_fixed_hash_seed(references: list[str], predictions: list[str], lang: str
                                   ) -> dict[str, float]:
    import json
    import subprocess

    env = dict(os.environ, PYTHONHASHSEED="0")
    job = json.dumps({"references": references, "predictions": predictions, "lang": lang})
    proc = subprocess.run([sys.executable, "-c", _CODEBLEU_CHILD], input=job, env=env,
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise LabError(f"codebleu failed ({last})")
    return json.loads(proc.stdout)


def score(references: Sequence[str], predictions: Sequence[str], metrics: Sequence[str] = METRICS,
          language: str | None = None, task: str = DEFAULT_TASK
          ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(corpus-level scores, per-sample scores) for the requested metrics.

    codebleu needs `language` (java or cs) and is left out without it; `em` takes the EM of
    `task`'s CodeXGLUE evaluator (translation: strict, generation: whitespace tokens).
    """
    check_task(task)
    if len(references) != len(predictions):
        raise LabError(f"{len(predictions)} predictions but {len(references)} references")
    if not references:
        raise LabError("no references to score against")
    empty = [i for i, r in enumerate(references) if not r.strip()]
    if empty:
        raise LabError(f"reference {empty[0] + 1} is empty ({len(empty)} empty in all): "
                       "refusing to score against empty references")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise LabError(f"unknown metric '{unknown[0]}' (choose from {', '.join(METRICS)})")
    per_sample: dict[str, list[float]] = {}
    corpus: dict[str, float] = {}
    per_sample_fns: dict[str, Callable[[Sequence[str], Sequence[str]], list[float]]] = {
        "bleu_sentence": bleu_per_sample, "smooth_bleu": smooth_bleu_per_sample,
        "meteor": meteor_per_sample,
        "em": lambda r, p: exact_match_per_sample(r, p, task),
        "em_tokens": exact_match_tokens_per_sample,
    }
    sentence_bleu: list[float] | None = None  # shared by bleu's per-sample and bleu_sentence
    for metric in metrics:
        if metric == "bleu":
            corpus["bleu"] = bleu(references, predictions)
            if sentence_bleu is None:
                sentence_bleu = bleu_per_sample(references, predictions)
            per_sample["bleu"] = sentence_bleu
        elif metric == "codebleu":
            if language is None:
                continue
            corpus.update({("codebleu" if k == "codebleu" else f"codebleu_{k}"): v
                           for k, v in codebleu_score(references, predictions, language).items()})
        else:
            if metric == "bleu_sentence":
                if sentence_bleu is None:
                    sentence_bleu = bleu_per_sample(references, predictions)
                values = sentence_bleu
            else:
                values = per_sample_fns[metric](references, predictions)
            per_sample[metric] = values
            corpus[metric] = sum(values) / len(values)
    return corpus, per_sample


def parse_metrics(text: str | None, language: str | None) -> tuple[str, ...]:
    """`--metrics a,b,c` (None: every metric; codebleu only when a language is given)."""
    if text is None:
        return tuple(m for m in METRICS if m != "codebleu" or language is not None)
    chosen = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    if not chosen:
        raise LabError(f"--metrics '{text}': no metric named (choose from {', '.join(METRICS)})")
    for name in chosen:
        if name not in METRICS:
            raise LabError(f"--metrics: unknown metric '{name}' (choose from {', '.join(METRICS)})")
    if "codebleu" in chosen and language is None:
        raise LabError("--metrics codebleu needs --language (java or cs): the grammar to "
                       "parse with")
    return chosen


def _is_jsonl(path: Path) -> bool:
    return Path(path).suffix.lower() in (".jsonl", ".ndjson")


def _lines(text: str) -> list[str]:
    """Lines as Python's readlines() gives them in text mode (CodeXGLUE's evaluator): split at
    newlines only (read_text already turned CR LF and CR into LF), not at the other separators
    str.splitlines() knows (U+2028 may occur raw inside a JSON string)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_jsonl_fields(path: Path, fields: Sequence[str]) -> tuple[dict[str, list[str]], list[int]]:
    """Fields of every record of a JSON-lines file (blank lines skipped), and each record's line
    number; every problem names file:line."""
    values: dict[str, list[str]] = {field: [] for field in fields}
    numbers: list[int] = []
    for number, record in read_jsonl(path):
        for field in fields:
            value = record.get(field)
            if not isinstance(value, str):
                what = ("no" if field not in record
                        else f"a {type(value).__name__} (not a string) as")
                raise LabError(f"{path}:{number}: {what} '{field}' field")
            values[field].append(value)
        numbers.append(number)
    return values, numbers


def _read_side(path: Path, field: str) -> tuple[list[str], list[int], str]:
    """(samples, their line numbers, unit) of one side: a JSON-lines field or one per line."""
    if _is_jsonl(path):
        columns, numbers = read_jsonl_fields(path, (field,))
        return columns[field], numbers, "records"
    lines = _lines(read_text_file(path))
    return lines, list(range(1, len(lines) + 1)), "lines"


def read_scoring_inputs(pred: Path, ref: Path | None) -> tuple[list[str], list[str]]:
    """(references, predictions) from `lab score`'s files, every problem as one LabError.

    A `.jsonl` (or `.ndjson`) file holds records with `prediction` and/or `reference` (with
    both, `ref` may be None); any other file holds one sample per line, as CodeXGLUE's
    predictions/references files.
    """
    pred = Path(pred)
    for path in (pred, ref):
        if path is not None and not Path(path).exists():
            raise LabError(f"{path}: no such file")
    if ref is None:
        if not _is_jsonl(pred):
            raise LabError(f"--ref is required: {pred} is not a predictions.jsonl "
                           "(records with 'prediction' and 'reference')")
        columns, numbers = read_jsonl_fields(pred, ("prediction", "reference"))
        predictions, references, ref_path, ref_numbers = (
            columns["prediction"], columns["reference"], pred, numbers)
    else:
        ref_path = Path(ref)
        predictions, _, pred_unit = _read_side(pred, "prediction")
        references, ref_numbers, ref_unit = _read_side(ref_path, "reference")
        if len(predictions) != len(references):
            raise LabError(f"{pred} has {len(predictions)} {pred_unit}, "
                           f"{ref_path} has {len(references)} {ref_unit}")
    if not references:
        raise LabError(f"{ref_path}: no references (empty file)")
    empty = [i for i, r in enumerate(references) if not r.strip()]
    if empty:
        raise LabError(f"{ref_path}:{ref_numbers[empty[0]]}: empty reference ({len(empty)} in "
                       "all): refusing to score against empty references")
    return references, predictions


def _evaluation_task(pred: Path) -> str | None:
    """The task of a `lab evaluate` predictions.jsonl, from the metrics.json beside it (if any)."""
    import json

    record = Path(pred).parent / EVALUATION
    try:
        found = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(found, dict) and found.get("kind") == "lab-evaluation":
        task = found.get("task")
        return task if task in EM_DEFINITIONS else None
    return None


def run_score(pred: Path, ref: Path | None = None, metrics: str | Sequence[str] | None = None,
              language: str | None = None, out: Path | None = None, task: str | None = None
              ) -> dict[str, Any]:
    """Entry point of `lab score`: corpus scores of a predictions file against references.

    `task` picks em's definition: translation (CodeXGLUE code-to-code, strict) or generation
    (text-to-code, whitespace tokens). Without it: the task of the `lab evaluate` run whose
    predictions.jsonl is scored (its metrics.json), else translation.
    """
    from lab.common import environment_record, write_json_atomic

    if language is not None and language not in CODEBLEU_LANGUAGES:
        raise LabError(f"--language '{language}': choose java or cs")
    if task is not None:
        check_task(task)
    chosen = parse_metrics(metrics if metrics is None or isinstance(metrics, str)
                           else ",".join(metrics), language)
    if out is not None and Path(out).is_dir():
        raise LabError(f"--out {out}: is a directory (name the JSON file to write)")
    if out is not None:
        # No --force: a previous lab score file is replaced as before, nothing else is.
        from lab.common import check_output

        check_output(Path(out), True, "lab-scores", [pred, ref], what="file")
    references, predictions = read_scoring_inputs(pred, ref)
    if task is None:
        task = (_evaluation_task(pred) if ref is None else None) or DEFAULT_TASK
    if "meteor" in chosen:
        ensure_wordnet()  # fail before any work
    corpus, _ = score(references, predictions, chosen, language, task)
    result = {
        "kind": "lab-scores", "samples": len(references), "predictions": str(pred),
        "references": str(ref if ref is not None else pred), "language": language, "task": task,
        "metrics": corpus, "metric_definitions": {m: describe(task)[m] for m in chosen},
        "environment": environment_record(),
    }
    if out is not None:
        out = Path(out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(out, result)
        except OSError as exc:
            raise LabError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    return result


EVALUATE_MODULES = Path(__file__).resolve().parent / "hf_metrics"


def load_evaluate_metric(name: str, **kwargs: Any) -> Any:
    """One of the lab's metrics as a Hugging Face `evaluate` module, loaded from its local folder
    (lab/eval/hf_metrics/NAME/NAME.py): no hub access, so it works with HF_HUB_OFFLINE=1."""
    if name not in METRICS:
        raise LabError(f"unknown metric '{name}' (choose from {', '.join(METRICS)})")
    try:
        import evaluate
    except ImportError:
        raise LabError("the 'evaluate' package is not installed (scripts/setup.sh)") from None
    return evaluate.load(str(EVALUATE_MODULES / name), **kwargs)


def evaluate_info(name: str) -> Any:
    """The MetricInfo of the `evaluate` module of metric `name` (shared by the modules)."""
    import datasets
    import evaluate

    inputs = ("predictions: list of str, the generated code (one sample each); references: list "
              "of str, the reference code (none empty)")
    if name == "codebleu":
        inputs += "; language: 'java' or 'cs' (the grammar to parse with)"
    if name == "em":
        inputs += ("; task: 'translation' (default: strip() equality) or 'generation' "
                   "(whitespace tokens)")
    return evaluate.MetricInfo(
        description=describe()[name] + " (computed by lab.eval.metrics; scores 0-100)",
        citation="", inputs_description=inputs,
        features=datasets.Features({"predictions": datasets.Value("string"),
                                    "references": datasets.Value("string")}),
    )


def evaluate_compute(name: str, predictions: Sequence[str], references: Sequence[str],
                     language: str | None = None, task: str | None = None) -> dict[str, float]:
    """What the `evaluate` module of metric `name` returns: the corpus scores of `score()`."""
    if name == "codebleu" and language is None:
        raise LabError("codebleu needs language='java' or 'cs'")
    corpus, _ = score(list(references), list(predictions), [name], language,
                      DEFAULT_TASK if task is None else task)
    return corpus


def evaluate_module(name: str, class_name: str) -> type:
    """The `evaluate.Metric` class of metric `name`. `evaluate.load` wants one script per
    metric (lab/eval/hf_metrics/NAME/NAME.py), each of which is this call and nothing else."""
    import evaluate

    class Module(evaluate.Metric):
        def _info(self):
            return evaluate_info(name)

        def _compute(self, predictions, references, **options):
            # Options beyond the features (codebleu's language, em's task) arrive here.
            return evaluate_compute(name, predictions, references, **options)

    Module.__name__ = Module.__qualname__ = class_name
    return Module


EM_TEXT = {
    "strict": "exact match as CodeXGLUE's code-to-code (translation) evaluator's Acc: equal after "
              "strip(), inner whitespace counts",
    "tokens": "exact match as CodeXGLUE's text-to-code (generation) evaluator's EM: the same "
              "whitespace tokens (pred.split() == gold.split())",
}


def describe(task: str | None = None) -> dict[str, Any]:
    """Each metric's definition; with a task, `em` names the definition that task uses."""
    em = (f"{EM_TEXT[EM_DEFINITIONS[check_task(task)]]} (task {task})" if task is not None else
          "exact match of the task's CodeXGLUE evaluator: translation (lab score's default) "
          "equal after strip(), generation the same whitespace tokens (summarisation too: "
          "code-to-text's evaluator has no EM)")
    return {
        "bleu": "CodeXGLUE evaluator: corpus BLEU-4, whitespace tokens, add-one smoothing",
        "bleu_sentence": "mean sentence-level BLEU-4 (same smoothing), the replication package's variant",
        "smooth_bleu": "CodeXGLUE code-to-text's evaluator: mean sentence BLEU-4, lower-cased, "
                       "words and punctuation split, NIST mteval normalisation, add-one smoothing "
                       "of the 2- to 4-gram precisions (the summarisation task's BLEU)",
        "meteor": "NLTK meteor_score on whitespace tokens, WordNet 3.0",
        "em": em,
        "em_tokens": "exact match of whitespace tokens (pred.split() == ref.split()), whatever "
                     "the task (CodeXGLUE's text-to-code EM)",
        "codebleu": "codebleu package 0.7.0 (tree-sitter grammars), Java or C#, run with "
                    "PYTHONHASHSEED=0 (its data-flow match depends on set order); the composite "
                    f"{CODEBLEU_COMPOSITE}",
    }
