"""13-gram decontamination speed: the lab's lm-eval-rule n-grams (lab decontam's `ngram13`)
against datatrove's own n-gram decontamination step (`datatrove`), or any other method (`winnow`),
over the CSN-format Java corpus (all splits, 120k documents) and the CodeTrans test split (or
CONCODE's, --benchmark concode).

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 nice -n 19 python benchmarks/decontam_speed.py
    ... --limit 2000 --repeats 1          # a seeded subset of N documents (a dry run)
    ... --repeats 3 --sizes 30000,60000,all  # is peak memory flat in the documents?
    ... --methods ngram13,winnow          # winnow against ngram13 (decontam_winnow.md)

Each method runs --repeats times (default 3), alternating the methods (A B A B ...), each run
in a fresh process of its own (this script again, with --only): loading the corpus is not
timed; the method's seconds and its peak memory (the rise of the process's resident set above
its size before the method, lab.decontam.scan.measured) are. Printed: every run, then per method
(and size) the medians: seconds, seconds and MiB per million documents, the documents flagged;
the ratios of the medians lab / datatrove and how far the two agree (the flagged sets differ by
design: datatrove keeps digits as 0 and punctuation as word breaks, and indexes input, output
and across-sides n-grams; docs/decontam.md); with --sizes, the median peak MiB per size and
method.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(limit: int | None, benchmark: str = "codetrans"):
    from lab.corpora import get_spec, load_documents, load_samples
    from lab.decontam.base import Reference

    documents = [d.text for part in load_documents("csn-java", ("train", "valid", "test"))
                 for d in part.records]
    if limit is not None and limit > len(documents):
        sys.exit(f"--limit/--sizes {limit}: the corpus has {len(documents)} documents "
                 "(`--sizes ...,all` runs the full corpus)")
    if limit is not None:
        documents = [documents[i] for i in
                     sorted(random.Random(0).sample(range(len(documents)), limit))]
    spec = get_spec(benchmark)
    reference = Reference(load_samples(benchmark, "test").records, spec.input_language,
                          spec.output_language)
    return documents, reference


def only(method: str, limit: int | None, ngram_n: int, benchmark: str) -> dict:
    from lab.decontam import DECONTAMINATORS
    from lab.decontam.base import Options
    from lab.decontam.scan import measured

    documents, reference = load(limit, benchmark)
    flags, cost = measured(lambda: DECONTAMINATORS[method].flag(documents, reference,
                                                                Options(ngram_n=ngram_n)))
    flagged = [i for i, f in enumerate(flags) if f]
    return {"method": method, "documents": len(documents), "seconds": cost["seconds"],
            "peak_mib": cost["peak_bytes"] / 2**20, "memory": cost["memory"],
            "flagged": flagged}


def child(method: str, size: int | None, ngram_n: int, benchmark: str) -> dict:
    """One timed run of `method` in a fresh process (this script again, with --only)."""
    command = [sys.executable, __file__, "--only", method, "--ngram-n", str(ngram_n),
               "--benchmark", benchmark]
    if size is not None:
        command += ["--limit", str(size)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"{method}: failed\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def digest(flagged: list[int]) -> str:
    return hashlib.sha256(json.dumps(flagged).encode()).hexdigest()[:12]


def size_arg(text: str) -> int | None:
    """A document count, or `all` (None): the full corpus."""
    return None if text == "all" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="a seeded subset of N documents (default: all)")
    parser.add_argument("--sizes", default=None,
                        help="comma-separated document counts (seeded subsets, as --limit; "
                             "`all` = the full corpus), run in turn to show whether peak "
                             "memory grows with the documents")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per method (and size), alternating the methods; medians "
                             "are reported (default 3)")
    parser.add_argument("--methods", default="ngram13,datatrove",
                        help="lab decontam methods, the first compared with the last")
    parser.add_argument("--ngram-n", type=int, default=13, help="n of the datatrove method")
    parser.add_argument("--benchmark", default="codetrans", choices=("codetrans", "concode"),
                        help="the reference: this benchmark's test split (default codetrans)")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.limit is not None and args.sizes is not None:
        parser.error("--limit and --sizes exclude each other (--sizes N is --limit N)")
    sizes: list[int | None] = [args.limit]
    if args.sizes is not None:
        try:
            sizes = [size_arg(s.strip()) for s in args.sizes.split(",")]
        except ValueError:
            parser.error(f"--sizes {args.sizes}: comma-separated counts >= 1 or `all`")
        if any(s is not None and s < 1 for s in sizes):
            parser.error(f"--sizes {args.sizes}: comma-separated counts >= 1 or `all`")
    methods = [m for m in args.methods.split(",") if m]
    if not methods:
        parser.error("--methods: name at least one method")
    if args.only:
        print(json.dumps(only(args.only, args.limit, args.ngram_n, args.benchmark)))
        return

    print(f"{'run':>3} {'method':<10} {'documents':>9} {'seconds':>8} {'peak MiB':>9} "
          f"{'flagged':>7}  flagged set")
    runs: dict[tuple[int | None, str], list[dict]] = {}
    for size in sizes:
        for repeat in range(1, args.repeats + 1):
            for method in methods:  # alternating: A B A B ...
                r = child(method, size, args.ngram_n, args.benchmark)
                runs.setdefault((size, method), []).append(r)
                print(f"{repeat:>3} {method:<10} {r['documents']:>9} {r['seconds']:>8.2f} "
                      f"{r['peak_mib']:>9.1f} {len(r['flagged']):>7}  {digest(r['flagged'])}",
                      flush=True)

    print(f"\nmedians of {args.repeats} run(s) each")
    print(f"{'method':<10} {'documents':>9} {'seconds':>8} {'s/M docs':>9} {'peak MiB':>9} "
          f"{'MiB/M docs':>10} {'flagged':>7}  flagged set")
    for size in sizes:
        for method in methods:
            rs = runs[(size, method)]
            documents = rs[0]["documents"]
            seconds = statistics.median(r["seconds"] for r in rs)
            peak = statistics.median(r["peak_mib"] for r in rs)
            sets = {digest(r["flagged"]) for r in rs}
            million = 1e6 / documents
            print(f"{method:<10} {documents:>9} {seconds:>8.2f} {seconds * million:>9.1f} "
                  f"{peak:>9.1f} {peak * million:>10.1f} {len(rs[0]['flagged']):>7}  "
                  + ("/".join(sorted(sets)) + " (differs between runs!)" if len(sets) > 1
                     else sets.pop()))
        if len(methods) >= 2:
            lab, other = runs[(size, methods[0])], runs[(size, methods[-1])]
            lab_s = statistics.median(r["seconds"] for r in lab)
            other_s = statistics.median(r["seconds"] for r in other)
            lab_m = statistics.median(r["peak_mib"] for r in lab)
            other_m = statistics.median(r["peak_mib"] for r in other)
            both = set(lab[0]["flagged"]) & set(other[0]["flagged"])
            either = set(lab[0]["flagged"]) | set(other[0]["flagged"])
            print(f"{methods[0]} / {methods[-1]} at {lab[0]['documents']} documents: "
                  f"median time x{lab_s / other_s:.3f}, median peak memory "
                  + (f"x{lab_m / other_m:.3f}" if other_m else "n/a")
                  + f"; flagged by both {len(both)}, by either {len(either)}")
    if len(sizes) > 1:
        print("\nmedian peak MiB by documents (flat memory: it does not grow with them)")
        counts = [runs[(size, methods[0])][0]["documents"] for size in sizes]
        print(f"{'method':<10} " + " ".join(f"{c:>9}" for c in counts))
        for method in methods:
            print(f"{method:<10} " + " ".join(
                f"{statistics.median(r['peak_mib'] for r in runs[(size, method)]):>9.1f}"
                for size in sizes))
    print(f"memory: {runs[(sizes[0], methods[0])][0]['memory']}")


if __name__ == "__main__":
    main()
