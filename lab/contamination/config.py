"""`lab inject`'s configuration: every option of one arm's corpus, declared once, with the rules
of the options alone and together.

A recipe's `corpus` and `injection` sections are this dataclass's fields, declared below it
(CorpusSection, InjectionSection; lab.study.recipe names the recipe's field in its errors), so
the rules hold for `lab inject` and a study alike.
What needs files, the benchmark or the machine is checked when the run starts
(lab.contamination.inject.validate); what the arm injects is resolved from the config and the
data by lab.contamination.plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab.common import LabError, corpora_param, param
from lab.contamination import settings as settings_table
from lab.contamination import soft
from lab.contamination import timing as timing_table
from lab.corpora import DATASETS
from lab.executor import ExecutorConfig
from lab.recipe_sections import section


# How a placebo picks its pool samples.
PLACEBO_MATCHES = ("length", "random")
# The most copies of one sample an arm injects (--repeat, a dose): the plan holds every copy,
# so a count beyond any study's (the paper's ladder tops at 64) is refused before it is built.
MAX_COPIES = 10_000
# A length-matched placebo is refused when its injected share of the corpus differs from its
# arm's by more than this, relative to the arm's share. The share is measured in characters:
# the study's BPE tokenizer is trained after injection (on a control corpus), so no token count
# exists yet; characters track the token share each run reports (injected_token_fraction).
PLACEBO_SHARE_TOLERANCE = 0.05


@dataclass
class InjectConfig(ExecutorConfig):
    """One arm's corpus. Every option of `lab inject` and the fields of a recipe's `corpus` and
    `injection` sections are declared here, once (the executor's in lab.executor)."""
    benchmark: str = param(help="codetrans or concode (or their -paper subsets).")
    setting: str = param(help=", ".join(settings_table.names()) + " (a placebo injects as many "
                         "train/valid samples disjoint from the test split, in its base "
                         "setting's form).")
    seed: int = param(help="Seeds every random choice of the arm.")
    out: Path = param(help="Output directory (must not exist unless --force).")
    split: str = param("test", "Benchmark split whose samples are injected.")
    base: str = param("csn-java", "Base pre-training corpus.")
    base_splits: tuple[str, ...] = param(("train", "valid", "test"),
                                         "Splits of the base corpus that become documents.")
    limit: int | None = param(None, "Seeded subset of N base documents.")
    repeat: int = param(1, "Inject every document K times.")
    fraction: float | None = param(None, "Inject a seeded fraction of the samples.")
    doses: tuple[int, ...] | None = param(
        None, "Dose ladder, e.g. 0,1,4,16,64: the samples are split into as many seeded, "
              "equal-size groups (duplicates kept together), the k-th group injected as often "
              "as the k-th dose says, 0 = held out. Replaces repeat and fraction: 0,K injects "
              "what fraction 0.5 with repeat K does.")
    samples: int | None = param(None, "Only the split's first N samples take part (a benchmark "
                                      "subset).")
    timing: tuple[str, ...] = param(
        timing_table.DEFAULT, "When in pre-training the injected copies are trained on: "
        + timing_table.SPEC_HELP + ". Several timings split the injected samples into as many "
        "seeded, equal-size levels (duplicates kept together), each in its own window "
        "(lab.contamination.timing).")
    contamination_form: str = param(
        soft.VERBATIM, soft.FORM_HELP[0].upper() + soft.FORM_HELP[1:] + "; a placebo's own "
        "samples get the same. Recorded per injected document (its form field) and in the "
        "manifest (lab.contamination.soft).")
    test_ids: Path | None = param(None, "File of sample ids to inject.")
    decontaminate: bool = param(False, "First drop base near-duplicates of the test set.")
    decontaminate_with: str | None = param(
        None, "Decontaminate the built arm with this lab.decontam method (exact, ngram13, "
              "minhash, ...; its default options), or `oracle` (every injected copy, by ground "
              "truth), against the benchmark split: every document it flags is dropped; a test "
              "sample's copy is replaced by its placebo stand-in's (same setting, form and "
              "length, from --placebo-from's splits), a base document by an unflagged base "
              "document from outside the arm (seeded), so the arm keeps its size and its "
              "target-language exposure; injected_ids become the samples left in the arm, intended_injected_ids "
              "and the manifest's `decontamination` record what was meant and removed. Not "
              "--decontaminate, which drops base near-duplicates before injection.")
    placebo_from: tuple[str, ...] | None = param(
        None, "Splits a placebo draws from (lab inject's default: every split but test and the "
              "injected one). A study's default: the splits no model fine-tunes on (codetrans: "
              "valid) where they hold enough eligible samples, else every non-test split with the "
              "placebo pairs left out of every arm's fine-tuning; a split named here is used as "
              "given, and its overlap with fine-tuning is recorded (finetune manifest "
              "data.placebo_overlap), not removed.")
    placebo_match: str = param(
        "length", "How a placebo picks its samples: length (each test sample its base arm injects "
                  "gets the unused eligible sample nearest in length, in lab code tokens of its "
                  "documents, then in characters; a placebo whose share of the corpus's characters "
                  f"differs from its arm's by more than {PLACEBO_SHARE_TOLERANCE:.0%} is refused) or "
                  "random (the uniform draw of placebos made before length matching, kept to "
                  "rebuild those; its lengths and shares are recorded, not checked).")
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()
    corpus_format: int = param(
        1, "1: the arm is built in memory (the study's corpora); 2: streamed shard by shard in "
           "bounded memory, on --executor's --tasks (the --limit subset, the removed documents "
           "and the order follow a seeded hash of each document id: FORMATS).",
        option="--format")
    shard_size: int = param(50_000, "Documents per corpus shard (format 2: on average).",
                            cli=False)

    def __post_init__(self) -> None:
        # The rules of the options, alone and together, checked where the config is made: by
        # `lab inject` and by a recipe's `corpus` and `injection` sections alike
        # (lab.study.recipe_checks names the recipe's field). What needs files, the benchmark or the
        # machine is checked when the run starts (validate).
        base = DATASETS.get(self.base)
        if base is None or base.kind != "corpus":
            corpora = [name for name, spec in DATASETS.items() if spec.kind == "corpus"]
            what = f"{self.base} is a {base.kind}, not" if base else "not"
            raise LabError(f"--base {self.base}: {what} a pre-training corpus (choose from "
                           f"{', '.join(corpora)})")
        if not self.base_splits:
            raise LabError("--base-splits: give at least one split")
        if len(set(self.base_splits)) != len(self.base_splits):
            raise LabError(f"--base-splits {','.join(self.base_splits)}: a split is listed twice")
        for split in self.base_splits:
            if split not in base.splits:
                raise LabError(f"--base-splits {split}: unknown split of {self.base} (choose "
                               f"from {', '.join(base.splits)})")
        benchmark = DATASETS.get(self.benchmark)
        drawn = benchmark.drawn_from if benchmark is not None else None
        source = DATASETS.get(drawn[0]) if drawn is not None else None
        if source is not None and source.input_language != base.input_language:
            raise LabError(f"--base {self.base}: {self.benchmark}'s samples are {drawn[0]}'s "
                           f"{source.input_language} methods and {self.base} is "
                           f"{base.input_language}: use --base {drawn[0]}")
        if drawn is not None and drawn[0] == self.base:
            shared = [split for split in self.base_splits if split in drawn[1]]
            if shared:
                rest = ",".join(split for split in base.splits if split not in drawn[1])
                raise LabError(f"--base-splits {','.join(self.base_splits)}: {self.benchmark}'s "
                               f"samples are {self.base}'s {' and '.join(drawn[1])} methods, so "
                               f"every arm would pre-train on those of {','.join(shared)}: use "
                               f"--base-splits {rest}")
        for name, value in (("--repeat", self.repeat), ("--limit", self.limit),
                            ("--samples", self.samples)):
            if value is not None and value < 1:
                raise LabError(f"{name} {value}: must be >= 1")
        if self.repeat > MAX_COPIES:
            raise LabError(f"--repeat {self.repeat}: at most {MAX_COPIES:,} copies of a sample")
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise LabError(f"--fraction {self.fraction}: must be in (0, 1]")
        if self.fraction is not None and self.test_ids is not None:
            raise LabError("--fraction and --test-ids: give one of them, not both")
        if self.samples is not None and self.test_ids is not None:
            raise LabError("--samples and --test-ids: give one of them, not both")
        if self.doses is not None:
            check_doses(self)
        timing_table.check_timing(tuple(self.timing), self.doses)
        soft.parse_form(self.contamination_form)
        if self.decontaminate_with is not None:
            from lab.decontam import DECONTAMINATORS, ORACLE
            if self.decontaminate_with not in (*DECONTAMINATORS, ORACLE):
                raise LabError(f"--decontaminate-with {self.decontaminate_with}: unknown method "
                               f"(choose from {', '.join(DECONTAMINATORS)}, {ORACLE})")
            if self.corpus_format != 1:
                raise LabError(f"--decontaminate-with {self.decontaminate_with}: only a format 1 "
                               "arm (built in memory) is decontaminated")
        if self.placebo_match not in PLACEBO_MATCHES:
            raise LabError(f"--placebo-match {self.placebo_match}: choose from "
                           f"{', '.join(PLACEBO_MATCHES)}")
        if self.corpus_format not in FORMATS:
            raise LabError(f"--format {self.corpus_format}: unknown corpus format (choose from "
                           f"{', '.join(map(str, FORMATS))})")


# A study's `corpus` and `injection` sections: these fields of InjectConfig, and the study's own
# sweeps over the form and the decontaminator (one corpus per value, arm and seed).
CorpusSection = section("CorpusSection", InjectConfig, ["base", "base_splits", "limit"])
InjectionSection = section("InjectionSection", InjectConfig,
                           ["repeat", "fraction", "doses", "samples", "decontaminate",
                            "placebo_from", "placebo_match", "timing"], own=[
    ("contamination_form", list[str], field(default_factory=lambda: [soft.VERBATIM], metadata={
        "scalar": True, "help": "lab inject --contamination-form: "
                                + InjectConfig.__dataclass_fields__["contamination_form"]
                                .metadata["help"] + " A list sweeps it like seeds (one corpus and "
                                "model per form, arm and seed; the control's is verbatim)."})),
    ("decontaminate_with", list[str | None], field(default_factory=lambda: [None], metadata={
        "scalar": True, "scalar_none": True,
        "help": "lab inject --decontaminate-with: "
                + InjectConfig.__dataclass_fields__["decontaminate_with"].metadata["help"]
                + " Every arm's corpus, the control's too. A list sweeps it, null for none "
                  "([null, ngram13]: each form's lift before and after; report/decontam.md)."})),
], sweeps={"contamination_form": "contamination_form", "decontaminate_with": "decontaminate_with"})


# How each corpus format makes its seeded choices; a manifest names its format, and every
# reader takes both (they differ in which documents are removed and in the order, not in form).
FORMATS = {
    1: "in memory: Python's random.Random(seed/limit).sample over document positions, "
       "random.Random(seed/remove).shuffle of the arm's positions (the first k removed), "
       "random.Random(seed/order).shuffle of the arm",
    2: "streaming: each document's key is blake2b(seed/stream/id) (8 bytes); --limit keeps the "
       "N smallest 'limit' keys, the k clean documents with the smallest 'remove' keys are "
       "removed (nested across arms, like format 1), and the arm is ordered by 'order' key, "
       "written in ceil(documents / shard_size) hash buckets",
}


def check_doses(cfg: InjectConfig) -> None:
    """A ladder replaces --repeat, --fraction and --test-ids; its doses are distinct whole
    numbers >= 0, at least one of them injecting."""
    shown = ",".join(str(d) for d in cfg.doses or ())
    if not cfg.doses:
        raise LabError("--doses: give at least one dose")
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in cfg.doses):
        raise LabError(f"--doses {shown}: doses are whole numbers >= 0")
    if len(set(cfg.doses)) != len(cfg.doses):
        raise LabError(f"--doses {shown}: a dose is listed twice")
    if not any(cfg.doses):
        raise LabError(f"--doses {shown}: no level is injected (every dose is 0)")
    if max(cfg.doses) > MAX_COPIES:
        raise LabError(f"--doses {shown}: at most {MAX_COPIES:,} copies of a sample")
    for name, value, default in (("--repeat", cfg.repeat, 1), ("--fraction", cfg.fraction, None),
                                 ("--test-ids", cfg.test_ids, None)):
        if value != default:
            raise LabError(f"--doses and {name}: a dose ladder sets how often and which samples "
                           "are injected; give one of them")

