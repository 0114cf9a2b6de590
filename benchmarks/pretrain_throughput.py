"""Pre-training throughput of four data layouts: the lab's packings against the alternatives.

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/pretrain_throughput.py

Quick smoke run (about a minute):

    LAB_CORPORA=../shared/corpora HF_HUB_OFFLINE=1 python benchmarks/pretrain_throughput.py \\
        --docs 500 --steps 3 --warmup 1 --repeats 1

One run builds a control arm of N CSN-format documents (`lab inject --setting control --limit N`)
in a temporary folder, trains a byte-level BPE tokenizer on it (vocabulary 8,000), tokenises it
with the lab's cache, then trains the `tiny` GPT-2 (causal LM) and then the `tiny` RoBERTa
(masked LM) on four layouts of the same tokens, everything else identical:

  (a) lab      the lab's default: document-aware best-fit-decreasing packing (`pack_documents`
               + `PackedDataset` + `PackedCollator`) with per-document attention:
               `<s> doc </s> <s> doc </s> ... <pad>...`, whole documents, block 512, each
               document attending only to itself with positions from 0 (GPT-2: per-document
               position_ids, transformers builds the block-diagonal causal mask; RoBERTa: a 4D
               block-diagonal boolean mask), i.e. (b)'s computation without its padding;
  (b) per-doc  the study's replication package: `<s> doc </s>` per sequence, truncated to 512 and
               padded to 512;
  (c) grouped  HF run_clm/run_mlm `group_texts`: all documents concatenated with `</s>` after
               each and cut into 512-token blocks (documents split across blocks, no padding,
               the last partial block dropped);
  (d) lab-x    the same packing with cross-document attention (`--cross-document-attention`,
               the lab's layout before per-document attention): `<s> doc </s> doc </s> ...
               <pad>...`, one mask over the sequence (padding masked), positions running on.

Identical across layouts: model config and initial weights (seeded), AdamW (lr 5e-4, weight
decay 0.01, gradient clipping at 1.0 as the HF Trainer does), batch size in sequences, block size
512, number of steps, the batch order's seed and this training loop: a torch DataLoader
(num_workers=0, like the lab's Trainer) feeding

    loss = model(**batch).loss; loss.backward(); clip_grad_norm_(1.0); opt.step(); opt.zero_grad()

Each repeat builds one model per layout afresh from the same initial weights and steps the three
round-robin, rotating the order every step (a b c, b c a, c a b, ...), so that bursts of load
from other processes on a shared machine hit all layouts alike; --warmup untimed steps each,
then --steps timed steps each. A layout's wall is the sum of its own timed steps (batch fetch
and collation included: they are part of training; tokenisation, model build and warm-up are
not). The collator: the lab's `PackedCollator` for (a) and (d) (masks, positions, labels as
`lab pretrain` trains), HF's `DataCollatorForLanguageModeling` for (b) and (c) (mlm=True for
RoBERTa, False for GPT-2). Useful tokens are the non-padding tokens trained on, counted on the
timed batches before collation. Each repeat uses another batch-order seed (the same for all
layouts); medians over repeats are reported. Targets, per model, in useful tokens/s:
(a) >= 3x (b) and (a) >= 0.85x (d) (per-document attention within 15% of cross-document
packing); (a) against (c) is reported too.

Achieved FLOP/s uses, per token processed (padding included, since it is computed on):
    6 * non-embedding params + 6 * vocab * hidden (output head; tied to the embedding, so not in
    the non-embedding count) + 12 * layers * hidden * block (attention scores and values),
and is compared with this machine's float32 matmul peak (2048x2048 torch.matmul at
torch.get_num_threads() threads, median of 7, measured before training and after each model;
the highest is used). Peak memory is the process's ru_maxrss.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 512
LR = 5e-4
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
MLM_PROBABILITY = 0.15
LAYOUTS = ("a", "b", "c", "d")
LAYOUT_LABELS = {"a": "(a) lab per-doc attn", "b": "(b) per-doc padded", "c": "(c) group_texts",
                 "d": "(d) lab cross-doc"}
TARGET_VS_B = 3.0
TARGET_VS_D = 0.85


# --------------------------------------------------------------------------- datasets (b), (c)

class PerDocumentDataset:
    """(b) One document per sequence: `<s> doc </s>`, truncated to the block, padded to it."""

    def __init__(self, corpus: Any, bos: int, eos: int, pad: int, block: int):
        import numpy as np

        self.corpus, self.bos, self.eos, self.pad, self.block = corpus, bos, eos, pad, block
        lengths = corpus.lengths()
        self.kept = np.minimum(lengths, block - 2)
        self.truncated = int((lengths > block - 2).sum())
        self.dropped_tokens = int((lengths - self.kept).sum())

    def __len__(self) -> int:
        return len(self.corpus)

    def padding_fraction(self) -> float:
        return 1.0 - float((self.kept + 2).sum()) / (self.block * len(self))

    def __getitem__(self, index: int) -> dict[str, Any]:
        import numpy as np
        import torch

        n = int(self.kept[index])
        ids = np.full(self.block, self.pad, dtype=np.int64)
        ids[0] = self.bos
        ids[1:1 + n] = self.corpus.document(index)[:n]
        ids[1 + n] = self.eos
        mask = np.zeros(self.block, dtype=np.int64)
        mask[:n + 2] = 1
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}


class GroupedDataset:
    """(c) HF `group_texts`: every document followed by `</s>`, concatenated, cut into blocks."""

    def __init__(self, corpus: Any, eos: int, block: int):
        import numpy as np

        # np.insert before each document's end offset puts </s> right after every document.
        flat = np.insert(np.asarray(corpus.tokens, dtype=np.int64), corpus.offsets[1:], eos)
        self.blocks = len(flat) // block
        self.dropped_tokens = len(flat) - self.blocks * block
        self.flat, self.block = flat[:self.blocks * block], block

    def __len__(self) -> int:
        return self.blocks

    def padding_fraction(self) -> float:
        return 0.0

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        ids = self.flat[index * self.block:(index + 1) * self.block].copy()
        return {"input_ids": torch.from_numpy(ids),
                "attention_mask": torch.ones(self.block, dtype=torch.int64)}


class CountingCollator:
    """A collator that also reports the batch's useful (non-padding) tokens, counted before
    collation (MLM may replace a token by the padding id; the 4D masks of (a) are no count)."""

    def __init__(self, collator: Any, pad: int):
        self.collator, self.pad = collator, pad

    def __call__(self, features: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
        useful = sum(int((f["input_ids"] != self.pad).sum()) for f in features)
        if not isinstance(self.collator, _lab_collator_type()):
            features = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in features]
        return self.collator(features), useful


def _lab_collator_type():
    from lab.train.packing import PackedCollator

    return PackedCollator


# --------------------------------------------------------------------------- measurement

@dataclass
class Measurement:
    wall: float
    steps: int
    useful: int
    processed: int
    data_seconds: float
    final_loss: float
    step_walls: list[float]


@dataclass
class Row:
    family: str
    layout: str
    runs: list[Measurement] = field(default_factory=list)

    def rates(self) -> list[float]:
        return [m.useful / m.wall for m in self.runs]

    def median_rate(self) -> float:
        return statistics.median(self.rates())

    def processed_rate(self) -> float:
        return statistics.median(m.processed / m.wall for m in self.runs)

    def padding(self) -> float:
        useful = sum(m.useful for m in self.runs)
        processed = sum(m.processed for m in self.runs)
        return 1.0 - useful / processed

    def step_seconds(self) -> float:
        return statistics.median(m.wall / m.steps for m in self.runs)

    def steady_rate(self) -> float:
        """Useful tokens per step over the median step time, pooled over all timed steps of all
        repeats: less swayed by bursts of load from other processes than the plain wall."""
        steps = sum(m.steps for m in self.runs)
        median_step = statistics.median(w for m in self.runs for w in m.step_walls)
        return sum(m.useful for m in self.runs) / steps / median_step

    def data_ms(self) -> float:
        return statistics.median(1000 * m.data_seconds / m.steps for m in self.runs)


def batch_order(size: int, count: int, seed: int) -> list[int]:
    """`count` indices of a seeded shuffle (reshuffled with the next seed if it runs out)."""
    import torch

    out: list[int] = []
    gen = torch.Generator().manual_seed(seed)
    while len(out) < count:
        out.extend(torch.randperm(size, generator=gen).tolist())
    return out[:count]


class Trainee:
    """One layout's model, optimizer and batch stream; `step` is the one training step every
    layout goes through."""

    def __init__(self, family: str, config: Any, init_state: dict, dataset: Any, collator: Any,
                 seed: int, total_steps: int, batch_size: int):
        import torch
        from torch.utils.data import DataLoader

        from lab.models import build_model

        self.model = build_model(family, config)
        self.model.load_state_dict(init_state)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        order = batch_order(len(dataset), total_steps * batch_size, seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=order, collate_fn=collator,
                            num_workers=0)
        self.batches = iter(loader)
        self.useful = self.processed = 0
        self.data_seconds = 0.0
        self.step_walls: list[float] = []
        self.loss = float("nan")

    def step(self, timed: bool) -> None:
        import torch

        started = time.perf_counter()
        batch, useful = next(self.batches)
        fetched = time.perf_counter()
        processed = batch["input_ids"].numel()
        loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_GRAD_NORM)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if timed:
            self.step_walls.append(time.perf_counter() - started)
            self.data_seconds += fetched - started
            self.useful += useful
            self.processed += processed
            self.loss = float(loss.detach())

    def measurement(self) -> Measurement:
        return Measurement(sum(self.step_walls), len(self.step_walls), self.useful,
                           self.processed, self.data_seconds, self.loss, self.step_walls)


def measure_round(family: str, config: Any, init_state: dict, datasets: dict[str, Any],
                  collators: dict[str, Any], seed: int, warmup: int, steps: int,
                  batch_size: int) -> dict[str, Measurement]:
    """One repeat: a fresh model per layout from the same initial weights, stepped round-robin
    (a b c d, b c d a, c d a b, ...) so bursts of load from other processes hit every layout
    alike. A layout's wall is the sum of its own timed steps (batch fetch and collation
    included)."""
    import torch

    torch.manual_seed(seed)  # HF's collator's MLM masking draws
    trainees = {layout: Trainee(family, config, init_state, datasets[layout], collators[layout],
                                seed, warmup + steps, batch_size) for layout in LAYOUTS}
    for index in range(warmup + steps):
        shift = index % len(LAYOUTS)
        for layout in LAYOUTS[shift:] + LAYOUTS[:shift]:
            trainees[layout].step(timed=index >= warmup)
    return {layout: trainee.measurement() for layout, trainee in trainees.items()}


def matmul_peak(n: int = 2048, runs: int = 7) -> float:
    """Median float32 FLOP/s of an n x n matmul at torch's current thread count."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        torch.matmul(a, b)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t)
    return 2 * n ** 3 / statistics.median(times)


def profile_data_path(datasets: dict[str, Any], collators: dict[str, Any], batch_size: int,
                      batches: int = 30) -> dict[str, tuple[float, float]]:
    """Per batch: milliseconds in dataset __getitem__ and in the collator (median)."""
    out = {}
    for layout, ds in datasets.items():
        order = batch_order(len(ds), batches * batch_size, 1234)
        get_ms, coll_ms = [], []
        for b in range(batches):
            t0 = time.perf_counter()
            items = [ds[i] for i in order[b * batch_size:(b + 1) * batch_size]]
            t1 = time.perf_counter()
            collators[layout](items)
            t2 = time.perf_counter()
            get_ms.append(1000 * (t1 - t0))
            coll_ms.append(1000 * (t2 - t1))
        out[layout] = (statistics.median(get_ms), statistics.median(coll_ms))
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- main

def build_inputs(tmp: Path, docs: int, vocab: int, seed: int):
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.tokenizer import load_tokenizer, tokenizer_hash, train_tokenizer
    from lab.train.packing import tokenize_corpus

    arm, tok_dir = tmp / "arm", tmp / "tokenizer"
    run_inject(InjectConfig(benchmark="codetrans", setting="control", seed=seed, out=arm,
                            limit=docs))
    train_tokenizer(arm, tok_dir, [], vocab_size=vocab)
    tokenizer = load_tokenizer(tok_dir)
    corpus = tokenize_corpus(arm, tokenizer, tokenizer_hash(tok_dir), tmp / "cache")
    return tokenizer, corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=5000, help="CSN documents in the arm")
    parser.add_argument("--steps", type=int, default=8, help="timed optimizer steps per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per model and layout")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--models", default="gpt2,roberta", help="comma-separated: gpt2, roberta")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (default: torch's own choice)")
    opts = parser.parse_args()
    if not os.environ.get("LAB_CORPORA"):
        sys.exit("set LAB_CORPORA to the corpora folder (for example ../shared/corpora)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    families = [f for f in opts.models.split(",") if f]
    if any(f not in ("gpt2", "roberta") for f in families) or not families:
        sys.exit(f"--models {opts.models}: choose from gpt2, roberta")
    if min(opts.steps, opts.repeats, opts.batch_size, opts.docs) < 1 or opts.warmup < 0:
        sys.exit("--steps, --repeats, --batch-size and --docs must be >= 1, --warmup >= 0")

    script_started = time.perf_counter()
    import numpy as np
    import torch
    from transformers import DataCollatorForLanguageModeling
    from transformers.utils import logging as hf_logging

    from lab.models import build_config, build_model, count_parameters, position_offset
    from lab.train.packing import PackedCollator, PackedDataset, pack_documents

    hf_logging.set_verbosity_error()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    threads = torch.get_num_threads()
    load_start = os.getloadavg()
    peaks = [matmul_peak()]

    with tempfile.TemporaryDirectory(prefix="lab-throughput-") as tmp_name:
        setup_started = time.perf_counter()
        tokenizer, corpus = build_inputs(Path(tmp_name), opts.docs, opts.vocab_size, opts.seed)
        bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
        packing = pack_documents(corpus.lengths(), BLOCK, samples=corpus.injected)
        packing_x = pack_documents(corpus.lengths(), BLOCK, samples=corpus.injected,
                                   cross_document=True)
        datasets = {
            "a": PackedDataset(corpus, packing, bos, eos, pad),
            "b": PerDocumentDataset(corpus, bos, eos, pad, BLOCK),
            "c": GroupedDataset(corpus, eos, BLOCK),
            "d": PackedDataset(corpus, packing_x, bos, eos, pad),
        }
        setup_seconds = time.perf_counter() - setup_started
        rss_setup = peak_rss_mb()
        lengths = corpus.lengths()
        print(f"corpus: {len(corpus)} CSN-format documents (control arm, seed {opts.seed}), "
              f"{int(lengths.sum())} tokens, vocabulary {len(tokenizer)}; document tokens: mean "
              f"{lengths.mean():.0f}, median {np.median(lengths):.0f}, p90 "
              f"{np.percentile(lengths, 90):.0f}, max {lengths.max()}")
        print(f"layouts at block {BLOCK}: "
              f"(a) {len(datasets['a'])} sequences, padding {packing.padding_fraction():.3f}, "
              f"{len(packing.truncated)} documents truncated; "
              f"(d) {len(datasets['d'])} sequences, padding {packing_x.padding_fraction():.3f}; "
              f"(b) {len(datasets['b'])} sequences, padding {datasets['b'].padding_fraction():.3f}, "
              f"{datasets['b'].truncated} truncated ({datasets['b'].dropped_tokens} tokens never "
              f"trained on); (c) {len(datasets['c'])} blocks, padding 0, "
              f"{datasets['c'].dropped_tokens} tail tokens dropped")
        print(f"setup (inject, tokenizer, tokenise, pack; untimed) {setup_seconds:.1f} s; "
              f"torch {torch.__version__}, {threads} threads; batch {opts.batch_size} x {BLOCK}, "
              f"{opts.warmup} warm-up + {opts.steps} timed steps, {opts.repeats} repeats",
              flush=True)

        rows: dict[tuple[str, str], Row] = {}
        flops_per_token: dict[str, float] = {}
        profiles: dict[str, dict[str, tuple[float, float]]] = {}
        rss_after: dict[str, float] = {}
        for family in families:
            torch.manual_seed(opts.seed)
            config = build_config(family, "tiny", tokenizer, BLOCK)
            init_model = build_model(family, config)
            init_state = {k: v.clone() for k, v in init_model.state_dict().items()}
            params = count_parameters(init_model)
            del init_model
            flops_per_token[family] = (6 * params["non_embedding"]
                                       + 6 * len(tokenizer) * config.hidden_size
                                       + 12 * config.num_hidden_layers * config.hidden_size * BLOCK)
            mlm = family == "roberta"
            hf = DataCollatorForLanguageModeling(tokenizer, mlm=mlm,
                                                 mlm_probability=MLM_PROBABILITY)
            lab = {x: PackedCollator(tokenizer, mlm=mlm, mlm_probability=MLM_PROBABILITY,
                                     seed=opts.seed, cross_document=x == "d",
                                     position_offset=position_offset(config))
                   for x in ("a", "d")}
            plain = {"a": lab["a"], "b": hf, "c": hf, "d": lab["d"]}
            collators = {x: CountingCollator(c, pad) for x, c in plain.items()}
            profiles[family] = profile_data_path(datasets, plain, opts.batch_size)
            for layout in LAYOUTS:
                rows[family, layout] = Row(family, layout)
            for repeat in range(opts.repeats):
                results = measure_round(family, config, init_state, datasets, collators,
                                        opts.seed + repeat, opts.warmup, opts.steps,
                                        opts.batch_size)
                for layout, m in results.items():
                    rows[family, layout].runs.append(m)
                    print(f"  {family:<7} repeat {repeat + 1} {LAYOUT_LABELS[layout]:<19} "
                          f"{m.useful / m.wall:9.0f} useful tok/s  {m.wall / m.steps:6.2f} s/step  "
                          f"loss {m.final_loss:.3f}", flush=True)
            rss_after[family] = peak_rss_mb()
            peaks.append(matmul_peak())
    peak = max(peaks)
    load_end = os.getloadavg()

    print()
    header = (f"{'model':<8} {'layout':<20} {'useful tok/s':>12} {'(min-max)':>15} {'padding':>8} "
              f"{'x(b)':>6} {'x(c)':>6} {'x(d)':>6} {'s/step':>7} {'data ms':>8} {'GFLOP/s':>8} "
              f"{'of peak':>8} {'steady tok/s':>12}")
    print(header)
    print("-" * len(header))
    verdicts = []
    for family in families:
        base = {x: rows[family, x].median_rate() for x in ("b", "c", "d")}
        for layout in LAYOUTS:
            row = rows[family, layout]
            rates = row.rates()
            gflops = flops_per_token[family] * row.processed_rate() / 1e9
            print(f"{family:<8} {LAYOUT_LABELS[layout]:<20} {row.median_rate():12.0f} "
                  f"{f'({min(rates):.0f}-{max(rates):.0f})':>15} {row.padding():8.3f} "
                  + "".join(f"{row.median_rate() / base[x]:6.2f} " for x in ("b", "c", "d"))
                  + f"{row.step_seconds():7.2f} {row.data_ms():8.1f} {gflops:8.1f} "
                  f"{gflops * 1e9 / peak:8.1%} {row.steady_rate():12.0f}")
        a = rows[family, "a"].median_rate()
        steady = {x: rows[family, x].steady_rate() for x in LAYOUTS}
        verdicts.append((family, a / base["b"], a / base["d"], a / base["c"],
                         steady["a"] / steady["b"], steady["a"] / steady["d"]))
    print()
    print("targets (median useful tokens/s):")
    for family, vs_b, vs_d, vs_c, steady_b, steady_d in verdicts:
        print(f"  {family:<8} (a) >= {TARGET_VS_B:.1f}x (b): {vs_b:5.2f}x  "
              f"{'MET' if vs_b >= TARGET_VS_B else 'MISSED'};   "
              f"(a) >= {TARGET_VS_D:.2f}x (d): {vs_d:5.2f}x  "
              f"{'MET' if vs_d >= TARGET_VS_D else 'MISSED'}   "
              f"(steady: {steady_b:.2f}x, {steady_d:.2f}x; (a)/(c) {vs_c:.2f}x)")
    useful_share = {"a": 1.0 - packing.padding_fraction(),
                    "b": 1.0 - datasets["b"].padding_fraction(), "c": 1.0,
                    "d": 1.0 - packing_x.padding_fraction()}
    print(f"  expectation from padding alone (equal step times, whole dataset rather than the "
          f"batches drawn): (a)/(b) {useful_share['a'] / useful_share['b']:.2f}x, "
          f"(a)/(c) {useful_share['a'] / useful_share['c']:.2f}x, "
          f"(a)/(d) {useful_share['a'] / useful_share['d']:.2f}x")
    print()
    print("padding = 1 - useful/processed over the timed batches; data ms = DataLoader fetch + "
          "collate per step (inside the timed wall); steady tok/s = useful tokens / (steps x "
          "median step time), all timed steps of all repeats pooled")
    print("data path alone (median per batch, outside training): "
          + "; ".join(f"{family} " + ", ".join(
              f"{layout} getitem {g:.1f} ms + collate {c:.1f} ms"
              for layout, (g, c) in profiles[family].items()) for family in families))
    print("FLOP/token = 6*non-embedding params + 6*vocab*hidden (tied output head) + "
          "12*layers*hidden*block: " + ", ".join(
              f"{family} {flops_per_token[family] / 1e6:.1f} MFLOP" for family in families)
          + "; GFLOP/s counts all processed tokens (padding included)")
    print(f"matmul peak (float32 2048x2048, {threads} threads, median of 7; before training and "
          f"after each model): {', '.join(f'{p / 1e9:.1f}' for p in peaks)} GFLOP/s; using the "
          f"highest, {peak / 1e9:.1f}")
    print(f"peak memory (ru_maxrss): {rss_setup:.0f} MB after setup, " + ", ".join(
        f"{rss:.0f} MB after {family}" for family, rss in rss_after.items()))
    busy = load_start[0] >= 1.0
    print(f"load average (1 min): {load_start[0]:.2f} before the run (other processes), "
          f"{load_end[0]:.2f} at the end (this run included), on {os.cpu_count()} CPUs"
          + ("  [other processes were using CPU: absolute rates may be low; the round-robin "
             "keeps the ratios comparable]" if busy else ""))
    print(f"total runtime {time.perf_counter() - script_started:.0f} s")


if __name__ == "__main__":
    main()
