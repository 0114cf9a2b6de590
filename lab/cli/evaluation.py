"""`lab`'s evaluation commands: a model generating for a split (lab evaluate), predictions
scored (lab score), trivial baselines (lab baseline), memorisation probes (lab probe), the
contamination detectors (lab detect) and the LLM arm (lab llm-eval)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lab.cli.shared import console, formatted, options_of, rich_table
from lab.common import refuse_unused_options
from lab.detect.run import DetectConfig
from lab.eval.baselines import BaselineConfig
from lab.eval.generate import EvaluateConfig
from lab.detect.probe import ProbeConfig
from lab.llm.llm_eval import LlmEvalConfig


@options_of(EvaluateConfig)
def evaluate(cfg: EvaluateConfig) -> None:
    """Generate for a split and score every sample (split into injected / held-out)."""
    from lab.eval.generate import run_evaluate

    result = run_evaluate(cfg)
    rows = [{"group": "all", "samples": result["samples"], **result["metrics"]}]
    rows += [{"group": g, **v} for g, v in result["by_group"].items()]
    columns = ["group", "samples"] + [m for m in result["metrics"] if not m.startswith("codebleu_")]
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float):
                row[key] = f"{value:.2f}"
    console.print(rich_table(f"{cfg.task} {cfg.split} ({result['decoding']['mode']})", rows,
                             columns))
    console.print(f"predictions and metrics: {result['out']}")

def score_command(
    pred: Path = typer.Option(..., help="Predictions: one per line, or predictions.jsonl "
                                        "(fields prediction and reference)."),
    ref: Optional[Path] = typer.Option(None, help="References, one per line (or .jsonl); "
                                                  "not needed with a predictions.jsonl."),
    metrics: Optional[str] = typer.Option(
        None, help="Comma-separated: bleu,bleu_sentence,meteor,em,em_tokens,codebleu (default: "
                   "all; codebleu only with --language)."),
    language: Optional[str] = typer.Option(None, help="java or cs: CodeBLEU's grammar."),
    out: Optional[Path] = typer.Option(None, help="Also write the scores to this JSON file."),
    task: Optional[str] = typer.Option(
        None, help="translation or generation: em as CodeXGLUE's evaluator of that task "
                   "(translation: equal after strip(); generation: same whitespace tokens). "
                   "Default: a lab evaluate predictions.jsonl's own task, else translation."),
) -> None:
    """Score predictions against references: CodeXGLUE BLEU, sentence BLEU, METEOR, EM, CodeBLEU."""
    from lab.eval.metrics import run_score

    result = run_score(pred, ref, metrics, language, out, task)
    rows = [{"metric": name, "score": f"{value:.2f}"} for name, value in result["metrics"].items()]
    console.print(f"{result['predictions']} vs {result['references']} (task {result['task']})")
    console.print(rich_table(f"{result['samples']} samples", rows, ["metric", "score"]))
    if out is not None:
        console.print(f"scores: {out}")


@options_of(BaselineConfig)
def baseline(cfg: BaselineConfig) -> None:
    """Trivial baselines of a task (naive copy, BM25 retrieval), scored like a model."""
    from lab.eval.baselines import run_baseline

    result = run_baseline(cfg)
    metrics = list(next(iter(result["baselines"].values())))
    rows = [{"baseline": name, **{m: f"{v:.2f}" for m, v in scores.items()}}
            for name, scores in result["baselines"].items()]
    console.print(rich_table(f"{result['benchmark']} {result['split']}: {result['samples']} samples "
                         f"(retrieval from {result['retrieval_pool']['train_used']} "
                         f"{result['retrieval_pool']['train_split']} samples)",
                         rows, ["baseline", *metrics]))
    if cfg.out is not None:
        console.print(f"scores: {cfg.out}")

@options_of(ProbeConfig)
def probe(cfg: ProbeConfig) -> None:
    """Was the injected data memorised? Loss, Min-K%, extraction and infill probes."""
    from lab.detect.probe import run_probe

    result = run_probe(cfg)
    # The never-seen group the injected one is compared with: held-out samples, else reference
    # samples of the validation split (an arm without a held-out half).
    baseline = result.get("baseline") or "held_out"
    rows = []
    for name, probe_summary in result["probes"].items():
        rows.append({"probe": name, **{k: formatted(probe_summary[k]) for k in
                                       ("injected", baseline, "gap", "auc")},
                     "p": formatted(probe_summary["p"], ".2g"),
                     "samples": "/".join(str(probe_summary["samples"][g])
                                         for g in ("injected", baseline))})
    console.print(rich_table(f"{result['family']} {result['form']} form, {result['samples']} samples "
                         f"(groups: {result['groups']})", rows,
                         ["probe", "injected", baseline, "gap", "auc", "p", "samples"]))
    against = {"held_out": "held-out samples",
               "reference": "never-seen samples of the validation split"}[baseline]
    console.print(f"AUC: how well the probe tells injected from {against} (0.5: not at all); "
                  "p: one-sided Mann-Whitney U, asymptotic.", markup=False)
    missing = (result.get("reference") or {}).get("missing")
    if missing:
        console.print(f"no never-seen baseline: {missing}", markup=False, soft_wrap=True)
    console.print(f"per-sample probes and summary: {result['out']}", markup=False, soft_wrap=True)


@options_of(DetectConfig)
def detect(cfg: DetectConfig) -> None:
    """Contamination detectors judged on known membership: AUC and TPR at low FPR."""
    from lab.detect.run import OPTION_USERS, run_detect

    refuse_unused_options(cfg, OPTION_USERS, cfg.detectors, "--detectors")
    result = run_detect(cfg)
    rows = [{"detector": name, "auc": formatted(m["auc"]), "tpr@1%": formatted(m["tpr_at_1pct_fpr"]),
             "tpr@5%": formatted(m["tpr_at_5pct_fpr"]), "p": formatted(m["p"], ".2g"),
             "members": formatted(m["member_mean"], ".4g"), "non-members": formatted(m["nonmember_mean"], ".4g"),
             "samples": f"{m['members']}/{m['nonmembers']}"}
            for name, m in result["detectors"].items()]
    audited = "audited" if result["membership"] == "unknown" else "injected"
    console.print(rich_table(f"{result['described']}, {result['form']} form: {audited} vs "
                         f"{result['baseline'].replace('_', '-')} samples", rows,
                         ["detector", "auc", "tpr@1%", "tpr@5%", "p", "members", "non-members",
                          "samples"]))
    console.print("AUC 0.5: no signal; scores are higher for member-like samples; p: one-sided "
                  "Mann-Whitney U, asymptotic, per sample (a description, not a test over seeds); "
                  "the shift check's p is two-sided.", markup=False)
    if result["membership"] == "unknown":
        console.print(f"membership unknown: an AUC above 0.5 says the {result['split']} samples "
                      "are scored as more seen than the valid ones, which contamination or a "
                      "difference between the splits can cause (a study's shift check measures "
                      "the latter on models whose membership is known)", markup=False,
                      soft_wrap=True)
    shift = result.get("shift")
    if shift and shift["detectors"]:
        aucs = ", ".join(f"{name} {formatted(m['auc'])}" for name, m in shift["detectors"].items())
        console.print(f"distribution shift, AUC of held-out test against {shift['samples']['count']} "
                      f"{shift['samples']['split']} samples (neither seen; 0.5: same distribution): "
                      f"{aucs}", markup=False, soft_wrap=True)
        if shift.get("statement"):
            console.print(shift["statement"], markup=False, soft_wrap=True)
    elif shift:
        console.print(f"no distribution-shift check: {shift['samples']['missing']}", markup=False,
                      soft_wrap=True)
    if result["skipped"]:
        console.print(f"not applicable here: {', '.join(result['skipped'])}", markup=False)
    console.print(f"per-sample scores and summary: {result['out']}", markup=False, soft_wrap=True)

@options_of(LlmEvalConfig)
def llm_eval(cfg: LlmEvalConfig) -> None:
    """The study's LLM arm: one-shot prompts on a contaminated set and its perturbed twin, BLEU and
    METEOR over repetitions, Mann-Whitney U between the two sets."""
    from lab.llm.llm_eval import run_llm_eval

    result = run_llm_eval(**vars(cfg))
    used = result["data"]["contaminated"]["used"]
    console.print(rich_table(f"{result['task_label']}: {used} pairs, {cfg.repetitions} repetitions",
                         result["rows"], ["model", "task", "metric", "experimental", "control", "p"]))
    console.print(result["note"], markup=False, highlight=False, soft_wrap=True)
    if cfg.out is not None:
        console.print(f"generations, results and table: {result['out']}", markup=False,
                      highlight=False, soft_wrap=True)
