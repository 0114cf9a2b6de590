"""The `winnow` decontaminator's recall per contamination form, and its threshold curve, measured
the way a user would: arms built by `lab inject` from $LAB_CORPORA, judged by `lab decontam`.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 nice -n 19 python benchmarks/decontam_winnow.py --work /tmp/winnow
    ... --limit 2000 --samples 200      # base documents and benchmark samples per arm (default)
    ... --extra "--winnow-names keep"   # any other lab decontam options
    ... --seed 2                        # arms of other samples and hosts (the bounds were chosen on seed 1)

For each benchmark (codetrans, concode), setting (paired, output-only) and form (verbatim,
reformatted, renamed, partial:0.5): one arm (`lab inject --seed 1 --base-splits valid --limit N
--samples S --doses 0,1`: half the samples injected once, half held out), then `lab decontam
--methods winnow,ngram13` on it. Printed: per arm, the samples injected, found by winnow and
by ngram13 (recall), winnow's flagged base documents, and its recall at each point of
winnow_thresholds.csv. The `embedded` form hosts a Java side: it is measured in the setting that
injects one (CodeTrans input-only, CONCODE output-only).

Precision over the whole CSN-format corpus is the `--full` run's: per benchmark one paired
verbatim arm over all 120,328 base documents and the whole test split (`--doses 0,1`: half of
it injected once), winnow run in this process at lab decontam's defaults. Every flagged base
document is classed: natural overlap as written (the document holds a side's code tokens, or
lies inside one), natural overlap renamed (it holds a side whole as a consistent renaming of
its names: the renamed form's leak, occurring in the wild), or a false positive; the natural
ones are listed in WORK/natural-BENCHMARK.csv. Printed: precision counting every flagged base
document as false, and with natural overlap apart.
"""
from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

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
            samples: int, extra: list[str], seed: int = 1) -> dict:
    name = (f"{benchmark}-{setting}-{form.replace(':', '')}" + ("-full" if limit is None else "")
            + ("" if seed == 1 else f"-seed{seed}"))
    arm, out = work / "arms" / name, work / "decontam" / name
    if not (arm / "manifest.json").exists():
        lab("inject", "--benchmark", benchmark, "--setting", setting, "--seed", str(seed),
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
            "long": long_side_recall(arm),
            "injected": dose1("winnow")["injected_samples"],
            "winnow": dose1("winnow"), "ngram13": dose1("ngram13"),
            "curve": rows(out / "winnow_thresholds.csv"),
            "seconds": {t["method"]: t["seconds"] for t in summary["timing"]}}


def long_side_recall(arm: Path) -> str:
    """Found / injected over the arm's injected samples with a code side of at least
    ABSTRACT_MIN_TOKENS tokens (the shorter ones are never matched with names abstracted), by
    winnow at its defaults in this process."""
    from lab.codetokens import code_tokens
    from lab.decontam.base import Options
    from lab.decontam.config import DecontamConfig
    from lab.decontam.plan import plan_decontam, read_arm
    from lab.decontam.winnow import ABSTRACT_MIN_TOKENS, best_containment

    manifest = json.loads((arm / "manifest.json").read_text())
    cfg = DecontamConfig(corpus=arm, out=arm.parent / "unused", methods=("winnow",))
    plan = plan_decontam(cfg, manifest, read_arm(cfg, manifest))
    options = Options()
    best = best_containment(plan.texts, plan.reference, options)
    found = {plan.samples_of[i] for i, (score, _sample) in enumerate(best)
             if score >= options.containment and plan.samples_of[i]}
    languages = (plan.reference.input_language, plan.reference.output_language)
    long = [sample.id for sample in plan.reference.samples
            if any(language != "nl" and len(code_tokens(text)) >= ABSTRACT_MIN_TOKENS
                   for text, language in zip((sample.input, sample.output), languages))]
    injected = {i for dose, level in plan.levels if dose > 0 for i in level}
    long = [i for i in long if i in injected]
    return f"{sum(i in found for i in long)}/{len(long)}"


def holds_renamed(side: list[str], document: list[str]) -> bool:
    """Whether the document holds the side's tokens whole, in order, as a consistent renaming:
    where the side has a name winnow abstracts (lab.decontam.winnow.Symbols.abstract) the
    document has a name (any: `function` read as `remove` counts), one for one; every other
    token as written."""
    from lab.decontam.winnow import NAME, Symbols, is_name

    symbols = Symbols()
    for token in (*side, *document, "(", ".", "::", "@", "new", "this", "base"):
        symbols.add(token)
    symbols.freeze()
    side_ids, document_ids = symbols.concrete(side), symbols.concrete(document)
    renamable = symbols.abstract(side, side_ids) == NAME
    named = np.array([is_name(token) for token in document], bool)
    if len(side) > len(document) or not len(side):
        return False
    ids = np.lib.stride_tricks.sliding_window_view(document_ids, len(side))
    names = np.lib.stride_tricks.sliding_window_view(named, len(side))
    fits = ((ids == side_ids) | renamable).all(axis=1) & (names | ~renamable).all(axis=1)
    for start in np.flatnonzero(fits).tolist():
        forward: dict[str, str] = {}
        backward: dict[str, str] = {}
        if all(forward.setdefault(old, new) == new and backward.setdefault(new, old) == old
               for old, new, rename in zip(side, document[start:], renamable.tolist())
               if rename):
            return True
    return False


def natural_class(document: str, sides: list[str]) -> str:
    """`as written`, `renamed` or "" (a false positive): how a flagged base document holds a
    side of the sample it matched (holds_renamed; module docstring)."""
    from lab.codetokens import code_tokens

    tokens = code_tokens(document)
    joined = " " + " ".join(tokens) + " "
    for side in sides:
        side_tokens = code_tokens(side)
        side_joined = " " + " ".join(side_tokens) + " "
        if side_joined in joined or joined in side_joined:
            return "as written"
    if any(holds_renamed(code_tokens(side), tokens) for side in sides):
        return "renamed"
    return ""


def precision(work: Path, benchmark: str) -> None:
    """The --full run of one benchmark (module docstring)."""
    from lab.corpora import load_samples
    from lab.corpora.shards import read_corpus
    from lab.decontam.base import Options
    from lab.decontam.config import DecontamConfig
    from lab.decontam.plan import plan_decontam, read_arm
    from lab.decontam.winnow import best_containment

    arm = work / "arms" / f"{benchmark}-paired-verbatim-full"
    size = len(load_samples(benchmark, "test", None).records)
    if not (arm / "manifest.json").exists():
        lab("inject", "--benchmark", benchmark, "--setting", "paired", "--seed", "1",
            "--samples", str(size), "--doses", "0,1", "--out", str(arm), "--force")
    manifest = json.loads((arm / "manifest.json").read_text())
    cfg = DecontamConfig(corpus=arm, out=work / "unused", methods=("winnow",))
    plan = plan_decontam(cfg, manifest, read_arm(cfg, manifest))
    ids = [str(record.get("id", i)) for i, record in enumerate(read_corpus(arm))]
    options = Options()
    began = time.perf_counter()
    best = best_containment(plan.texts, plan.reference, options)
    seconds = time.perf_counter() - began
    injected = {i for dose, level in plan.levels if dose > 0 for i in level}
    by_id = {sample.id: sample for sample in plan.reference.samples}
    copies = [i for i, sample in enumerate(plan.samples_of) if sample in injected]
    found = [i for i in copies if best[i][0] >= options.containment]
    classes: dict[str, list[tuple[int, float, str]]] = {"as written": [], "renamed": [], "": []}
    for i, (score, sample) in enumerate(best):
        if score >= options.containment and not plan.samples_of[i]:
            sides = [t for t in (by_id[sample].input, by_id[sample].output) if t.strip()]
            classes[natural_class(plan.texts[i], sides)].append((i, score, sample))
    with open(work / f"natural-{benchmark}.csv", "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["document", "sample", "score", "natural overlap"])
        for kind in ("as written", "renamed"):
            for i, score, sample in classes[kind]:
                out.writerow([ids[i], sample, round(score, 4), kind])
    false = len(classes[""])
    natural = len(classes["as written"]) + len(classes["renamed"])
    print(f"| {benchmark} | {len(plan.texts)} | {len(copies)} | {len(found)} "
          f"({len(found) / max(len(copies), 1):.3f}) | {len(classes['as written'])} | "
          f"{len(classes['renamed'])} | {false} | "
          f"{len(found) / max(len(found) + natural + false, 1):.4f} | "
          f"{len(found) / max(len(found) + false, 1):.4f} | {seconds:.1f} |", flush=True)
    for i, score, sample in classes[""][:5]:
        print(f"  false positive: {ids[i]} {sample} {score:.2f} "
              f"{plan.texts[i][:160]!r}", file=sys.stderr)


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
    parser.add_argument("--seed", type=int, default=1,
                        help="the arms' injection seed: winnow's bounds were chosen on seed 1's "
                             "arms, so another seed measures it on samples and hosts held out")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    if args.full:
        print("| benchmark | documents | injected copies | found (recall) | base flagged: natural "
              "as written | natural renamed | false positives | precision, all flagged base "
              "documents false | precision, natural overlap apart | seconds |")
        print("|---" * 10 + "|")
        for benchmark in args.benchmarks.split(","):
            precision(args.work, benchmark)
        return
    grid = ([(b, "paired", "verbatim") for b in args.benchmarks.split(",")] if args.full else
            [(b, s, f) for b in args.benchmarks.split(",") for f in args.forms.split(",")
             for s in ([EMBEDDED_SETTING[b]] if f == "embedded" else args.settings.split(","))])
    print("| arm | documents | injected | winnow found | recall | ngram13 recall | "
          "winnow flagged | other (false pos.) | precision | recall at containment "
          "0.2 / 0.3 / ... / 1.0 | seconds winnow / ngram13 | found / injected, samples with "
          "a code side of 12+ tokens |")
    print("|---" * 12 + "|")
    for benchmark, setting, form in grid:
        r = measure(args.work, benchmark, setting, form, None if args.full else args.limit,
                    args.samples, extra, args.seed)
        w, n = r["winnow"], r["ngram13"]
        curve = " / ".join(f"{float(p['recall']):.2f}" for p in r["curve"])
        print(f"| {r['arm']} | {r['documents']} | {r['injected']} | {w['samples_found']} | "
              f"{float(w['recall']):.3f} | {float(n['recall']):.3f} | "
              f"{w['flagged_documents']} | {w['flagged_other']} | {w['precision']} | {curve} | "
              f"{r['seconds']['winnow']} / {r['seconds']['ngram13']} | {r['long']} |",
              flush=True)


if __name__ == "__main__":
    main()
