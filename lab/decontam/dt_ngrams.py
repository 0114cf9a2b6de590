"""datatrove's own n-gram decontamination (datatrove.pipeline.decont.n_grams), run for real.

The index is built with the indexer step's own hashing, `NGramsDecontIndexer.compute_hashes`
(datatrove's text normalisation `simplify_text`, its n-grams and its xxhash-64 hash), and
saved in the indexer's file format (`TASK.index.hashes`, uint64 in native order). The
filtering is datatrove's `NGramsDecontFilter` step itself, run by datatrove's
`LocalPipelineExecutor` (one task) over the documents; a document it excludes is flagged.

Departures, each forced by the environment or the lab's data, none in the matching rule:
- the indexer step itself is not run: its `run` loads the benchmark through lighteval (a
  dependency the lab does not have, and a benchmark it does not list); its `compute_hashes` is
  called instead with the step's own configuration (so the hashes are the ones its run writes);
- datatrove's English word tokenizer is spaCy's, which the lab does not install; both steps get
  a whitespace word tokenizer (datatrove's `language` argument accepts one). After
  `simplify_text` has removed punctuation, spaCy's and whitespace tokens differ little in code;
- label = the sample's output, query = its input, and `find_query_ngrams` is on (datatrove's
  default is off: an arm may inject the input alone), `find_overlap_ngrams` on (its default);
- n = --ngram-n (datatrove's default n is 12; the lab's default 13 matches lm-eval's);
- the hash is datatrove's sha1 (64 bits), not its default xxhash: datatrove 0.10.1 hands the
  n-gram as str to xxhash, which xxhash 4 refuses ("Strings must be encoded before hashing"),
  so the default configuration fails in both steps here.
"""
from __future__ import annotations

import tempfile
import types
from pathlib import Path
from typing import Sequence

from lab.decontam.base import Options, Reference


def _tokenizer():
    from datatrove.utils.word_tokenizers import WordTokenizer

    class WhitespaceTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    return WhitespaceTokenizer("whitespace")


def _config(n: int):
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig
    from datatrove.utils.hashing import HashConfig

    # datatrove's default hash (xxhash) hands str to xxhash, which xxhash 4 refuses ("Strings
    # must be encoded before hashing"); its sha1 hash (64 bits, as the default) takes str.
    return NGramsDecontConfig(n_grams=n, find_query_ngrams=True, find_overlap_ngrams=True,
                              hash_config=HashConfig(precision=64, hash_fc="sha1"))


def build_index(reference: Reference, n: int, folder: Path, name: str = "benchmark") -> int:
    """Write datatrove's index of the reference's n-gram hashes; return how many."""
    import numpy as np
    from datatrove.pipeline.decont.n_grams import NGramsDecontIndexer
    from datatrove.utils.hashing import create_hash_func

    config = _config(n)
    step = types.SimpleNamespace(tokenizer=_tokenizer(), config=config,
                                 hash_func=create_hash_func(config.hash_config))
    hashes: set[int] = set()
    for sample in reference.samples:
        label, query = sample.output, sample.input
        if not label.strip():  # no reference: the input is the label
            label, query = query, None
        hashes.update(NGramsDecontIndexer.compute_hashes(step, label, query))
    array = np.array(sorted(hashes), dtype=config.hash_config.np_descr)
    with open(folder / f"{name}.index.hashes", "wb") as handle:
        array.tofile(handle)
    return len(hashes)


def flag(documents: Sequence[str], reference: Reference, options: Options) -> list[bool]:
    from datatrove.data import Document
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.decont.n_grams import NGramsDecontFilter

    from lab.executor_datatrove import QuietLocalExecutor, quiet_console

    kept: set[str] = set()

    # The documents reach the pipeline from a step's closure: the executor deep-copies its
    # pipeline for each task, and a list of documents in it would be copied whole.
    class Feed(PipelineStep):
        name = "lab documents"

        def run(self, data, rank: int = 0, world_size: int = 1):
            for i, text in enumerate(documents):
                yield Document(text=text, id=str(i))

    class Collect(PipelineStep):
        name = "collect kept ids"

        def run(self, data, rank: int = 0, world_size: int = 1):
            for doc in data:
                kept.add(doc.id)
                yield doc

    config = _config(options.ngram_n)
    with tempfile.TemporaryDirectory(prefix="lab-decontam-datatrove-") as work:
        index = Path(work) / "index"
        index.mkdir()
        build_index(reference, options.ngram_n, index)
        pipeline = [
            Feed(),
            NGramsDecontFilter(str(index), config=config, language=_tokenizer()),
            Collect(),
        ]
        class Executor(QuietLocalExecutor):
            # One task runs in this process, and datatrove puts its console logger back
            # after it (close_task_logger): quiet it again, for the executor's summary too.
            def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1):
                try:
                    return super()._run_for_rank(rank, local_rank, node_rank)
                finally:
                    quiet_console()

        quiet_console()
        Executor(pipeline, tasks=1, workers=1, logging_dir=str(Path(work) / "logs"),
                           skip_completed=False).run()
    return [str(i) not in kept for i in range(len(documents))]
