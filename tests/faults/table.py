"""The fault table: (command, fault, expected outcome) rows, run on the micro world of world.py.

Each row is one call of a constructor:

    error(name, argv, fragment, setup=None)  exit 2, one `lab: error:` line naming `fragment`,
                                             no traceback, no --out left, nothing else changed
    ok(name, argv, fragment, setup=None)     exit 0, `fragment` in the output: a fault the lab
                                             heals (or a dry run reports) itself
    same(name, argv, files)                  twice (or against a reference) byte-identical
    resumed(name, argv, files, when)         killed once `when` exists, resumed: as if never killed

`argv` runs with the world as working directory (control, paired, tok, pt, e0, ids.txt, ...:
see world.py; a command without --out names what it writes with `writes=`, as `lab report`
does); `setup` damages a copy of something there first (write, copy_then, truncate,
flip_byte, set_json). Outcomes are judged in outcomes.py; every one also checks that nothing
in the world but the row's own --out changed.

A new command gets its cases by adding rows: a prefix of its arguments (like INJECT below),
then at least its --out refusals (an input as --out, --out inside an input, --force into a
user's folder), its bad numbers (0, negative, nan, inf, huge), a damaged input of each kind it
reads, and a `same` row if its output should be reproducible. A row that finds a defect not yet
fixed keeps its expected outcome and gets `defect="..."` (an xfail, strict: it fails once fixed).
"""
from __future__ import annotations

import csv
import gzip
import json
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .world import PRETRAIN, ROOT, Result

Setup = Callable[[Path], None]
Damage = Callable[[Path], None]
Check = Callable[[Path, Result], "str | None"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    expect: str  # error, ok, same or resumed (outcomes.OUTCOMES)
    # error: what the one error line must name (the option or file); ok: what the output says
    fragment: str = ""
    setup: Setup | None = None  # the fault, made in the world before the run
    env: Mapping[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # modules that import as not installed
    check: Check | None = None  # ok: returns what is wrong, or None
    files: tuple[str, ...] = ()  # same, resumed: globs under --out compared byte for byte
    # same: rerun into the same --out with these (else into a second one); resumed: the resume's
    again: tuple[str, ...] | None = None
    reference: str | None = None  # same: compare with this folder of the world instead of a rerun
    writes: str = ""  # the output of a command without --out (lab report: STUDY/report)
    when: str = ""  # resumed: the path ({out}: the --out) whose appearance triggers the signal
    kill_with: int = signal.SIGKILL  # resumed: the signal
    defect: str | None = None  # a defect this row finds, not fixed yet: a strict xfail


def error(name: str, argv: list[str], fragment: str, setup: Setup | None = None,
          **more: Any) -> Case:
    return Case(name, tuple(argv), "error", fragment, setup, **more)


def ok(name: str, argv: list[str], fragment: str = "", setup: Setup | None = None,
       **more: Any) -> Case:
    return Case(name, tuple(argv), "ok", fragment, setup, **more)


def same(name: str, argv: list[str], files: tuple[str, ...] = (), **more: Any) -> Case:
    return Case(name, tuple(argv), "same", files=files, **more)


def resumed(name: str, argv: list[str], files: tuple[str, ...], when: str, **more: Any) -> Case:
    return Case(name, tuple(argv), "resumed", files=files, when=when,
                again=more.pop("again", ("--resume",)), **more)


# --- the faults ---------------------------------------------------------------------------------

def write(path: str, text: str | bytes) -> Setup:
    def make(root: Path) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(text, bytes) else target.write_text)(text)
    return make


def recipe(text: str) -> Setup:
    return write("bad.yaml", text)


def copy_then(source: str, target: str, *damages: Damage) -> Setup:
    """A fresh copy of a folder of the world, then damaged."""
    def make(root: Path) -> None:
        shutil.rmtree(root / target, ignore_errors=True)
        shutil.copytree(root / source, root / target, symlinks=True)
        for damage in damages:
            damage(root / target)
    return make


def _one(folder: Path, pattern: str) -> Path:
    return sorted(folder.glob(pattern))[0]


def truncate(pattern: str, keep: int = 100) -> Damage:
    def damage(folder: Path) -> None:
        path = _one(folder, pattern)
        path.write_bytes(path.read_bytes()[:keep])
    return damage


def flip_byte(pattern: str) -> Damage:
    """One bit of the middle byte changed: same size, other content."""
    def damage(folder: Path) -> None:
        path = _one(folder, pattern)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    return damage


def edit_document(folder: Path) -> None:
    """One word of a document changed, the shard still valid gzip and JSON."""
    shard = _one(folder, "corpus/*.jsonl.gz")
    data = gzip.decompress(shard.read_bytes())
    shard.write_bytes(gzip.compress(data.replace(b"return", b"retorn", 1), mtime=0))


def set_json(name: str, **values: Any) -> Damage:
    def damage(folder: Path) -> None:
        path = folder / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **values}, indent=2))
    return damage


def corrupt_line(folder: Path) -> None:
    shard = _one(folder, "corpus/*.jsonl.gz")
    lines = gzip.decompress(shard.read_bytes()).splitlines(keepends=True)
    lines[1] = b'{"text": "unterminated\n'
    shard.write_bytes(gzip.compress(b"".join(lines), mtime=0))


def table_study(name: str, extra: str = "") -> Setup:
    """A tables-only study shard (recipe.json, results.csv) of the mini micro recipe, as
    tests/test_merge.py builds them; `extra` is appended to its results.csv."""
    def make(root: Path) -> None:
        from lab.study.recipe import load_recipe, recipe_dict

        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        data = recipe_dict(load_recipe(ROOT / "recipes" / "mini" / "micro.yaml"))
        (folder / "recipe.json").write_text(json.dumps(data))
        row = {"stage": "evaluate-1", "group": "all", "model": "gpt2", "task": "codetrans",
               "arm": "control", "seed": 0, "epochs": 0, "train_size": 16, "bleu": 1.5}
        with open(folder / "results.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            writer.writeheader()
            writer.writerow(row)
            handle.write(extra)
    return make


def report_study(name: str, sample_id: str = "") -> Setup:
    """A finished study's tables (two arms, five seeds, epochs 0 and 1, per-sample scores), as
    tests/test_report.py writes them; `sample_id` is appended to every injected sample's id."""
    def make(root: Path) -> None:
        from test_report import CONTROL, PAIRED, write_study

        shutil.rmtree(root / name, ignore_errors=True)
        study = write_study(root / name, {"control": CONTROL, "paired": PAIRED})
        if sample_id:
            samples = study / "samples.csv"
            samples.write_text(samples.read_text(encoding="utf-8").replace(
                ",injected-", f",{sample_id}injected-"), encoding="utf-8")
    return make


def report_data_intact(name: str) -> Check:
    """The HTML report's data script ends where it should and holds no `<!--` (which would put
    the browser's parser in a state where the page's own script never runs)."""
    def check(root: Path, result: Result) -> str | None:
        page = (root / name / "report" / "report.html").read_text(encoding="utf-8")
        data = page.split("<script type='application/json'", 1)[-1].split("</script>", 1)[0]
        if "<!--" in data or page.count("<script") != 2:
            return f"{name}/report/report.html: a sample's text changed how the page parses"
        return None
    return check


def shards(*setups: Setup) -> Setup:
    def make(root: Path) -> None:
        for setup in setups:
            setup(root)
    return make


def damage_token_cache(root: Path) -> None:
    """A byte of a token-cache entry flipped in place (the original kept beside the world's
    files, to see it rebuilt)."""
    entry = _one(root / "cache", "shards/*/tokens.npy")
    kept = root / "tokens.orig.npy"
    if kept.exists():
        shutil.copyfile(kept, entry)
    else:
        shutil.copyfile(entry, kept)
    flip_byte(entry.name)(entry.parent)


def token_cache_rebuilt(root: Path, result: Result) -> str | None:
    entry = _one(root / "cache", "shards/*/tokens.npy")
    if entry.read_bytes() != (root / "tokens.orig.npy").read_bytes():
        return f"{entry.relative_to(root)} was not rebuilt"
    return None


# --- the rows -----------------------------------------------------------------------------------

INJECT = ["inject", "--benchmark", "codetrans", "--seed", "0", "--base-splits", "valid",
          "--limit", "300", "--out", "out-inject"]
TOKENIZER = ["tokenizer", "train", "--corpus", "control", "--out", "out-tok", "--vocab-size",
             "1200"]
PRE = [*PRETRAIN, "--out", "out-pt"]
FINETUNE = ["finetune", "--pretrained", "pt", "--task", "translation", "--epochs", "1",
            "--train-size", "8", "--out", "out-ft"]
EVALUATE = ["evaluate", "--model", "e0", "--task", "translation", "--ids", "ids.txt",
            "--max-new-tokens", "8", "--out", "out-eval"]
PROBE = ["probe", "--model", "pt", "--max-samples", "4", "--out", "out-probe"]
EXPORT = ["export", "pt", "--out", "out-export"]
BASELINE = ["baseline", "--task", "translation", "--metrics", "em", "--corpora", "corp",
            "--out", "out-baseline.json"]
PERTURB = ["perturb", "records.jsonl", "--code-fields", "code", "--out", "out-perturb.jsonl"]
SCORE = ["score", "--pred", "pred.txt", "--ref", "pred.txt", "--out", "out-score.json"]
LLM_EVAL = ["llm-eval", "--model", "e0", "--contaminated", "records.jsonl", "--perturbed",
            "records.jsonl"]
AUDIT = ["audit", "--benchmark", "codetrans", "--split", "test", "--no-near", "--against",
         "control", "--out", "out-audit"]
STUDY = ["study", "--dry-run", "--out", "out-study"]

QUICK_RECIPE = "name: bad\nbenchmark: codetrans\narms: [control, paired]\n"
YAML_BOMB = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
    f"{cur}: &{cur} [" + ",".join(f"*{prev}" for _ in range(9)) + "]"
    for prev, cur in zip("abcdefgh", "bcdefghi")]) + "\nname: *i\n"
REFUSED = "--force refused: not a previous"
NO_DEEPSPEED = ("deepspeed",)  # preflight rows run as if DeepSpeed were not installed
WEIGHTS_CHANGED = "{}: model/model.safetensors differs from the sha256 recorded when it was written"
FLIP_WEIGHTS = flip_byte("model/model.safetensors")  # same size: a weight's value changed
CUT_WEIGHTS = truncate("model/model.safetensors")

CASES = [
    # inject
    error("inject: unknown benchmark", [*INJECT, "--setting", "paired", "--benchmark", "nope"], "nope"),
    error("inject: unknown setting", [*INJECT, "--setting", "sideways"], "sideways"),
    error("inject: fraction above 1", [*INJECT, "--setting", "paired", "--fraction", "1.5"], "--fraction"),
    error("inject: negative fraction", [*INJECT, "--setting", "paired", "--fraction", "-0.1"], "--fraction"),
    error("inject: fraction nan", [*INJECT, "--setting", "paired", "--fraction", "nan"], "--fraction"),
    error("inject: fraction inf", [*INJECT, "--setting", "paired", "--fraction", "inf"], "--fraction inf"),
    error("inject: limit 0", [*INJECT, "--setting", "paired", "--limit", "0"], "--limit"),
    error("inject: repeat 0", [*INJECT, "--setting", "paired", "--repeat", "0"], "--repeat"),
    error("inject: repeat a billion", [*INJECT, "--setting", "paired", "--repeat", "1000000000"],
          "--repeat 1000000000: at most 10,000 copies"),
    error("inject: doses up to a billion", [*INJECT, "--setting", "paired", "--doses", "0,1000000000"],
          "--doses 0,1000000000: at most 10,000 copies"),
    error("inject: a dose beyond 64 bits", [*INJECT, "--setting", "paired", "--doses",
                                            "0,99999999999999999999999"], "at most 10,000 copies"),
    error("inject: seed beyond 2^32", [*INJECT, "--setting", "paired", "--fraction", "0.05", "--seed",
                                       "99999999999"], "--seed"),
    error("inject: unknown base corpus", [*INJECT, "--setting", "paired", "--base", "csn-cobol"], "csn-cobol"),
    error("inject: unknown base split", [*INJECT, "--setting", "paired", "--base-splits", "dev"], "dev"),
    error("inject: --corpora missing folder", [*INJECT, "--setting", "paired", "--corpora", "nowhere"], "nowhere"),
    error("inject: test ids file missing", [*INJECT, "--setting", "paired", "--test-ids", "no-ids.txt"], "no-ids.txt"),
    error("inject: test id unknown", [*INJECT, "--setting", "paired", "--test-ids", "bad-ids.txt"],
          "codetrans:test:999999", write("bad-ids.txt", "codetrans:test:999999\n")),
    error("inject: --out is an existing file", [*INJECT, "--setting", "paired", "--out", "pred.txt"], "pred.txt"),
    error("inject: --out an arm, no --force", [*INJECT, "--setting", "paired", "--out", "control"],
          "control: output directory exists"),
    error("inject: --force onto an arm, failing later, keeps it",
          [*INJECT, "--setting", "paired", "--out", "control", "--force"],
          "the base corpus holds only 300"),
    error("inject: --out is its --test-ids file", [*INJECT, "--setting", "paired", "--test-ids",
                                                   "ids.txt", "--out", "ids.txt", "--force"],
          "ids.txt: is an input of this command"),
    error("inject: --out holds its --corpora", [*INJECT, "--setting", "control", "--corpora", "corp",
                                                "--out", "corp", "--force"],
          "corp: contains an input of this command (corp/codetrans)"),
    error("inject: --force into a user's folder", [*INJECT, "--setting", "paired", "--out", "userdir",
                                                   "--force"], f"userdir: {REFUSED} lab-corpus"),
    same("inject: twice, the same shards", [*INJECT, "--setting", "paired", "--fraction", "0.05"],
         ("corpus/*",)),
    # tokenizer
    error("tokenizer: vocabulary of 0", [*TOKENIZER, "--vocab-size", "0"], "--vocab-size"),
    error("tokenizer: negative vocabulary", [*TOKENIZER, "--vocab-size", "-5"], "--vocab-size -5"),
    error("tokenizer: corpus is a text file", [*TOKENIZER, "--corpus", "pred.txt"], "pred.txt"),
    error("tokenizer: unknown benchmark", [*TOKENIZER, "--benchmarks", "codetrans,nope"], "nope"),
    error("tokenizer: --out is its corpus", [*TOKENIZER, "--out", "control", "--force"],
          "control: is an input of this command"),
    error("tokenizer: --out inside its corpus", [*TOKENIZER, "--out", "control/tok"],
          "control/tok: lies inside an input of this command"),
    error("tokenizer: --force over a model", [*TOKENIZER, "--out", "pt", "--force"],
          f"pt: {REFUSED} lab-tokenizer output (it holds a lab-pretrained output)"),
    error("tokenizer: --force into a user's folder", [*TOKENIZER, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-tokenizer"),
    error("tokenizer: corpus shard changed, same size", [*TOKENIZER, "--corpus", "ctl-flip"],
          "ctl-flip/corpus/part-00000.jsonl.gz",
          copy_then("control", "ctl-flip", flip_byte("corpus/*.jsonl.gz"))),
    error("tokenizer: a document of its corpus edited", [*TOKENIZER, "--corpus", "ctl-edit"],
          "ctl-edit/corpus/part-00000.jsonl.gz: sha256 differs",
          copy_then("control", "ctl-edit", edit_document)),
    error("tokenizer: corpus_sha256 edited", [*TOKENIZER, "--corpus", "ctl-sha"],
          "ctl-sha/manifest.json: corpus_sha256 does not match",
          copy_then("control", "ctl-sha", set_json("manifest.json", corpus_sha256="0" * 64))),
    same("tokenizer: --force replaces its own tokenizer, byte for byte", TOKENIZER,
         ("tokenizer.json",), again=("--force",)),
    # pretrain
    error("pretrain: unknown model family", [*PRE, "--model", "bert"], "bert"),
    error("pretrain: unknown preset", [*PRE, "--preset", "huge"], "huge"),
    error("pretrain: block larger than the preset", [*PRE, "--block-size", "100000"], "--block-size"),
    error("pretrain: batch size 0", [*PRE, "--batch-size", "0"], "--batch-size"),
    error("pretrain: negative weight decay", [*PRE, "--weight-decay", "-1"], "--weight-decay"),
    error("pretrain: weight decay inf", [*PRE, "--weight-decay", "inf"], "--weight-decay inf"),
    error("pretrain: save every 0 steps", [*PRE, "--save-steps", "0"], "--save-steps"),
    error("pretrain: max steps -5", [*PRE, "--max-steps", "-5"], "--max-steps -5: must be >= 1"),
    error("pretrain: max steps 0", [*PRE, "--max-steps", "0"], "--max-steps 0: must be >= 1"),
    error("pretrain: unknown attention kernel", [*PRE, "--attention", "dense"],
          "--attention dense: choose from mask, flex"),
    error("pretrain: unknown loop", [*PRE, "--loop", "sideways"],
          "--loop sideways: choose from trainer, plain"),
    error("pretrain: plain loop with DeepSpeed", [*PRE, "--loop", "plain", "--deepspeed", "ds.json"],
          "--loop plain: the plain loop has no DeepSpeed", write("ds.json", "{}")),
    error("pretrain: lr nan", [*PRE, "--lr", "nan"], "--lr nan: must be a finite number"),
    error("pretrain: lr inf", [*PRE, "--lr", "inf"], "--lr inf: must be a finite number"),
    error("pretrain: negative lr", [*PRE, "--lr", "-1"], "--lr -1.0: must be > 0"),
    error("pretrain: negative epochs", [*PRE, "--epochs", "-1"], "--epochs -1.0: must be >= 0"),
    error("pretrain: negative warm-up", [*PRE, "--warmup-steps", "-1"], "--warmup-steps -1"),
    error("pretrain: mask probability 1.5", [*PRE, "--mlm-probability", "1.5"], "--mlm-probability 1.5"),
    error("pretrain: DeepSpeed config not JSON", [*PRE, "--deepspeed", "ds.json"], "ds.json",
          write("ds.json", "{zero: 2")),
    error("pretrain: tokenizer.json truncated", [*PRE, "--tokenizer", "tok-cut"], "tok-cut",
          copy_then("tok", "tok-cut", truncate("tokenizer.json"))),
    error("pretrain: tokenizer.json changed, same size", [*PRE, "--tokenizer", "tok-flip"],
          "--tokenizer tok-flip: tokenizer.json differs from the sha256",
          copy_then("tok", "tok-flip", flip_byte("tokenizer.json"))),
    error("pretrain: corpus manifest not JSON", [*PRE, "--corpus", "arm-badjson"], "arm-badjson",
          copy_then("paired", "arm-badjson", write("manifest.json", '{"kind":'))),
    error("pretrain: corpus shard with a corrupt JSON line", [*PRE, "--corpus", "arm-badline"],
          "arm-badline", copy_then("paired", "arm-badline", corrupt_line)),
    error("pretrain: corpus shard changed, same size", [*PRE, "--corpus", "arm-flip"],
          "arm-flip/corpus/part-00000.jsonl.gz: sha256 differs",
          copy_then("paired", "arm-flip", flip_byte("corpus/*.jsonl.gz"))),
    error("pretrain: a document of its corpus edited", [*PRE, "--corpus", "arm-edit"],
          "arm-edit/corpus/part-00000.jsonl.gz: sha256 differs",
          copy_then("paired", "arm-edit", edit_document)),
    error("pretrain: corpus_sha256 edited", [*PRE, "--corpus", "arm-sha"],
          "arm-sha/manifest.json: corpus_sha256 does not match",
          copy_then("paired", "arm-sha", set_json("manifest.json", corpus_sha256="0" * 64))),
    error("pretrain: corpus is a tokenizer folder", [*PRE, "--corpus", "tok"], "tok"),
    error("pretrain: --resume with nothing to resume", [*PRE, "--resume"], "out-pt"),
    error("pretrain: --out is its corpus", [*PRE, "--out", "paired", "--force"],
          "paired: is an input of this command"),
    error("pretrain: --out inside its corpus", [*PRE, "--out", "paired/corpus/x"],
          "paired/corpus/x: lies inside an input of this command (paired)"),
    error("pretrain: --out is its tokenizer", [*PRE, "--out", "tok", "--force"],
          "tok: is an input of this command"),
    error("pretrain: --force over a fine-tuned model", [*PRE, "--out", "e0", "--force"],
          f"e0: {REFUSED} lab-pretrained output (it holds a lab-finetuned output)"),
    error("pretrain: --force into a user's folder", [*PRE, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-pretrained"),
    ok("pretrain: a token-cache entry changed in place is rebuilt", PRE,
       "lab: warning: token cache", damage_token_cache, check=token_cache_rebuilt),
    same("pretrain: again, the same weights as pt", PRE, ("model/model.safetensors",),
         reference="pt"),
    resumed("pretrain: killed after a checkpoint, resumed",
            [*PRE, "--max-steps", "24", "--save-steps", "4"], ("model/model.safetensors",),
            "{out}.partial/checkpoints/checkpoint-4/lab_checkpoint.json"),  # written last
    # finetune
    error("finetune: unknown task", [*FINETUNE, "--task", "summarise"], "summarise"),
    error("finetune: negative train size", [*FINETUNE, "--train-size", "-1"], "--train-size"),
    error("finetune: train size 0", [*FINETUNE, "--train-size", "0"], "--train-size 0"),
    error("finetune: batch size 0", [*FINETUNE, "--batch-size", "0"], "--batch-size 0"),
    error("finetune: negative epochs", [*FINETUNE, "--epochs", "-1"], "--epochs -1"),
    error("finetune: lr nan", [*FINETUNE, "--lr", "nan"], "--lr nan: must be a finite number"),
    error("finetune: --select worst", [*FINETUNE, "--select", "worst"], "--select"),
    error("finetune: pretrained is a corpus", [*FINETUNE, "--pretrained", "paired"], "paired"),
    error("finetune: pretrained weights garbage", [*FINETUNE, "--pretrained", "pt-garbage"], "pt-garbage",
          copy_then("pt", "pt-garbage", write("model/model.safetensors", b"\0" * 64))),
    error("finetune: pretrained config.json not JSON", [*FINETUNE, "--pretrained", "pt-badcfg"], "pt-badcfg",
          copy_then("pt", "pt-badcfg", write("model/config.json", "{"))),
    error("finetune: pretrained weights changed in place", [*FINETUNE, "--pretrained", "pt-flip"],
          WEIGHTS_CHANGED.format("--pretrained pt-flip"), copy_then("pt", "pt-flip", FLIP_WEIGHTS)),
    error("finetune: pretrained weights cut short", [*FINETUNE, "--pretrained", "pt-cut"],
          "--pretrained pt-cut: model/model.safetensors has 100 bytes",
          copy_then("pt", "pt-cut", CUT_WEIGHTS)),
    error("finetune: --out is its model", [*FINETUNE, "--out", "pt", "--force"],
          "pt: is an input of this command"),
    error("finetune: --out inside its model", [*FINETUNE, "--out", "pt/model/ft"],
          "pt/model/ft: lies inside an input of this command (pt)"),
    error("finetune: --force over a corpus", [*FINETUNE, "--out", "paired", "--force"],
          f"paired: {REFUSED} lab-finetuned output (it holds a lab-corpus output)"),
    error("finetune: --force into a user's folder", [*FINETUNE, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-finetuned"),
    # evaluate
    error("evaluate: unknown split", [*EVALUATE, "--split", "holdout"], "holdout"),
    error("evaluate: unknown decoding", [*EVALUATE, "--decoding", "psychic"], "psychic"),
    error("evaluate: unknown metric", [*EVALUATE, "--metrics", "bleu,vibes"], "vibes"),
    error("evaluate: 0 new tokens", [*EVALUATE, "--max-new-tokens", "0"], "--max-new-tokens"),
    error("evaluate: top-p above 1", [*EVALUATE, "--decoding", "sample", "--top-p", "2"], "--top-p"),
    error("evaluate: top-p nan", [*EVALUATE, "--decoding", "sample", "--top-p", "nan"], "--top-p nan"),
    error("evaluate: temperature nan", [*EVALUATE, "--decoding", "sample", "--temperature", "nan"],
          "--temperature nan: must be a finite number"),
    error("evaluate: empty ids file", [*EVALUATE, "--ids", "empty-ids.txt"], "empty-ids.txt",
          write("empty-ids.txt", "")),
    error("evaluate: ids of another benchmark", [*EVALUATE, "--ids", "concode-ids.txt"], "concode",
          write("concode-ids.txt", "concode:test:0\n")),
    error("evaluate: model is a tokenizer folder", [*EVALUATE, "--model", "tok"], "tok"),
    error("evaluate: weights changed in place", [*EVALUATE, "--model", "e0-flip"],
          WEIGHTS_CHANGED.format("--model e0-flip"), copy_then("e0", "e0-flip", FLIP_WEIGHTS)),
    error("evaluate: weights cut short", [*EVALUATE, "--model", "e0-cut"],
          "--model e0-cut: model/model.safetensors has 100 bytes", copy_then("e0", "e0-cut", CUT_WEIGHTS)),
    error("evaluate: its tokenizer changed in place", [*EVALUATE, "--model", "e0-tok"],
          "--model e0-tok: model/tokenizer.json differs from the sha256",
          copy_then("e0", "e0-tok", flip_byte("model/tokenizer.json"))),
    error("evaluate: --out is its model", [*EVALUATE, "--out", "e0", "--force"],
          "e0: is an input of this command"),
    error("evaluate: --out holds its model", [*EVALUATE, "--out", ".", "--force"],
          ".: contains an input of this command (e0)"),
    error("evaluate: --out is its ids file", [*EVALUATE, "--out", "ids.txt", "--force"],
          "ids.txt: is an input of this command"),
    error("evaluate: --force over another model", [*EVALUATE, "--out", "pt", "--force"],
          f"pt: {REFUSED} lab-evaluation output (it holds a lab-pretrained output)"),
    error("evaluate: --force into a user's folder", [*EVALUATE, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-evaluation"),
    same("evaluate: twice, the same predictions", EVALUATE, ("predictions.jsonl",)),
    # probe
    error("probe: min-k 0", [*PROBE, "--min-k", "0"], "--min-k"),
    error("probe: min-k 1.5", [*PROBE, "--min-k", "1.5"], "--min-k"),
    error("probe: min-k nan", [*PROBE, "--min-k", "nan"], "--min-k nan"),
    error("probe: negative samples", [*PROBE, "--max-samples", "-3"], "--max-samples -3"),
    error("probe: unknown form", [*PROBE, "--form", "sideways"], "--form"),
    error("probe: groups is not a corpus", [*PROBE, "--groups", "tok"], "tok"),
    error("probe: weights changed in place", [*PROBE, "--model", "pt-flip"],
          WEIGHTS_CHANGED.format("--model pt-flip"), copy_then("pt", "pt-flip", FLIP_WEIGHTS)),
    error("probe: --out is its model", [*PROBE, "--out", "pt", "--force"],
          "pt: is an input of this command"),
    error("probe: --out inside its --groups", [*PROBE, "--groups", "paired", "--out", "paired/probe"],
          "paired/probe: lies inside an input of this command (paired)"),
    error("probe: --force into a user's folder", [*PROBE, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-probe"),
    # export
    error("export: weights changed in place", [*EXPORT[:1], "pt-flip", *EXPORT[2:]],
          WEIGHTS_CHANGED.format("MODEL pt-flip"), copy_then("pt", "pt-flip", FLIP_WEIGHTS)),
    error("export: weights cut short", [*EXPORT[:1], "pt-cut", *EXPORT[2:]],
          "MODEL pt-cut: model/model.safetensors has 100 bytes", copy_then("pt", "pt-cut", CUT_WEIGHTS)),
    error("export: --out holds its model", [*EXPORT, "--out", ".", "--force"],
          ".: contains an input of this command (pt)"),
    error("export: --out is its model", [*EXPORT, "--out", "pt", "--force"],
          "pt: is an input of this command"),
    error("export: --out inside its model", [*EXPORT, "--out", "pt/model", "--force"],
          "pt/model: lies inside an input of this command (pt)"),
    error("export: --force over another model", [*EXPORT, "--out", "e0", "--force"],
          f"e0: {REFUSED} lab-export output"),
    error("export: --force into a user's folder", [*EXPORT, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-export"),
    same("export: twice, the same files", EXPORT, ("model.safetensors", "config.json")),
    # baseline
    error("baseline: --out a dataset file", [*BASELINE, "--out", "corp/codetrans/test.java-cs.txt.java",
                                             "--force"],
          "corp/codetrans/test.java-cs.txt.java: lies inside an input of this command (corp/codetrans)"),
    error("baseline: --out exists, no --force", [*BASELINE, "--out", "existing.json"],
          "existing.json: output file exists (use --force to replace it)"),
    error("baseline: --force over a file it did not write", [*BASELINE, "--out", "existing.json", "--force"],
          f"existing.json: {REFUSED} lab-baselines"),
    same("baseline: twice, the same scores", BASELINE),
    # score
    error("score: predictions file missing", ["score", "--pred", "no-pred.txt", "--ref", "ref.txt"], "no-pred.txt"),
    error("score: line counts differ", ["score", "--pred", "pred.txt", "--ref", "ref.txt"], "ref.txt"),
    error("score: unknown metric", ["score", "--pred", "pred.txt", "--ref", "pred.txt", "--metrics", "vibes"],
          "vibes"),
    error("score: predictions not UTF-8", ["score", "--pred", "latin1.txt", "--ref", "ref.txt"], "latin1.txt",
          write("latin1.txt", "caf\xe9\n".encode("latin-1"))),
    error("score: unknown language", [*SCORE, "--language", "cobol"], "--language 'cobol'"),
    error("score: --out is its predictions", [*SCORE, "--out", "pred.txt"],
          "pred.txt: is an input of this command"),
    error("score: --out a user's file", [*SCORE, "--out", "userdir/notes.txt"],
          f"userdir/notes.txt: {REFUSED} lab-scores"),
    same("score: twice, the same scores", SCORE),
    # stats / report
    error("stats: folder that is not a study", ["stats", "tok"], "tok"),
    error("stats: unknown format", ["stats", "tok", "--format", "pdf"], "pdf"),
    error("report: alpha 2", ["report", "tok", "--alpha", "2"], "--alpha"),
    # merge
    error("merge: a shard's results.csv with a short line",
          ["merge", "shard-a", "shard-short", "--out", "out-merge"],
          "shard-short/results.csv: line 3 has fewer cells than the header",
          shards(table_study("shard-a"), table_study("shard-short", "evaluate-3,all,gpt2\n"))),
    error("merge: a shard's results.csv with text for a number",
          ["merge", "shard-a", "shard-text", "--out", "out-merge"],
          "shard-text/results.csv: line 3, column seed: 'x' is text",
          shards(table_study("shard-a"), table_study(
              "shard-text", "evaluate-3,all,gpt2,codetrans,control,x,0,16,1.0\n"))),
    error("merge: --out is a shard", ["merge", "shard-a", "--out", "shard-a", "--force"],
          "shard-a: is an input of this command", table_study("shard-a")),
    error("merge: --out a user's folder", ["merge", "shard-a", "--out", "userdir"],
          "userdir: output directory exists (use --force", table_study("shard-a")),
    error("merge: --force into a user's folder", ["merge", "shard-a", "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-merged", table_study("shard-a")),
    error("merge: --out inside a shard", ["merge", "shard-a", "--out", "shard-a/merged"],
          "shard-a/merged: lies inside an input of this command", table_study("shard-a")),
    # report
    same("report: twice, byte-identical figures and tables", ["report", "rstudy"],
         ("decay-bleu.svg", "decay-bleu.png", "table.csv", "table.tex", "primary.csv"),
         writes="rstudy/report", again=(), setup=report_study("rstudy")),
    ok("report: a sample id holding <!--<script>", ["report", "rstudy-html"], "report.html",
       report_study("rstudy-html", "<!--<script>"), writes="rstudy-html/report",
       check=report_data_intact("rstudy-html")),
    # study recipes
    error("study: recipe missing", [*STUDY, "nowhere.yaml"], "nowhere.yaml"),
    error("study: recipe is a list", [*STUDY, "bad.yaml"], "bad.yaml", recipe("- a\n- b\n")),
    error("study: unknown top-level key", [*STUDY, "bad.yaml"], "colour", recipe(QUICK_RECIPE + "colour: red\n")),
    error("study: unknown nested key", [*STUDY, "bad.yaml"], "pretrain.epochz",
          recipe(QUICK_RECIPE + "pretrain:\n  epochz: 2\n")),
    error("study: seeds not numbers", [*STUDY, "bad.yaml"], "seeds", recipe(QUICK_RECIPE + "seeds: [a, b]\n")),
    error("study: no arms", [*STUDY, "bad.yaml"], "arms", recipe("name: bad\nbenchmark: codetrans\narms: []\n")),
    error("study: unknown arm", [*STUDY, "bad.yaml"], "sideways",
          recipe("name: bad\nbenchmark: codetrans\narms: [control, sideways]\n")),
    error("study: tab-indented YAML", [*STUDY, "bad.yaml"], "bad.yaml", recipe(QUICK_RECIPE + "pretrain:\n\tepochs: 2\n")),
    error("study: billion-laughs YAML", [*STUDY, "bad.yaml"], "line 2: YAML alias *a refused",
          recipe(YAML_BOMB)),
    error("study: injection.repeat a billion", [*STUDY, "bad.yaml"],
          "injection.repeat: at most 10,000 copies",
          recipe(QUICK_RECIPE + "injection:\n  repeat: 1000000000\n")),
    error("study: stages_per_gpu 0", [*STUDY, "bad.yaml"],
          "resources.stages_per_gpu: expected int 1..64 or null, got 0",
          recipe(QUICK_RECIPE + "resources:\n  stages_per_gpu: 0\n")),
    error("study: unknown DeepSpeed config", [*STUDY, "bad.yaml"],
          "resources.pretrain.deepspeed: zero9: no such DeepSpeed config",
          recipe(QUICK_RECIPE + "resources:\n  pretrain:\n    deepspeed: zero9\n")),
    error("study: --set without =", [*STUDY, "recipe.yaml", "--set", "seeds"], "seeds"),
    error("study: --set unknown key", [*STUDY, "recipe.yaml", "--set", "pretrain.colour=red"], "colour"),
    error("study: --set bad YAML value", [*STUDY, "recipe.yaml", "--set", "seeds=[0,"], "seeds"),
    error("study: workers 0", [*STUDY, "recipe.yaml", "--workers", "0"], "--workers"),
    error("study: unknown executor", [*STUDY, "recipe.yaml", "--executor", "kubernetes"], "kubernetes"),
    error("study: --out is a file", ["study", "recipe.yaml", "--out", "pred.txt"], "pred.txt"),
    # issue 59 row 14: a dry run exits 2 with the real run's line (they share check_start)
    error("study: DeepSpeed asked for, not installed (dry run)", [*STUDY, "bad.yaml"],
          "a DeepSpeed config is requested but deepspeed does not import",
          recipe(QUICK_RECIPE + "resources:\n  pretrain:\n    deepspeed: zero2\n"), absent=NO_DEEPSPEED),
    error("study: DeepSpeed config not JSON (dry run)", [*STUDY, "bad.yaml"],
          "deepspeed config ds.json: not valid JSON",
          shards(write("ds.json", "{zero: 2"),
                 recipe(QUICK_RECIPE + "resources:\n  pretrain:\n    deepspeed: ds.json\n")),
          absent=NO_DEEPSPEED),
    error("study: device cuda:99 (dry run)", [*STUDY, "bad.yaml"], "resources.device:",
          recipe(QUICK_RECIPE + "resources:\n  device: cuda:99\n")),
    error("study: --out a corpus folder (dry run)", [*STUDY, "recipe.yaml", "--out", "control"],
          "control: exists and is not a study directory (no recipe.json or study.json)"),
    error("study: --out a corpus folder", ["study", "recipe.yaml", "--out", "control"],
          "control: exists and is not a study directory"),
    error("study: --out inside a dataset folder", [*STUDY, "recipe.yaml", "--corpora", "corp",
                                                   "--out", "corp/codetrans/study"],
          "corp/codetrans/study: lies inside an input of this command (corp/codetrans)"),
    # llm-eval, perturb, audit, corpora
    error("llm-eval: contaminated file missing", ["llm-eval", "--model", "e0", "--contaminated", "no.jsonl",
                                                  "--perturbed", "no2.jsonl"], "no.jsonl"),
    error("llm-eval: repetitions 0", [*LLM_EVAL, "--repetitions", "0"], "--repetitions"),
    error("llm-eval: a lab model's weights changed in place",
          ["llm-eval", "--model", "e0-flip", "--contaminated", "qa.jsonl", "--perturbed",
           "qa.jsonl", "--task", "java2cs"],
          WEIGHTS_CHANGED.format("--model e0-flip"),
          shards(copy_then("e0", "e0-flip", FLIP_WEIGHTS),
                 write("qa.jsonl", '{"question": "int a;", "answer": "int a;"}\n'))),
    error("llm-eval: temperature nan", [*LLM_EVAL, "--temperature", "nan"], "--temperature nan"),
    error("llm-eval: top-p nan", [*LLM_EVAL, "--top-p", "nan"], "--top-p nan"),
    error("llm-eval: --out is its model", [*LLM_EVAL, "--out", "e0", "--force"],
          "e0: is an input of this command"),
    error("perturb: corrupt JSON line", ["perturb", "corrupt.jsonl", "--out", "out-perturb.jsonl"],
          "corrupt.jsonl", write("corrupt.jsonl", '{"code": "int a;"}\n{"code": \n')),
    error("perturb: input missing", ["perturb", "no.jsonl", "--out", "out-perturb.jsonl"], "no.jsonl"),
    error("perturb: negative tolerance", [*PERTURB, "--tolerance", "-1"], "--tolerance must be >= 0"),
    error("perturb: tolerance nan", [*PERTURB, "--tolerance", "nan"],
          "--tolerance nan: must be a finite number"),
    error("perturb: tolerance inf", [*PERTURB, "--tolerance", "inf"],
          "--tolerance inf: must be a finite number"),
    error("perturb: --out is its input", [*PERTURB, "--out", "records.jsonl", "--force"],
          "records.jsonl: output would overwrite the input"),
    error("perturb: --out a user's file", [*PERTURB, "--out", "userdir/notes.txt", "--force"],
          f"userdir/notes.txt: {REFUSED} lab-perturbation"),
    same("perturb: twice, the same records", PERTURB),
    error("audit: --out is its corpus", [*AUDIT, "--out", "control", "--force"],
          "control: is an input of this command"),
    error("audit: --force into a user's folder", [*AUDIT, "--out", "userdir", "--force"],
          f"userdir: {REFUSED} lab-audit"),
    error("corpora verify: no file found", ["corpora", "verify", "codetrans", "--corpora", "empty-corpora"],
          "empty-corpora", write("empty-corpora/.keep", ""), env={"LAB_CORPORA": "empty-corpora"}),
    error("corpora verify: a known file truncated", ["corpora", "verify", "codetrans", "--corpora", "corp-cut"],
          "differs from the published test.java-cs.txt.java",
          copy_then("corp", "corp-cut", truncate("codetrans/test.java-cs.txt.java", 1000))),
    error("corpora verify: an arm's shard changed, same size", ["corpora", "verify", "arm-flip"],
          "arm-flip/corpus/part-00000.jsonl.gz: sha256 differs",
          copy_then("paired", "arm-flip", flip_byte("corpus/*.jsonl.gz"))),
    error("corpora verify: an arm's corpus_sha256 edited", ["corpora", "verify", "arm-sha"],
          "arm-sha/manifest.json: corpus_sha256 does not match",
          copy_then("paired", "arm-sha", set_json("manifest.json", corpus_sha256="0" * 64))),
]

assert len({case.name for case in CASES}) == len(CASES), "row names must be unique"
