"""`lab decontam`'s configuration: the methods, their options and the threshold curves' grid,
declared once, with the rules of the options alone and together."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.common import LabError, corpora_param, param, refuse_unused_options
from lab.decontam import DECONTAMINATORS, check_methods
from lab.decontam.base import NGRAM_RULES, NGRAM_SHORT, Options
from lab.decontam.winnow import NAMES as WINNOW_NAMES
from lab.executor import ExecutorConfig, check_executor

KIND = "lab-decontam"
DEFAULT_METHODS = ("exact", "ngram8", "ngram13", "ngram50", "datatrove", "minhash", "audit")
# The options only some methods read (lab.decontam's flag functions; --ngram-short is read by
# thresholds.csv too, so always used): one given with none of its methods chosen is refused.
OPTION_USERS = {"ngram_n": ("ngram", "datatrove"),
                "ngram_rule": ("ngram8", "ngram13", "ngram50", "ngram"),
                **{name: ("minhash",) for name in ("jaccard", "num_perm", "shingle")},
                **{name: ("winnow",) for name in ("winnow_k", "winnow_w", "winnow_names",
                                                  "containment", "curve_containment")}}

# --num-perm's ceiling. A MinHash estimates Jaccard with standard error sqrt(J(1-J)/num_perm),
# at most 0.5/sqrt(4096) = 0.008 here, finer than any --jaccard threshold is set; time and
# memory grow linearly with it (measured on a 700-document arm: 1.4 s at 128, 14 s and 0.4 GiB
# at 8192); issue 70's 10^8 ran 10 minutes at full CPU without a word.
MAX_NUM_PERM = 4096


@dataclass
class DecontamConfig(ExecutorConfig):
    """The options of `lab decontam`, declared once (the executor's, which --write-clean reads,
    in lab.executor). Two modes: an arm judged on its ground truth (--out), or a corpus
    without one cleaned (--write-clean, with --benchmark: lab.decontam.clean)."""
    corpus: Path = param(help="An arm's corpus folder (made by lab inject; its manifest.json "
                              "names the benchmark split and the dose levels); with "
                              "--write-clean, any lab corpus or a folder in CodeSearchNet's "
                              "jsonl.gz layout.")
    out: Path | None = param(None, "Output folder: decontam.csv, decontam_timing.csv, "
                                   "summary.json (an arm judged on its ground truth).")
    write_clean: Path | None = param(None, "Clean a corpus without ground truth: write its "
                                           "kept documents here in its own layout, with "
                                           "flagged.csv and summary.json (needs --benchmark).")
    benchmark: str | None = param(None, "--write-clean: the benchmark to decontaminate "
                                        "against, NAME[:SPLIT] (split default: test).")
    methods: tuple[str, ...] = param(DEFAULT_METHODS, "Decontaminators to run: "
                                     + ", ".join(DECONTAMINATORS) + ".")
    ngram_n: int = param(13, "Words per n-gram of the `ngram` and `datatrove` methods.")
    ngram_rule: str = param("any", "n-gram methods: any (a shared n-gram removes the document) "
                                   "or janitor (lm-eval's Janitor: 200-character windows cut, "
                                   "a document removed when nothing is left or > 10 matches).")
    ngram_short: str = param("skip", "n-gram methods, a sample side of fewer than n words: "
                                     "skip (lm-eval: never matched) or whole (matched when all "
                                     "its words occur in a row; the lab's departure).")
    jaccard: float = param(0.8, "minhash: Jaccard threshold, in (0, 1].")
    num_perm: int = param(128, f"minhash: permutations per MinHash (1 to {MAX_NUM_PERM}).")
    shingle: int = param(5, "minhash: code tokens per shingle.")
    winnow_k: int = param(10, "winnow: code tokens per k-gram.")
    winnow_w: int = param(4, "winnow: k-gram hashes per window (the minimum of each is a "
                             "fingerprint).")
    winnow_names: str = param("abstract", "winnow: keep (identifiers as written) or abstract "
                                          "(also scored with the names a renaming may change "
                                          "made one symbol, each match verified as a consistent "
                                          "renaming; code sides of 12 tokens or more).")
    containment: float = param(0.8, "winnow: the score a document must reach to be flagged, in "
                                    "(0, 1]: the share of a side's fingerprints it holds, of a "
                                    "side's tokens it holds renamed, or of its own k-grams "
                                    "one sample holds.")
    curve_n: tuple[int, ...] = param((5, 8, 13, 20, 50), "thresholds.csv: the n of each point "
                                     "of the word n-gram threshold curves.")
    curve_min_count: tuple[int, ...] = param((1, 2, 5, 10), "thresholds.csv: the min-counts "
                                             "(matching n-grams a document needs to be flagged).")
    curve_containment: tuple[float, ...] = param(
        (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), "winnow_thresholds.csv (with winnow "
        "among --methods): the containment thresholds of the winnow threshold curve.")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        self.methods = tuple(self.methods)
        self._check_mode()
        check_methods(self.methods)
        refuse_unused_options(self, OPTION_USERS, self.methods, "--methods")
        if self.ngram_n <= 0:
            raise LabError(f"--ngram-n {self.ngram_n}: must be >= 1")
        if self.ngram_rule not in NGRAM_RULES:
            raise LabError(f"--ngram-rule {self.ngram_rule}: choose from "
                           f"{', '.join(NGRAM_RULES)}")
        if self.ngram_short not in NGRAM_SHORT:
            raise LabError(f"--ngram-short {self.ngram_short}: choose from "
                           f"{', '.join(NGRAM_SHORT)}")
        if not 0 < self.jaccard <= 1:
            raise LabError(f"--jaccard {self.jaccard}: must be in (0, 1]")
        if not 1 <= self.num_perm <= MAX_NUM_PERM:
            raise LabError(f"--num-perm {self.num_perm}: must be from 1 to {MAX_NUM_PERM} (the "
                           "Jaccard estimate's error is below 0.01 there; time and memory grow "
                           "with it)")
        if self.shingle < 1:
            raise LabError(f"--shingle {self.shingle}: must be >= 1")
        if self.winnow_k < 1 or self.winnow_w < 1:
            raise LabError(f"--winnow-k {self.winnow_k} --winnow-w {self.winnow_w}: both must "
                           "be >= 1")
        if self.winnow_names not in WINNOW_NAMES:
            raise LabError(f"--winnow-names {self.winnow_names}: choose from "
                           f"{', '.join(WINNOW_NAMES)}")
        if not 0 < self.containment <= 1:
            raise LabError(f"--containment {self.containment}: must be in (0, 1]")
        self.curve_containment = tuple(self.curve_containment)
        if (not self.curve_containment or len(set(self.curve_containment))
                != len(self.curve_containment)
                or not all(0 < c <= 1 for c in self.curve_containment)):
            raise LabError(f"--curve-containment {','.join(map(str, self.curve_containment))}: "
                           "give distinct values in (0, 1]")
        self.curve_n, self.curve_min_count = tuple(self.curve_n), tuple(self.curve_min_count)
        for option, values in (("--curve-n", self.curve_n),
                               ("--curve-min-count", self.curve_min_count)):
            if not values or min(values) < 1 or len(set(values)) != len(values):
                raise LabError(f"{option} {','.join(map(str, values))}: give distinct values "
                               ">= 1")

    def _check_mode(self) -> None:
        """--out (ground truth) or --write-clean (none), and the options each mode reads."""
        if self.write_clean is None:
            if self.out is None:
                raise LabError("--out: give the output folder (or --write-clean OUT with "
                               "--benchmark to clean a corpus without ground truth)")
            given = [name for name, value in (("--benchmark", self.benchmark),
                                              ("--executor", self.executor != "local"),
                                              ("--tasks", self.tasks != 1),
                                              ("--slurm-partition", self.slurm_partition))
                     if value]
            if given:
                raise LabError(f"{given[0]}: only with --write-clean (an arm's benchmark is "
                               "its manifest's)")
            return
        if self.out is not None:
            raise LabError(f"--out {self.out}: not with --write-clean (its folder is the "
                           "output)")
        if not self.benchmark:
            raise LabError("--write-clean: give --benchmark NAME[:SPLIT] (a corpus without "
                           "ground truth names no benchmark)")
        fields = type(self).__dataclass_fields__
        for name in ("curve_n", "curve_min_count"):
            if tuple(getattr(self, name)) != fields[name].default:
                raise LabError(f"--{name.replace('_', '-')}: not with --write-clean (the "
                               "threshold curves need an arm's ground truth)")
        check_executor(self)

    def options(self) -> Options:
        return Options(ngram_n=self.ngram_n, ngram_rule=self.ngram_rule,
                       ngram_short=self.ngram_short, jaccard=self.jaccard,
                       num_perm=self.num_perm, shingle=self.shingle,
                       winnow_k=self.winnow_k, winnow_w=self.winnow_w,
                       winnow_names=self.winnow_names, containment=self.containment)
