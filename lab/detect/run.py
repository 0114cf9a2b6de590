"""`lab detect MODEL`: every detector on a lab model whose training membership is known.

The model's own pre-training corpus (or --groups, for a control or placebo model) says which
test samples were injected, in which form and at which dose: those are the members. Non-members
are the held-out half of a split-half arm or, for an arm that injected every sample, never-seen
samples of the validation split, found as `lab probe` finds them (lab.detect.probe), from one
pool shared by every arm of the seed (--seed-corpora: lab.detect.probe.SHARED_POOL_RULE), and drawn
length-matched to the members with the model's seed (lab.detect.shift). Each sample is
scored in the form it was injected in. Per detector, the summary gives the ROC AUC of telling
members from non-members, the TPR at 1% and 5% FPR (the low-FPR regime membership inference is
judged by), the one-sided Mann-Whitney p and both groups' means; with a dose ladder, the same per
dose against the held-out level. `--reference` (a model that never saw the samples, with the
same tokenizer and family: the study's control or placebo model) adds the reference detector.
The TPR at 0.1% FPR is given only where there are at least 1000 non-members (with fewer, no
threshold has an FPR of 0.1% but 0: the row says so). The blind baseline (lab.detect.blind)
reads the members' and non-members' labels, never the model (its p and interval are its own
two-sided label-permutation test's, membership and shift check alike); DC-PDD reads the model's
pre-training corpus. Each row and metric carries the arm's contamination form (`lab inject
--contamination-form`; verbatim where its corpus record states none).
With a held-out half, the distribution-shift check sets it against as many never-seen validation
samples, length-matched to it (lab.detect.shift): two-sided, read as a bound that states the
smallest shift the check could have detected.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lab.common import (MANIFEST, LabError, beside, check_output, corpora_param, environment_record,
                        param, write_rows_and_summary)
from lab.contamination import settings as settings_table
from lab.contamination.soft import recorded_form
from lab.corpora import corpora_inputs, load_samples
from lab.corpora.shards import verify_corpus
from lab.detect import DEFAULT_DETECTORS, DETECTORS, applicable, blind, check_detectors, score_all
from lab.detect.context import DetectContext
from lab.detect.shift import DRAW
from lab.detect.probe import seed_arm_samples, seed_corpora_param
from lab.models import (check_placement, device_param, dtype_param, place_model, positions_of,
                        pretraining_record)
from lab.recipe_sections import section
from lab.train.artefacts import read_model
from lab.stats import auc_interval, membership_auc, roc_auc, tpr_at_fpr

FPRS = (0.01, 0.05)  # the false positive rates TPR is reported at
# TPR at 0.1% FPR, where at least LOW_FPR_NONMEMBERS non-members let a threshold's FPR be 0.1%
LOW_FPR, LOW_FPR_NONMEMBERS = 0.001, 1000
LOW_FPR_KEY = "tpr_at_0.1pct_fpr"
SHIFT_SUFFIX = "_shift"  # a labelled detector's scores of the shift check (held-out test vs valid)
# A labelled detector's own test of its AUC (its scores are not independent samples)
LABELLED_TESTS = {"blind": blind.test}
# The options only some detectors read: `lab detect` refuses one given with none of them chosen
# (a study's smoke run lowers neighbours and cdd_samples whatever its detectors, so not here).
OPTION_USERS = {"k": ("min_k", "min_k_plus_plus"), "neighbours": ("neighbourhood",),
                "cdd_samples": ("peakedness",)}


@dataclass
class DetectConfig:
    """One detection run. Every option of `lab detect` is declared here, once."""
    model: Path = param(help="A lab pretrain directory (GPT-2 or RoBERTa), a fine-tuned GPT-2, "
                             "or a local Hugging Face causal LM (with --benchmark).")
    benchmark: str | None = param(None, "A model that is not a lab model: the benchmark whose "
                                        "samples to audit (its membership unknown).")
    split: str = param("test", "With --benchmark: the audited split; never-seen-assumed "
                               "samples of the validation split are the comparison.")
    out: Path | None = param(None, "Default: MODEL-detect, beside MODEL.")
    detectors: tuple[str, ...] = param(DEFAULT_DETECTORS, "Detectors to run (lab.detect): "
                                       + ", ".join(DEFAULT_DETECTORS) + ".")
    reference: Path | None = param(None, "A model that never saw the samples (a study's control "
                                         "or placebo model, same tokenizer and family): enables "
                                         "the reference detector.")
    groups: Path | None = param(None, "Corpus or model whose injected / held-out samples to score "
                                      "(default: the model's own pre-training corpus).")
    form: str = param("auto", "auto (the injection setting; unpaired for an outside model), "
                              "input, output, unpaired, paired.")
    k: float = param(0.2, "k of Min-K% and Min-K%++.")
    neighbours: int = param(4, "Renamed twins per sample (neighbourhood).")
    cdd_samples: int = param(10, "Sampled outputs per input (peakedness).")
    max_samples: int | None = param(None, "Score the first N members and N non-members only.")
    shift: bool = param(True, "Also score never-seen validation samples, as many as the held-out "
                              "test samples and length-matched to them: the distribution-shift "
                              "check (held-out test against valid, neither seen, two-sided: AUC "
                              "near 0.5 unless the splits differ).")
    seed: int | None = param(None, "Seed of the validation samples' draw (default: the model's "
                                   "pre-training seed; 0 for an outside model).")
    seed_corpora: tuple[Path, ...] = seed_corpora_param()
    draw: str = param(DRAW, "How the never-seen validation samples are drawn (the study's stage "
                            "key names it).", cli=False)
    batch_size: int = param(16, "Documents per forward pass.")
    device: str = device_param()
    dtype: str = dtype_param()
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        if not self.detectors:  # `--detectors ,` or a recipe's `detectors: []`: empty tables
            raise LabError(f"--detectors: name at least one detector (choose from "
                           f"{', '.join(DETECTORS)})")
        check_detectors(self.detectors)
        if self.form not in ("auto", *settings_table.FORMS):
            raise LabError(f"--form {self.form}: choose from auto, "
                           f"{', '.join(settings_table.FORMS)}")
        if not 0 < self.k <= 1:
            raise LabError(f"--k {self.k}: expected a fraction in (0, 1]")
        for option, value in (("--neighbours", self.neighbours),
                              ("--cdd-samples", self.cdd_samples),
                              ("--max-samples", self.max_samples),
                              ("--batch-size", self.batch_size)):
            if value is not None and value < 1:
                raise LabError(f"{option} {value}: must be >= 1")


# A study's `detect` section; like the probe's, 200 samples a model (every sample costs more
# than the rest of a CPU study).
DetectSection = section("DetectSection", DetectConfig,
                        ["detectors", "k", "neighbours", "cdd_samples", "max_samples", "shift"],
                        own=[
    ("enabled", bool, field(default=False, metadata={
        "help": "Run the contamination detectors (lab detect) on every pre-trained model: "
                "published detectors judged on the study's known members; a contaminated or "
                "placebo model gets its seed's control model as the reference."})),
    ("epochs", list[int], field(default_factory=list, metadata={
        "help": "Also score the fine-tuned GPT-2 of these fine-tuning epochs (each one of "
                "finetune.epochs; its first train size): does fine-tuning hide pre-training "
                "contamination?"})),
], study_defaults={"max_samples": 200})


def detection_metrics(members: Sequence[float], nonmembers: Sequence[float]) -> dict[str, Any]:
    """AUC with its interval over this model's samples, TPR at FPRS, the one-sided
    Mann-Whitney p and the groups' means and sizes."""
    _auc, p = membership_auc(members, nonmembers, True)
    interval = auc_interval(members, nonmembers)
    return {"auc": roc_auc(members, nonmembers),
            # over this model's samples (a percentile bootstrap), not over seeds
            "auc_sample_low": interval[0] if interval else None,
            "auc_sample_high": interval[1] if interval else None,
            **{f"tpr_at_{round(f * 100)}pct_fpr": tpr_at_fpr(members, nonmembers, f)
               for f in FPRS},
            **low_fpr_metrics(members, nonmembers),
            "p": p, "alternative": "greater", "member_mean": sum(members) / len(members) if members else None,
            "nonmember_mean": sum(nonmembers) / len(nonmembers) if nonmembers else None,
            "members": len(members), "nonmembers": len(nonmembers)}


def low_fpr_metrics(members: Sequence[float], nonmembers: Sequence[float]) -> dict[str, Any]:
    """TPR at 0.1% FPR where there are >= LOW_FPR_NONMEMBERS non-members; else None and why."""
    if not len(members) or len(nonmembers) >= LOW_FPR_NONMEMBERS:
        return {LOW_FPR_KEY: tpr_at_fpr(members, nonmembers, LOW_FPR)}
    return {LOW_FPR_KEY: None,
            f"{LOW_FPR_KEY}_note": f"n/a (needs >= {LOW_FPR_NONMEMBERS} non-members; "
                                   f"{len(nonmembers)} here)"}


def summarise(rows: list[dict[str, Any]], names: Sequence[str],
              positive: str = "member", negative: str = "nonmember") -> dict[str, dict[str, Any]]:
    """Per detector, the metrics of telling rows of role `positive` from those of `negative`."""
    return {name: detection_metrics([r[name] for r in rows if r["role"] == positive],
                                    [r[name] for r in rows if r["role"] == negative])
            for name in names}


def _load(path: Path, option: str) -> tuple[Any, Any, dict[str, Any], str]:
    from lab.detect.probe import load_probed_model

    try:
        return load_probed_model(path)
    except LabError as exc:
        raise LabError(str(exc).replace("--model", option, 1)) from None


def _reference_context(cfg: DetectConfig, family: str, manifest: dict[str, Any], form: str,
                       max_tokens: int, scored: set[str]) -> DetectContext | None:
    if cfg.reference is None:
        return None
    model, tokenizer, theirs, their_family = _load(cfg.reference, "--reference")
    _check_reference_unseen(cfg, manifest, theirs, scored)
    if their_family != family:
        raise LabError(f"--reference {cfg.reference}: a {their_family} model; the detected model "
                       f"is {family} (the reference must be of the same family)")
    sha = [pretraining_record(m).get("tokenizer", {}).get("sha256") for m in (manifest, theirs)]
    if sha[0] != sha[1]:
        raise LabError(f"--reference {cfg.reference}: trained with another tokenizer "
                       "(its tokenizer sha256 differs), so its losses do not compare")
    return DetectContext(model=place_model(model, cfg.device, cfg.dtype), tokenizer=tokenizer,
                         family=family, form=form, max_tokens=max_tokens,
                         batch_size=cfg.batch_size)


def _check_reference_unseen(cfg: DetectConfig, manifest: dict[str, Any],
                            theirs: dict[str, Any], scored: set[str]) -> None:
    """The reference detector reads the target's loss against the reference's: a reference that
    saw the scored samples (the model itself, or another arm's model) lowers both alike and
    hides the contamination (AUC 0.5). One whose membership is unknown (weights from a model
    with no lab record) may have seen them too, so it is refused as well."""
    if (manifest.get("final_weights_sha256")
            and manifest.get("final_weights_sha256") == theirs.get("final_weights_sha256")):
        raise LabError(f"--reference {cfg.reference}: the same weights as --model {cfg.model}; "
                       "a reference must never have seen the scored samples")
    corpus = pretraining_record(theirs).get("corpus", {})
    if corpus.get("membership") == "unknown":  # lab.train.continued.UNKNOWN
        raise LabError(f"--reference {cfg.reference}: its membership is unknown (weights from a "
                       "model with no lab record of what it saw), so it may have seen the scored "
                       "samples; use a control or placebo model of the study")
    seen = sorted(scored & set(corpus.get("injected_ids") or []))
    if seen:
        raise LabError(f"--reference {cfg.reference}: it pre-trained on {len(seen)} of the "
                       f"scored samples ({', '.join(seen[:3])}{', ...' if len(seen) > 3 else ''}); "
                       "a reference must never have seen them (a control or placebo model)")


@dataclass
class _Subject:
    """The scored model and what its members are."""
    model: Any
    tokenizer: Any
    manifest: dict[str, Any]  # {} for a model that is not a lab model
    family: str  # the detectors' families: gpt2 (any causal LM) or roberta
    chosen: dict[str, Any]  # lab.detect.probe.probe_groups' record
    form: str
    max_tokens: int
    reference: DetectContext | None
    described: str  # what the console names the model
    contamination_form: str | None = None  # the scored samples' arm's; None: an outside model
    corpus: dict[str, Any] | None = None  # the model's pre-training corpus record (DC-PDD)
    # what the seed's other arms injected or pre-trained on (--seed-corpora): out of the draw
    seed_arms: frozenset[str] = frozenset()


OUTSIDE_MAX_TOKENS = 2048  # an outside model's documents are cut there (or at its positions)


def _draw_seed(cfg: DetectConfig, manifest: dict[str, Any]) -> int:
    """The validation draw's seed: --seed, else the scored model's pre-training seed (a study's
    seed: each seed draws afresh), else 0 (an outside model)."""
    if cfg.seed is not None:
        return cfg.seed
    seed = pretraining_record(manifest).get("seed")
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise LabError(f"--model {cfg.model}: manifest seed {seed!r} is not a whole number "
                       "(give --seed)")
    return seed


def _valid_samples(chosen: dict[str, Any], tests: list[Any], targets: list[Any],
                   manifest: dict[str, Any], form: str, seed: int, corpora_dir: Path | None,
                   seed_arms: frozenset[str] = frozenset()) -> tuple[list[Any], dict[str, Any]]:
    """Never-seen validation samples set against `targets`: every eligible one (lab.detect.probe's
    rule, less every sample an arm of the seed pre-trained on: `seed_arms` and the model's own
    placebo samples), then one per target, length-matched with `seed` (lab.detect.shift). The
    arms of a seed scored on one group thus draw the same samples: same pool, seed, targets and
    form."""
    import sys

    from lab.detect.shift import length_matched_draw
    from lab.detect.probe import reference_samples

    # a count no pool reaches: reference_samples then returns every eligible sample, undrawn
    eligible, found = reference_samples(chosen, tests, sys.maxsize, True, manifest, corpora_dir,
                                        seed_arms)
    if not eligible:
        return [], found
    drawn, draw = length_matched_draw(eligible, targets, seed, form)
    return drawn, {"split": found["split"], **draw, "eligibility": found["eligibility"]}


def _lab_subject(cfg: DetectConfig, check: Any) -> _Subject:
    from lab.detect.probe import probe_groups, refuse_corpus

    if cfg.benchmark is not None:
        raise LabError(f"--benchmark {cfg.benchmark}: only for a model that is not a lab model; "
                       "a lab model's members come from its corpus (or --groups)")
    own = refuse_corpus(read_model(cfg.model, "--model"), cfg.model)
    if cfg.groups is not None and (Path(cfg.groups) / MANIFEST).is_file() and \
            read_model(cfg.groups, "--groups").get("kind") == "lab-corpus":
        verify_corpus(cfg.groups)  # its membership is what its shards hold
    chosen = probe_groups(own, cfg.groups)
    form = settings_table.probed_form(chosen["setting"]) if cfg.form == "auto" else cfg.form
    if form is None:
        raise LabError(f"the corpus setting '{chosen['setting']}' has no injected form to score")
    seed_arms = seed_arm_samples(cfg.seed_corpora, chosen["benchmark"])
    check()  # the model's membership was checked against its corpus by read_model
    model, tokenizer, manifest, family = _load(cfg.model, "--model")
    positions = positions_of(model.config)
    block = int(pretraining_record(manifest).get("config", {}).get("block_size") or positions)
    max_tokens = min(block, positions)
    reference = _reference_context(cfg, family, manifest, form, max_tokens,
                                   {*chosen["injected"], *chosen["held_out"]})
    groups_record = (pretraining_record(own).get("corpus", {}) if cfg.groups is None
                     else _groups_record(cfg.groups))
    record = pretraining_record(manifest)
    corpus = {**record.get("corpus", {}),
              "tokenizer_sha256": record.get("tokenizer", {}).get("sha256")}
    return _Subject(model, tokenizer, manifest, family, chosen, form, max_tokens, reference,
                    family, recorded_form(groups_record), corpus, seed_arms)


def _groups_record(groups: Path) -> dict[str, Any]:
    """--groups' corpus record: the corpus's manifest, or a model's pre-training corpus."""
    other = read_model(groups, "--groups")
    return other if other.get("kind") == "lab-corpus" else pretraining_record(other).get(
        "corpus", {})


def _outside_subject(cfg: DetectConfig, check: Any) -> _Subject:
    """A local Hugging Face causal LM (as `lab llm-eval` loads it): the benchmark split's
    samples are scored against never-seen-assumed validation samples. Nobody knows its
    training membership, so this is an audit, not a ground-truth judgement."""
    from lab.corpora import get_spec
    from lab.detect.probe import reference_split
    from lab.llm.llm_eval import load_causal_lm

    if cfg.benchmark is None:
        raise LabError(f"--model {cfg.model}: not a lab model (no manifest.json): name the "
                       "audited samples with --benchmark (and --split)")
    if cfg.groups is not None:
        raise LabError(f"--groups {cfg.groups}: only for a lab model (an outside model's "
                       "samples are --benchmark's --split)")
    if cfg.seed_corpora:
        raise LabError(f"--seed-corpora {cfg.seed_corpora[0]}: only for a lab model (an outside "
                       "model has no seed whose arms could share its draw)")
    spec = get_spec(cfg.benchmark)
    try:
        split = spec.canonical_split(cfg.split)
    except LabError as exc:
        raise LabError(f"--split {cfg.split}: {exc}") from None
    if split == reference_split(cfg.benchmark, split) or split not in ("train", "test"):
        raise LabError(f"--split {cfg.split}: the validation split is the audit's comparison "
                       "(audit test or train)")
    check()
    model, tokenizer, info = load_causal_lm(cfg.model)
    max_tokens = min(info["positions"] or OUTSIDE_MAX_TOKENS, OUTSIDE_MAX_TOKENS)
    form = settings_table.SIDES_APART if cfg.form == "auto" else cfg.form
    reference = None
    if cfg.reference is not None:
        theirs, their_tokenizer, _info = load_causal_lm(cfg.reference)
        if their_tokenizer.get_vocab() != tokenizer.get_vocab():
            raise LabError(f"--reference {cfg.reference}: another tokenizer (its vocabulary "
                           "differs), so its losses do not compare")
        reference = DetectContext(model=place_model(theirs, cfg.device, cfg.dtype),
                                  tokenizer=their_tokenizer, family="gpt2", form=form,
                                  max_tokens=max_tokens, batch_size=cfg.batch_size)
    chosen = {"benchmark": cfg.benchmark, "split": split,
              "setting": None, "injected": None, "held_out": [], "doses": {},
              "source": f"{cfg.benchmark} {cfg.split} (membership unknown)"}
    return _Subject(model, tokenizer, {}, "gpt2", chosen, form, max_tokens, reference,
                    f"{info['model_type']} (outside model)")


def run_detect(cfg: DetectConfig | Path, out: Path | None = None, **options: Any
               ) -> dict[str, Any]:
    """Entry point of `lab detect`: scores.jsonl (per sample) and summary.json (per detector)."""
    if not isinstance(cfg, DetectConfig):
        cfg = DetectConfig(model=Path(cfg), out=out, **options)
    import torch

    started = time.perf_counter()
    device = check_placement(cfg.device, cfg.dtype)
    if cfg.draw != DRAW:
        raise LabError(f"detect draw '{cfg.draw}': this lab draws only '{DRAW}'")
    detectors = check_detectors(cfg.detectors)
    out = Path(cfg.out or beside(cfg.model, "detect"))
    inputs = [cfg.model, cfg.groups, cfg.reference, *cfg.seed_corpora,
              *corpora_inputs(cfg.corpora_dir)]
    outside = Path(cfg.model).is_dir() and not (Path(cfg.model) / MANIFEST).exists()
    subject = (_outside_subject if outside else _lab_subject)(
        cfg, lambda: check_output(out, cfg.force, "lab-detection", inputs))
    chosen, form, family, manifest = (subject.chosen, subject.form, subject.family,
                                      subject.manifest)
    tokenizer, max_tokens, reference_ctx = (subject.tokenizer, subject.max_tokens,
                                            subject.reference)
    model = place_model(subject.model, cfg.device, cfg.dtype)

    tests = load_samples(chosen["benchmark"], chosen["split"], cfg.corpora_dir,
                         require_references=True).records
    injected = {s.id for s in tests} if chosen["injected"] is None else set(chosen["injected"])
    members = [s for s in tests if s.id in injected][:cfg.max_samples]
    held = set(chosen["held_out"])
    nonmembers = [s for s in tests if s.id in held][:cfg.max_samples]
    baseline, reference_record = "held_out", None
    seed = _draw_seed(cfg, manifest)
    if not held:
        nonmembers, reference_record = _valid_samples(chosen, tests, members, manifest, form,
                                                      seed, cfg.corpora_dir, subject.seed_arms)
        baseline = "reference"
        if not nonmembers:
            raise LabError(f"{chosen['source']}: no never-seen samples to compare the injected "
                           f"ones with ({reference_record.get('missing')})")
    shift, shift_record = [], None
    if cfg.shift and baseline == "held_out":
        shift, shift_record = _valid_samples(chosen, tests, nonmembers, manifest, form, seed,
                                             cfg.corpora_dir, subject.seed_arms)
    elif cfg.shift and not outside:
        shift_record = {"missing": "every scored test sample was injected: no never-seen test "
                                   "samples to set against never-seen valid ones"}
    spec_languages = _languages(chosen["benchmark"])
    ctx = DetectContext(model=model, tokenizer=tokenizer, family=family, form=form,
                        max_tokens=max_tokens, batch_size=cfg.batch_size, k=cfg.k,
                        reference=reference_ctx, languages=spec_languages,
                        neighbours=cfg.neighbours, cdd_samples=cfg.cdd_samples,
                        fold_seed=seed, corpus=subject.corpus)
    used = applicable(detectors, family, reference_ctx is not None, subject.corpus is not None)
    if outside:  # they prompt `<s> input <SEP>`, the lab's injected format, not the model's
        used = [d for d in used if d.needs != "output"]
    if not used:
        raise LabError(f"--detectors {','.join(cfg.detectors)}: none applies to this {family} "
                       "model" + ("" if reference_ctx else " without --reference"))
    if any(d.name == "dc_pdd" for d in used):  # its corpus refused before any scoring
        from lab.detect.dc_pdd import corpus_counts

        corpus_counts(ctx)
    torch.manual_seed(0)
    samples = members + nonmembers + shift
    seconds: dict[str, float] = {}
    scores = score_all(ctx, samples, [d for d in used if d.needs != "labels"], seconds)
    # a labelled detector (the blind baseline) learns the groups it tells apart: members
    # against non-members, then (the shift check) held-out test against valid samples
    labelled = [d for d in used if d.needs == "labels"]
    for name, values in score_all(ctx, members + nonmembers, labelled, seconds,
                                  labels=[True] * len(members) + [False] * len(nonmembers)
                                  ).items():
        scores[name] = values + [None] * len(shift)
    if shift and labelled:
        for name, values in score_all(ctx, nonmembers + shift, labelled,
                                      labels=[True] * len(nonmembers) + [False] * len(shift)
                                      ).items():
            scores[name + SHIFT_SUFFIX] = [None] * len(members) + values
    # its p and interval come from its own test (lab.detect.blind), each dose's as well
    tested = _labelled_tests(ctx, members + nonmembers, labelled, [
        chosen["doses"].get(s.id) or "member" for s in members] + [None] * len(nonmembers),
        seconds)
    shift_tested = (_labelled_tests(ctx, nonmembers + shift, labelled,
                                    ["test"] * len(nonmembers) + [None] * len(shift), seconds)
                    if shift else {})
    roles = (["member"] * len(members) + ["nonmember"] * len(nonmembers)
             + ["shift"] * len(shift))
    groups = {"member": "audited" if outside else "injected", "nonmember": baseline,
              "shift": "valid"}
    rows = []
    for i, (sample, role) in enumerate(zip(samples, roles)):
        row = {"id": sample.id, "member": role == "member", "role": role, "group": groups[role],
               **({"contamination_form": subject.contamination_form}
                  if subject.contamination_form else {}),
               **{name: values[i] for name, values in scores.items() if values[i] is not None}}
        if sample.id in chosen["doses"] and role != "shift":
            row["dose"] = chosen["doses"][sample.id]
        rows.append(row)
    names = [d.name for d in used]
    shift_summary = None
    if shift_record is not None:
        # the never-seen test samples (positives) against never-seen valid ones, two-sided
        checked = _shift_summary(rows, names, shift_tested) if shift else {}
        shift_summary = {"samples": shift_record, "detectors": checked,
                         "statement": "; ".join(f"{name}: {m['bound']}"
                                                for name, m in checked.items())
                         or shift_record.get("missing")}
    summary = {
        "kind": "lab-detection", "model": str(cfg.model), "family": family,
        "described": subject.described,
        # an outside model's training data is unknown: its AUC is an audit, not ground truth
        "membership": "unknown" if outside else "known",
        "groups": chosen["source"], "benchmark": chosen["benchmark"], "split": chosen["split"],
        "form": form, "baseline": baseline, "reference_samples": reference_record,
        "reference_model": str(cfg.reference) if cfg.reference else None,
        **({"contamination_form": subject.contamination_form}
           if subject.contamination_form else {}),
        "detectors": _labelled_metrics(summarise(rows, names), tested),
        "skipped": sorted(d.name for d in detectors if d not in used),
        "detector_seconds": seconds,
        "settings": {"k": cfg.k, "neighbours": cfg.neighbours, "cdd_samples": cfg.cdd_samples,
                     "fprs": list(FPRS), "low_fpr": LOW_FPR,
                     "low_fpr_min_nonmembers": LOW_FPR_NONMEMBERS,
                     **({"dc_pdd_a": _dc_pdd_a()} if "dc_pdd" in names else {}),
                     **({"blind_fold_seed": seed, "blind_test": blind.TEST_RULE,
                         "blind_interval": blind.INTERVAL,
                         "blind_permutations": blind.PERMUTATIONS} if labelled else {})},
        "placement": {"device": device, "dtype": cfg.dtype},
        **({"by_dose": _by_dose(rows, names, tested)} if chosen["doses"] else {}),
        **({"shift": shift_summary} if shift_summary is not None else {}),
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    if subject.contamination_form:  # in every metric's row, so a study's detect.csv has it
        _with_form(summary, subject.contamination_form)
    write_rows_and_summary(out, "scores.jsonl", rows, summary, force=cfg.force,
                           kind="lab-detection", inputs=inputs)
    summary["out"] = str(out)
    return summary


def _dc_pdd_a() -> float:
    from lab.detect.dc_pdd import A

    return A


def _with_form(summary: dict[str, Any], form: str) -> None:
    """Each detector's metrics (every member, each dose, the shift check) named with the
    contamination form."""
    tables = [summary["detectors"], *(summary.get("by_dose") or {}).values(),
              (summary.get("shift") or {}).get("detectors") or {}]
    for table in tables:
        for metrics in table.values():
            metrics["contamination_form"] = form


LabelledTests = dict[str, dict[Any, dict[str, Any]]]  # detector -> comparison -> its test


def _labelled_tests(ctx: DetectContext, samples: Sequence[Any], labelled: Sequence[Any],
                    groups: Sequence[Any], seconds: dict[str, float]) -> LabelledTests:
    """Each labelled detector's own test of the AUC of its scores of `samples` (`groups`: each
    one's member group, a dose or 'member', None for a non-member), timed into its seconds. The
    blind baseline is the one labelled detector: its pooled cross-fitted scores are not
    independent samples, so it is tested by refitting it on permuted labels
    (lab.detect.blind.test)."""
    out = {}
    for detector in labelled:
        started = time.perf_counter()
        out[detector.name] = LABELLED_TESTS[detector.name](ctx, samples, groups)
        seconds[detector.name] = round(seconds.get(detector.name, 0.0)
                                       + time.perf_counter() - started, 2)
    return out


def _tested(metrics: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """A labelled detector's metrics with its own test's two-sided p and interval in place of
    the rank test's and the bootstrap's (detection_metrics), which its scores would fail."""
    return {**metrics, "auc_sample_low": test["low"], "auc_sample_high": test["high"],
            "p": test["p"], "alternative": "two-sided", "test": blind.TEST,
            "permutations": test["permutations"], "permutation_seed": test["seed"],
            "null_sd": test["null_sd"]}


def _labelled_metrics(table: dict[str, dict[str, Any]], tested: LabelledTests,
                      comparison: Any = None) -> dict[str, dict[str, Any]]:
    """A summary table (detector -> metrics) with each labelled detector's metrics made its
    own test's, for `comparison`: a dose (its members against the non-members), or every member
    (None; also a dose whose group is every member)."""
    return {name: _tested(metrics, tested[name].get(comparison, tested[name][blind.MEMBER]))
            if name in tested else metrics for name, metrics in table.items()}


def _shift_summary(rows: list[dict[str, Any]], names: Sequence[str],
                   tested: LabelledTests | None = None) -> dict[str, dict[str, Any]]:
    """Per detector, the held-out test samples against the valid ones: the membership metrics
    with a two-sided p, the direction and the bound (lab.detect.shift.shift_metrics). A
    labelled detector's are its own scores of the shift check (it learnt test against valid),
    with its own test's p, interval and spread under no shift (`tested`)."""
    from lab.detect.shift import shift_metrics

    test = [r for r in rows if r["role"] == "nonmember"]
    valid = [r for r in rows if r["role"] == "shift"]
    out = {}
    for name in names:
        key = name + SHIFT_SUFFIX if DETECTORS[name].needs == "labels" else name
        first, second = [r[key] for r in test], [r[key] for r in valid]
        if name in (tested or {}):
            test = tested[name][blind.MEMBER]
            out[name] = shift_metrics(_tested(detection_metrics(first, second), test), first,
                                      second, test["p"], test["null_sd"])
        else:
            out[name] = shift_metrics(detection_metrics(first, second), first, second)
    return out


def _by_dose(rows: list[dict[str, Any]], names: Sequence[str],
             tested: LabelledTests | None = None) -> dict[str, Any]:
    """Each injected dose's members against the held-out level (dose 0); a labelled
    detector's p and interval from its own test of that dose (`tested`)."""
    held = [r for r in rows if r["role"] == "nonmember"]
    doses = sorted({r["dose"] for r in rows if r.get("dose") and r["role"] == "member"})
    return {str(d): _labelled_metrics(summarise(
        [r for r in rows if r.get("dose") == d and r["role"] == "member"] + held, names),
        tested or {}, d) for d in doses}


def _languages(benchmark: str) -> tuple[str, str]:
    from lab.corpora import get_spec

    spec = get_spec(benchmark)
    return spec.input_language, spec.output_language
