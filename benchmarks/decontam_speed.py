"""13-gram decontamination speed: the lab's lm-eval-rule n-grams (lab decontam's `ngram13`)
against datatrove's own n-gram decontamination step (`datatrove`), over the CSN-format Java
corpus (all splits, 120k documents) and the CodeTrans test split.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 nice -n 19 python benchmarks/decontam_speed.py
    ... --limit 2000      # a seeded subset of N documents (a dry run)

Each method runs in a fresh process of its own (this script again, with --only): loading the
corpus is not timed; the method's seconds and its peak memory (the rise of the process's
resident set above its size before the method, lab.decontam.run.measured) are. Printed per
method: seconds, seconds and MiB per million documents, the documents flagged; then the ratios
lab / datatrove and how far the two agree (the flagged sets differ by design: datatrove keeps
digits as 0 and punctuation as word breaks, and indexes input, output and across-sides n-grams;
docs/decontam.md).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(limit: int | None):
    from lab.corpora import get_spec, load_documents, load_samples
    from lab.decontam.base import Reference

    documents = [d.text for part in load_documents("csn-java", ("train", "valid", "test"))
                 for d in part.records]
    if limit is not None:
        documents = [documents[i] for i in
                     sorted(random.Random(0).sample(range(len(documents)), limit))]
    spec = get_spec("codetrans")
    reference = Reference(load_samples("codetrans", "test").records, spec.input_language,
                          spec.output_language)
    return documents, reference


def only(method: str, limit: int | None, ngram_n: int) -> dict:
    from lab.decontam import DECONTAMINATORS
    from lab.decontam.base import Options
    from lab.decontam.run import measured

    documents, reference = load(limit)
    flags, cost = measured(lambda: DECONTAMINATORS[method].flag(documents, reference,
                                                                Options(ngram_n=ngram_n)))
    flagged = [i for i, f in enumerate(flags) if f]
    return {"method": method, "documents": len(documents), "seconds": cost["seconds"],
            "peak_mib": cost["peak_bytes"] / 2**20, "memory": cost["memory"],
            "flagged": flagged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="a seeded subset of N documents (default: all)")
    parser.add_argument("--methods", default="ngram13,datatrove",
                        help="lab decontam methods, the first compared with the last")
    parser.add_argument("--ngram-n", type=int, default=13, help="n of the datatrove method")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    if args.only:
        print(json.dumps(only(args.only, args.limit, args.ngram_n)))
        return
    results = []
    for method in args.methods.split(","):
        command = [sys.executable, __file__, "--only", method, "--ngram-n", str(args.ngram_n)]
        if args.limit is not None:
            command += ["--limit", str(args.limit)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"{method}: failed\n{done.stderr[-2000:]}")
        results.append(json.loads(done.stdout.splitlines()[-1]))
    print(f"{'method':<10} {'documents':>9} {'seconds':>8} {'s/M docs':>9} {'peak MiB':>9} "
          f"{'MiB/M docs':>10} {'flagged':>7}  flagged set")
    for r in results:
        million = 1e6 / r["documents"]
        digest = hashlib.sha256(json.dumps(r["flagged"]).encode()).hexdigest()[:12]
        print(f"{r['method']:<10} {r['documents']:>9} {r['seconds']:>8.2f} "
              f"{r['seconds'] * million:>9.1f} {r['peak_mib']:>9.1f} "
              f"{r['peak_mib'] * million:>10.1f} {len(r['flagged']):>7}  {digest}")
    if len(results) >= 2:
        lab, other = results[0], results[-1]
        both = set(lab["flagged"]) & set(other["flagged"])
        either = set(lab["flagged"]) | set(other["flagged"])
        print(f"{lab['method']} / {other['method']}: "
              f"time x{lab['seconds'] / other['seconds']:.3f}, peak memory "
              + (f"x{lab['peak_mib'] / other['peak_mib']:.3f}" if other["peak_mib"] else "n/a")
              + f"; flagged by both {len(both)}, by either {len(either)}")
    print(f"memory: {results[0]['memory']}")


if __name__ == "__main__":
    main()
