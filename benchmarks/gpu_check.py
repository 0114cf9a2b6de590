"""The GPU check a maintainer runs in one command (scripts/gpu-check.sh runs this file).

Each part runs in its own process with its own time limit, writes its numbers into
OUT/results.json as soon as it ends (a part that fails or runs out of time leaves the others'),
and the last lines printed are one verdict per target of issue 46:

  peak          the bf16 matmul rate this GPU reaches (8192^3), the MFU denominator beside the
                lab's table (lab.train.speed.PEAK_BF16_TFLOPS)
  data          a control corpus of CSN-format Java (the valid split) and a 16k BPE tokenizer
  correctness   the FlexAttention document kernel against the 4D-mask path, per document: logits
                in float32 and in bf16 autocast, and the gradients of one backward pass
  plain-gpt2    a plain compiled loop of the paper GPT-2 shape (benchmarks/plain_loop.py)
  lab-gpt2      `lab pretrain` of the same shape with the GPU defaults (one process: the plain
                loop, lab.train.loop); its steady rate
  lab-gpt2-trainer  the same through the HF Trainer (--loop trainer), for comparison
  quickstart    `lab study recipes/quickstart.yaml` on the GPU, timed whole, stages included
  plain-roberta, lab-roberta    the same pair for RoBERTa
  deepspeed     `lab pretrain` under DeepSpeed ZeRO-2 in bf16, one GPU (world size 1)

    python benchmarks/gpu_check.py --out runs/gpu-check            # on a GPU machine
    python benchmarks/gpu_check.py --out /tmp/gc --dry-run         # on a CPU: tiny shapes, a few
                                                                   # steps, the study's plan only
Targets: lab-gpt2 >= 0.95x plain-gpt2 and >= 40% MFU; lab-roberta >= 0.95x plain-roberta;
quickstart <= 60 s; per-document logits within bf16 tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
PARTS = ("peak", "data", "correctness", "plain-gpt2", "lab-gpt2", "plain-roberta", "lab-roberta",
         "quickstart", "deepspeed")
# Seconds each part may take on a GPU (compilation included).
LIMITS = {"peak": 60, "data": 120, "correctness": 150, "plain-gpt2": 150, "lab-gpt2": 240,
          "quickstart": 300, "plain-roberta": 150, "lab-roberta": 240, "deepspeed": 240}
# The paper shape; --dry-run swaps in a micro one.
SHAPE = {"preset": "paper", "layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "block": 512,
         "batch": 32, "vocab": 16000, "steps": 160, "plain_steps": 40}
DRY_SHAPE = {"preset": "micro", "layers": 2, "hidden": 64, "heads": 2, "ffn": 128, "block": 128,
             "batch": 4, "vocab": 1200, "steps": 8, "plain_steps": 3}
# Seconds each part is expected to take on an H100/H200 (what --budget plans with).
EXPECTED = {"peak": 15, "data": 30, "correctness": 40, "plain-gpt2": 50, "lab-gpt2": 80,
            "quickstart": 90, "plain-roberta": 50, "lab-roberta": 80, "deepspeed": 60,
            "lab-gpt2-mask": 70, "lab-gpt2-trainer": 80}
TARGETS = {"ratio": 0.95, "mfu": 0.40, "quickstart_seconds": 60.0}


def lab_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lab.cli", *args]


class Check:
    def __init__(self, out: Path, dry_run: bool):
        self.out, self.dry_run = out, dry_run
        self.shape = DRY_SHAPE if dry_run else SHAPE
        self.results_path = out / "results.json"
        self.results: dict[str, Any] = (json.loads(self.results_path.read_text())
                                        if self.results_path.is_file() else {})

    def save(self, part: str, result: dict[str, Any]) -> None:
        self.results[part] = result
        tmp = self.results_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        os.replace(tmp, self.results_path)

    deadline: float | None = None  # perf_counter() by which every part must have ended

    def run(self, part: str, command: list[str], env: dict[str, str] | None = None
            ) -> tuple[int, float]:
        """A part's process, its output in OUT/PART.log; (exit code, seconds); 124 on time out."""
        log = self.out / f"{part}.log"
        started = time.perf_counter()
        limit = LIMITS.get(part.removesuffix("-mask").removesuffix("-trainer"), 240) * (
            3 if self.dry_run else 1)
        if self.deadline is not None:
            limit = max(1.0, min(limit, self.deadline - started))
        with open(log, "a") as handle:
            handle.write("$ " + " ".join(command) + "\n")
            handle.flush()
            try:
                code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                      cwd=REPO, env={**os.environ, **(env or {})},
                                      timeout=limit).returncode
            except subprocess.TimeoutExpired:
                code = 124
        seconds = round(time.perf_counter() - started, 1)
        if code:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            print(f"  {part}: rc {code} after {seconds} s; {' | '.join(tail)[-400:]}", flush=True)
        return code, seconds

    # --- parts ----------------------------------------------------------------------------

    def peak(self) -> dict[str, Any]:
        target = self.out / "peak.json"
        size = ["--peak-size", "256"] if self.dry_run else []
        code, seconds = self.run("peak", [sys.executable, str(REPO / "benchmarks" / "plain_loop.py"),
                                          "--measure-peak", "--steps", "0", "--json", str(target),
                                          *size])
        result = json.loads(target.read_text()) if target.is_file() else {}
        return {"rc": code, "seconds": seconds, "tflops": result.get("peak_tflops_measured"),
                "device": result.get("device_name")}

    def data(self) -> dict[str, Any]:
        corpus, tokenizer = self.out / "corpus", self.out / "tokenizer"
        limit = "300" if self.dry_run else "11000"
        code, seconds = self.run("data", lab_command(
            "inject", "--benchmark", "codetrans", "--setting", "control", "--seed", "0",
            "--base-splits", "valid", "--limit", limit, "--out", str(corpus), "--force"))
        if code == 0:
            more, extra = self.run("data", lab_command(
                "tokenizer", "train", "--corpus", str(corpus), "--out", str(tokenizer),
                "--benchmarks", "codetrans", "--vocab-size", str(self.shape["vocab"]), "--force"))
            code, seconds = more, seconds + extra
        return {"rc": code, "seconds": seconds}

    def correctness(self) -> dict[str, Any]:
        target = self.out / "correctness.json"
        code, seconds = self.run("correctness", [
            sys.executable, str(Path(__file__)), "--correctness-only", "--out", str(self.out),
            *(["--dry-run"] if self.dry_run else [])])
        result = json.loads(target.read_text()) if target.is_file() else {}
        return {"rc": code, "seconds": seconds, **result}

    def plain(self, family: str) -> dict[str, Any]:
        part, target = f"plain-{family}", self.out / f"plain-{family}.json"
        s = self.shape
        code, seconds = self.run(part, [
            sys.executable, str(REPO / "benchmarks" / "plain_loop.py"), "--model", family,
            "--layers", str(s["layers"]), "--hidden", str(s["hidden"]), "--heads", str(s["heads"]),
            "--ffn", str(s["ffn"]), "--vocab", str(s["vocab"]), "--block", str(s["block"]),
            "--batch", str(s["batch"]), "--steps", str(s["plain_steps"]), "--warmup", "5",
            "--compile", "--dtype", "fp32" if self.dry_run else "bf16", "--json", str(target),
            *(["--peak-tflops", str(self.peak_tflops())] if self.peak_tflops() else [])])
        result = json.loads(target.read_text()) if target.is_file() else {}
        mean = result.get("step_seconds_mean")
        return {"rc": code, "seconds": seconds,
                # the lab's steady rate is total tokens over total time: compared with the same
                "tokens_per_second": s["batch"] * s["block"] / mean if mean else None,
                "tokens_per_second_median_step": result.get("tokens_per_second"),
                **{k: result.get(k) for k in ("step_seconds_median", "mfu",
                                              "compile_warmup_seconds", "max_memory_allocated_gib",
                                              "loss_finite")}}

    def lab(self, family: str, extra: tuple[str, ...] = (), part: str | None = None
            ) -> dict[str, Any]:
        part = part or f"lab-{family}"
        out = self.out / part
        s = self.shape
        if self.dry_run and "--loop" not in extra:  # a CPU's default is the Trainer
            extra = (*extra, "--loop", "plain")
        code, seconds = self.run(part, lab_command(
            "pretrain", "--model", family, "--preset", s["preset"], "--corpus",
            str(self.out / "corpus"), "--tokenizer", str(self.out / "tokenizer"), "--out", str(out),
            "--block-size", str(s["block"]), "--batch-size", str(s["batch"]), "--max-steps",
            str(s["steps"]), "--lr", "5e-4", "--warmup-steps", "10", "--save-steps", "100000",
            "--log-steps", "20", "--report-to", "none", "--cache-dir", str(self.out / "cache"),
            "--force", *extra))
        manifest_path = out / "manifest.json"
        if not manifest_path.is_file():
            return {"rc": code or 1, "seconds": seconds}
        manifest = json.loads(manifest_path.read_text())
        return {"rc": code, "seconds": seconds, **manifest["throughput"],
                "speed": manifest["speed"], "train_seconds": manifest["train_seconds"],
                "wall_tokens_per_second": manifest["useful_tokens_per_second"],
                "parameters": manifest["model"]["parameters"],
                "loss": {k: manifest["loss"][k] for k in ("first", "final")}}

    def quickstart(self) -> dict[str, Any]:
        study = self.out / "quickstart"
        command = lab_command("study", str(REPO / "recipes" / "quickstart.yaml"), "--out",
                              str(study), "--set", "resources.device=cuda")
        if self.dry_run:
            command.append("--dry-run")
        code, seconds = self.run("quickstart", command)
        stages = {}
        for timing in sorted((study / "stages").glob("*.timing.json")):
            stages[timing.name.split(".")[0]] = json.loads(timing.read_text())["seconds"]
        slowest = dict(sorted(stages.items(), key=lambda kv: -kv[1])[:6])
        summary = {}
        if (study / "results.csv").is_file():
            summary["results_csv_lines"] = len((study / "results.csv").read_text().splitlines())
        return {"rc": code, "seconds": seconds, "stages": len(stages),
                "stage_seconds_sum": round(sum(stages.values()), 1), "slowest": slowest,
                **summary}

    def deepspeed(self) -> dict[str, Any]:
        try:
            import deepspeed  # noqa: F401
        except Exception as exc:  # noqa: BLE001  (any import failure: report it)
            return {"rc": None, "skipped": f"deepspeed not importable: {exc}"[:300]}
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29517"}
        out = self.out / "deepspeed"
        s = self.shape
        code, seconds = self.run("deepspeed", lab_command(
            "pretrain", "--model", "gpt2", "--preset", "micro" if self.dry_run else "small",
            "--corpus", str(self.out / "corpus"), "--tokenizer", str(self.out / "tokenizer"),
            "--out", str(out), "--block-size", str(min(s["block"], 256)), "--batch-size", "16",
            "--max-steps", "30", "--save-steps", "20", "--log-steps", "10", "--report-to", "none",
            "--deepspeed", str(REPO / "recipes" / "deepspeed" / "zero2.json"), "--bf16",
            "--cache-dir", str(self.out / "cache"), "--force"), env=env)
        manifest_path = out / "manifest.json"
        if not manifest_path.is_file():
            return {"rc": code or 1, "seconds": seconds}
        manifest = json.loads(manifest_path.read_text())
        return {"rc": code, "seconds": seconds, "steps": manifest["steps"],
                "loss": {k: manifest["loss"][k] for k in ("first", "final")},
                "world_size": manifest["world_size"], "speed": manifest["speed"]}

    def peak_tflops(self) -> float | None:
        return (self.results.get("peak") or {}).get("tflops")

    def parts(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return {"peak": self.peak, "data": self.data, "correctness": self.correctness,
                "plain-gpt2": lambda: self.plain("gpt2"), "lab-gpt2": lambda: self.lab("gpt2"),
                "quickstart": self.quickstart, "plain-roberta": lambda: self.plain("roberta"),
                "lab-roberta": lambda: self.lab("roberta"), "deepspeed": self.deepspeed,
                "lab-gpt2-mask": lambda: self.lab("gpt2", ("--attention", "mask"),
                                                  "lab-gpt2-mask"),
                "lab-gpt2-trainer": lambda: self.lab("gpt2", ("--loop", "trainer"),
                                                     "lab-gpt2-trainer")}

    def verdicts(self) -> list[str]:
        r = self.results
        lines = []

        def get(part: str, key: str) -> Any:
            return (r.get(part) or {}).get(key)

        for family in ("gpt2", "roberta"):
            lab, plain = get(f"lab-{family}", "steady_tokens_per_second"), get(
                f"plain-{family}", "tokens_per_second")
            if lab and plain:
                ratio = lab / plain
                lines.append(f"{family}: lab {lab:,.0f} vs plain compiled {plain:,.0f} tokens/s = "
                             f"{ratio:.3f}x (target >= {TARGETS['ratio']}): "
                             + ("MET" if ratio >= TARGETS["ratio"] else "NOT MET"))
            else:
                lines.append(f"{family}: ratio not measured (lab {lab}, plain {plain})")
        trainer, plain = get("lab-gpt2-trainer", "steady_tokens_per_second"), get(
            "plain-gpt2", "tokens_per_second")
        if trainer and plain:
            lines.append(f"gpt2 through the HF Trainer (--loop trainer): {trainer:,.0f} tokens/s "
                         f"= {trainer / plain:.3f}x the plain compiled loop")
        mfu = get("lab-gpt2", "mfu")
        lines.append(f"gpt2 MFU: {mfu if mfu is None else f'{mfu:.1%}'} (target >= "
                     f"{TARGETS['mfu']:.0%} of the table's rate): "
                     + ("not measured" if mfu is None else "MET" if mfu >= TARGETS["mfu"]
                        else "NOT MET"))
        seconds, code = get("quickstart", "seconds"), get("quickstart", "rc")
        if self.dry_run:
            lines.append(f"quickstart: dry run, its plan only (rc {code})")
        else:
            lines.append(f"quickstart on the GPU: {seconds} s, rc {code} (target <= "
                         f"{TARGETS['quickstart_seconds']:.0f} s): "
                         + ("MET" if code == 0 and seconds
                            and seconds <= TARGETS["quickstart_seconds"] else "NOT MET"))
        worst = get("correctness", "worst")
        lines.append(f"per-document flex vs mask: {worst} : "
                     + ("MET" if get("correctness", "ok") else "NOT MET"))
        ds = r.get("deepspeed") or {}
        lines.append(f"DeepSpeed ZeRO-2, 1 GPU, bf16: rc {ds.get('rc')}, loss {ds.get('loss')}"
                     + (f" ({ds['skipped']})" if ds.get("skipped") else ""))
        return lines


# --- the correctness part (its own process) -------------------------------------------------

def correctness(out: Path, dry_run: bool) -> dict[str, Any]:
    import torch

    from lab.models import build_config, build_model, position_offset
    from lab.tokenizer import load_tokenizer, tokenizer_hash
    from lab.train.attention import use_flex_attention, with_document_mask
    from lab.train.packing import PackedCollator, PackedDataset, pack_documents, tokenize_corpus

    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = DRY_SHAPE if dry_run else SHAPE
    tok = load_tokenizer(out / "tokenizer")
    corpus = tokenize_corpus(out / "corpus", tok, tokenizer_hash(out / "tokenizer"),
                             out / "cache")
    block = shape["block"]
    dataset = PackedDataset(corpus, pack_documents(corpus.lengths(), block), tok.bos_token_id,
                            tok.eos_token_id, tok.pad_token_id)
    most = sorted(range(len(dataset)), key=lambda i: -int(dataset[i]["segments"].max()))[:7]
    features = [dataset[i] for i in most + [len(dataset) - 1]]
    report: dict[str, Any] = {"device": device, "rows": len(features), "checks": {}}
    ok = True
    for family in ("gpt2", "roberta"):
        torch.manual_seed(0)
        preset = "micro" if dry_run else "small"
        model = build_model(family, build_config(family, preset, tok, block)).to(device).eval()
        offset = position_offset(model.config)
        mlm = family == "roberta"
        mask_batch = PackedCollator(tok, mlm=mlm, seed=1, position_offset=offset)(features)
        flex_batch = PackedCollator(tok, mlm=mlm, seed=1, position_offset=offset,
                                    attention="flex")(features)
        mask_batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in mask_batch.items()}
        flex_batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in flex_batch.items()}
        documents = flex_batch["document_ids"]
        real = documents > 0
        runs = [("float32", torch.float32)] + ([("bf16", torch.bfloat16)]
                                               if device == "cuda" else [])
        for precision, dtype in runs:
            with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
                grad = device == "cuda"
                with torch.set_grad_enabled(grad):
                    model.zero_grad(set_to_none=True)
                    want = model(**mask_batch)
                    if grad:
                        want.loss.backward()
                        want_grads = [p.grad.detach().clone() for p in model.parameters()]
                    had = use_flex_attention(model)
                    model.zero_grad(set_to_none=True)
                    got = model(**with_document_mask(flex_batch, causal=not mlm))
                    if grad:
                        got.loss.backward()
                        got_grads = [p.grad.detach().clone() for p in model.parameters()]
                    from lab.train.attention import restore_attention

                    restore_attention(model, had)
            a, b = want.logits.float()[real], got.logits.float()[real]
            rel = ((a - b).norm() / a.norm()).item()
            limit = 1e-4 if precision == "float32" else 2e-2
            check = {"logits_relative_error": rel, "limit": limit,
                     "loss": [want.loss.item(), got.loss.item()]}
            if device == "cuda":
                num = sum(((x - y).float().norm() ** 2).item() for x, y in zip(want_grads, got_grads))
                den = sum((x.float().norm() ** 2).item() for x in want_grads)
                check["gradient_relative_error"] = (num / den) ** 0.5
                check["ok"] = rel <= limit and check["gradient_relative_error"] <= limit * 5
            else:
                check["ok"] = rel <= limit
            ok &= check["ok"]
            report["checks"][f"{family}-{precision}"] = check
    report["ok"] = bool(ok)
    report["worst"] = max((c["logits_relative_error"] for c in report["checks"].values()),
                          default=None)
    (out / "correctness.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu-check")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny shapes and a few steps on whatever device is here")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)}, lab-gpt2-mask, "
                             "lab-gpt2-trainer")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all parts: a part expected to need more than is left "
                             "is skipped, one running at the end is stopped")
    parser.add_argument("--correctness-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.correctness_only:
        return 0 if correctness(args.out, args.dry_run)["ok"] else 1
    check = Check(args.out, args.dry_run)
    parts = check.parts()
    wanted = [p for p in args.parts.split(",") if p]
    unknown = [p for p in wanted if p not in parts]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}")
    import torch

    print(f"gpu-check: torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}, "
          f"out {args.out}{' (dry run)' if args.dry_run else ''}", flush=True)
    began = time.perf_counter()
    if args.budget:
        check.deadline = began + args.budget
    for part in wanted:
        started = time.perf_counter()
        if check.deadline is not None and not args.dry_run and (
                check.deadline - started < EXPECTED.get(part, 60)):
            print(f"[skipped] {part}: {check.deadline - started:.0f} s of the budget left, "
                  f"about {EXPECTED.get(part, 60)} s needed", flush=True)
            continue
        try:
            result = parts[part]()
        except Exception as exc:  # noqa: BLE001  (a part's failure must not stop the others)
            result = {"rc": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
        check.save(part, result)
        shown = {k: v for k, v in result.items() if k not in ("speed", "slowest", "checks")}
        print(f"[{time.perf_counter() - started:6.1f} s] {part}: {json.dumps(shown, default=str)}",
              flush=True)
    print("== verdicts")
    for line in check.verdicts():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
