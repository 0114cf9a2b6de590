"""Try the lab as a careless new user would: bad options, damaged files, impossible settings.

Every case must end in one `lab: error:` line on stderr naming the file or option, exit code 2,
no traceback, and no output (nor a `*.tmp-*` sibling) left behind. Prints a Markdown table
(case, rc, message, verdict) and exits 1 if any case fails.

    LAB_CORPORA=../shared/corpora python scripts/sweep_bad_inputs.py [--keep DIR] [-k substring]

It builds a micro world first (a 300-document arm, the study tokenizer, a micro GPT-2, a few
seconds each) in a temporary folder.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class Case:
    name: str
    argv: list[str]
    fragment: str  # must appear in the error line (the option or file it names)
    setup: Callable[[Path], None] | None = None
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def lab(args: list[str], cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200", **(env or {}))
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=stdin)


def build_world(root: Path) -> None:
    """A control and a paired arm, the tokenizer, a micro GPT-2 and its E0 model."""
    steps = [
        ["inject", "--benchmark", "codetrans", "--setting", "control", "--seed", "0",
         "--base-splits", "valid", "--limit", "300", "--out", "control"],
        ["inject", "--benchmark", "codetrans", "--setting", "paired", "--seed", "0",
         "--base-splits", "valid", "--limit", "300", "--fraction", "0.05", "--out", "paired"],
        ["tokenizer", "train", "--corpus", "control", "--out", "tok", "--vocab-size", "1200"],
        ["pretrain", "--model", "gpt2", "--corpus", "paired", "--tokenizer", "tok", "--out", "pt",
         "--preset", "micro", "--max-steps", "2", "--block-size", "128", "--batch-size", "4",
         "--cache-dir", "cache"],
        ["finetune", "--pretrained", "pt", "--task", "translation", "--epochs", "0", "--out", "e0"],
    ]
    for args in steps:
        result = lab(args, root)
        if result.returncode != 0:
            sys.exit(f"building the micro world failed at `lab {' '.join(args)}`:\n{result.stderr}")
    (root / "ids.txt").write_text("codetrans:test:0\ncodetrans:test:1\n")
    (root / "pred.txt").write_text("a b c\nd e f\n")
    (root / "ref.txt").write_text("a b c\n")
    (root / "recipe.yaml").write_text((Path(__file__).parents[1] / "recipes" / "quickstart.yaml")
                                      .read_text(encoding="utf-8"))


def write(path: str, text: str | bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(text, bytes) else target.write_text)(text)
    return make


def copy_then(source: str, target: str, damage: Callable[[Path], None]) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        shutil.rmtree(root / target, ignore_errors=True)
        shutil.copytree(root / source, root / target, symlinks=True)
        damage(root / target)
    return make


def recipe(text: str) -> Callable[[Path], None]:
    return write("bad.yaml", text)


def truncate(name: str, keep: int = 100) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        path = folder / name
        path.write_bytes(path.read_bytes()[:keep])
    return damage


def first_shard(folder: Path) -> Path:
    return sorted((folder / "corpus").glob("*.jsonl.gz"))[0]


def corrupt_line(folder: Path) -> None:
    shard = first_shard(folder)
    lines = gzip.decompress(shard.read_bytes()).splitlines(keepends=True)
    lines[1] = b'{"text": "unterminated\n'
    shard.write_bytes(gzip.compress(b"".join(lines), mtime=0))


INJECT = ["inject", "--benchmark", "codetrans", "--seed", "0", "--base-splits", "valid",
          "--limit", "300", "--out", "out-inject"]
PRETRAIN = ["pretrain", "--model", "gpt2", "--corpus", "paired", "--tokenizer", "tok",
            "--preset", "micro", "--max-steps", "2", "--block-size", "128", "--out", "out-pt",
            "--cache-dir", "cache"]
FINETUNE = ["finetune", "--pretrained", "pt", "--task", "translation", "--epochs", "1",
            "--train-size", "8", "--out", "out-ft"]
EVALUATE = ["evaluate", "--model", "e0", "--task", "translation", "--ids", "ids.txt",
            "--max-new-tokens", "8", "--out", "out-eval"]
PROBE = ["probe", "--model", "pt", "--max-samples", "4", "--out", "out-probe"]
STUDY = ["study", "--dry-run", "--out", "out-study"]

QUICK_RECIPE = "name: bad\nbenchmark: codetrans\narms: [control, paired]\n"

CASES = [
    # inject
    Case("inject: unknown benchmark", [*INJECT, "--setting", "paired", "--benchmark", "nope"], "nope"),
    Case("inject: unknown setting", [*INJECT, "--setting", "sideways"], "sideways"),
    Case("inject: fraction above 1", [*INJECT, "--setting", "paired", "--fraction", "1.5"], "--fraction"),
    Case("inject: negative fraction", [*INJECT, "--setting", "paired", "--fraction", "-0.1"], "--fraction"),
    Case("inject: fraction nan", [*INJECT, "--setting", "paired", "--fraction", "nan"], "--fraction"),
    Case("inject: limit 0", [*INJECT, "--setting", "paired", "--limit", "0"], "--limit"),
    Case("inject: repeat 0", [*INJECT, "--setting", "paired", "--repeat", "0"], "--repeat"),
    Case("inject: seed beyond 2^32", [*INJECT, "--setting", "paired", "--fraction", "0.05", "--seed",
                                     "99999999999"], "--seed"),
    Case("inject: unknown base corpus", [*INJECT, "--setting", "paired", "--base", "csn-cobol"], "csn-cobol"),
    Case("inject: unknown base split", [*INJECT, "--setting", "paired", "--base-splits", "dev"], "dev"),
    Case("inject: --corpora missing folder", [*INJECT, "--setting", "paired", "--corpora", "nowhere"], "nowhere"),
    Case("inject: test ids file missing", [*INJECT, "--setting", "paired", "--test-ids", "no-ids.txt"], "no-ids.txt"),
    Case("inject: test id unknown", [*INJECT, "--setting", "paired", "--test-ids", "bad-ids.txt"],
         "codetrans:test:999999", write("bad-ids.txt", "codetrans:test:999999\n")),
    Case("inject: --out is an existing file", [*INJECT, "--setting", "paired", "--out", "pred.txt"], "pred.txt"),
    # tokenizer
    Case("tokenizer: vocabulary of 0", ["tokenizer", "train", "--corpus", "control", "--out", "out-tok",
                                        "--vocab-size", "0"], "--vocab-size"),
    Case("tokenizer: corpus is a text file", ["tokenizer", "train", "--corpus", "pred.txt", "--out",
                                              "out-tok"], "pred.txt"),
    Case("tokenizer: unknown benchmark", ["tokenizer", "train", "--corpus", "control", "--out", "out-tok",
                                          "--benchmarks", "codetrans,nope"], "nope"),
    # pretrain
    Case("pretrain: unknown model family", [*PRETRAIN, "--model", "bert"], "bert"),
    Case("pretrain: unknown preset", [*PRETRAIN, "--preset", "huge"], "huge"),
    Case("pretrain: block larger than the preset", [*PRETRAIN, "--block-size", "100000"], "--block-size"),
    Case("pretrain: batch size 0", [*PRETRAIN, "--batch-size", "0"], "--batch-size"),
    Case("pretrain: negative weight decay", [*PRETRAIN, "--weight-decay", "-1"], "--weight-decay"),
    Case("pretrain: save every 0 steps", [*PRETRAIN, "--save-steps", "0"], "--save-steps"),
    Case("pretrain: DeepSpeed config not JSON", [*PRETRAIN, "--deepspeed", "ds.json"], "ds.json",
         write("ds.json", "{zero: 2")),
    Case("pretrain: tokenizer.json truncated", [*PRETRAIN, "--tokenizer", "tok-cut"], "tok-cut",
         copy_then("tok", "tok-cut", truncate("tokenizer.json"))),
    Case("pretrain: corpus manifest not JSON", [*PRETRAIN, "--corpus", "arm-badjson"], "arm-badjson",
         copy_then("paired", "arm-badjson", lambda f: (f / "manifest.json").write_text("{\"kind\":"))),
    Case("pretrain: corpus shard with a corrupt JSON line", [*PRETRAIN, "--corpus", "arm-badline"],
         "arm-badline", copy_then("paired", "arm-badline", corrupt_line)),
    Case("pretrain: corpus is a tokenizer folder", [*PRETRAIN, "--corpus", "tok"], "tok"),
    Case("pretrain: --resume with nothing to resume", [*PRETRAIN, "--resume"], "out-pt"),
    # finetune
    Case("finetune: unknown task", [*FINETUNE, "--task", "summarise"], "summarise"),
    Case("finetune: negative train size", [*FINETUNE, "--train-size", "-1"], "--train-size"),
    Case("finetune: --select worst", [*FINETUNE, "--select", "worst"], "--select"),
    Case("finetune: pretrained is a corpus", [*FINETUNE, "--pretrained", "paired"], "paired"),
    Case("finetune: pretrained weights garbage", [*FINETUNE, "--pretrained", "pt-garbage"], "pt-garbage",
         copy_then("pt", "pt-garbage", lambda f: (f / "model" / "model.safetensors").write_bytes(b"\0" * 64))),
    Case("finetune: pretrained config.json not JSON", [*FINETUNE, "--pretrained", "pt-badcfg"], "pt-badcfg",
         copy_then("pt", "pt-badcfg", lambda f: (f / "model" / "config.json").write_text("{"))),
    # evaluate
    Case("evaluate: unknown split", [*EVALUATE, "--split", "holdout"], "holdout"),
    Case("evaluate: unknown decoding", [*EVALUATE, "--decoding", "psychic"], "psychic"),
    Case("evaluate: unknown metric", [*EVALUATE, "--metrics", "bleu,vibes"], "vibes"),
    Case("evaluate: 0 new tokens", [*EVALUATE, "--max-new-tokens", "0"], "--max-new-tokens"),
    Case("evaluate: top-p above 1", [*EVALUATE, "--decoding", "sample", "--top-p", "2"], "--top-p"),
    Case("evaluate: empty ids file", [*EVALUATE, "--ids", "empty-ids.txt"], "empty-ids.txt",
         write("empty-ids.txt", "")),
    Case("evaluate: ids of another benchmark", [*EVALUATE, "--ids", "concode-ids.txt"], "concode",
         write("concode-ids.txt", "concode:test:0\n")),
    Case("evaluate: model is a tokenizer folder", [*EVALUATE, "--model", "tok"], "tok"),
    # probe
    Case("probe: min-k 0", [*PROBE, "--min-k", "0"], "--min-k"),
    Case("probe: min-k 1.5", [*PROBE, "--min-k", "1.5"], "--min-k"),
    Case("probe: unknown form", [*PROBE, "--form", "sideways"], "--form"),
    Case("probe: groups is not a corpus", [*PROBE, "--groups", "tok"], "tok"),
    # score
    Case("score: predictions file missing", ["score", "--pred", "no-pred.txt", "--ref", "ref.txt"], "no-pred.txt"),
    Case("score: line counts differ", ["score", "--pred", "pred.txt", "--ref", "ref.txt"], "ref.txt"),
    Case("score: unknown metric", ["score", "--pred", "pred.txt", "--ref", "pred.txt", "--metrics", "vibes"],
         "vibes"),
    Case("score: predictions not UTF-8", ["score", "--pred", "latin1.txt", "--ref", "ref.txt"], "latin1.txt",
         write("latin1.txt", "caf\xe9\n".encode("latin-1"))),
    # stats / report
    Case("stats: folder that is not a study", ["stats", "tok"], "tok"),
    Case("stats: unknown format", ["stats", "tok", "--format", "pdf"], "pdf"),
    Case("report: alpha 2", ["report", "tok", "--alpha", "2"], "--alpha"),
    # study recipes
    Case("study: recipe missing", [*STUDY, "nowhere.yaml"], "nowhere.yaml"),
    Case("study: recipe is a list", [*STUDY, "bad.yaml"], "bad.yaml", recipe("- a\n- b\n")),
    Case("study: unknown top-level key", [*STUDY, "bad.yaml"], "colour", recipe(QUICK_RECIPE + "colour: red\n")),
    Case("study: unknown nested key", [*STUDY, "bad.yaml"], "pretrain.epochz",
         recipe(QUICK_RECIPE + "pretrain:\n  epochz: 2\n")),
    Case("study: seeds not numbers", [*STUDY, "bad.yaml"], "seeds", recipe(QUICK_RECIPE + "seeds: [a, b]\n")),
    Case("study: no arms", [*STUDY, "bad.yaml"], "arms", recipe("name: bad\nbenchmark: codetrans\narms: []\n")),
    Case("study: unknown arm", [*STUDY, "bad.yaml"], "sideways", recipe("name: bad\nbenchmark: codetrans\n"
                                                                         "arms: [control, sideways]\n")),
    Case("study: tab-indented YAML", [*STUDY, "bad.yaml"], "bad.yaml", recipe(QUICK_RECIPE + "pretrain:\n\tepochs: 2\n")),
    Case("study: --set without =", [*STUDY, "recipe.yaml", "--set", "seeds"], "seeds"),
    Case("study: --set unknown key", [*STUDY, "recipe.yaml", "--set", "pretrain.colour=red"], "colour"),
    Case("study: --set bad YAML value", [*STUDY, "recipe.yaml", "--set", "seeds=[0,"], "seeds"),
    Case("study: workers 0", [*STUDY, "recipe.yaml", "--workers", "0"], "--workers"),
    Case("study: unknown executor", [*STUDY, "recipe.yaml", "--executor", "kubernetes"], "kubernetes"),
    Case("study: --out is a file", ["study", "recipe.yaml", "--out", "pred.txt"], "pred.txt"),
    # llm-eval, perturb, corpora
    Case("llm-eval: contaminated file missing", ["llm-eval", "--model", "e0", "--contaminated", "no.jsonl",
                                                 "--perturbed", "no2.jsonl"], "no.jsonl"),
    Case("llm-eval: repetitions 0", ["llm-eval", "--model", "e0", "--contaminated", "set.jsonl",
                                     "--perturbed", "set.jsonl", "--repetitions", "0"], "--repetitions",
         write("set.jsonl", '{"code": "int a;", "id": 0}\n')),
    Case("perturb: corrupt JSON line", ["perturb", "corrupt.jsonl", "--out", "out-perturb.jsonl"],
         "corrupt.jsonl", write("corrupt.jsonl", '{"code": "int a;"}\n{"code": \n')),
    Case("perturb: input missing", ["perturb", "no.jsonl", "--out", "out-perturb.jsonl"], "no.jsonl"),
    Case("corpora verify: no file found", ["corpora", "verify", "codetrans", "--corpora", "empty-corpora"],
         "empty-corpora", lambda root: (root / "empty-corpora").mkdir(exist_ok=True),
         env={"LAB_CORPORA": "empty-corpora"}),
]


def outputs_of(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--out"]


def judge(case: Case, result: subprocess.CompletedProcess, root: Path, existed: set[str]) -> tuple[str, str]:
    lines = [line for line in result.stderr.splitlines() if not line.startswith("lab: warning:")]
    message = lines[0] if lines else (result.stdout.strip().splitlines() or [""])[0]
    problems = []
    if result.returncode != 2:
        problems.append(f"rc {result.returncode}")
    if "Traceback" in result.stderr:
        problems.append("traceback")
    if len(lines) != 1 or not lines[0].startswith("lab: error: "):
        problems.append(f"{len(lines)} stderr lines")
    elif case.fragment not in lines[0]:
        problems.append(f"does not name {case.fragment!r}")
    for out in outputs_of(case.argv):
        if out not in existed and (root / out).exists():
            problems.append(f"left {out}")
        leftovers = [p.name for p in root.glob(Path(out).name + ".tmp-*")]
        if leftovers:
            problems.append(f"left {leftovers[0]}")
    return message, ("ok" if not problems else "FAIL: " + ", ".join(problems))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="Build (or reuse) the micro world here.")
    parser.add_argument("-k", default="", help="Only the cases whose name contains this.")
    args = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the folder holding the datasets (../shared/corpora here)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="lab-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "e0").is_dir():
        started = time.perf_counter()
        build_world(root)
        print(f"micro world built in {time.perf_counter() - started:.0f} s: {root}\n")
    print("| case | rc | message | verdict |\n|---|---|---|---|")
    failures = 0
    for case in (c for c in CASES if args.k in c.name):
        if case.setup:
            case.setup(root)
        existed = {out for out in outputs_of(case.argv) if (root / out).exists()}
        result = lab(case.argv, root, case.env, case.stdin)
        message, verdict = judge(case, result, root, existed)
        for out in set(outputs_of(case.argv)) - existed:  # a defect's output must not mask the next case
            shutil.rmtree(root / out, ignore_errors=True)
        failures += verdict != "ok"
        shown = message.replace("|", "\\|")
        shown = shown if len(shown) <= 140 else shown[:137] + "..."
        print(f"| {case.name} | {result.returncode} | {shown} | {verdict} |", flush=True)
    print(f"\n{len([c for c in CASES if args.k in c.name]) - failures} of "
          f"{len([c for c in CASES if args.k in c.name])} cases ok")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
