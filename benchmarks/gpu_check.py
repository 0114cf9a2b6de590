"""The GPU check a maintainer runs in one command (scripts/gpu-check.sh runs this file).

Each part runs in its own process with its own time limit, writes its numbers into
OUT/results.json as soon as it ends (a part that fails or runs out of time leaves the others'),
and the last lines printed are one verdict per target (issues 46 and 57):

  data          a control corpus of CSN-format Java (the valid split), a 16k BPE tokenizer, and
                the batches `lab pretrain` trains on first, in its order (OUT/batches-*.npz),
                for the plain loop
  correctness   the FlexAttention document kernel against the 4D-mask path
                (lab.train.flex_check.compare_paths): logits over document tokens and every
                gradient of one backward pass, in float32 and bf16, both families, on real packed
                rows and the self-check's rows; a pass writes OUT/verified.json, the record of the
                CUDA-only code it passed on (lab.train.attention.CUDA_ONLY)
  peak          the bf16 matmul rate this GPU reaches (8192^3), the MFU denominator beside the
                lab's table (lab.train.speed.PEAK_BF16_TFLOPS)
  plain-gpt2    a plain compiled loop of the paper GPT-2 shape (benchmarks/plain_loop.py) on the
                lab's batches, at the same constant learning rate, for as many steps
  lab-gpt2      `lab pretrain` of the same shape with the GPU defaults (one process: the plain
                loop, lab.train.loop); its steady rate and its loss
  lab-gpt2-cross  the same with --cross-document-attention: the function the plain loop
                computes (attention across the packed row, positions running on), so its loss
                must be the plain loop's; the default keeps documents apart and may learn faster
  lab-gpt2-trainer  the same through the HF Trainer (--loop trainer), for comparison
  quickstart    `lab study recipes/quickstart.yaml` on the GPU, timed whole, stages included
  plain-roberta, lab-roberta    the same pair for RoBERTa
  deepspeed     `lab pretrain` under DeepSpeed ZeRO-2 in bf16, one GPU (world size 1)

Correctness comes first: asked for any part that measures speed, the check runs it before them
(and the data it reads) unless it passed in this folder on this GPU, torch and CUDA-only code;
a speed ratio is printed only over that pass, for a run whose loss stayed finite at every step
and, for GPT-2, when the lab's loop computing the plain loop's function (lab-gpt2-cross) ends
within TARGETS["loss_relative"] of the plain loop's loss on the same batches (the mean over the
last logged window) and the run itself does not end above it by more than that.

    python benchmarks/gpu_check.py --out runs/gpu-check            # on a GPU machine
    python benchmarks/gpu_check.py --out /tmp/gc --dry-run         # on a CPU: tiny shapes, a few
                                                                   # steps, the study's plan only
Targets: lab-gpt2 >= 0.95x plain-gpt2 and >= 40% MFU of the measured peak; lab-roberta >= 0.95x
plain-roberta; quickstart <= 60 s; DeepSpeed ZeRO-2 with a finite loss; flex within
lab.train.flex_check.TOLERANCES of the mask path.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the lab from this checkout
    sys.path.insert(0, str(REPO))
PARTS = ("data", "correctness", "peak", "plain-gpt2", "lab-gpt2", "lab-gpt2-cross", "plain-roberta",
         "lab-roberta", "quickstart", "deepspeed")
# Parts whose numbers are speeds: correctness runs before them in the same call.
SPEED_PARTS = ("plain-gpt2", "lab-gpt2", "lab-gpt2-cross", "plain-roberta", "lab-roberta",
               "quickstart", "deepspeed", "lab-gpt2-mask", "lab-gpt2-trainer")
# Seconds each part may take on a GPU (compilation included).
LIMITS = {"peak": 60, "data": 120, "correctness": 150, "plain-gpt2": 150, "lab-gpt2": 240,
          "quickstart": 300, "plain-roberta": 150, "lab-roberta": 240, "deepspeed": 240}
# The paper shape; --dry-run swaps in a micro one. Both loops train `steps` steps on the same
# batches; the plain loop times the last steps - 1 - warmup of them, the lab's steady rate starts
# at lab.train.speed.steady_skip(steps) (20 of 160: the same window).
SHAPE = {"preset": "paper", "layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "block": 512,
         "batch": 32, "vocab": 16000, "steps": 160, "warmup": 19, "log_steps": 20}
DRY_SHAPE = {"preset": "micro", "layers": 2, "hidden": 64, "heads": 2, "ffn": 128, "block": 128,
             "batch": 4, "vocab": 1200, "steps": 8, "warmup": 2, "log_steps": 4}
# Both loops: AdamW at this constant learning rate (the plain loop has no schedule), seed 0.
LEARNING_RATE, SEED = 5e-4, 0
# Seconds each part is expected to take on an H100/H200 (what --budget plans with).
EXPECTED = {"peak": 15, "data": 40, "correctness": 45, "plain-gpt2": 50, "lab-gpt2": 90,
            "quickstart": 75, "plain-roberta": 50, "lab-roberta": 90, "deepspeed": 60,
            "lab-gpt2-mask": 70, "lab-gpt2-trainer": 60, "lab-gpt2-cross": 90}
# loss_relative: |lab - plain| / plain over the last logged window, same batches and rate.
TARGETS = {"ratio": 0.95, "mfu": 0.40, "quickstart_seconds": 60.0, "loss_relative": 0.05}


def lab_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lab.cli", *args]


class Check:
    def __init__(self, out: Path, dry_run: bool):
        self.out, self.dry_run = out, dry_run
        self.shape = DRY_SHAPE if dry_run else SHAPE
        self.results_path = out / "results.json"
        self.results: dict[str, Any] = (json.loads(self.results_path.read_text())
                                        if self.results_path.is_file() else {})
        self.ran: set[str] = set()  # the parts run in this call

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
        if code == 0:
            more, extra = self.run("data", [sys.executable, str(Path(__file__)), "--write-batches",
                                            "--out", str(self.out),
                                            *(["--dry-run"] if self.dry_run else [])])
            code, seconds = more, seconds + extra
        batches = self.out / "batches.json"
        return {"rc": code, "seconds": seconds,
                **(json.loads(batches.read_text()) if code == 0 and batches.is_file() else {})}

    def correctness(self) -> dict[str, Any]:
        target = self.out / "correctness.json"
        code, seconds = self.run("correctness", [
            sys.executable, str(Path(__file__)), "--correctness-only", "--out", str(self.out),
            *(["--dry-run"] if self.dry_run else [])])
        result = json.loads(target.read_text()) if target.is_file() else {}
        return {"rc": code, "seconds": seconds, **result}

    def correctness_holds(self) -> bool:
        """Correctness passed on this device, with this torch and this CUDA-only code (in this
        call, or recorded in this folder by an earlier one)."""
        import torch

        from lab.train.attention import cuda_only_sha256

        done = self.results.get("correctness") or {}
        here = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        return bool(done.get("rc") == 0 and done.get("ok") and done.get("device") == here
                    and done.get("torch") == torch.__version__
                    and done.get("cuda_only_sha256") == cuda_only_sha256())

    def plain(self, family: str) -> dict[str, Any]:
        part, target = f"plain-{family}", self.out / f"plain-{family}.json"
        s = self.shape
        data = self.out / f"batches-{family}.npz"
        vocab = (self.results.get("data") or {}).get("vocab") or s["vocab"]
        code, seconds = self.run(part, [
            sys.executable, str(REPO / "benchmarks" / "plain_loop.py"), "--model", family,
            "--layers", str(s["layers"]), "--hidden", str(s["hidden"]), "--heads", str(s["heads"]),
            "--ffn", str(s["ffn"]), "--vocab", str(vocab), "--block", str(s["block"]),
            "--batch", str(s["batch"]), "--steps", str(s["steps"] - 1 - s["warmup"]),
            "--warmup", str(s["warmup"]), "--lr", str(LEARNING_RATE), "--seed", str(SEED),
            "--data", str(data), "--compile", "--dtype", "fp32" if self.dry_run else "bf16",
            "--json", str(target),
            *(["--peak-tflops", str(self.peak_tflops())] if self.peak_tflops() else [])])
        result = json.loads(target.read_text()) if target.is_file() else {}
        mean = result.get("step_seconds_mean")
        losses = result.get("losses") or []
        window = losses[-s["log_steps"]:]
        return {"rc": code, "seconds": seconds,
                # the lab's steady rate is total tokens over total time: compared with the same
                "tokens_per_second": s["batch"] * s["block"] / mean if mean else None,
                "tokens_per_second_median_step": result.get("tokens_per_second"),
                "steps": len(losses),
                "window_tokens_per_second": plain_windows(result.get("step_seconds") or [],
                                                          s["batch"] * s["block"],
                                                          s["log_steps"]),
                # the mean over the last log window, as the lab logs its loss
                "loss_last_window": sum(window) / len(window) if window else None,
                **{k: result.get(k) for k in ("step_seconds_median", "mfu", "loss_first",
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
            str(s["steps"]), "--lr", str(LEARNING_RATE), "--lr-scheduler", "constant",
            "--warmup-steps", "0", "--seed", str(SEED), "--save-steps", "100000",
            "--log-steps", str(s["log_steps"]), "--report-to", "none",
            "--cache-dir", str(self.out / "cache"), "--force", *extra))
        manifest_path = out / "manifest.json"
        if not manifest_path.is_file():
            return {"rc": code or 1, "seconds": seconds}
        manifest = json.loads(manifest_path.read_text())
        history = [h["loss"] for h in manifest["loss"]["history"]]
        return {"rc": code, "seconds": seconds, **manifest["throughput"],
                "speed": manifest["speed"], "train_seconds": manifest["train_seconds"],
                "wall_tokens_per_second": manifest["useful_tokens_per_second"],
                "parameters": manifest["model"]["parameters"], "steps": manifest["steps"],
                "flex_check": manifest["speed"].get("flex_check"),
                "loss": {k: manifest["loss"][k] for k in ("first", "final")},
                "loss_finite": bool(history) and all(math.isfinite(v) for v in history),
                # the rate of each log window after the first (the median is quoted)
                "window_tokens_per_second": logged_windows(self.out / f"{part}.log")[1:]}

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
                                                     "lab-gpt2-trainer"),
                "lab-gpt2-cross": lambda: self.lab("gpt2", ("--cross-document-attention",),
                                                   "lab-gpt2-cross")}

    def verdicts(self) -> list[str]:
        r = self.results
        lines = []

        def get(part: str, key: str) -> Any:
            return (r.get(part) or {}).get(key)

        checks = r.get("correctness") or {}
        holds = self.correctness_holds()
        lines.append("correctness (flex vs the mask path"
                     + ("" if "correctness" in self.ran else ", recorded earlier in this folder")
                     + "): " + "; ".join(
                         f"{name} logits {c['logits']:.2g}, gradients "
                         + ("-" if c.get("gradients") is None else f"{c['gradients']:.2g}")
                         + ("" if c["ok"] else " (OVER)")
                         for name, c in (checks.get("checks") or {}).items())
                     + (": PASSED" if holds else ": NOT PASSED here"))
        for family, part in (("gpt2", "lab-gpt2"), ("roberta", "lab-roberta"),
                             ("gpt2", "lab-gpt2-trainer")):
            if part not in r:  # run in this call or recorded in this folder
                continue
            lab, plain = r.get(part) or {}, r.get(f"plain-{family}") or {}
            name = family + (" through the HF Trainer" if part.endswith("trainer") else "")
            refused = self.speed_refusal(family, lab, plain)
            if refused:
                lines.append(f"{name}: speed not reported ({refused})")
                continue
            ratio = lab["steady_tokens_per_second"] / plain["tokens_per_second"]
            cross = (r.get("lab-gpt2-cross") or {}).get("loss", {}).get("final")
            loss = (f"; loss over the last {self.shape['log_steps']} steps {lab['loss']['final']:.4g}"
                    + (f", the lab on the plain loop's function {cross:.4g}"
                       if family == "gpt2" and cross is not None else "")
                    + f", the plain loop {plain['loss_last_window']:.4g}")
            verdict = ("(for comparison: the targets are the default loop's)"
                       if part.endswith("trainer") else f"(target >= {TARGETS['ratio']}): "
                       + ("MET" if ratio >= TARGETS["ratio"] else "NOT MET"))
            windows = (median(lab.get("window_tokens_per_second") or []),
                       median(plain.get("window_tokens_per_second") or []))
            medians = (f"; medians of {self.shape['log_steps']}-step windows: lab "
                       f"{windows[0]:,.0f} vs plain {windows[1]:,.0f} = "
                       f"{windows[0] / windows[1]:.3f}x" if all(windows) else "")
            lines.append(f"{name}: lab {lab['steady_tokens_per_second']:,.0f} vs plain compiled "
                         f"{plain['tokens_per_second']:,.0f} tokens/s = {ratio:.3f}x {verdict}"
                         + medians + loss)
            if part == "lab-gpt2":
                lines.append(self.mfu_line(lab))
        seconds, code = get("quickstart", "seconds"), get("quickstart", "rc")
        if "quickstart" in r and self.dry_run:
            lines.append(f"quickstart: dry run, its plan only (rc {code})")
        elif "quickstart" in r:
            lines.append(f"quickstart on the GPU: {seconds} s, rc {code} (target <= "
                         f"{TARGETS['quickstart_seconds']:.0f} s): "
                         + ("MET" if code == 0 and seconds
                            and seconds <= TARGETS["quickstart_seconds"] else "NOT MET"))
        ds = r.get("deepspeed") or {}
        finite = ds.get("loss") and all(isinstance(v, (int, float)) and math.isfinite(v)
                                        for v in ds["loss"].values())
        if "deepspeed" in r:
            lines.append(f"DeepSpeed ZeRO-2, 1 GPU, bf16: rc {ds.get('rc')}, loss {ds.get('loss')}"
                         + (f" ({ds['skipped']})" if ds.get("skipped") else "")
                         + (": MET" if ds.get("rc") == 0 and finite else ": NOT MET"))
        return lines

    def speed_refusal(self, family: str, lab: dict[str, Any], plain: dict[str, Any]) -> str | None:
        """Why a speed ratio must not be printed, or None: correctness passed in this call, both
        runs ended with a finite loss at every step, and (GPT-2) their losses agree."""
        if not self.correctness_holds():
            return ("the correctness part has not passed on this GPU, torch and CUDA-only code")
        if lab.get("rc") != 0 or not lab.get("loss_finite"):
            return f"the lab's run ended rc {lab.get('rc')}, loss finite: {lab.get('loss_finite')}"
        if plain.get("rc") != 0 or not plain.get("loss_finite"):
            return (f"the plain loop ended rc {plain.get('rc')}, loss finite: "
                    f"{plain.get('loss_finite')}")
        if not lab.get("steady_tokens_per_second") or not plain.get("tokens_per_second"):
            return "no steady rate measured"
        if family != "gpt2":
            return None
        want, limit = plain.get("loss_last_window"), TARGETS["loss_relative"]
        window = f"over the last {self.shape['log_steps']} steps"
        cross = self.results.get("lab-gpt2-cross") or {}
        if cross.get("rc") != 0 or not cross.get("loss_finite"):
            return ("no finite loss of the lab's loop on the plain loop's function to compare "
                    f"with the plain loop's (part lab-gpt2-cross: rc {cross.get('rc')})")
        same = cross["loss"]["final"]
        if abs(same - want) / want > limit:
            return (f"on the plain loop's function the lab's loss {window} {same:.4g} is "
                    f"{abs(same - want) / want:.1%} from the plain loop's {want:.4g} on the same "
                    f"batches (at most {limit:.0%})")
        got = lab["loss"]["final"]
        if (got - want) / want > limit:
            return (f"its loss {window} {got:.4g} is {(got - want) / want:.1%} above the plain "
                    f"loop's {want:.4g} (at most {limit:.0%})")
        return None

    def mfu_line(self, lab: dict[str, Any]) -> str:
        """GPT-2's MFU against the peak measured here (the target) and the lab's table."""
        measured, table = self.peak_tflops(), (lab.get("peak_bf16_tflops") or {}).get("value")
        per_token, rate = lab.get("flops_per_token"), lab.get("steady_tokens_per_second")
        if not (measured and per_token and rate):
            return f"gpt2 MFU: not measured (peak {measured}, FLOPs/token {per_token})"
        mfu = rate * per_token / (measured * 1e12)
        return (f"gpt2 MFU: {mfu:.1%} of the {measured:.0f} TFLOP/s this GPU's bf16 matmul "
                f"reached (target >= {TARGETS['mfu']:.0%}): "
                + ("MET" if mfu >= TARGETS["mfu"] else "NOT MET")
                + (f"; {lab['mfu']:.1%} of the table's {table:.0f}" if table and lab.get("mfu")
                   else ""))


# --- the data's batches and the correctness part (each its own process) ------------------

def packed_data(out: Path, block: int) -> tuple[Any, Any, Any, Any]:
    """(tokenizer, tokenized corpus, packing, dataset) of OUT's corpus, packed as lab pretrain
    packs it."""
    from lab.tokenizer import load_tokenizer, tokenizer_hash
    from lab.train.packing import PackedDataset, pack_documents, tokenize_corpus

    tok = load_tokenizer(out / "tokenizer")
    corpus = tokenize_corpus(out / "corpus", tok, tokenizer_hash(out / "tokenizer"),
                             out / "cache")
    packing = pack_documents(corpus.lengths(), block, samples=corpus.injected)
    dataset = PackedDataset(corpus, packing, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    return tok, corpus, packing, dataset


def write_batches(out: Path, dry_run: bool) -> dict[str, Any]:
    """OUT/batches-FAMILY.npz: the `steps` batches `lab pretrain` trains on first with SEED, in
    its order (lab.train.schedule, lab.train.loop), as its mask-path collator gives them
    (input_ids, labels; a short batch at an epoch's end filled with padding rows whose labels are
    -100, as the flex path fills it); OUT/batches.json: the tokenizer's vocabulary and counts."""
    from types import SimpleNamespace

    import numpy as np

    from lab.models import build_config, position_offset
    from lab.train.loop import BatchesOfTheRun, micro_batches
    from lab.train.packing import PackedCollator
    from lab.train.schedule import plan_data_order

    shape = DRY_SHAPE if dry_run else SHAPE
    block, batch, steps = shape["block"], shape["batch"], shape["steps"]
    tok, corpus, packing, dataset = packed_data(out, block)
    order = plan_data_order(packing.sequences, corpus.injected, SEED, batch, 1, 1, 1.0, steps,
                            None)
    plan = micro_batches(len(dataset), SimpleNamespace(batch_size=batch, grad_accum=1), 0, steps)
    for family in ("gpt2", "roberta"):
        config = build_config(family, shape["preset"], tok, block)
        collator = PackedCollator(tok, mlm=family == "roberta", seed=SEED,
                                  position_offset=position_offset(config))
        batches = BatchesOfTheRun(dataset, collator, plan, batch, SEED, order.orders)
        ids, labels = [], []
        for k in range(len(plan)):
            inputs = batches[k][1]
            short = batch - inputs["input_ids"].shape[0]
            ids.append(np.pad(inputs["input_ids"].numpy(), ((0, short), (0, 0)),
                              constant_values=tok.pad_token_id))
            labels.append(np.pad(inputs["labels"].numpy(), ((0, short), (0, 0)),
                                 constant_values=-100))
        np.savez(out / f"batches-{family}.npz", input_ids=np.stack(ids).astype(np.int32),
                 labels=np.stack(labels).astype(np.int32))
    record = {"vocab": len(tok), "sequences": len(dataset), "batches": len(plan),
              "epochs_touched": len({epoch for epoch, _ in plan})}
    (out / "batches.json").write_text(json.dumps(record))
    return record


def plain_windows(step_seconds: list[float], tokens_per_step: int, size: int) -> list[float]:
    """The plain loop's rate over consecutive windows of `size` timed steps, the windows the
    lab logs (its timed steps start where the lab's steady rate does)."""
    return [tokens_per_step * size / sum(step_seconds[i:i + size])
            for i in range(0, len(step_seconds) - size + 1, size)]


def logged_windows(log: Path) -> list[float]:
    """The tokens/s of each log window the last `lab pretrain` in a part's log printed (the
    manifest keeps no timing, so that it stays the same run to run)."""
    import ast

    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    last = max((i for i, line in enumerate(lines) if line.startswith("$ ")), default=-1)
    rates = []
    for line in lines[last + 1:]:
        if line.startswith("{'loss'") and "throughput_tokens_per_second" in line:
            rates.append(float(ast.literal_eval(line)["throughput_tokens_per_second"]))
    return rates


def median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def commit() -> str | None:
    """The commit measured: LAB_COMMIT (a working tree copied without .git), else git's."""
    if os.environ.get("LAB_COMMIT"):
        return os.environ["LAB_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def correctness(out: Path, dry_run: bool) -> dict[str, Any]:
    """The flex kernel against the mask path (lab.train.flex_check.compare_paths) for both
    families at the `small` preset: the packed rows of the data holding most documents, the
    last (least full) row, and the self-check's rows; float32 and bf16 with gradients on a GPU,
    float32 logits elsewhere. A pass on a GPU writes OUT/verified.json."""
    import torch

    from lab.models import build_config, build_model
    from lab.train.attention import CUDA_ONLY, cuda_only_sha256
    from lab.train.flex_check import check_features, compare_paths

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    shape = DRY_SHAPE if dry_run else SHAPE
    block = shape["block"]
    tok, _, _, dataset = packed_data(out, block)
    most = sorted(range(len(dataset)), key=lambda i: -int(dataset[i]["segments"].max()))[:7]
    features = [dataset[i] for i in most + [len(dataset) - 1]]
    features += [{**f, "index": len(dataset) + f["index"]} for f in check_features(tok, block)]
    started = time.perf_counter()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                              "torch": torch.__version__, "rows": len(features), "block": block,
                              "cuda_only_sha256": cuda_only_sha256(), "checks": {}}
    for family in ("gpt2", "roberta"):
        torch.manual_seed(0)
        preset = "micro" if dry_run else "small"
        model = build_model(family, build_config(family, preset, tok, block))
        errors = compare_paths(model, tok, features, device,
                               ("float32", "bf16") if cuda else ("float32",))
        for precision, entry in errors.items():
            report["checks"][f"{family}-{precision}"] = entry
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["ok"] = all(c["ok"] for c in report["checks"].values())
    report["gradients_checked"] = cuda
    if cuda and report["ok"]:
        verified = {"kind": "lab-gpu-verified", "commit": commit(), "torch": torch.__version__,
                    "device": report["device"], "cuda_only": list(CUDA_ONLY),
                    "cuda_only_sha256": cuda_only_sha256(),
                    "checks": {name: {k: c[k] for k in ("logits", "gradients", "ok")}
                               for name, c in report["checks"].items()}}
        (out / "verified.json").write_text(json.dumps(verified, indent=1) + "\n")
        report["verified"] = verified["cuda_only_sha256"]
    (out / "correctness.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return report


def planned(wanted: list[str], out: Path, correctness_holds: bool) -> list[str]:
    """The parts to run in order: correctness before any speed part unless it holds already
    (Check.correctness_holds), with the data before it when this folder has none; each once."""
    plan = list(dict.fromkeys(wanted))
    if any(p in SPEED_PARTS for p in plan) and not (correctness_holds and "correctness" not in plan):
        first = min(plan.index(p) for p in plan if p in SPEED_PARTS)
        if "correctness" not in plan[:first]:
            if "correctness" in plan:
                plan.remove("correctness")
            plan.insert(first, "correctness")
        needs_data = not (out / "tokenizer").is_dir() or not (out / "batches.json").is_file()
        if needs_data and "data" not in plan[:plan.index("correctness")]:
            if "data" in plan:
                plan.remove("data")
            plan.insert(plan.index("correctness"), "data")
    return plan


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
    parser.add_argument("--write-batches", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.correctness_only:
        return 0 if correctness(args.out, args.dry_run)["ok"] else 1
    if args.write_batches:
        print(json.dumps(write_batches(args.out, args.dry_run)))
        return 0
    check = Check(args.out, args.dry_run)
    parts = check.parts()
    wanted = [p for p in args.parts.split(",") if p]
    unknown = [p for p in wanted if p not in parts]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}")
    wanted = planned(wanted, args.out, check.correctness_holds())
    import torch

    print(f"gpu-check: torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}, "
          f"commit {commit()}, out {args.out}{' (dry run)' if args.dry_run else ''}; "
          f"parts {', '.join(wanted)}", flush=True)
    check.save("run", {"commit": commit(), "torch": torch.__version__, "parts": wanted,
                       "dry_run": args.dry_run, "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
    began = time.perf_counter()
    if args.budget:
        check.deadline = began + args.budget
    for part in wanted:
        check.ran.add(part)
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
