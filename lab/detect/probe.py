"""`lab probe`: was the injected test data memorised? The manipulation check of a study.

A null lift means little if the model never learned the injected samples. For a pre-trained (or
fine-tuned GPT-2) model, every probed test sample is scored on the form it was injected in
(input, output, both as separate documents, or `input <SEP> output`), and injected samples are
compared with never-seen ones of the same model:

- loss: mean token negative log-likelihood of `<s> document </s>` (perplexity = exp(loss)); for
  RoBERTa a pseudo-log-likelihood: every token masked once, in 7 strided passes (~15% masked);
- min_k: Min-K% probability (Shi et al.): the mean log-probability of the k% least likely tokens;
- extraction (GPT-2): greedy continuation of `<s> input <SEP>` against the output, exact match
  and sentence BLEU (Pythia-style extraction);
- infill (TraWiC-style, cf. the membership-inference paper in ../shared/papers/002_*): each
  identifier and string literal masked one at a time and filled by the model, counting exact
  hits. GPT-2 fills from the prefix: under greedy decoding the fill is exact iff every token of
  the name is the model's top prediction given the true prefix, so one forward pass scores every
  name. RoBERTa fills the name's tokens from <mask>s with both sides visible (masked-token
  recovery on the sample's identifiers).

The never-seen baseline: an arm that injected a seeded half of the test split is judged against
its held-out half. An arm that injected every sample has no held-out half; comparing its loss
with the control model's on the same samples would be confounded (the arm saw the task's
format and languages, the control did not), so the probe also scores `reference` samples: as
many samples of the benchmark's validation split (CodeTrans valid, CONCODE dev) as injected ones
are probed, in the same form, drawn with a fixed seed from those `lab audit` finds neither
exactly nor as near-duplicates of any test sample (either side), one per group sharing a side
verbatim: the placebo pool's rule (`placebo.disjoint_from`). Samples the model pre-trained on
as a placebo are left out, and so are those of the seed's other arms (--seed-corpora:
SHARED_POOL_RULE), so that the arm, its placebo and the control of one seed are judged against
the same samples; without a validation split (or one the model was fine-tuned on) the summary
records why and has no baseline. Split-half arms get no reference samples.

Each probe's summary is the gap between injected and baseline samples, a one-sided Mann-Whitney
test (injected more member-like) and the ROC AUC of the probe at separating the two groups
(0.5: no signal). On a control model, pass the contaminated arm's corpus as --groups: the same
samples, never seen, should give an AUC near 0.5. A control or placebo model probed with a
fully injected arm's groups gets the reference samples too: its injected-vs-reference AUC
measures the shift between the test and validation distributions alone (expected near 0.5),
which bounds what the arm's own AUC can owe to that shift.
"""
from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lab import progress
from lab.codetokens import KEYWORDS, TOKEN_PATTERN
from lab.common import (DataNotFound, LabError, beside, check_output, corpora_param,
                        environment_record, param, write_rows_and_summary)
from lab.contamination import settings as settings_table
from lab.corpora.shards import verify_corpus
from lab.contamination.placebo import disjoint_from, split_sides_index
from lab.corpora import Sample, corpora_inputs, get_spec, load_samples
from lab.detect import extraction
from lab.detect.context import DetectContext
from lab.detect.min_k import lowest_mean as min_k_score  # Min-K% (Shi et al.)
from lab.eval import metrics as metric_fns
from lab.eval.generate import assigned_injected_ids, padded
from lab.models import (check_placement, device_param, dtype_param, lab_architecture,
                        load_lab_model, place_model, positions_of, pretraining_record)
from lab.recipe_sections import section
from lab.train.artefacts import read_model
from lab.stats import membership_auc
from lab.tasks import Decoding
from lab.train.finetune import causal_prompt

# Probe name -> (what it measures, whether a higher value means "more likely seen").
PROBES: dict[str, tuple[str, bool]] = {
    "loss": ("mean token loss of the injected form", False),
    "min_k": ("Min-K% log-probability of the injected form", True),
    "extraction_em": ("greedy continuation of `input <SEP>` equals the output (%)", True),
    "extraction_bleu": ("sentence BLEU of that continuation", True),
    "infill": ("identifiers and string literals filled exactly, one at a time (%)", True),
}
FORMS = ("auto", *settings_table.FORMS)
# The form in which each setting that injects test samples put them into the corpus (the
# settings table's; a placebo's corpus holds no test sample: probe its base arm's).
SETTING_FORMS = {s.name: s.form for s in settings_table.SETTINGS.values() if s.injects_test}
# The seed of the reference draw: a fixed string, so every model probed on the same groups (arm,
# control, placebo) is compared with the same validation samples whenever its eligible list is
# the same, which SHARED_POOL_RULE makes it for every arm of a seed.
REFERENCE_SEED = "reference"
# Why every arm of a seed has one pool of never-seen samples (the probe's reference samples and
# lab detect's validation draw): a placebo model pre-trained on some validation samples, which
# its pool must leave out; were they left out of its pool alone, its draw would differ from its
# arm's and the control's (an audit found 120 and 134 of 200 shared), and arm-vs-placebo
# differences would compare other samples.
SHARED_POOL_RULE = ("every sample that any arm of the seed injected or pre-trained on as a "
                    "placebo (the model's own corpus and --seed-corpora), and any sample sharing "
                    "a side verbatim with one, is left out of every arm's pool of never-seen "
                    "samples, so the arms of a seed draw from one pool")
# The fields of a corpus manifest naming the samples an arm injected (test samples) or put in as
# a placebo (train/valid samples), as built and as meant before decontamination.
ARM_SAMPLE_FIELDS = ("injected_ids", "intended_injected_ids", "placebo_ids",
                     "intended_placebo_ids")
_NAME = re.compile(r'@?"|[^\W\d]|\$')  # how a lexer token that is a name or string literal starts


def seed_corpora_param() -> Any:
    """--seed-corpora of lab probe and lab detect (SHARED_POOL_RULE)."""
    return param((), "Corpora (lab inject) of the other arms of the model's seed: the samples "
                     "they injected or put in as a placebo are left out of the never-seen "
                     "validation samples, as the model's own are, so every arm of the seed is "
                     "set against the same ones (a study passes its seed's placebo corpora).")


def load_probed_model(model_dir: Path) -> tuple[Any, Any, dict[str, Any], str]:
    """(model, tokenizer, manifest, family) of a lab pre-trained model or fine-tuned GPT-2."""
    manifest = read_model(model_dir, "--model")
    architecture = lab_architecture(manifest, model_dir)
    if architecture == "encoder-decoder":
        raise LabError(f"--model {model_dir}: a fine-tuned encoder-decoder is not probed; probe "
                       "its pre-trained RoBERTa")
    model, tokenizer = load_lab_model(model_dir, architecture)
    return model, tokenizer, manifest, "gpt2" if architecture == "causal-lm" else "roberta"


def probe_groups(manifest: dict[str, Any], groups_dir: Path | None) -> dict[str, Any]:
    """The corpus record that says which samples were injected and how: the model's own
    pre-training corpus, or (--groups) another arm's corpus or model, for a control model."""
    if groups_dir is None:
        record = pretraining_record(manifest).get("corpus", {})
        source = "the model's pre-training corpus"
        if record.get("membership") == "unknown":  # lab.train.continued.UNKNOWN
            origins = [stage.get("path") for stage in pretraining_record(manifest).get("lineage")
                       or [] if stage.get("membership") == "unknown"]
            origin = origins[0] if origins else "weights"
            raise LabError(f"{source}: membership unknown (it continued from {origin}, which "
                           "has no lab record of what it saw), so no sample is known to be a "
                           "member or not: the model cannot be scored")
    else:
        other = read_model(groups_dir, "--groups")
        if other.get("kind") == "lab-corpus":
            record = other
        elif other.get("kind") in ("lab-pretrained", "lab-finetuned"):
            record = pretraining_record(other).get("corpus", {})
        else:
            raise LabError(f"--groups {groups_dir}: not a lab corpus or model directory")
        source = str(groups_dir)
    assigned = assigned_injected_ids(record)  # by intention to treat
    if not assigned:
        setting = settings_table.find(record.get("setting"))
        hint = (f"for a placebo model, pass --groups its base arm's ('{setting.base}') corpus"
                if setting and setting.placebo else
                "for a control model, pass --groups a contaminated arm's corpus")
        raise LabError(f"{source}: injected no test samples, so there is nothing to probe "
                       f"({hint})")
    return {"benchmark": record["benchmark"], "split": record.get("benchmark_split", "test"),
            "setting": record["setting"],
            "injected": assigned,
            "held_out": list(record.get("held_out_ids", [])), "source": source,
            "doses": {sample: level["dose"] for level in record.get("dose_levels") or []
                      for sample in level["ids"]}}


def reference_split(benchmark: str, probed_split: str) -> str | None:
    """The benchmark's validation split (CodeTrans valid, CONCODE dev; the -paper subsets'
    valid/dev): its split that is neither train, test nor the probed one. None if it has none."""
    spec = get_spec(benchmark)
    probed = spec.canonical_split(probed_split)
    others = [s for s in spec.splits if s not in ("train", "test", probed)]
    return others[0] if others else None


def trained_placebo_ids(manifest: dict[str, Any]) -> frozenset[str]:
    """Ids of the non-test samples the probed model pre-trained on: those its own corpus
    injected as a placebo (read from that corpus, verified against its shards, whose sha256
    must match). A
    reference sample must not be one of them. Refused when they cannot be known."""
    corpus = pretraining_record(manifest).get("corpus", {})
    setting = settings_table.find(corpus.get("setting"))
    if setting is None or not setting.placebo:
        return frozenset()
    folder = corpus.get("path")
    try:
        other = verify_corpus(Path(folder)) if folder else None
    except LabError as exc:
        raise LabError(f"the model pre-trained on a placebo corpus whose samples are unknown "
                       f"here ({exc})") from None
    if other is None or other.get("corpus_sha256") != corpus.get("sha256"):
        raise LabError(f"the model pre-trained on a placebo corpus ({folder or 'no path'}) that "
                       "is not the one recorded (sha256 differs), so its samples are unknown")
    return frozenset(other.get("placebo_ids", []))


def seed_arm_samples(corpora: Sequence[Path], benchmark: str) -> frozenset[str]:
    """Ids of the samples the corpora (lab inject: the other arms of the scored model's seed)
    injected or put in as a placebo (ARM_SAMPLE_FIELDS). Each must be a corpus of `benchmark`."""
    ids: set[str] = set()
    for corpus in corpora:
        try:
            manifest = verify_corpus(Path(corpus))
        except LabError as exc:
            raise LabError(f"--seed-corpora: {exc}") from None
        if manifest.get("benchmark") != benchmark:
            raise LabError(f"--seed-corpora {corpus}: injects {manifest.get('benchmark')}, the "
                           f"scored samples are {benchmark}'s")
        for name in ARM_SAMPLE_FIELDS:
            ids.update(manifest.get(name) or [])
    return frozenset(ids)


def reference_samples(chosen: dict[str, Any], tests: list[Sample], count: int,
                      needs_output: bool, manifest: dict[str, Any],
                      corpora_dir: Path | None, seed_arms: frozenset[str] = frozenset()
                      ) -> tuple[list[Sample], dict[str, Any]]:
    """Never-seen samples of the same distribution, for an arm without a held-out half: `count`
    samples of the benchmark's validation split that the audit finds disjoint from every test
    sample (`placebo.disjoint_from`, the placebo pool's rule; `tests` is the whole probed split)
    and from every sample an arm of the seed pre-trained on (SHARED_POOL_RULE: the model's own
    placebo samples and `seed_arms`, seed_arm_samples' ids), drawn with REFERENCE_SEED and kept
    in split order; all of them when fewer are eligible. Returns (samples, record); when no such
    split can be used, ([], {"missing": why})."""
    split = reference_split(chosen["benchmark"], chosen["split"])
    if split is None:
        return [], {"missing": f"{chosen['benchmark']} has no validation split besides "
                               f"'{chosen['split']}'"}
    data = manifest.get("data", {}) if manifest.get("kind") == "lab-finetuned" else {}
    if data.get("train_split") == split:
        return [], {"split": split, "missing": f"the model was fine-tuned on the {split} split"}
    try:
        loaded = load_samples(chosen["benchmark"], split, corpora_dir)
    except DataNotFound as exc:
        return [], {"split": split, "missing": str(exc)}
    try:
        trained = trained_placebo_ids(manifest)
    except LabError as exc:
        return [], {"split": split, "missing": str(exc)}
    candidates = loaded.records
    empty = [s for s in candidates if needs_output and not s.output.strip()]
    candidates = [s for s in candidates if not (needs_output and not s.output.strip())]
    spec = get_spec(chosen["benchmark"])
    eligible, found = disjoint_from(candidates, split_sides_index(tests), spec,
                                    trained | seed_arms)
    in_split = {s.id for s in loaded.records}
    picked = (range(len(eligible)) if count >= len(eligible)
              else random.Random(REFERENCE_SEED).sample(range(len(eligible)), count))
    reference = [eligible[i] for i in sorted(picked)]
    record = {
        "split": split, "seed": REFERENCE_SEED, "requested": count, "count": len(reference),
        "fewer_eligible": len(eligible) < count,
        "eligibility": {**({"empty_output_dropped": len(empty)} if needs_output else {}),
                        **({"placebo_trained": len(trained & in_split)} if trained else {}),
                        # the seed's arms' samples in this split (the model's own among them):
                        # with those sharing a side verbatim, `excluded` of them left the pool
                        **({"seed_arms": {"rule": SHARED_POOL_RULE, "samples_in_split":
                                          len((trained | seed_arms) & in_split)}}
                           if seed_arms else {}),
                        **found},
    }
    return reference, record


def name_spans(text: str, limit: int) -> list[tuple[int, int]]:
    """Character spans of the first `limit` identifiers (not keywords) and string literals."""
    spans = [(m.start(), m.end()) for m in TOKEN_PATTERN.finditer(text)
             if _NAME.match(m.group()) and m.group() not in KEYWORDS]
    return spans[:limit]


def _encode(tokenizer: Any, text: str, max_tokens: int) -> tuple[list[int], list[tuple[int, int]]]:
    """`<s> text </s>` ids (cut to max_tokens) and each id's character span (-1 for specials)."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"][: max_tokens - 2]
    offsets = [tuple(o) for o in encoded["offset_mapping"][: len(ids)]]
    return ([tokenizer.bos_token_id, *ids, tokenizer.eos_token_id],
            [(-1, -1), *offsets, (-1, -1)])


def _name_positions(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[list[int]]:
    """Per name span, the token positions overlapping it (names cut off by truncation dropped)."""
    found = []
    for start, end in spans:
        positions = [i for i, (a, b) in enumerate(offsets) if a >= 0 and a < end and b > start]
        if positions:
            found.append(positions)
    return found


def _batched(items: list[Any], size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _causal_name_hits(stats: Any, names: list[list[int]]) -> int:
    """GPT-2: the names filled exactly. The token at position p is predicted at p - 1; a name
    is filled exactly when every one of its tokens is the greedy choice given the true prefix."""
    return sum(all(stats.greedy[p - 1] for p in positions) for positions in names)


def _masked_name_hits(model: Any, tokenizer: Any, docs: list[list[int]],
                      names: list[list[list[int]]], batch_size: int) -> list[int]:
    """RoBERTa: per document, the names whose tokens, all masked at once, are all recovered."""
    import torch

    jobs = [(d, doc, positions) for d, doc in enumerate(docs) for positions in names[d]]
    hits = [0] * len(docs)
    for batch in progress.steps(_batched(jobs, batch_size), "masked names",
                                total=-(-len(jobs) // batch_size)):
        ids, attention = padded([doc for _d, doc, _p in batch], tokenizer.pad_token_id,
                                left=False)
        for row, (_d, _doc, positions) in enumerate(batch):
            ids[row, positions] = tokenizer.mask_token_id
        ids, attention = ids.to(model.device), attention.to(model.device)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=attention).logits
        for row, (d, doc, positions) in enumerate(batch):
            truth = torch.tensor([doc[p] for p in positions], device=model.device)
            hits[d] += int(bool((logits[row, positions].argmax(-1) == truth).all()))
    return hits


BASELINES = ("held_out", "reference")  # never-seen groups an injected group is compared with
GROUPS = ("injected", *BASELINES)


def summarise(rows: list[dict[str, Any]], baseline: str | None = "held_out"
              ) -> dict[str, dict[str, Any]]:
    """Per probe: the means of every group, and the injected group's gap, AUC and p against
    the baseline group (held-out samples, else reference samples; None: no comparison)."""
    if baseline is not None and baseline not in BASELINES:
        raise LabError(f"baseline {baseline}: choose from {', '.join(BASELINES)}")
    summary = {}
    for probe, (meaning, higher_is_member) in PROBES.items():
        values = {g: [r[probe] for r in rows if r["group"] == g and r.get(probe) is not None]
                  for g in GROUPS}
        if not values["injected"]:
            continue
        means = {g: (sum(v) / len(v) if v else None) for g, v in values.items()}
        against = means[baseline] if baseline else None
        auc, p = membership_auc(values["injected"], values[baseline] if baseline else [],
                           higher_is_member)
        summary[probe] = {
            "meaning": meaning, "higher_means_seen": higher_is_member, "baseline": baseline,
            "injected": means["injected"], "held_out": means["held_out"],
            "reference": means["reference"],
            "gap": None if against is None else means["injected"] - against,
            "auc": auc, "p": p, "test": "Mann-Whitney U, one-sided (injected more seen), asymptotic",
            "samples": {g: len(v) for g, v in values.items()},
        }
    return summary


def by_dose(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For a dose ladder: each injected dose's probes against the held-out level (dose 0)."""
    doses = sorted({r["dose"] for r in rows if r.get("dose")})
    held = [r for r in rows if r.get("dose") == 0]
    return {str(d): summarise([r for r in rows if r.get("dose") == d] + held,
                              "held_out" if held else None) for d in doses}


def _probe_rows(model: Any, tokenizer: Any, family: str, samples: list[Sample],
                group_of: dict[str, str], setting: str, min_k: float, max_names: int,
                max_tokens: int, batch_size: int) -> list[dict[str, Any]]:
    """One row per sample: every probe, on the documents of the sample's injected form. The
    token statistics and the greedy continuation are the detectors' (lab.detect)."""
    if not samples:
        return []
    ctx = DetectContext(model=model, tokenizer=tokenizer, family=family, form=setting,
                        max_tokens=max_tokens, batch_size=batch_size, k=min_k)
    texts = [ctx.documents(sample) for sample in samples]
    flat = [text for doc_texts in texts for text in doc_texts]
    stats = ctx.text_stats(flat)
    names = [_name_positions(_encode(tokenizer, text, max_tokens)[1],
                             name_spans(text, max_names)) for text in flat]
    if family == "gpt2":
        hits = [_causal_name_hits(stat, doc_names) for stat, doc_names in zip(stats, names)]
    else:
        hits = _masked_name_hits(model, tokenizer, [ctx.encode(text) for text in flat], names,
                                 batch_size)
    rows: list[dict[str, Any]] = []
    at = 0
    for sample, doc_texts in zip(samples, texts):
        mine = range(at, at + len(doc_texts))
        at += len(doc_texts)
        token_lp = [lp for d in mine for lp in stats[d].logprob]
        found, count = sum(hits[d] for d in mine), sum(len(names[d]) for d in mine)
        loss = -sum(token_lp) / len(token_lp)
        rows.append({"id": sample.id, "group": group_of[sample.id], "tokens": len(token_lp),
                     "loss": loss, "perplexity": math.exp(min(loss, 50.0)),
                     "min_k": min_k_score(token_lp, min_k), "names": count,
                     "infill": 100.0 * found / count if count else None})
    if family == "gpt2":
        max_source = (min(positions_of(model.config), max_tokens) - 3) // 2
        prompts = [causal_prompt(tokenizer, s.input, max_source) for s in samples]
        continued = extraction.continuations(ctx, samples, Decoding())
        references = [s.output for s in samples]
        em = metric_fns.exact_match_tokens_per_sample(references, continued)
        bleu = metric_fns.bleu_per_sample(references, continued)
        for row, prompt, text, e, b in zip(rows, prompts, continued, em, bleu):
            row.update(extraction=text, extraction_em=e, extraction_bleu=b,
                       prompt_tokens=len(prompt))
    return rows


@dataclass
class ProbeConfig:
    """One probe run. Every option of `lab probe` and the fields of a recipe's `probe` section
    are declared here, once."""
    model: Path = param(help="A lab pretrain directory (GPT-2 or RoBERTa) or a fine-tuned GPT-2.")
    out: Path | None = param(None, "Default: MODEL-probe, beside MODEL.")
    groups: Path | None = param(None, "Corpus or model whose injected / held-out samples to probe "
                                      "(default: the model's own pre-training corpus; for a "
                                      "control model, a contaminated arm).")
    form: str = param("auto", "auto (the injection setting), input, output, unpaired, paired.")
    min_k: float = param(0.2, "k of Min-K% probability.")
    max_samples: int | None = param(None, "Probe the first N samples only.")
    max_names: int = param(32, "Identifiers and literals filled per sample.")
    seed_corpora: tuple[Path, ...] = seed_corpora_param()
    batch_size: int = param(16, "Documents per forward pass.")
    device: str = device_param()
    dtype: str = dtype_param()
    force: bool = param(False, "Replace an existing output directory.")
    corpora_dir: Path | None = corpora_param()

    def __post_init__(self) -> None:
        # Checked where the config is made: by `lab probe` and by a recipe's `probe` section
        # alike (lab.study.recipe_checks names the recipe's field).
        if self.form not in FORMS:
            raise LabError(f"--form {self.form}: choose from {', '.join(FORMS)}")
        if not 0 < self.min_k <= 1:
            raise LabError(f"--min-k {self.min_k}: expected a fraction in (0, 1]")
        for option, value in (("--max-samples", self.max_samples), ("--max-names", self.max_names),
                              ("--batch-size", self.batch_size)):
            if value is not None and value < 1:
                raise LabError(f"{option} {value}: must be >= 1")


# A study's `probe` section. Probing every sample of every model costs more than the rest of a
# CPU study: a study probes 200.
ProbeSection = section("ProbeSection", ProbeConfig, ["min_k", "max_samples", "max_names"], own=[
    ("enabled", bool, field(default=True, metadata={
        "help": "Probe every pre-trained model (lab probe): was the injected data memorised?"})),
    ("shared_pool", bool, field(default=True, metadata={
        "help": "Every probe of a seed leaves the samples of the seed's placebo arms out of its "
                "never-seen reference samples, so the arm, its placebo and the control are "
                "judged against the same ones (lab.detect.probe.SHARED_POOL_RULE); false: each "
                "model leaves out its own only, as studies before issue 69 drew (their probe "
                "stages are found done)."})),
], study_defaults={"max_samples": 200})


def refuse_corpus(manifest: dict[str, Any], model: Path) -> dict[str, Any]:
    """--model's manifest, unless it is a corpus's (probe and detect read a corpus's manifest
    as a model's record otherwise, and say its 'pre-training corpus' injected nothing)."""
    if manifest.get("kind") == "lab-corpus":
        raise LabError(f"--model {model}: is a corpus, not a model (pre-train a model on it "
                       "with lab pretrain, or pass it as --groups to score a control model on "
                       "its samples)")
    return manifest


def run_probe(cfg: ProbeConfig | Path, out: Path | None = None, **options: Any) -> dict[str, Any]:
    """Entry point of `lab probe` and of a study's probe stages: probes.jsonl (per sample) and
    summary.json (per probe). run_probe(model, out, **options) makes the ProbeConfig of those
    fields."""
    if not isinstance(cfg, ProbeConfig):
        cfg = ProbeConfig(model=Path(cfg), out=out, **options)
    import torch

    started = time.perf_counter()
    device = check_placement(cfg.device, cfg.dtype)
    # Everything that can be refused is checked before the model is loaded.
    chosen = probe_groups(refuse_corpus(read_model(cfg.model, "--model"), cfg.model), cfg.groups)
    setting = settings_table.probed_form(chosen["setting"]) if cfg.form == "auto" else cfg.form
    if setting is None:
        raise LabError(f"the corpus setting '{chosen['setting']}' has no injected form to probe")
    out = Path(cfg.out or beside(cfg.model, "probe"))
    inputs = [cfg.model, cfg.groups, *cfg.seed_corpora, *corpora_inputs(cfg.corpora_dir)]
    seed_arms = seed_arm_samples(cfg.seed_corpora, chosen["benchmark"])
    check_output(out, cfg.force, "lab-probe", inputs)
    model, tokenizer, manifest, family = load_probed_model(cfg.model)
    model = place_model(model, cfg.device, cfg.dtype)

    group_of = {i: "injected" for i in chosen["injected"]}
    group_of.update({i: "held_out" for i in chosen["held_out"]})
    needs_output = "output" in settings_table.form_sides(setting) or family == "gpt2"
    tests = load_samples(chosen["benchmark"], chosen["split"], cfg.corpora_dir,
                         require_references=needs_output).records
    samples = [s for s in tests if s.id in group_of]
    samples = samples[:cfg.max_samples] if cfg.max_samples else samples
    # No held-out half: never-seen validation samples are the within-model baseline.
    reference, reference_record = [], None
    if not chosen["held_out"]:
        reference, reference_record = reference_samples(chosen, tests, len(samples),
                                                         needs_output, manifest, cfg.corpora_dir,
                                                         seed_arms)
        group_of.update({s.id: "reference" for s in reference})
    baseline = "held_out" if chosen["held_out"] else ("reference" if reference else None)
    positions = positions_of(model.config)
    block = int(pretraining_record(manifest).get("config", {}).get("block_size") or positions)
    max_tokens = min(block, positions)

    torch.manual_seed(0)
    # Reference samples are scored apart, so the probed samples' rows (batches, generation
    # length) are those a probe without them computes.
    rows = [row for batch in (samples, reference)
            for row in _probe_rows(model, tokenizer, family, batch, group_of, setting, cfg.min_k,
                                   cfg.max_names, max_tokens, cfg.batch_size)]
    for row in rows:
        if row["id"] in chosen["doses"]:
            row["dose"] = chosen["doses"][row["id"]]
    summary = {
        "kind": "lab-probe", "model": str(cfg.model), "family": family,
        "groups": chosen["source"], "benchmark": chosen["benchmark"], "split": chosen["split"],
        "form": setting, "min_k": cfg.min_k, "max_names": cfg.max_names, "samples": len(rows),
        "placement": {"device": device, "dtype": cfg.dtype},
        "baseline": baseline, "reference": reference_record,
        "probes": summarise(rows, baseline),
        **({"by_dose": by_dose(rows)} if chosen["doses"] else {}),
        "wall_seconds": round(time.perf_counter() - started, 2),
        "environment": environment_record(),
    }
    write_rows_and_summary(out, "probes.jsonl", rows, summary, force=cfg.force,
                           kind="lab-probe", inputs=inputs)
    summary["out"] = str(out)
    return summary
