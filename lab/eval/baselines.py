"""Trivial baselines: what a program with no model scores on the same samples, so that every
table can say where the floor is.

- `copy` (translation only): the prediction is the input, unchanged (CodeXGLUE's "naive copy").
- `first_line` (summarisation only): the input's first non-blank line, stripped: a method's
  signature, what a summary most often restates.
- `method_name` (summarisation only): the name of the method (the identifier before the input's
  first parenthesis) split into lower-case words at underscores and camelCase humps
  (`getFileName` -> `get file name`); the input itself where it has no such name.
- `retrieval`: the reference of the fine-tuning sample whose input is most similar to the test
  input, by Okapi BM25 (k1 1.2, b 0.75, Lucene's non-negative idf; each distinct query word
  once) over lower-cased words (identifiers and numbers; camelCase not split). Ties, including
  no shared word at all, go to the earliest fine-tuning sample, so it is deterministic. The
  fine-tuning samples are those `lab finetune` trains on: the task's train split (offline
  CONCODE: dev), or the seeded `--train-size` subset of it.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lab.common import LabError, check_output, corpora_param, param
from lab.corpora import Sample, corpora_inputs, load_samples
from lab.tasks import fine_tuning_records, get_task

BASELINES = {
    "copy": "the input unchanged (translation only)",
    "retrieval": "the reference of the most similar fine-tuning input (BM25 over words)",
    "first_line": "the input's first non-blank line (summarisation only)",
    "method_name": "the method's name split into words (summarisation only)",
}
# The tasks a baseline applies to (a baseline not named here applies to every task).
ONLY_FOR = {"copy": "translation", "first_line": "summarisation", "method_name": "summarisation"}
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
# Not an annotation's name (`@SuppressWarnings("unchecked") void f()` is named f).
NAME_BEFORE_PARENTHESIS = re.compile(r"(?<![@\w])([A-Za-z_][A-Za-z0-9_]*)\s*\(")
HUMP = re.compile(r"[A-Z]+\d*(?=[A-Z][a-z])|[A-Z]?[a-z]+\d*|[A-Z]+\d*|\d+")
BM25_K1, BM25_B = 1.2, 0.75


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


class BM25Index:
    """Okapi BM25 weights of a document collection, as one sparse matrix."""

    def __init__(self, documents: Sequence[str]):
        from scipy.sparse import csr_matrix

        self.vocabulary: dict[str, int] = {}
        rows, columns, counts, lengths = [], [], [], []
        for row, document in enumerate(documents):
            bag = Counter(words(document))
            lengths.append(sum(bag.values()))
            for word, count in bag.items():
                rows.append(row)
                columns.append(self.vocabulary.setdefault(word, len(self.vocabulary)))
                counts.append(count)
        n, size = len(documents), max(1, len(self.vocabulary))
        tf = csr_matrix((np.asarray(counts, dtype=np.float64), (rows, columns)), shape=(n, size))
        df = np.bincount(np.asarray(columns, dtype=np.int64), minlength=size)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        length = np.asarray(lengths, dtype=np.float64)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / max(length.mean() if n else 1.0, 1e-9))
        row_of = np.repeat(np.arange(n), np.diff(tf.indptr))
        weights = idf[tf.indices] * tf.data * (BM25_K1 + 1) / (tf.data + norm[row_of])
        self.weights = csr_matrix((weights, tf.indices.copy(), tf.indptr.copy()), shape=(n, size))

    def best(self, queries: Sequence[str], chunk: int = 256) -> list[int]:
        """Index of the best-scoring document for each query (ties: the earliest)."""
        from scipy.sparse import csr_matrix

        found: list[int] = []
        transposed = self.weights.T.tocsr()
        for start in range(0, len(queries), chunk):
            rows, columns = [], []
            for row, query in enumerate(queries[start:start + chunk]):
                for word in dict.fromkeys(words(query)):
                    if word in self.vocabulary:
                        rows.append(row)
                        columns.append(self.vocabulary[word])
            block = csr_matrix((np.ones(len(rows)), (rows, columns)),
                               shape=(len(queries[start:start + chunk]), transposed.shape[0]))
            scores = (block @ transposed).toarray()
            found += np.argmax(scores, axis=1).tolist()
        return found


def first_line(code: str) -> str:
    return next((line.strip() for line in code.splitlines() if line.strip()), "")


def method_name_words(code: str) -> str:
    """`method_name`'s prediction (module docstring)."""
    found = NAME_BEFORE_PARENTHESIS.search(code)
    if found is None:
        return code.strip()
    return " ".join(part.lower() for piece in found.group(1).split("_")
                    for part in HUMP.findall(piece))


def baseline_predictions(name: str, task: str, samples: Sequence[Sample],
                         pool: Sequence[Sample] | None = None) -> list[str]:
    """The predictions of baseline `name` for `samples` (`pool`: the fine-tuning samples)."""
    if name in ONLY_FOR and task != ONLY_FOR[name]:
        raise LabError(f"baseline {name}: {ONLY_FOR[name]} only (task {task})")
    if name == "copy":
        return [s.input for s in samples]
    if name == "first_line":
        return [first_line(s.input) for s in samples]
    if name == "method_name":
        return [method_name_words(s.input) for s in samples]
    if name == "retrieval":
        if not pool:
            raise LabError("baseline retrieval: no fine-tuning samples to retrieve from")
        index = BM25Index([s.input for s in pool])
        return [pool[i].output for i in index.best([s.input for s in samples])]
    raise LabError(f"unknown baseline '{name}' (choose from {', '.join(BASELINES)})")


def applicable(task: str) -> tuple[str, ...]:
    return tuple(b for b in BASELINES if ONLY_FOR.get(b, task) == task)


def score_baselines(task: str, samples: Sequence[Sample], pool: Sequence[Sample],
                    metrics: Sequence[str], language: str | None = None,
                    names: Sequence[str] | None = None) -> dict[str, Any]:
    """Corpus and per-sample scores of each baseline on `samples`: {name: (corpus, per_sample)}."""
    from lab.eval.metrics import score

    references = [s.output for s in samples]
    return {name: score(references, baseline_predictions(name, task, samples, pool), metrics,
                        language, task)
            for name in (names or applicable(task))}


@dataclass
class BaselineConfig:
    """`lab baseline`: the trivial baselines of a task, scored like a model."""
    task: str = param(help="A task: translation, generation, summarisation, python-summarisation "
                                "or python-generation.")
    split: str = param("test", "Benchmark split to score.")
    baselines: tuple[str, ...] = param(None, "Of " + ", ".join(BASELINES) + " (default: every "
                                             "one that applies to the task).")
    metrics: tuple[str, ...] = param(("bleu", "meteor", "em"), "Metrics (as lab score).")
    train_size: int | None = param(None, "Retrieve from the seeded subset of this size that "
                                         "lab finetune --train-size trains on.")
    seed: int = param(0, "Seed of that subset (lab finetune --seed).")
    out: Path | None = param(None, "Also write the scores and predictions here (JSON).")
    force: bool = param(False, "Replace an existing --out file that lab baseline wrote.")
    corpora_dir: Path | None = corpora_param()


def run_baseline(cfg: BaselineConfig) -> dict[str, Any]:
    """Entry point of `lab baseline`."""
    from lab.common import environment_record, write_json_atomic
    from lab.eval.metrics import ensure_wordnet, parse_metrics

    task = get_task(cfg.task)
    family = task.family  # python-summarisation: summarisation's baselines and EM
    names = tuple(cfg.baselines or applicable(family))
    for name in names:
        if name not in BASELINES:
            raise LabError(f"--baselines: unknown baseline '{name}' (choose from "
                           f"{', '.join(BASELINES)})")
        if name not in applicable(family):
            raise LabError(f"--baselines {name}: does not apply to task {cfg.task}")
    metrics = parse_metrics(",".join(cfg.metrics), None)
    if cfg.out is not None:  # before any work; never over a dataset file or another output
        check_output(Path(cfg.out), cfg.force, "lab-baselines", corpora_inputs(cfg.corpora_dir),
                     what="file")
    if "meteor" in metrics:
        ensure_wordnet()
    samples = load_samples(task.benchmark, cfg.split, cfg.corpora_dir, True).records
    pool, note = fine_tuning_records(task, cfg.corpora_dir, cfg.train_size, cfg.seed)
    scored = score_baselines(family, samples, pool, metrics, None, names)
    result = {"kind": "lab-baselines", "task": cfg.task, "benchmark": task.benchmark,
              "split": cfg.split, "samples": len(samples),
              "retrieval_pool": {k: v for k, v in note.items() if k != "train_files"},
              "definitions": {n: BASELINES[n] for n in names},
              "baselines": {n: corpus for n, (corpus, _) in scored.items()},
              "environment": environment_record()}
    if cfg.out is not None:
        try:
            write_json_atomic(Path(cfg.out), result)
        except OSError as exc:  # as lab score says it: a full disk names --out, not a temporary
            raise LabError(f"--out {cfg.out}: cannot write ({exc.strerror or exc})") from None
    return result
