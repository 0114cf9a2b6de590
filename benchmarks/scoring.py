"""Scoring speed: 1,000 CodeTrans test samples (C#) with every metric, against the 10 s target.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/scoring.py [--repeats 3]

References are the real C# side of CodeTrans test (codetrans/test.java-cs.txt.cs); predictions
are a deterministic perturbation of them: every 7th whitespace token dropped and every 5th
replaced by the token at the same position of the next reference. (Dropping alone would leave
every predicted token an exact match, so METEOR would never consult WordNet and CodeBLEU would
see no wrong identifiers: the benchmark would understate both.) CodeTrans is the translation
task, so `em` is the code-to-code definition (`lab score`'s default), `em_tokens` the other.

Each repetition runs in a fresh process, so its time includes start-up, imports, loading
WordNet and the CodeBLEU child: (1) `lab score --language cs` end to end (the figure held
against the target) and (2) the metrics one by one in-process, for the breakdown. The median of
the repetitions is reported, with its ratio to the target (<= 1 meets it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 10.0
SAMPLES = 1000
METRIC_STEPS = ["bleu", "bleu_sentence", "meteor", "em", "em_tokens", "codebleu"]

BREAKDOWN = r"""
import json, sys, time
started = time.perf_counter()
from lab.eval import metrics
imported = time.perf_counter()
with open(sys.argv[1], encoding="utf-8") as handle:
    predictions = handle.read().split("\n")[:-1]
with open(sys.argv[2], encoding="utf-8") as handle:
    references = handle.read().split("\n")[:-1]
seconds, scores = {"import": imported - started}, {}
for name in metrics.METRICS:
    begin = time.perf_counter()
    corpus, _ = metrics.score(references, predictions, [name], "cs", "translation")
    seconds[name] = time.perf_counter() - begin
    scores.update(corpus)
seconds["total"] = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "scores": scores}))
"""


def perturb(references: list[str]) -> list[str]:
    predictions = []
    for i, reference in enumerate(references):
        other = references[(i + 1) % len(references)].split()
        tokens = []
        for j, token in enumerate(reference.split()):
            if j % 7 == 6:
                continue
            if j % 5 == 4 and j < len(other):
                token = other[j]
            tokens.append(token)
        predictions.append(" ".join(tokens))
    return predictions


def run(args: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed: {' '.join(args)}\n{proc.stderr}")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the shared corpora folder")
    source = Path(os.environ["LAB_CORPORA"]) / "codetrans" / "test.java-cs.txt.cs"
    if not source.is_file():
        sys.exit(f"{source}: not found")
    references = source.read_text(encoding="utf-8").split("\n")[:SAMPLES]
    references = [r for r in references if r.strip()]
    if len(references) != SAMPLES:
        sys.exit(f"{source}: expected {SAMPLES} references, found {len(references)}")
    predictions = perturb(references)

    with tempfile.TemporaryDirectory(prefix="lab-scoring-bench-") as tmp:
        pred_file, ref_file = Path(tmp) / "predictions.txt", Path(tmp) / "references.txt"
        pred_file.write_text("".join(p + "\n" for p in predictions), encoding="utf-8")
        ref_file.write_text("".join(r + "\n" for r in references), encoding="utf-8")
        cli_walls, breakdowns, score_sets = [], [], []
        for repeat in range(opts.repeats):
            wall, _ = run(["-m", "lab.cli", "score", "--pred", str(pred_file), "--ref",
                           str(ref_file), "--language", "cs", "--out", str(Path(tmp) / "m.json")])
            cli_walls.append(wall)
            score_sets.append(json.loads((Path(tmp) / "m.json").read_text())["metrics"])
            _, out = run(["-c", BREAKDOWN, str(pred_file), str(ref_file)])
            result = json.loads(out)
            breakdowns.append(result["seconds"])
            score_sets.append(result["scores"])
            print(f"run {repeat + 1}: lab score {wall:.2f} s; in-process "
                  f"{result['seconds']['total']:.2f} s", file=sys.stderr)

    print(f"scoring {SAMPLES} CodeTrans test samples (C#), every metric, "
          f"{opts.repeats} fresh-process runs, median seconds")
    print(f"{'step':<16}{'median':>9}  runs")
    for step in ["import", *METRIC_STEPS, "total"]:
        values = [b[step] for b in breakdowns]
        print(f"{step:<16}{statistics.median(values):>9.2f}  "
              + " ".join(f"{v:.2f}" for v in values))
    median = statistics.median(cli_walls)
    print(f"{'lab score (CLI)':<16}{median:>9.2f}  " + " ".join(f"{v:.2f}" for v in cli_walls))
    verdict = "met" if median <= TARGET_SECONDS else "MISSED"
    print(f"target {TARGET_SECONDS:.0f} s: lab score median {median:.2f} s = "
          f"{median / TARGET_SECONDS:.2f} x target ({verdict})")
    same = all(s == score_sets[0] for s in score_sets)
    print("scores (identical in every run: " + ("yes" if same else "NO") + "): "
          + ", ".join(f"{k} {v:.2f}" for k, v in score_sets[0].items()))
    if median > TARGET_SECONDS or not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
