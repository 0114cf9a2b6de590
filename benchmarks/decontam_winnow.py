"""The `winnow` decontaminator's recall per contamination form, and its threshold curve, measured
the way a user would: arms built by `lab inject` from $LAB_CORPORA, judged by `lab decontam`.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 nice -n 19 python benchmarks/decontam_winnow.py --work /tmp/winnow
    ... --limit 2000 --samples 200      # base documents and benchmark samples per arm (default)
    ... --extra "--winnow-names keep"   # any other lab decontam options

For each benchmark (codetrans, concode), setting (paired, output-only) and form (verbatim,
reformatted, renamed, partial:0.5): one arm (`lab inject --seed 1 --base-splits valid --limit N
--samples S --doses 0,1`: half the samples injected once, half held out), then `lab decontam
--methods winnow,ngram13` on it. Printed: per arm, the samples injected, found by winnow and
by ngram13 (recall), winnow's flagged base documents, and its recall at each point of
winnow_thresholds.csv. Precision over the whole CSN-format corpus is the `--full` run's: one
paired verbatim arm per benchmark over all 120,328 base documents.
"""
from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path

BENCHMARKS = ("codetrans", "concode")
SETTINGS = ("paired", "output-only")
FORMS = ("verbatim", "reformatted", "renamed", "embedded", "partial:0.5")
# embedded hosts a side in a base document of its language (Java): CodeTrans's input, CONCODE's
# output; it is measured in that one setting.
EMBEDDED_SETTING = {"codetrans": "input-only", "concode": "output-only"}


def lab(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"lab {' '.join(args)}: failed\n{done.stderr[-2000:]}")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def measure(work: Path, benchmark: str, setting: str, form: str, limit: int | None,
            samples: int, extra: list[str]) -> dict:
    name = f"{benchmark}-{setting}-{form.replace(':', '')}" + ("-full" if limit is None else "")
    arm, out = work / "arms" / name, work / "decontam" / name
    if not (arm / "manifest.json").exists():
        lab("inject", "--benchmark", benchmark, "--setting", setting, "--seed", "1",
            "--samples", str(samples), "--doses", "0,1", "--contamination-form", form,
            "--out", str(arm), "--force",
            *(["--base-splits", "valid", "--limit", str(limit)] if limit else []))
    lab("decontam", "--corpus", str(arm), "--out", str(out), "--force",
        "--methods", "winnow,ngram13", *extra)
    decontam = rows(out / "decontam.csv")
    summary = json.loads((out / "summary.json").read_text())

    def dose1(method: str) -> dict[str, str]:
        return next(r for r in decontam if r["method"] == method and r["dose"] == "1")

    return {"arm": name, "documents": dose1("winnow")["documents"],
            "injected": dose1("winnow")["injected_samples"],
            "winnow": dose1("winnow"), "ngram13": dose1("ngram13"),
            "curve": rows(out / "winnow_thresholds.csv"),
            "seconds": {t["method"]: t["seconds"] for t in summary["timing"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for arms and outputs")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--full", action="store_true",
                        help="one paired verbatim arm per benchmark over the whole corpus")
    parser.add_argument("--extra", default="", help="more lab decontam options")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    grid = ([(b, "paired", "verbatim") for b in args.benchmarks.split(",")] if args.full else
            [(b, s, f) for b in args.benchmarks.split(",") for f in args.forms.split(",")
             for s in ([EMBEDDED_SETTING[b]] if f == "embedded" else args.settings.split(","))])
    print("| arm | documents | injected | winnow found | recall | ngram13 recall | "
          "winnow flagged | other (false pos.) | precision | recall at containment "
          "0.2 / 0.3 / ... / 1.0 | seconds winnow / ngram13 |")
    print("|---" * 11 + "|")
    for benchmark, setting, form in grid:
        r = measure(args.work, benchmark, setting, form, None if args.full else args.limit,
                    args.samples, extra)
        w, n = r["winnow"], r["ngram13"]
        curve = " / ".join(f"{float(p['recall']):.2f}" for p in r["curve"])
        print(f"| {r['arm']} | {r['documents']} | {r['injected']} | {w['samples_found']} | "
              f"{float(w['recall']):.3f} | {float(n['recall']):.3f} | "
              f"{w['flagged_documents']} | {w['flagged_other']} | {w['precision']} | {curve} | "
              f"{r['seconds']['winnow']} / {r['seconds']['ngram13']} |", flush=True)


if __name__ == "__main__":
    main()
