"""Each `lab decontam` method beside the implementation it says it follows, both run on the
same documents and the same sample sides: how many documents the two agree on, and every
disagreement put under a named departure (docs/decontam.md, "Faithful to which source, and
where not"). tests/test_decontam_sources.py asserts the same on a smaller arm, in CI.

    PYTHONPATH=. LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/decontam_agreement.py
    ... --janitor-cpp PATH/scripts/clean_training_data/janitor_util.cpp   # lm-eval's C++ path too
    ... --out benchmarks/decontam_agreement.md                           # the table, as committed

The arm is the one docs/decontam.md measures its threshold curves on (`lab inject --benchmark
codetrans --setting paired --seed 0 --base-splits valid --limit 500 --samples 20 --doses 0,1,4`:
500 documents, 20 samples, so 40 sample sides, 13 of them injected), built in a temporary folder.

The outside code is run as itself, never copied:
- lm-evaluation-harness 0.4.13 (`pip install --no-deps lm_eval==0.4.13`, as `bash
  scripts/setup.sh --dev` does): only its module `lm_eval.decontamination.janitor` is imported
  (the package's `__init__` imports nothing beyond the standard library; the module prints a
  warning and a traceback when its C++ helper is absent, which is swallowed here). Its Python
  path: `Janitor.register_contaminant_python` and `Janitor.clean_python`, at the Janitor's
  defaults (n = 13, 200-character windows and slices, 10 matches too dirty).
- Its C++ path: `janitor_util.cpp` is not in the wheel (it is in the repository,
  scripts/clean_training_data/). Given its path, it is compiled here with pybind11 (`pip install
  pybind11`) by the command lm-eval's README gives, and `Janitor.register_contaminant_cpp` and
  `Janitor.clean_cpp` run on it. Without it the C++ rows are left out.
- datatrove 0.10.1: `NGramsDecontFilter.filter`, called on each document outside any executor,
  over the index the lab builds with `NGramsDecontIndexer.compute_hashes`.
- datasketch: `MinHash` and `MinHashLSH` used the plain way (one sketch per whole document, the
  LSH candidates taken as matches), over the lab's shingles.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lab.decontam import minhash, ngram  # noqa: E402
from lab.decontam.base import Options, Reference  # noqa: E402

ARM = dict(benchmark="codetrans", setting="paired", seed=0, base_splits=("valid",), limit=500,
           samples=20, doses=(0, 1, 4))
# The Janitor's published settings (its __init__ defaults, GPT-3's appendix C).
N = 13
# The departures, as named in docs/decontam.md.
EMPTY_WORDS = "empty words (a punctuation-only word stays in the document's n-gram)"
SHORT_TEXT = "200-character rule (an unmatched text under 200 characters is dropped)"
NO_FILTER = "C++ path without its filter (every n-gram of the document counts as dirty)"
WORD_CAP = "C++ word cap (a word is cut after 11 characters, its 12th dropped)"
BYTE_OFFSETS = "C++ byte offsets (a non-ASCII document is cut at UTF-8 byte positions)"
SIDE_BY_SIDE = "side by side (the lab also compares each <SEP> side alone)"
LSH_ONLY = "LSH candidate below the threshold (the lab checks the estimate)"
OTHER = "unexplained"


@dataclass
class Agreement:
    """One method (or one part of it) beside its source, over the same documents."""
    method: str
    source: str
    documents: int = 0
    agree: int = 0
    lab_flags: int = 0
    source_flags: int = 0
    departures: Counter = field(default_factory=Counter)
    lab_found: set = field(default_factory=set)      # injected samples with a flagged copy
    source_found: set = field(default_factory=set)

    def add(self, lab: bool, source: bool, departure: str | None = None,
            sample: str = "") -> None:
        self.documents += 1
        self.lab_flags += lab
        self.source_flags += source
        if lab == source:
            self.agree += 1
        else:
            self.departures[departure or OTHER] += 1
        if sample and lab:
            self.lab_found.add(sample)
        if sample and source:
            self.source_found.add(sample)


# --- lm-evaluation-harness's Janitor -------------------------------------------------------------

def load_janitor() -> ModuleType:
    """lm-eval's `lm_eval.decontamination.janitor`, quietly (it prints a traceback when its C++
    helper is missing)."""
    if importlib.util.find_spec("lm_eval") is None:
        raise SystemExit("needs lm-evaluation-harness: pip install --no-deps lm_eval==0.4.13 "
                         "(bash scripts/setup.sh --dev installs it)")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module("lm_eval.decontamination.janitor")


def compile_janitor_cpp(source: Path, folder: Path) -> ModuleType:
    """lm-eval's `janitor_util` built from its own source, as its README says to build it."""
    try:
        import pybind11
    except ImportError:
        raise SystemExit("--janitor-cpp: needs pybind11 (pip install pybind11), as lm-eval's "
                         "scripts/clean_training_data/README.md says") from None
    target = folder / f"janitor_util{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["c++", "-O3", "-Wall", "-shared", "-std=c++11", "-fPIC",
                    f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("janitor_util", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_janitor(janitor: ModuleType, reference: Reference, n: int = N):
    """A Janitor at its defaults with every sample side registered (Python path)."""
    cleaner = janitor.Janitor(ngram_n=n)
    for _id, text in reference.sides():
        cleaner.register_contaminant_python(text)
    return cleaner


def python_dirty(janitor: ModuleType, cleaner, text: str) -> list[tuple[int, int]]:
    """The (start, end) of every n-gram `clean_python` counts as dirty in `text` (its own
    n-grams and normalisation)."""
    return [span for gram, span in janitor.word_ngrams_indices(text, cleaner.ngram_n)
            if cleaner.normalize_string(gram) in cleaner.dirt_ngrams]


def lab_spans(reference: Reference, n: int = N):
    grams = ngram.reference_ngrams(reference, n)
    vocabulary = {w for wanted in grams.values() for gram in wanted for w in gram}
    return lambda text: ngram.matches(ngram.word_spans(text), grams, vocabulary,
                                      first_only=False)


def compare_ngram_any(janitor: ModuleType, texts: Sequence[str], reference: Reference,
                      samples: Sequence[str]) -> Agreement:
    """`ngram13` (any shared 13-gram) against the Janitor's normalisation and n-grams as its
    register side makes them (`register_contaminant_python`'s n-grams of the whole document):
    the lab follows this exactly, so every document should agree."""
    cleaner = python_janitor(janitor, reference)
    flags = ngram.flag(texts, reference, Options(ngram_n=N))
    result = Agreement("ngram13 (rule any)", "lm-eval 0.4.13 Janitor: word_ngrams("
                       "normalize_string(document)) & dirt_ngrams")
    for text, lab, sample in zip(texts, flags, samples):
        grams = set(janitor.word_ngrams(cleaner.normalize_string(text), N))
        result.add(lab, bool(grams & cleaner.dirt_ngrams), sample=sample)
    return result


def compare_janitor_python(janitor: ModuleType, texts: Sequence[str], reference: Reference,
                           samples: Sequence[str]) -> tuple[Agreement, Agreement]:
    """`ngram13 --ngram-rule janitor` against `Janitor.clean_python` (a document is removed when
    it returns no chunk), with each disagreement named; and the cut alone: lm-eval's own
    `_split_chunks` over the lab's matches against the lab's `janitor_removes`."""
    cleaner = python_janitor(janitor, reference)
    spans_of = lab_spans(reference)
    whole = Agreement("ngram13 --ngram-rule janitor", "lm-eval 0.4.13 Janitor.clean_python")
    cut = Agreement("ngram13 --ngram-rule janitor, the cut", "lm-eval 0.4.13 "
                    "Janitor._split_chunks over the lab's matches")
    for text, sample in zip(texts, samples):
        ours, theirs = spans_of(text), python_dirty(janitor, cleaner, text)
        lab = ngram.janitor_removes(text, ours)
        source = cleaner.clean_python(text) == []
        departure = None
        if len(theirs) < len(ours):
            departure = EMPTY_WORDS
        elif not theirs and len(text) < cleaner.minimum_slice_length:
            departure = SHORT_TEXT
        whole.add(lab, source, departure, sample)
        if ours:
            cut.add(lab, cleaner._split_chunks(text, [(None, s, e) for s, e in ours]) == [],
                    sample=sample)
    return whole, cut


def compare_janitor_cpp(janitor: ModuleType, util: ModuleType, texts: Sequence[str],
                        reference: Reference, samples: Sequence[str]
                        ) -> tuple[Agreement, Agreement, Agreement]:
    """lm-eval's C++ path: `clean_cpp` as shipped, the same with the registered n-grams as its
    filter (what lm-eval intends), both against `ngram13 --ngram-rule janitor`; and the filtered
    C++ n-grams as a match (any) against `ngram13`."""
    janitor.janitor_util = util  # the name janitor.py's `import janitor_util` binds
    cleaner = janitor.Janitor(ngram_n=N)
    for _id, text in reference.sides():
        cleaner.register_contaminant_cpp(text)
    spans_of = lab_spans(reference)
    any_flags = ngram.flag(texts, reference, Options(ngram_n=N))
    shipped = Agreement("ngram13 --ngram-rule janitor", "lm-eval 0.4.13 Janitor.clean_cpp, "
                        "as shipped")
    filtered = Agreement("ngram13 --ngram-rule janitor", "lm-eval 0.4.13 janitor_util with "
                         "its filter: _split_chunks(registered n-grams only)")
    matched = Agreement("ngram13 (rule any)", "lm-eval 0.4.13 janitor_util with its filter: "
                        "any registered n-gram")
    for text, any_flag, sample in zip(texts, any_flags, samples):
        ours = spans_of(text)
        lab = ngram.janitor_removes(text, ours)
        every = util.clean_ngram_with_indices(text, cleaner.delete_chars, N)
        dirty = [part for part in every if part[0] in cleaner.dirt_ngrams]
        # An ASCII text's C++ words are the Python path's unless one is over 11 characters
        # long (the cap): a disagreement is put under the cap only where such a word exists.
        capped = any(len(w) > 11 for w in ngram.words(text))
        reason = (BYTE_OFFSETS if not text.isascii() else
                  SHORT_TEXT if not dirty and len(text) < cleaner.minimum_slice_length else
                  WORD_CAP if capped else OTHER)
        shipped.add(lab, cleaner.clean_cpp(text) == [],
                    NO_FILTER if len(every) > len(dirty) else reason, sample)
        filtered.add(lab, cleaner._split_chunks(text, dirty) == [], reason, sample)
        matched.add(any_flag, bool(dirty), BYTE_OFFSETS if not text.isascii() else
                    WORD_CAP if capped else OTHER, sample)
    return shipped, filtered, matched


def word_cap(util: ModuleType) -> list[str]:
    """What the C++ path makes of one 26-letter word (a space after it): its pieces."""
    return util.clean_ngram("abcdefghijklmnopqrstuvwxyz ", "", 1)


def last_word(util: ModuleType) -> tuple[list[str], list[str]]:
    """The C++ path's 1-grams of `a b c` and of `a b c ` (a text's last word is emitted only
    when whitespace follows it)."""
    return util.clean_ngram("a b c", "", 1), util.clean_ngram("a b c ", "", 1)


def byte_offsets(janitor: ModuleType, util: ModuleType) -> tuple[list, list]:
    """The span of the 1-gram `a` in a text that starts with two non-ASCII characters, by the
    C++ path and by the Python path (character offsets)."""
    text = "\u00e9\u00e9 a b "
    return ([(s, e) for gram, s, e in util.clean_ngram_with_indices(text, "", 1) if gram == "a"],
            [span for gram, span in janitor.word_ngrams_indices(text, 1) if gram == "a"])


# --- datatrove ----------------------------------------------------------------------------------

def compare_datatrove(texts: Sequence[str], reference: Reference,
                      samples: Sequence[str]) -> Agreement:
    """`datatrove` (the filter run in datatrove's executor) against `NGramsDecontFilter.filter`
    called on each document alone, over the same index."""
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontFilter

    from lab.decontam import dt_ngrams

    flags = dt_ngrams.flag(texts, reference, Options(ngram_n=N))
    result = Agreement("datatrove", "datatrove 0.10.1 NGramsDecontFilter.filter")
    with tempfile.TemporaryDirectory(prefix="agreement-datatrove-") as folder:
        dt_ngrams.build_index(reference, N, Path(folder))
        step = NGramsDecontFilter(folder, config=dt_ngrams._config(N),
                                  language=dt_ngrams._tokenizer())
        for i, (text, lab, sample) in enumerate(zip(texts, flags, samples)):
            result.add(lab, step.filter(Document(text=text, id=str(i))) is not True,
                       sample=sample)
    return result


def datatrove_defaults_fail() -> dict[str, str]:
    """Why the lab cannot run datatrove's step at its defaults here: each default's error."""
    from datatrove.utils.hashing import HashConfig, create_hash_func
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    errors = {}
    for name, call in (("hash (xxhash)", lambda: create_hash_func(HashConfig())("a b c")),
                       ("tokenizer (English)",
                        lambda: load_word_tokenizer("eng").word_tokenize("a b"))):
        try:
            call()
        except Exception as error:  # noqa: BLE001 - the error is what is reported
            errors[name] = f"{type(error).__name__}: {error}"
    return errors


# --- datasketch ---------------------------------------------------------------------------------

def compare_minhash(texts: Sequence[str], reference: Reference, samples: Sequence[str],
                    options: Options = Options()) -> Agreement:
    """`minhash` against datasketch used plainly: one MinHash per whole document, its
    MinHashLSH candidates taken as matches, over the same shingles and permutations."""
    from datasketch import MinHash, MinHashLSH

    def sketch(text: str) -> MinHash:
        return next(iter(MinHash.generator([minhash.shingles(text, options.shingle)],
                                           num_perm=options.num_perm, seed=options.seed)))

    lsh = MinHashLSH(threshold=options.jaccard, num_perm=options.num_perm)
    sides = {}
    for key, text in enumerate(minhash.reference_texts(reference)):
        sides[key] = sketch(text)
        lsh.insert(key, sides[key])
    flags = minhash.flag(texts, reference, options)
    result = Agreement("minhash", "datasketch MinHashLSH.query, whole document")
    for text, lab, sample in zip(texts, flags, samples):
        whole = sketch(text)
        candidates = lsh.query(whole)
        estimated = any(whole.jaccard(sides[key]) >= options.jaccard for key in candidates)
        result.add(lab, bool(candidates),
                   SIDE_BY_SIDE if lab and not estimated else LSH_ONLY if candidates else None,
                   sample)
    return result


# --- the table ----------------------------------------------------------------------------------

def build_arm(folder: Path) -> tuple[list[str], Reference, list[str]]:
    """The arm's documents, its reference samples and, per document, the injected sample it
    copies ("" for a base document)."""
    from lab.contamination.inject import InjectConfig, run_inject

    arm = folder / "arm"
    run_inject(InjectConfig(out=arm, **ARM))
    return arm_documents(arm)


def arm_documents(arm: Path) -> tuple[list[str], Reference, list[str]]:
    """An arm's documents, its reference samples (those `lab decontam` reads) and, per
    document, the reference sample it is an injected copy of ("" for a base document)."""
    from lab.corpora.shards import read_manifest
    from lab.decontam.config import DecontamConfig
    from lab.decontam.plan import read_arm

    data = read_arm(DecontamConfig(corpus=arm, out=arm / "unused"), read_manifest(arm))
    ids = {s.id for s in data.reference.samples}
    return data.texts, data.reference, [s if s in ids else "" for s in data.sample_fields]


def table(rows: Sequence[Agreement], injected: int) -> str:
    lines = ["| lab method | source, run as its own code | documents | agree | disagree "
             "| disagreements, by departure | removed: lab / source | samples found: lab / "
             f"source (of {injected}) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        named = "; ".join(f"{name}: {count}" for name, count in r.departures.most_common())
        lines.append(f"| `{r.method}` | {r.source} | {r.documents} | {r.agree} | "
                     f"{r.documents - r.agree} | {named or '-'} | {r.lab_flags} / "
                     f"{r.source_flags} | {len(r.lab_found)} / {len(r.source_found)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--janitor-cpp", type=Path, help="lm-eval's janitor_util.cpp "
                        "(scripts/clean_training_data/ of its repository): compile and run it")
    parser.add_argument("--out", type=Path, help="also write the report here (markdown)")
    args = parser.parse_args(argv)
    janitor = load_janitor()
    with tempfile.TemporaryDirectory(prefix="decontam-agreement-") as work:
        texts, reference, samples = build_arm(Path(work))
        rows = [compare_ngram_any(janitor, texts, reference, samples),
                *compare_janitor_python(janitor, texts, reference, samples)]
        cap = None
        if args.janitor_cpp:
            util = compile_janitor_cpp(args.janitor_cpp, Path(work))
            rows += compare_janitor_cpp(janitor, util, texts, reference, samples)
            cap, offsets, last = word_cap(util), byte_offsets(janitor, util), last_word(util)
        rows += [compare_datatrove(texts, reference, samples),
                 compare_minhash(texts, reference, samples)]
    injected = len({s for s in samples if s})
    arm = " ".join(f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, tuple) else v}"
                   for k, v in ARM.items())
    report = ["# Decontaminators beside their sources\n",
              f"`python benchmarks/decontam_agreement.py"
              f"{' --janitor-cpp PATH/janitor_util.cpp' if cap else ''}`: the arm of "
              f"`lab inject {arm}` ({len(texts)} documents, {len(reference.sides())} sample "
              f"sides, {injected} samples injected); n = {N} throughout.\n", table(rows, injected)]
    if cap is not None:
        report.append(f"\nlm-eval's C++ path splits the 26-letter word `abcdefghijklmnopqrstuvwxyz`"
                      f" into {cap}. In `\u00e9\u00e9 a b ` it puts the word `a` at {offsets[0]} "
                      f"(UTF-8 bytes), its Python path at {offsets[1]} (characters). Its 1-grams "
                      f"of `a b c` are {last[0]}, of `a b c ` (a space after) {last[1]}.")
    report.append("\ndatatrove at its defaults, here: " + "; ".join(
        f"{name}: `{error}`" for name, error in datatrove_defaults_fail().items()) + ".")
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
