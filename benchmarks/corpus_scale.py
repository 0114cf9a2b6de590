"""Corpus side at scale: wall time and peak memory of `lab inject --format 2` and `lab audit` on
synthetic CSN-like corpora 1x, 10x and 30x the CSN-format corpus, with 1 and N local tasks.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 \
        python benchmarks/corpus_scale.py --work /tmp/scale --sizes 1,10,30 [--repeats 3]
    python benchmarks/corpus_scale.py --work /tmp/scale --report   # table + figure only

Synthetic corpora: copy 0 is the CSN-format corpus itself; copy c >= 1 is every record with a
seeded choice of its lower-case identifiers renamed (`count` -> `countNode`, the same rename in
`code`, `original_string`, `code_tokens` and `func_name`), so the copies keep the corpus's
near-duplicate structure without being exact duplicates. Size K holds copies 0..K-1, as CSN's
own sharded layout (4K train files, K valid, K test), beside a link to the CodeTrans files.

Each measurement is the real CLI in a fresh process; peak memory is the largest of the
process's own peak and its largest worker's (datatrove's tasks are child processes). Results
are appended to WORK/results.jsonl (a rerun adds repeats), and the report uses medians.
Targets (issue 19): peak memory at 30x within 1.5x of 1x; time linear in size; N tasks
>= 1.7x faster than one. Baseline for memory: today's in-memory path (`--format 1`) at 1x.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import statistics
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import measure  # noqa: E402  (the sibling benchmark's fresh-process runner)

from lab.codetokens import KEYWORDS  # noqa: E402

SUFFIXES = ("Node", "Value", "Item", "Data", "Ref", "Next", "Buf", "Ctx", "Count", "Entry")
RENAME_PERCENT = 40
IDENTIFIER = re.compile(r"\b[a-z][A-Za-z0-9_]*\b")
CSN_SPLITS = ("train", "valid", "test")


def _choice(seed: int, copy: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{copy}:{name}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def renamed_record(record: dict, seed: int, copy: int) -> dict:
    renames: dict[str, str] = {}

    def rename(name: str) -> str:
        if name not in renames:
            value = _choice(seed, copy, name)
            renames[name] = (name if name in KEYWORDS or value % 100 >= RENAME_PERCENT
                             else name + SUFFIXES[(value // 100) % len(SUFFIXES)])
        return renames[name]

    code = IDENTIFIER.sub(lambda m: rename(m.group(0)), record["code"])
    out = dict(record)
    out["code"] = code
    out["original_string"] = IDENTIFIER.sub(lambda m: rename(m.group(0)),
                                            record.get("original_string", ""))
    out["code_tokens"] = [renames.get(t, t) for t in record.get("code_tokens", [])]
    out["func_name"] = ".".join(renames.get(p, p) for p in record.get("func_name", "").split("."))
    return out


def _write_copy(job: tuple[str, str, int, int]) -> str:
    source, target, seed, copy = job
    tmp = target + ".tmp"
    with gzip.open(source, "rt", encoding="utf-8") as inp, \
            gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as out:
        for line in inp:
            if line.strip():
                out.write(json.dumps(renamed_record(json.loads(line), seed, copy)) + "\n")
    os.replace(tmp, target)
    return target


def build_corpora(corpora: Path, work: Path, sizes: list[int], seed: int) -> dict[int, Path]:
    """WORK/size-Kx holding copies 0..K-1 in CSN's layout (files shared between sizes)."""
    source_root = corpora / "codesearchnet-java" / "java" / "final" / "jsonl"
    originals = {split: sorted(source_root.joinpath(split).glob(f"java_{split}_*.jsonl.gz"),
                               key=lambda p: int(re.search(r"_(\d+)\.jsonl", p.name).group(1)))
                 for split in CSN_SPLITS}
    copies = work / "copies"
    copies.mkdir(parents=True, exist_ok=True)
    jobs = []
    for copy in range(1, max(sizes)):
        for split in CSN_SPLITS:
            for i, path in enumerate(originals[split]):
                target = copies / f"seed{seed}-copy{copy}-{split}-{i}.jsonl.gz"
                if not target.is_file():
                    jobs.append((str(path), str(target), seed, copy))
    if jobs:
        print(f"writing {len(jobs)} renamed files under {copies}", file=sys.stderr)
        with Pool(os.cpu_count() or 1) as pool:
            for done, _ in enumerate(pool.imap_unordered(_write_copy, jobs), 1):
                print(f"  {done}/{len(jobs)}", end="\r", file=sys.stderr)
        print(file=sys.stderr)
    folders = {}
    for size in sizes:
        folder = work / f"size-{size}x"
        root = folder / "codesearchnet-java" / "java" / "final" / "jsonl"
        for split in CSN_SPLITS:
            (root / split).mkdir(parents=True, exist_ok=True)
            per_copy = len(originals[split])
            for copy in range(size):
                for i, path in enumerate(originals[split]):
                    source = path if copy == 0 else \
                        copies / f"seed{seed}-copy{copy}-{split}-{i}.jsonl.gz"
                    link = root / split / f"java_{split}_{copy * per_copy + i}.jsonl.gz"
                    if not link.is_symlink():
                        link.symlink_to(source.resolve())
        for name in ("codetrans", "concode"):
            if not (folder / name).is_symlink():
                (folder / name).symlink_to((corpora / name).resolve())
        folders[size] = folder
    return folders


def cases(folder: Path, out: Path, tasks: int) -> list[tuple[str, int, list[str]]]:
    inject = ["inject", "--benchmark", "codetrans", "--setting", "unpaired", "--seed", "0",
              "--corpora", str(folder), "--out", str(out), "--force"]
    audit = ["audit", "--benchmark", "codetrans", "--split", "test", "--against", "csn-java",
             "--corpora", str(folder)]
    return [("inject", 1, inject + ["--format", "2"]),
            ("inject", tasks, inject + ["--format", "2", "--tasks", str(tasks)]),
            ("audit", 1, audit),
            ("audit", tasks, audit + ["--tasks", str(tasks)])]


def run(opts: argparse.Namespace) -> None:
    corpora = Path(os.environ.get("LAB_CORPORA", ""))
    if not (corpora / "codesearchnet-java").is_dir():
        sys.exit("set LAB_CORPORA to the corpora folder (for example ../shared/corpora)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    sizes = [int(s) for s in opts.sizes.split(",")]
    folders = build_corpora(corpora, opts.work, sizes, opts.seed)
    results = opts.work / "results.jsonl"
    arm = opts.work / "arm"
    for _ in range(opts.repeats):
        for size in sizes:
            todo = cases(folders[size], arm, opts.tasks)
            if size in opts.in_memory:
                todo.insert(0, ("inject-format-1", 1, todo[0][2][:-2] + ["--format", "1"]))
            for step, tasks, args in todo:
                got = measure(args, env)
                row = {"size": size, "step": step, "tasks": tasks, **got,
                       "documents": _documents(arm) if step.startswith("inject") else None}
                print(json.dumps(row), flush=True)
                with results.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
    report(opts.work)


def _documents(arm: Path) -> int | None:
    manifest = arm / "manifest.json"
    if not manifest.is_file():
        return None
    data = json.loads(manifest.read_text())
    return data.get("counts", {}).get("base_documents")


def report(work: Path) -> None:
    rows = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()
            if line.strip()]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["step"], row["tasks"], row["size"]), []).append(row)
    table = []
    for (step, tasks, size), runs in sorted(groups.items()):
        table.append({"step": step, "tasks": tasks, "size": size, "runs": len(runs),
                      "wall": statistics.median(r["wall"] for r in runs),
                      "peak_mb": max(max(r["peak_mb"], r["worker_peak_mb"]) for r in runs),
                      "tree_mb": max(r["tree_peak_mb"] for r in runs),
                      "documents": runs[-1].get("documents")})

    def cell(step: str, tasks: int, size: int) -> dict | None:
        return next((t for t in table if (t["step"], t["tasks"], t["size"]) == (step, tasks,
                                                                               size)), None)

    lines = ["| step | tasks | size | documents | runs | wall s (median) | s per 1x | "
             "peak MB, largest process | peak / 1x | peak MB, all processes | "
             "speed-up vs 1 task |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        base = cell(t["step"], t["tasks"], 1)
        single = cell(t["step"], 1, t["size"])
        documents = f"{t['documents']:,}" if t["documents"] else "-"
        lines.append(
            f"| {t['step']} | {t['tasks']} | {t['size']}x | {documents} | {t['runs']} | "
            f"{t['wall']:.1f} | {t['wall'] / t['size']:.1f} | {t['peak_mb']:.0f} | "
            + (f"{t['peak_mb'] / base['peak_mb']:.2f}" if base else "-")
            + f" | {t['tree_mb']:.0f} | "
            + (f"{single['wall'] / t['wall']:.2f}" if single and t["tasks"] > 1 else "-")
            + " |")
    text = "\n".join(lines)
    (work / "table.md").write_text(text + "\n")
    print(text)
    _figure(table, work / "corpus-scale.png")
    print(f"figure: {work / 'corpus-scale.png'}")


def _figure(table: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for step, tasks in sorted({(t["step"], t["tasks"]) for t in table}):
        mine = sorted((t for t in table if (t["step"], t["tasks"]) == (step, tasks)),
                      key=lambda t: t["size"])
        sizes = [t["size"] for t in mine]
        label = f"{step}, {tasks} task{'s' if tasks > 1 else ''}"
        style = "o--" if tasks > 1 else "o-"
        left.plot(sizes, [t["wall"] / 60 for t in mine], style, label=label)
        right.plot(sizes, [t["peak_mb"] for t in mine], style, label=label)
        if tasks > 1:
            right.plot(sizes, [t["tree_mb"] for t in mine], ":", color=right.lines[-1].get_color(),
                       label=f"{label}, all processes")
    left.set(xlabel="corpus size (x CSN-format corpus, 120k functions)",
             ylabel="wall time (min, median)", title="Time")
    right.set(xlabel="corpus size (x CSN-format corpus)", ylabel="peak memory (MB)",
              title="Memory (solid, dashed: largest process)",
              ylim=(0, 1.45 * max(t["tree_mb"] for t in table)))
    for axis in (left, right):
        axis.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.legend(fontsize=7, ncol=2, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="folder for the synthetic corpora, the arm and results.jsonl")
    parser.add_argument("--sizes", default="1,10,30")
    parser.add_argument("--tasks", type=int, default=2, help="N of the N-task runs")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the identifier renaming")
    parser.add_argument("--in-memory", default="1",
                        help="sizes at which to also run today's --format 1 (baseline)")
    parser.add_argument("--report", action="store_true", help="only print table and figure")
    opts = parser.parse_args()
    opts.in_memory = {int(s) for s in opts.in_memory.split(",") if s}
    opts.work.mkdir(parents=True, exist_ok=True)
    if opts.report:
        report(opts.work)
    else:
        run(opts)


if __name__ == "__main__":
    main()
