"""The `lab` command line: parses options and calls one entry function per command."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from lab.common import LabError

app = typer.Typer(
    help="Contamination-injection pre-training lab for code language models.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
corpora_app = typer.Typer(help="Datasets the lab can read, and where it finds them.",
                          no_args_is_help=True)
app.add_typer(corpora_app, name="corpora")
# Piped output (CI logs, files) gets wide tables instead of truncated cells.
console = Console(width=None if sys.stdout.isatty() else 200)

CorporaOption = typer.Option(
    None, "--corpora", help="Folder holding the datasets (else $LAB_CORPORA, ./corpora, the hub)."
)


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

    console.print(_table(f"{name}: checksums", verify_dataset(name, corpora),
                         ["split", "file", "status"]))


@app.command()
def inject(
    benchmark: str = typer.Option(..., help="codetrans or concode (or their -paper subsets)."),
    setting: str = typer.Option(..., help="control, input-only, output-only, unpaired, paired."),
    seed: int = typer.Option(..., help="Seeds every random choice of the arm."),
    out: Path = typer.Option(..., help="Output directory (must not exist unless --force)."),
    split: str = typer.Option("test", help="Benchmark split whose samples are injected."),
    base: str = typer.Option("csn-java", help="Base pre-training corpus."),
    base_splits: str = typer.Option("train,valid,test", help="Comma-separated base splits."),
    limit: Optional[int] = typer.Option(None, help="Seeded subset of N base documents."),
    repeat: int = typer.Option(1, help="Inject every document K times."),
    fraction: Optional[float] = typer.Option(None, help="Inject a seeded fraction of the samples."),
    test_ids: Optional[Path] = typer.Option(None, help="File of sample ids to inject."),
    decontaminate: bool = typer.Option(False, help="First drop base near-duplicates of the test set."),
    force: bool = typer.Option(False, help="Replace an existing output directory."),
    corpora: Optional[Path] = CorporaOption,
) -> None:
    """Build one arm's pre-training corpus: inject test samples, remove as many base documents."""
    from lab.contamination.inject import InjectConfig, run_inject

    cfg = InjectConfig(
        benchmark=benchmark, setting=setting, seed=seed, out=out, split=split, base=base,
        base_splits=tuple(s for s in base_splits.split(",") if s), limit=limit, repeat=repeat,
        fraction=fraction, test_ids=test_ids, decontaminate=decontaminate, force=force,
        corpora_dir=corpora,
    )
    manifest = run_inject(cfg)
    counts = manifest["counts"]
    console.print(_table(f"{setting} arm of {benchmark} (seed {seed}) -> {out}",
                         [{"count": k, "value": v} for k, v in counts.items()], ["count", "value"]))
    console.print(f"corpus sha256 {manifest['corpus_sha256']}")


@app.command()
def audit(
    benchmark: str = typer.Option(..., help="codetrans or concode (or their -paper subsets)."),
    split: Optional[List[str]] = typer.Option(None, help="Split(s) to audit (default: all)."),
    against: str = typer.Option(
        "csn-java", help="csn-java[:split], BENCHMARK:SPLIT, or a lab corpus directory."),
    out: Optional[Path] = typer.Option(None, help="Write report.jsonl and summary.json here."),
    force: bool = typer.Option(False, help="Replace an existing output directory."),
    near: bool = typer.Option(True, help="Also look for near-duplicates (not only exact)."),
    corpora: Optional[Path] = CorporaOption,
) -> None:
    """Pre-existing overlap between a corpus and a benchmark: exact and near-duplicates."""
    from lab.contamination.audit import run_audit

    summary = run_audit(benchmark, split or None, against, corpora, out, force, near)
    rows = [{"split": name, **block} for name, block in summary["counts"].items()]
    columns = ["split", "samples", "leaked", "leaked_pct", "exact", "near_only",
               "input_exact", "input_leaked", "output_exact", "output_leaked"]
    console.print(_table(f"{benchmark} vs {summary['against']} "
                         f"({summary['corpus_documents']} documents)", rows, columns))
    if summary["splits_missing"]:
        console.print(f"not audited (not available): {', '.join(summary['splits_missing'])}")
    if out is not None:
        console.print(f"report: {out}/report.jsonl  summary: {out}/summary.json")


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: user errors become one line on stderr and exit code 2."""
    try:
        result = app(args=argv, standalone_mode=False)
    except LabError as exc:
        _fail(str(exc))
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
