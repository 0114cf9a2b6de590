"""`lab`'s data commands: the corpora it reads or extracts (lab corpora), an arm's corpus (lab
inject), the overlap already in a corpus (lab audit), the decontaminators judged on an arm (lab
decontam), the identifier renamer (lab perturb) and the shared tokenizer (lab tokenizer)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lab.common import EXTRACT_MANIFEST
from lab.cli.shared import CorporaOption, console, formatted, options_of, rich_table
from lab.contamination.audit import AuditConfig, run_audit
from lab.contamination.inject import InjectConfig  # the configs declare their commands' options
from lab.corpora.extract import ExtractConfig
from lab.decontam.run import DecontamConfig
from lab.llm.perturb import PerturbConfig
from lab.tokenizer import TokenizerConfig

corpora_app = typer.Typer(help="Datasets the lab can read, and where it finds them.",
                          no_args_is_help=True)
tokenizer_app = typer.Typer(help="The study's shared BPE tokenizer.", no_args_is_help=True)


@corpora_app.command("list")
def corpora_list(corpora: Optional[Path] = CorporaOption) -> None:
    """Every dataset and split, and where it would be read from."""
    from lab.corpora import dataset_table

    console.print(rich_table("datasets", dataset_table(corpora),
                             ["dataset", "kind", "split", "where"]))


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
    console.print(rich_table(f"{name}: tokens per record", rows, columns + ["where"]))


@corpora_app.command("verify")
def corpora_verify(name: str = typer.Argument(..., help="csn-java, codetrans, concode, ..."),
                   corpora: Optional[Path] = CorporaOption) -> None:
    """Check local files against the checksums of the published version (corpora/NAME.json)."""
    from lab.corpora import verify_dataset

    rows = verify_dataset(name, corpora)
    console.print(rich_table(f"{name}: checksums", rows, ["split", "file", "status"]))


@corpora_app.command("extract")
@options_of(ExtractConfig)
def corpora_extract(cfg: ExtractConfig) -> None:
    """A CodeSearchNet-style corpus (CSN's layout and fields) from a folder of repositories, by
    the shared CSN Java corpus's rules (docs/data.md)."""
    from lab.corpora.extract import run_extract

    manifest = run_extract(cfg)
    console.print(rich_table(f"{cfg.language}: {len(manifest['repositories'])} repositories",
                             [{"split": s, **block} for s, block in manifest["splits"].items()],
                             ["split", "records", "repositories"]))
    removed = {**manifest["files"], **manifest["filters"]}
    console.print("removed: " + ", ".join(f"{k} {v}" for k, v in removed.items() if k != "files")
                  + f"\n{manifest['files']['files']} files, {manifest['seconds']} s; corpus and "
                  f"{EXTRACT_MANIFEST}: {cfg.out}", markup=False, soft_wrap=True)


@options_of(InjectConfig)
def inject(cfg: InjectConfig) -> None:
    """Build one arm's pre-training corpus: inject test samples, remove as many base documents."""
    from lab.contamination.inject import run_inject

    manifest = run_inject(cfg)
    counts = manifest["counts"]
    console.print(rich_table(f"{cfg.setting} arm of {cfg.benchmark} (seed {cfg.seed}) -> {cfg.out}",
                         [{"count": k, "value": v} for k, v in counts.items()], ["count", "value"]))
    console.print(f"corpus sha256 {manifest['corpus_sha256']}")


@options_of(AuditConfig)
def audit(cfg: AuditConfig) -> None:
    """Pre-existing overlap between a corpus and a benchmark: exact and near-duplicates."""
    summary = run_audit(cfg.benchmark, list(cfg.split) if cfg.split else None, cfg.against,
                        cfg.corpora_dir, cfg.out, cfg.force, cfg.near, executor=cfg)
    rows = [{"split": name, **block} for name, block in summary["counts"].items()]
    columns = ["split", "samples", "leaked", "leaked_pct", "exact", "near_only",
               "input_exact", "input_leaked", "output_exact", "output_leaked"]
    console.print(rich_table(f"{cfg.benchmark} vs {summary['against']} "
                         f"({summary['corpus_documents']} documents)", rows, columns))
    if summary["splits_missing"]:
        console.print(f"not audited (not available): {', '.join(summary['splits_missing'])}")
    if cfg.out is not None:
        console.print(f"report: {cfg.out}/report.jsonl  summary: {cfg.out}/summary.json")


@options_of(DecontamConfig)
def decontam(cfg: DecontamConfig) -> None:
    """Decontaminators run over an arm's corpus, judged on its injected samples per dose (or,
    with --write-clean, a corpus without ground truth cleaned)."""
    from lab.decontam.run import run_decontam

    result = run_decontam(cfg)
    if cfg.write_clean is not None:
        console.print(rich_table(
            f"{result['benchmark']}:{result['split']}: kept {result['kept']} of "
            f"{result['documents']}",
            [{"method": m, "flagged": n} for m, n in result["flagged_by_method"].items()],
            ["method", "flagged"]))
        console.print(f"kept documents and flagged.csv: {cfg.write_clean} ({result['seconds']} s, "
                      f"peak rss {result['peak_rss_mib']} MiB)", markup=False, soft_wrap=True)
        return
    rows = [{**row, "recall": formatted(row["recall"]), "precision": formatted(row["precision"])}
            for row in result["rows"]]
    console.print(rich_table(f"{result['setting']} arm of {result['benchmark']}:{result['split']} "
                         f"({result['documents']} documents, {result['form']} form)", rows,
                         ["method", "dose", "injected_samples", "samples_found", "recall",
                          "flagged_documents", "flagged_injected", "flagged_natural_overlap",
                          "flagged_other", "precision"]))
    console.print(f"rows: {cfg.out}/decontam.csv  time and memory: {cfg.out}/decontam_timing.csv",
                  markup=False, soft_wrap=True)


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
    console.print(rich_table(f"{cfg.input_file} (seed {cfg.seed}): {result['perturbed']}/{result['records']} "
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
        console.print(rich_table(f"vs {cmp['twin']}", rows, ["field", "automated", "manual", "Table I"]))
        ids = cmp["identifiers"]
        console.print(f"lab token count kept: automated {cmp['auto_keep_lab_tokens']}/{cmp['samples']}, "
                      f"manual {cmp['manual_keep_lab_tokens']}/{cmp['samples']}; renamed identifiers: "
                      f"manual {ids['manual']}, automated {ids['auto']}, both {ids['both']} "
                      f"(tool covers {ids['auto_covers_manual']:.0%} of manual, manual covers "
                      f"{ids['manual_covers_auto']:.0%} of tool)")
    if cfg.out is not None:
        console.print(f"perturbed: {result['out']}  report: {result['report']}")

@tokenizer_app.command("train")
@options_of(TokenizerConfig)
def tokenizer_train(cfg: TokenizerConfig) -> None:
    """Train the byte-level BPE tokenizer on the control corpus plus benchmark train splits."""
    from lab.tokenizer import run_tokenizer

    manifest = run_tokenizer(cfg)
    console.print(f"tokenizer: {cfg.out} (vocabulary {manifest['vocab_size']}, "
                  f"sha256 {manifest['tokenizer_sha256'][:16]})")
