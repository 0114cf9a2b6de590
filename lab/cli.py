"""The `lab` command line: parses options and calls one entry function per command."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from lab.common import LabError, option_name, refuse_unused_options
from lab.contamination.audit import AuditConfig, run_audit
from lab.contamination.inject import InjectConfig  # the configs declare their commands' options
from lab.decontam.run import DecontamConfig
from lab.eval.baselines import BaselineConfig
from lab.eval.generate import EvaluateConfig
from lab.detect.run import DetectConfig
from lab.detect.probe import ProbeConfig
from lab.llm.llm_eval import LlmEvalConfig
from lab.llm.perturb import PerturbConfig
from lab.modelcard import ExportConfig, write_model_card
from lab.analysis.report import run_report
from lab.study.runner import run_study
from lab.tokenizer import TokenizerConfig
from lab.train.finetune import FinetuneConfig
from lab.train.pretrain import PretrainConfig

app = typer.Typer(
    help="Contamination-injection pre-training lab for code language models.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
corpora_app = typer.Typer(help="Datasets the lab can read, and where it finds them.",
                          no_args_is_help=True)
app.add_typer(corpora_app, name="corpora")
# Piped output (CI logs, files) gets wide tables instead of truncated cells.
console = Console(width=None if sys.stdout.isatty() else 200)


def _print_version(asked: bool) -> None:
    if asked:
        from lab import __version__
        from lab.common import git_commit

        commit = git_commit()
        print(f"lab {__version__}" + (f" (git {commit})" if commit else ""))
        raise typer.Exit()


@app.callback()
def _everywhere(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the lab's version (and git commit) and exit."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars inside long steps "
                                                      "(also off when stderr is not a terminal "
                                                      "or in CI)."),
) -> None:
    """The options before any command (the app's help is Typer's `help`)."""
    from lab.progress import QUIET_VARIABLE, quiet_libraries

    if quiet:  # in the environment, so a study's stages and a run's ranks are quiet too
        os.environ[QUIET_VARIABLE] = "1"
    quiet_libraries()


CorporaOption = typer.Option(
    None, "--corpora", help="Folder holding the datasets (else $LAB_CORPORA, ./corpora, the hub)."
)


def _option_type(kind: Any) -> tuple[Any, bool]:
    """(the command line's type of a config field, whether it is a comma-separated list)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner, listed = _option_type(args[0])
        return Optional[inner], listed
    if typing.get_origin(kind) in (list, tuple):
        return str, True
    return kind, False


def options_of(config: Any) -> Callable[[Callable[[Any], None]], Callable[..., None]]:
    """Decorate `command(cfg)` into a typer command whose options are the fields of the config
    dataclass: names, types, defaults and help all come from the fields' declarations
    (lab.common.param), so each is written once. Tuple fields are comma-separated options."""
    hints = typing.get_type_hints(config)
    # A shared section (keyword-only, e.g. the executor's) comes after the command's own.
    shown = sorted((f for f in dataclasses.fields(config) if f.metadata.get("cli", True)),
                   key=lambda f: bool(f.kw_only))

    def decorate(command: Callable[[Any], None]) -> Callable[..., None]:
        parameters, annotations, listed = [], {}, set()
        for f in shown:
            kind, is_list = _option_type(hints[f.name])
            if is_list:
                listed.add(f.name)
            required = f.default is dataclasses.MISSING
            # A list's default as the option's text: "" for an empty tuple, which gives () back.
            default = ... if required else (",".join(map(str, f.default))
                                             if is_list and f.default is not None else f.default)
            name = option_name(f)
            if bool in (kind, _without_none(kind)) and not f.metadata.get("flag"):
                name = f"{name}/--no-{name[2:]}"
            meaning = f.metadata.get("help", "") + (" Comma-separated." if is_list else "")
            complete = _completion(f.name, _without_none(kind))
            option = (typer.Argument(default, help=meaning, autocompletion=complete)
                      if f.metadata.get("argument")
                      else typer.Option(default, name, help=meaning, autocompletion=complete))
            annotations[f.name] = kind
            parameters.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                                default=option, annotation=kind))

        def run(**values: Any) -> None:
            for name in listed:
                if values[name] is not None:
                    values[name] = tuple(_listed_item(v, hints[name], name)
                                         for v in values[name].split(",") if v)
            command(config(**values))

        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = annotations
        run.__name__, run.__doc__ = command.__name__, command.__doc__
        return run

    return decorate


def _listed_item(text: str, kind: Any, name: str) -> Any:
    """One item of a comma-separated option, as the field's element type (str or int)."""
    element = next((a for a in typing.get_args(_without_none(kind)) if a is not Ellipsis), str)
    if element is int:
        try:
            return int(text)
        except ValueError:
            raise LabError(f"--{name.replace('_', '-')}: '{text}' is not a whole number") from None
    return text


def _choices() -> dict[str, tuple[str, ...]]:
    """The values of the options whose values the lab's own tables name (shell completion)."""
    from lab.contamination.settings import SETTINGS
    from lab.contamination.soft import FORM_NAMES
    from lab.corpora import DATASETS
    from lab.decontam import DECONTAMINATORS
    from lab.detect import DETECTORS
    from lab.models import MODELS, PRESETS

    return {"setting": tuple(SETTINGS), "model": MODELS, "preset": tuple(PRESETS),
            "benchmark": tuple(DATASETS), "detectors": tuple(DETECTORS),
            "methods": tuple(DECONTAMINATORS), "contamination_form": FORM_NAMES}


def _completion(field: str, kind: Any) -> Callable[[str], list[str]] | None:
    """What the shell completes for an option: a table's names (the last item of a
    comma-separated list), a path's files and folders; None: nothing known."""
    import glob

    def names(incomplete: str) -> list[str]:
        head, comma, last = incomplete.rpartition(",")
        return [head + comma + name for name in _choices()[field] if name.startswith(last)]

    def paths(incomplete: str) -> list[str]:
        found = sorted(glob.glob(glob.escape(os.path.expanduser(incomplete)) + "*"))
        return [path + ("/" if os.path.isdir(path) else "") for path in found]

    if kind is str and field in _choices():
        return names
    return paths if kind is Path else None


def _without_none(kind: Any) -> Any:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind


def _default(function: Callable[..., Any], name: str) -> Any:
    """The default an entry function declares for a parameter (an option without a config)."""
    return inspect.signature(function).parameters[name].default


def _table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    return table


@corpora_app.command("list")
def corpora_list(corpora: Optional[Path] = CorporaOption) -> None:
    """Every dataset and split, and where it would be read from."""
    from lab.corpora import dataset_table

    console.print(_table("datasets", dataset_table(corpora), ["dataset", "kind", "split", "where"]))


@corpora_app.command("stats")
def corpora_stats(name: str = typer.Argument(..., help="csn-java, codetrans, concode, ..."),
                  corpora: Optional[Path] = CorporaOption) -> None:
    """Split counts and token-length quantiles (lab code tokens)."""
    from lab.corpora import dataset_stats

    rows = []
    for row in dataset_stats(name, corpora):
        flat = {"split": row["split"], "records": row["records"], "expected": row["expected"],
                "where": row["where"]}
        for side in ("text", "input", "output"):
            if side in row:
                q = row[side]
                flat[side] = f"mean {q['mean']} p50 {q['p50']:.0f} p90 {q['p90']:.0f} " \
                             f"p99 {q['p99']:.0f} max {q['max']}"
        rows.append(flat)
    sides = [c for c in ("text", "input", "output") if any(c in row for row in rows)]
    columns = ["split", "records", "expected"] + sides
    console.print(_table(f"{name}: tokens per record", rows, columns + ["where"]))


@corpora_app.command("verify")
def corpora_verify(name: str = typer.Argument(..., help="csn-java, codetrans, concode, ..."),
                   corpora: Optional[Path] = CorporaOption) -> None:
    """Check local files against the checksums of the published version (corpora/NAME.json)."""
    from lab.corpora import verify_dataset

    rows = verify_dataset(name, corpora)
    if all(row["status"] == "missing" for row in rows):
        where = corpora or os.environ.get("LAB_CORPORA") or "./corpora"
        raise LabError(f"{name}: no file of it found (under {where}): nothing to verify")
    changed = [row for row in rows if row["status"].startswith("differs")]
    if changed:
        raise LabError(f"{changed[0]['file']}: {changed[0]['status']} (sha256 "
                       f"{changed[0]['sha256'][:12]}...; {len(changed)} file(s) differ)")
    console.print(_table(f"{name}: checksums", rows, ["split", "file", "status"]))


@app.command()
@options_of(InjectConfig)
def inject(cfg: InjectConfig) -> None:
    """Build one arm's pre-training corpus: inject test samples, remove as many base documents."""
    from lab.contamination.inject import run_inject

    manifest = run_inject(cfg)
    counts = manifest["counts"]
    console.print(_table(f"{cfg.setting} arm of {cfg.benchmark} (seed {cfg.seed}) -> {cfg.out}",
                         [{"count": k, "value": v} for k, v in counts.items()], ["count", "value"]))
    console.print(f"corpus sha256 {manifest['corpus_sha256']}")


@app.command()
@options_of(AuditConfig)
def audit(cfg: AuditConfig) -> None:
    """Pre-existing overlap between a corpus and a benchmark: exact and near-duplicates."""
    summary = run_audit(cfg.benchmark, list(cfg.split) if cfg.split else None, cfg.against,
                        cfg.corpora_dir, cfg.out, cfg.force, cfg.near, executor=cfg)
    rows = [{"split": name, **block} for name, block in summary["counts"].items()]
    columns = ["split", "samples", "leaked", "leaked_pct", "exact", "near_only",
               "input_exact", "input_leaked", "output_exact", "output_leaked"]
    console.print(_table(f"{cfg.benchmark} vs {summary['against']} "
                         f"({summary['corpus_documents']} documents)", rows, columns))
    if summary["splits_missing"]:
        console.print(f"not audited (not available): {', '.join(summary['splits_missing'])}")
    if cfg.out is not None:
        console.print(f"report: {cfg.out}/report.jsonl  summary: {cfg.out}/summary.json")


@app.command()
@options_of(DecontamConfig)
def decontam(cfg: DecontamConfig) -> None:
    """Decontaminators run over an arm's corpus, judged on its injected samples per dose."""
    from lab.decontam.run import run_decontam

    result = run_decontam(cfg)
    rows = [{**row, "recall": _fmt(row["recall"]), "precision": _fmt(row["precision"])}
            for row in result["rows"]]
    console.print(_table(f"{result['setting']} arm of {result['benchmark']}:{result['split']} "
                         f"({result['documents']} documents, {result['form']} form)", rows,
                         ["method", "dose", "injected_samples", "samples_found", "recall",
                          "flagged_documents", "flagged_injected", "flagged_natural_overlap",
                          "flagged_other", "precision"]))
    console.print(f"rows: {cfg.out}/decontam.csv  time and memory: {cfg.out}/decontam_timing.csv",
                  markup=False, soft_wrap=True)


@app.command()
@options_of(PerturbConfig)
def perturb(cfg: PerturbConfig) -> None:
    """Rename identifiers by sub-token synonyms, one map per record (the study's Table I)."""
    from lab.llm.perturb import run_perturb

    result = run_perturb(**vars(cfg))

    def spread(block: dict[str, float]) -> str:
        return f"{block['avg']:.2f} / {block['std']:.2f} / {block['med']:.1f}"

    def perturbance(count: float, ratio: float) -> str:
        return f"{count:.2f} ({ratio:.2f}%)"

    rows = [{"field": f"{row['field']} ({row['kind']})", "contaminated": spread(row["exp"]),
             "perturbed": spread(row["ctl"]), "perturbance": perturbance(row["count"], row["ratio"]),
             "Table I": row["table_i"] and perturbance(row["table_i"]["count"], row["table_i"]["ratio"])}
            for row in result["fields"]]
    console.print(_table(f"{cfg.input_file} (seed {cfg.seed}): {result['perturbed']}/{result['records']} "
                         f"samples perturbed; tokens avg / std / med, sub-token count",
                         rows, ["field", "contaminated", "perturbed", "perturbance", "Table I"]))
    if result["unperturbed"]:
        console.print("not perturbed: " + ", ".join(
            f"sample {u['index']} ({u['reason']})" for u in result["unperturbed"][:5])
            + (" ..." if len(result["unperturbed"]) > 5 else ""))
    if result["compare"] is not None:
        cmp = result["compare"]
        rows = [{"field": row["field"], "automated": perturbance(row["auto_count"], row["auto_ratio"]),
                 "manual": perturbance(row["manual_count"], row["manual_ratio"]),
                 "Table I": row["table_i"] and perturbance(row["table_i"]["count"], row["table_i"]["ratio"])}
                for row in cmp["fields"]]
        console.print(_table(f"vs {cmp['twin']}", rows, ["field", "automated", "manual", "Table I"]))
        ids = cmp["identifiers"]
        console.print(f"lab token count kept: automated {cmp['auto_keep_lab_tokens']}/{cmp['samples']}, "
                      f"manual {cmp['manual_keep_lab_tokens']}/{cmp['samples']}; renamed identifiers: "
                      f"manual {ids['manual']}, automated {ids['auto']}, both {ids['both']} "
                      f"(tool covers {ids['auto_covers_manual']:.0%} of manual, manual covers "
                      f"{ids['manual_covers_auto']:.0%} of tool)")
    if cfg.out is not None:
        console.print(f"perturbed: {result['out']}  report: {result['report']}")


@app.command()
@options_of(FinetuneConfig)
def finetune(cfg: FinetuneConfig) -> None:
    """Fine-tune a pre-trained model on the task's train split (or keep it: --epochs 0)."""
    from lab.train.finetune import run_finetune

    manifest = run_finetune(cfg)
    write_model_card(cfg.out)  # README.md, from the manifest the stage wrote
    loss = manifest["loss"]
    trained = f"loss {loss['first']:.3f} -> {loss['final']:.3f}" if loss["first"] else "not trained"
    console.print(f"{cfg.out}: {manifest['architecture']} for {cfg.task}, "
                  f"{manifest['data']['train_used']} training samples, {cfg.epochs} epochs, {trained}")


@app.command()
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
    console.print(_table(f"{cfg.task} {cfg.split} ({result['decoding']['mode']})", rows, columns))
    console.print(f"predictions and metrics: {result['out']}")


@app.command()
@options_of(ExportConfig)
def export(cfg: ExportConfig) -> None:
    """Write a model as a folder plain transformers loads, with its model card."""
    from lab.modelcard import export_model

    record = export_model(cfg)
    console.print(f"{record['out']}: {record['architecture']}, {', '.join(record['files'])}",
                  markup=False, highlight=False, soft_wrap=True)
    if "hub" in record:
        console.print(f"pushed to {record['hub']['repo']} ({record['hub']['commit']})")


@app.command()
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
        rows.append({"probe": name, **{k: _fmt(probe_summary[k]) for k in
                                       ("injected", baseline, "gap", "auc")},
                     "p": _fmt(probe_summary["p"], ".2g"),
                     "samples": "/".join(str(probe_summary["samples"][g])
                                         for g in ("injected", baseline))})
    console.print(_table(f"{result['family']} {result['form']} form, {result['samples']} samples "
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


@app.command()
@options_of(DetectConfig)
def detect(cfg: DetectConfig) -> None:
    """Contamination detectors judged on known membership: AUC and TPR at low FPR."""
    from lab.detect.run import OPTION_USERS, run_detect

    refuse_unused_options(cfg, OPTION_USERS, cfg.detectors, "--detectors")
    result = run_detect(cfg)
    rows = [{"detector": name, "auc": _fmt(m["auc"]), "tpr@1%": _fmt(m["tpr_at_1pct_fpr"]),
             "tpr@5%": _fmt(m["tpr_at_5pct_fpr"]), "p": _fmt(m["p"], ".2g"),
             "members": _fmt(m["member_mean"], ".4g"), "non-members": _fmt(m["nonmember_mean"], ".4g"),
             "samples": f"{m['members']}/{m['nonmembers']}"}
            for name, m in result["detectors"].items()]
    audited = "audited" if result["membership"] == "unknown" else "injected"
    console.print(_table(f"{result['described']}, {result['form']} form: {audited} vs "
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
        aucs = ", ".join(f"{name} {_fmt(m['auc'])}" for name, m in shift["detectors"].items())
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


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


@app.command()
def study(
    recipe: Path = typer.Argument(..., help="Recipe YAML (recipes/...)."),
    out: Optional[Path] = typer.Option(None, help="Study directory (default runs/NAME)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override: section.key=value."),
    dry_run: bool = typer.Option(False, help="Print the grid, what is done and the estimated cost."),
    executor: str = typer.Option(_default(run_study, "executor"),
                                 help="local, slurm (submitit) or submitit-local."),
    workers: Optional[int] = typer.Option(None, help="Stages at a time (local default: cores / "
                                                     "threads; slurm: 64 jobs)."),
    threads: Optional[int] = typer.Option(None, help="torch threads of every stage, fixed for the "
                                                     "study (= --set resources.threads=N; default: "
                                                     "the cores, recorded at the study's start)."),
    slurm: Optional[List[str]] = typer.Option(None, help="submitit parameter for --executor slurm, "
                                                         "key=value (slurm_partition=gpu, gpus_per_node=1)."),
    seeds: Optional[str] = typer.Option(None, help="Run only these of the recipe's seeds "
                                                   "(2,3): a shard, whose stages keep the whole "
                                                   "study's keys; `lab merge` joins shards run "
                                                   "apart into one study."),
    report: bool = typer.Option(True, help="Print the report's table and figure path at the end."),
    allow_underpowered: bool = typer.Option(
        False, "--allow-underpowered", help="Run a study whose primary tests can never reach "
                                            "alpha with its seeds (refused otherwise)."),
    smoke: bool = typer.Option(
        False, help="The recipe's whole shape (every arm, stage kind, swept value, question and "
                    "the report) on toy sizes, on a CPU, in minutes: what to run before sending a "
                    "study to a cluster. Only sizes shrink (printed; lab.study.smoke); the study "
                    "is NAME-smoke, marked so in its folder and tables."),
    corpora: Optional[Path] = CorporaOption,
) -> None:
    """Run a whole contamination study; finished stages are reused, interrupted ones resumed."""
    from lab.study.recipe import load_recipe
    from lab.study.runner import check_study_folder, run_study
    from lab.study.scheduler import check_executor

    overrides = list(set_ or []) + ([f"resources.threads={threads}"] if threads is not None else [])
    parsed = load_recipe(recipe, overrides)
    if smoke:
        from lab.study.smoke import smoke_lines, smoke_recipe, smoke_record

        parsed = smoke_recipe(parsed, corpora)
        console.print("\n".join(smoke_lines()), markup=False, highlight=False, soft_wrap=True)
    smoked = smoke_record() if smoke else None
    folder = out or Path("runs") / parsed.name
    check_executor(executor, workers)
    slurm_parameters = _parse_pairs(slurm or [], "--slurm")
    shard = _parse_seeds(seeds)
    check_study_folder(folder, corpora)
    if dry_run:
        plan = run_study(parsed, folder, corpora, dry_run=True, executor=executor, workers=workers,
                         seeds=shard, allow_underpowered=allow_underpowered, smoke=smoked)
        from lab.study.cost import gpu_assumptions

        rows = [{"stage": r["kind"], "count": r["stages"], "done": r["done"],
                 "tokens": f"{r['tokens'] / 1e6:,.2f} M", "FLOPs": f"{r['flops']:.2e}",
                 "est. CPU time": _duration(r["seconds"]),
                 **{f"{gpu} GPU-h": f"{hours:,.1f}" for gpu, hours in r["gpu_hours"].items()}}
                for r in plan["estimate"]]
        total = sum(r["seconds"] for r in plan["estimate"])
        gpus = {gpu: sum(r["gpu_hours"][gpu] for r in plan["estimate"])
                for gpu in plan["estimate"][0]["gpu_hours"]}
        console.print(_table(f"{parsed.name}: {plan['stages']} stages, {plan['done']} done -> {folder}",
                             rows, list(rows[0])))
        console.print(f"estimated: {_duration(total)} on a 2-core CPU with one worker "
                      f"({sum(r['flops'] for r in plan['estimate']):.2e} FLOPs); "
                      + ", ".join(f"{hours:,.1f} {gpu} GPU-hours" for gpu, hours in gpus.items()),
                      markup=False, soft_wrap=True)
        console.print(gpu_assumptions(), markup=False, soft_wrap=True)
        if smoke:  # a smoke run's seeds are not the study's
            console.print("power: the real study's question (its --dry-run without --smoke)",
                          markup=False)
        else:
            _print_power(plan["power"], parsed.statistics.descriptive)
        for warning in plan["warnings"]:
            console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
        if plan["refusal"]:  # the line the real run refuses with, and its exit code
            raise LabError(plan["refusal"])
        return
    from lab.study.runner import check_start, resume_corpora

    # Before the progress display opens; the dry run's checks (run_study) are these.
    for warning in check_start(parsed, folder, corpora, executor, shard, allow_underpowered,
                               smoke):
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    again = ["lab", "study", str(recipe), "--out", str(folder)]
    again += ["--executor", executor] if executor != "local" else []
    for option, values in (("--set", set_ or []), ("--slurm", slurm or []),
                           ("--workers", [workers] if workers else []),
                           ("--threads", [threads] if threads else []),
                           ("--seeds", [seeds] if seeds else []),
                           ("--corpora", [where] if (where := resume_corpora(corpora)) else [])):
        again += [part for value in values for part in (option, str(value))]
    again += ["--smoke"] if smoke else ["--allow-underpowered"] if allow_underpowered else []
    _exit_with_a_resume_line_on_signals(again)
    summary = _run_with_progress(parsed, folder, corpora, executor, workers, slurm_parameters,
                                 shard, smoked)
    took = summary["seconds"]
    console.print(f"{parsed.name}: {summary['stages']} stages ({len(summary['ran'])} run now in "
                  f"{_duration(took['this_run'])}; all {took['stages_timed']} timed stages "
                  f"{_duration(took['all_stages'])}); results {summary['results']}, per-sample "
                  f"{summary['samples']}")
    if report:
        from lab.analysis.report import run_report

        result = run_report(folder)  # the recipe's convention and alpha
        console.print(result["console"], markup=False, highlight=False, soft_wrap=True)
        console.print(f"figure: {', '.join(str(p) for p in result['figure'])}", markup=False,
                      highlight=False, soft_wrap=True)


def _print_power(plan: dict[str, Any], descriptive: bool) -> None:
    """The dry run's statistics plan: per primary test, the smallest p the planned seeds can
    give, alone and after Holm over the family (whether it can reach alpha at all, which is not
    power), then the family's simulated power at the recipe's declared effect (per test and
    the whole family), and its sensitivity to the shape and correlation of the seed effects."""
    rows = [{"question": r["contrast"].question, "model": r["contrast"].model,
             "E": (str(r["contrast"].epochs) if r["contrast"].epochs_to is None
                   else f"{r['contrast'].epochs} -> {r['contrast'].epochs_to}"),
             "contrast": r["contrast"].label(), "unit": r["unit"],
             "smallest p": f"{r['floor']:.3g}", "after Holm": f"{r['holm_floor']:.3g}"}
            for r in plan["tests"]]
    if not rows:
        console.print("primary tests: none declared (statistics.primary: [])", markup=False)
        return
    reach = "none can reach" if len(plan["unreachable"]) == len(rows) else (
        f"{len(plan['unreachable'])} cannot reach" if plan["unreachable"] else "all can reach")
    console.print(_table(f"primary tests ({plan['alternative']}, {plan['seeds']} seeds, Holm over "
                         f"{len(rows)}): {reach} alpha {plan['alpha']:g}"
                         + (" (descriptive study)" if descriptive else ""), rows, list(rows[0])))
    if "power" in plan:
        from lab.analysis.questions import power_line, sensitivity_line

        console.print(power_line(plan["power"]), markup=False, highlight=False, soft_wrap=True)
        console.print(sensitivity_line(plan["power"]), markup=False, highlight=False,
                      soft_wrap=True)


def _exit_with_a_resume_line_on_signals(command: List[str]) -> None:
    """Ctrl-C or SIGTERM (a scheduler's cancel) of `lab study`: one line saying how to resume,
    then an exit (130 / 143) without waiting for running stages. Safe: finished stages are
    complete folders, an interrupted pre-training resumes from its checkpoint, and the next run
    removes what the killed workers left."""
    import multiprocessing
    import shlex
    import signal

    again = " ".join(shlex.quote(part) for part in command)

    def stop(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one line, however often it is pressed
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for worker in multiprocessing.active_children():
            worker.kill()  # a stage cut short is redone (or resumed) by the next run
        from lab.study.execution import console_stderr

        os.write(console_stderr(), f"lab: interrupted; resume with: {again}\n".encode())
        raise SystemExit(128 + signum)  # unwinds: temporary outputs of this process are removed

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _parse_seeds(text: Optional[str]) -> Optional[List[int]]:
    """--seeds 2,3 as [2, 3]; None when not given."""
    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise LabError(f"--seeds {text}: expected seeds separated by commas, e.g. 2,3") from None
    return sorted(set(seeds))


def _parse_pairs(pairs: List[str], option: str) -> dict[str, Any]:
    import yaml

    parsed: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise LabError(f"{option} {pair}: expected key=value")
        key, value = pair.split("=", 1)
        try:
            parsed[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = str(exc).strip().splitlines()[0][:80]
            raise LabError(f"{option} {pair[:80]}: value is not valid YAML ({problem})") from None
    return parsed


@contextlib.contextmanager
def _terminal() -> Iterator[Console]:
    """A console on the terminal as it is now, for the progress display: while a stage runs in
    this process, descriptors 1 and 2 and sys.stdout/stderr go to the stage's log."""
    try:
        handle = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        yield Console(file=sys.stdout, width=200)  # a test's captured stream has no descriptor
        return
    try:
        yield Console(file=handle, width=None if handle.isatty() else 200)
    finally:
        handle.close()


def _run_with_progress(recipe: Any, folder: Path, corpora: Optional[Path], executor: str,
                       workers: Optional[int], slurm: dict[str, Any],
                       seeds: Optional[List[int]] = None,
                       smoke: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """lab study with a rich progress bar over stages, a line per finished stage with its wall
    time, and each distinct warning of the stages' logs once."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lab.study.execution import stage_log
    from lab.study.grid import describe, expand
    from lab.study.runner import run_study

    stages = expand(recipe, seeds)
    done = sum(s.done(folder) for s in stages)
    with _terminal() as terminal, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=terminal, redirect_stdout=False,
            redirect_stderr=False) as bar:
        task = bar.add_task(recipe.name, total=len(stages), completed=done)
        running: list[str] = []

        def on_event(event: str, stage: Any, detail: Any = None) -> None:
            if event == "start":
                running.append(describe(stage))
            elif event == "warning":
                log = stage_log(stage, folder).relative_to(folder)
                bar.console.print(f"warning (first in {log}): {detail}", markup=False,
                                  highlight=False, soft_wrap=True)
                return
            else:  # "end", or OTHER_RUNNER: a stage this runner did not run
                running.remove(describe(stage))
                bar.console.print(f"done {describe(stage)} in {_duration(detail or 0)}"
                                  if event == "end" else f"{event}: {describe(stage)}")
                bar.advance(task)
            bar.update(task, description=f"{recipe.name}: {', '.join(running) or 'collecting'}")

        return run_study(recipe, folder, corpora, executor=executor, workers=workers, slurm=slurm,
                         on_event=on_event, ready_checked=True, seeds=seeds, smoke=smoke)


from lab.stats import CONVENTIONS as _CONVENTIONS  # noqa: E402 (the one table)

ConventionOption = typer.Option(
    None, help=", ".join(_CONVENTIONS) + " for the secondary tables (default: the study's recipe; "
               "the primary table always keeps the recipe's).")
AlphaOption = typer.Option(None, help="Significance level of the secondary tables (default: the "
                                      "study's recipe; the primary table always keeps the recipe's).")
StudyArgument = typer.Argument(..., help="A study directory made by lab study or lab merge; tables "
                                         "that are not what its stages give (tables.json) are "
                                         "refused, not rebuilt.")


@app.command()
def stats(
    study: Path = StudyArgument,
    convention: Optional[str] = ConventionOption,
    alpha: Optional[float] = AlphaOption,
    fmt: str = typer.Option("table", "--format", help="table (rich), md, csv or json."),
) -> None:
    """Per cell: every arm over seeds, each arm vs the control, power, injected vs held-out."""
    from lab.analysis.report import run_stats

    if fmt not in ("table", "md", "csv", "json"):
        raise LabError(f"--format {fmt}: choose from table, md, csv, json")
    result = run_stats(study, convention, alpha)
    if fmt in ("table", "md"):  # the study's tests first
        console.print(result["primary_md"], markup=False, highlight=False, soft_wrap=True)
    if fmt == "table":
        rows = [dict(zip(result["header"], row)) for row in result["rows"]]
        console.print(_table(result["title"], rows, result["header"]))
        console.print(result["note"], markup=False, highlight=False)
    elif fmt == "json" and result["unwritten"]:
        raise LabError(f"{result['unwritten']} (--format json prints the stats.json it writes)")
    else:  # plain text for files and pipes: never wrapped or coloured
        sys.stdout.write(result["json"].read_text(encoding="utf-8") if fmt == "json"
                         else result[fmt])
    if fmt in ("table", "md"):  # a dose ladder's levels, per metric
        for metric, rendered in result["dose_tables"].items():
            console.print(f"\ndose-response, {metric}:\n{rendered['md']}", markup=False,
                          highlight=False, soft_wrap=True)
        for metric, rendered in result["timing_tables"].items():  # timing levels
            console.print(f"\ninjection timing, {metric}:\n{rendered}", markup=False,
                          highlight=False, soft_wrap=True)
    if fmt != "json":  # json stays parseable; stats.json is in the same place every time
        console.print(f"stats: {result['json']}" if result["json"] else
                      f"stats.json not written, the tables above are whole: {result['unwritten']}",
                      markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(
    study: Path = StudyArgument,
    convention: Optional[str] = ConventionOption,
    alpha: Optional[float] = AlphaOption,
    metric: str = typer.Option(_default(run_report, "metric"), help="Metric of the decay figure."),
    html: bool = typer.Option(_default(run_report, "html"),
                              help="Also write report/report.html: one self-contained page with "
                                   "the tables, figures, loss curves, probes and a sample browser."),
) -> None:
    """Paper-style tables (Markdown, LaTeX, CSV), stats.json, the contamination-decay figure and
    the HTML report."""
    folder = Path(study) / "report"
    made_here = not folder.exists()
    try:
        result = run_report(study, convention, metric, alpha, html)
    except BaseException:  # a full disk: no empty report/ left behind (its files are each whole)
        if made_here and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise
    # The primary table and where its legend and the full tables are (soft_wrap: Markdown rows
    # and paths wider than the terminal stay one line each), the figure last: what to open next.
    console.print(result["console"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"figure: {', '.join(str(p) for p in result['figure'])}", markup=False,
                  highlight=False, soft_wrap=True)


@app.command()
def merge(
    sources: List[Path] = typer.Argument(..., help="Study folders of one recipe: shards run "
                                                   "apart (lab study --seeds), killed or "
                                                   "running studies, or earlier merges."),
    out: Path = typer.Option(..., help="The merged study folder (new, or an earlier merge "
                                       "with --force)."),
    seeds: Optional[str] = typer.Option(None, help="Only these seeds (0,1): e.g. a running "
                                                   "study's finished ones."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier merge at --out."),
    plan_from: Optional[Path] = typer.Option(None, "--plan-from", help="The source whose "
                                             "analysis (statistics section) the merged study "
                                             "keeps where the sources' differ; recorded."),
) -> None:
    """One study from shards of it: the union of their finished cells, which `lab stats` and
    `lab report` read; a stage found twice must give the same numbers."""
    from lab.study.merge import merge_studies

    record = merge_studies(sources, out, _parse_seeds(seeds), force, plan_from)
    for given in record["sources"]:
        console.print(f"{given['source']} ({given['from']}): seeds {given['seeds']}, "
                      f"{given['evaluations']} evaluations", markup=False, highlight=False,
                      soft_wrap=True)
    console.print(f"{record['recipe']}: seeds {record['seeds']}, {record['evaluations']} "
                  f"evaluations -> {record['out']} (lab report {record['out']})",
                  markup=False, highlight=False, soft_wrap=True)


tokenizer_app = typer.Typer(help="The study's shared BPE tokenizer.", no_args_is_help=True)
app.add_typer(tokenizer_app, name="tokenizer")


@tokenizer_app.command("train")
@options_of(TokenizerConfig)
def tokenizer_train(cfg: TokenizerConfig) -> None:
    """Train the byte-level BPE tokenizer on the control corpus plus benchmark train splits."""
    from lab.tokenizer import run_tokenizer

    manifest = run_tokenizer(cfg)
    console.print(f"tokenizer: {cfg.out} (vocabulary {manifest['vocab_size']}, "
                  f"sha256 {manifest['tokenizer_sha256'][:16]})")


@app.command()
@options_of(PretrainConfig)
def pretrain(cfg: PretrainConfig) -> None:
    """Pre-train RoBERTa or GPT-2 from scratch on one arm's corpus."""
    from lab.train.pretrain import run_pretrain

    result = run_pretrain(cfg)
    if cfg.dry_run:
        params = result["parameters"]
        console.print(f"{result['model']} {result['preset']}: {params['total']:,} parameters "
                      f"({params['non_embedding']:,} non-embedding), vocabulary "
                      f"{result['vocab_size']}, {result['tokens_per_step']:,} tokens per step")
        return
    if result.get("kind") == "lab-pretrained":  # rank 0, whose folder is complete
        write_model_card(cfg.out)  # README.md, from the manifest the stage wrote
        loss = result["loss"]
        console.print(f"{cfg.out}: {result['steps']} steps, loss {loss['first']:.3f} -> "
                      f"{loss['final']:.3f}, {result['useful_tokens_per_second']:,.0f} useful "
                      f"tokens/s, padding {result['packing']['padding_fraction']:.1%}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A rank of a multi-process launch, its work written and its process group left: end
        # here. Interpreter shutdown can still abort it on a loaded machine ("terminate called
        # without an active exception" from a communication thread of DeepSpeed ZeRO-3), which
        # fails the whole launch after the model was saved.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@app.command("score")
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
    console.print(_table(f"{result['samples']} samples", rows, ["metric", "score"]))
    if out is not None:
        console.print(f"scores: {out}")


@app.command()
@options_of(BaselineConfig)
def baseline(cfg: BaselineConfig) -> None:
    """Trivial baselines of a task (naive copy, BM25 retrieval), scored like a model."""
    from lab.eval.baselines import run_baseline

    result = run_baseline(cfg)
    metrics = list(next(iter(result["baselines"].values())))
    rows = [{"baseline": name, **{m: f"{v:.2f}" for m, v in scores.items()}}
            for name, scores in result["baselines"].items()]
    console.print(_table(f"{result['benchmark']} {result['split']}: {result['samples']} samples "
                         f"(retrieval from {result['retrieval_pool']['train_used']} "
                         f"{result['retrieval_pool']['train_split']} samples)",
                         rows, ["baseline", *metrics]))
    if cfg.out is not None:
        console.print(f"scores: {cfg.out}")


@app.command("llm-eval")
@options_of(LlmEvalConfig)
def llm_eval(cfg: LlmEvalConfig) -> None:
    """The study's LLM arm: one-shot prompts on a contaminated set and its perturbed twin, BLEU and
    METEOR over repetitions, Mann-Whitney U between the two sets."""
    from lab.llm.llm_eval import run_llm_eval

    result = run_llm_eval(**vars(cfg))
    used = result["data"]["contaminated"]["used"]
    console.print(_table(f"{result['task_label']}: {used} pairs, {cfg.repetitions} repetitions",
                         result["rows"], ["model", "task", "metric", "experimental", "control", "p"]))
    console.print(result["note"], markup=False, highlight=False, soft_wrap=True)
    if cfg.out is not None:
        console.print(f"generations, results and table: {result['out']}", markup=False,
                      highlight=False, soft_wrap=True)


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell")
COMPLETE_VARIABLE = "_LAB_COMPLETE"  # set by the completion script when the shell asks


@app.command()
def completion(shell: str = typer.Argument(..., help=", ".join(COMPLETION_SHELLS) + ".")) -> None:
    """Print the shell's completion script (bash: eval "$(lab completion bash)" in ~/.bashrc)."""
    from typer.completion import get_completion_script

    if shell not in COMPLETION_SHELLS:
        raise LabError(f"lab completion {shell}: unknown shell; choose from "
                       f"{', '.join(COMPLETION_SHELLS)}")
    # The script asks `lab` itself for the candidates (_LAB_COMPLETE=complete_SHELL lab ...),
    # which typer answers before any command runs.
    print(get_completion_script(prog_name="lab", complete_var=COMPLETE_VARIABLE, shell=shell))


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: user errors become one line on stderr and exit code 2."""
    if os.environ.get("LAB_DIE_WITH_PARENT") == "1":
        # A rank started by a study's launcher: die with the launcher (its runner's child).
        from lab.study.execution import die_with_parent

        die_with_parent()
    if COMPLETE_VARIABLE in os.environ:
        from typer.completion import completion_init

        completion_init()  # typer registers its shells' answers only for add_completion apps
    try:
        result = app(args=argv, standalone_mode=False, complete_var=COMPLETE_VARIABLE)
    except LabError as exc:
        _fail(str(exc))
    except OSError as exc:
        # The environment's faults (disk full, a read-only or immutable folder, --out under a
        # file): the file and the reason say it all; LAB_DEBUG=1 keeps the traceback.
        if os.environ.get("LAB_DEBUG") == "1":
            raise
        where = exc.filename if exc.filename is not None else type(exc).__name__
        _fail(f"{where}: {exc.strerror or exc}")
    except Exception as exc:
        # Usage errors of click (or typer's vendored click) carry exit_code 2 and a message;
        # matched by shape so the lab works with either.
        if getattr(exc, "exit_code", None) == 2 and hasattr(exc, "format_message"):
            if type(exc).__name__ == "NoArgsIsHelpError":
                sys.exit(0)
            _fail(exc.format_message())
        if type(exc).__name__ == "Abort":
            _fail("aborted")
        raise
    sys.exit(result if isinstance(result, int) else 0)


def _fail(message: str) -> None:
    print(f"lab: error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
