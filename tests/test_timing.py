"""Injection timing (lab.contamination.timing) and the data order that keeps it
(lab.train.schedule): the steps a manifest records are the steps the model really trained each
injected sample at, an early window holds every copy, and uniform timing changes nothing."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lab.common import LabError
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.timing import parse_timing
from lab.train import pretrain as pretrain_module
from lab.train.pretrain import PretrainConfig, run_pretrain
from lab.train.schedule import (Stream, document_levels, exposures, timed_orders, uniform_order,
                                window_steps)

BLOCK = 128
COMMON = dict(benchmark="codetrans", seed=3, base_splits=("valid",), limit=700)


@pytest.fixture(scope="module")
def world(micro_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("timing")
    for name in ("control", "tok"):
        (root / name).symlink_to(micro_world / name)
    run_inject(InjectConfig(setting="paired", fraction=0.05, out=root / "uniform", **COMMON))
    run_inject(InjectConfig(setting="paired", fraction=0.05, timing=("early:0.3",),
                            out=root / "early", **COMMON))
    run_inject(InjectConfig(setting="paired", fraction=0.05, timing=("early:0.4", "late:0.4"),
                            out=root / "ladder", **COMMON))
    return root


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


class Watch:
    """Records, at every forward pass of the model pre-training builds, the injected samples in
    each row of the batch and the step it belongs to (one batch per step: grad_accum 1)."""

    def __init__(self, monkeypatch, corpus: Path, tok: Path, cache: Path, fail_at: int = 0):
        from lab.tokenizer import load_tokenizer, tokenizer_hash
        from lab.train.packing import PackedDataset, pack_documents, tokenize_corpus

        tokenizer = load_tokenizer(tok)
        tokenized = tokenize_corpus(corpus, tokenizer, tokenizer_hash(tok), cache)
        packing = pack_documents(tokenized.lengths(), BLOCK, samples=tokenized.injected,
                                 levels=document_levels(tokenized.injected,
                                                        manifest(corpus).get("timing_levels")))
        dataset = PackedDataset(tokenized, packing, tokenizer.bos_token_id,
                                tokenizer.eos_token_id, tokenizer.pad_token_id)
        self.samples = {}
        for i, seq in enumerate(packing.sequences):
            held = [tokenized.injected[d] for d in seq if tokenized.injected[d]]
            self.samples.setdefault(dataset.sequence(i).tobytes(), held)
        self.start, self.forwards, self.fail_at = 0, 0, fail_at
        self.seen: dict[str, list[int]] = {}
        build = pretrain_module.build_model

        def watched(*args, **kwargs):
            model = build(*args, **kwargs)
            model.register_forward_pre_hook(self.hook, with_kwargs=True)
            return model

        monkeypatch.setattr(pretrain_module, "build_model", watched)

    def hook(self, module, args, kwargs):
        if not module.training:
            return
        self.forwards += 1
        if self.fail_at and self.forwards == self.fail_at:
            raise RuntimeError("interrupted on purpose")
        step = self.start + self.forwards
        for row in kwargs["input_ids"].cpu().numpy():
            for sample in self.samples[row.astype(np.int64).tobytes()]:
                self.seen.setdefault(sample, []).append(step)

    def steps(self, until: int | None = None) -> dict[str, list[int]]:
        return {s: sorted(x for x in v if until is None or x <= until)
                for s, v in sorted(self.seen.items()) if until is None or min(v) <= until}


def pretrain(world: Path, corpus: str, name: str, **overrides) -> dict:
    options = dict(model="gpt2", corpus=world / corpus, tokenizer=world / "tok",
                   out=world / name, preset="micro", max_steps=40, lr=3e-3, batch_size=8,
                   block_size=BLOCK, seed=0, save_steps=1000, log_steps=5,
                   cache_dir=world / "cache")
    options.update(overrides)
    return run_pretrain(PretrainConfig(**options))


# --- the arm --------------------------------------------------------------------------------

def test_timing_specs_are_windows_and_bad_ones_get_one_line():
    assert (parse_timing("early:0.2").start, parse_timing("early:0.2").end) == (0.0, 0.2)
    assert (parse_timing("late:0.25").start, parse_timing("late:0.25").end) == (0.75, 1.0)
    assert (parse_timing("window:0.4-0.6").start, parse_timing("window:0.4-0.6").end) == (0.4, 0.6)
    assert window_steps((0.0, 0.2), 100) == (1, 20)
    assert window_steps((0.8, 1.0), 100) == (81, 100)
    assert window_steps((0.4, 0.6), 7) == (4, 4)  # step 4 spans 3/7..4/7, inside 0.4..0.6
    for bad, fragment in [(("early:1.5",), "X must be in"), (("sometimes",), "unknown timing"),
                          (("late",), "write it as late:X"), (("window:0.6-0.2",), "0 <= A < B"),
                          (("early:0.2", "early:0.2"), "listed twice"),
                          (("uniform", "early:0.2"), "window:0-1")]:
        with pytest.raises(LabError, match=fragment) as err:
            InjectConfig(setting="paired", out=Path("x"), timing=bad, **COMMON)
        assert "\n" not in str(err.value)
    with pytest.raises(LabError, match="one dose"):
        InjectConfig(setting="paired", out=Path("x"), doses=(0, 1, 4),
                     timing=("early:0.2", "late:0.2"), **COMMON)


def test_timing_keeps_the_corpus_and_splits_a_ladder_into_seeded_levels(world):
    uniform, early, ladder = (manifest(world / n) for n in ("uniform", "early", "ladder"))
    # uniform is the default and writes nothing new; a timing changes no document
    assert "timing_levels" not in uniform and "timing" not in uniform["options"]
    assert early["corpus_sha256"] == uniform["corpus_sha256"] == ladder["corpus_sha256"]
    assert early["options"]["timing"] == ["early:0.3"]
    [level] = early["timing_levels"]
    assert level["window"] == [0.0, 0.3] and level["ids"] == early["injected_ids"]
    a, b = ladder["timing_levels"]
    assert (a["timing"], b["timing"]) == ("early:0.4", "late:0.4")
    assert not set(a["ids"]) & set(b["ids"])
    assert sorted(a["ids"] + b["ids"]) == sorted(ladder["injected_ids"])
    assert abs(len(a["ids"]) - len(b["ids"])) <= 2
    assert a["sources"] == a["ids"]  # a placebo would name its own samples here


# --- the order ------------------------------------------------------------------------------

def test_a_timed_order_moves_visits_into_windows_and_keeps_every_visit():
    stream = Stream(sequences=50, batch_size=4, grad_accum=1, world_size=1, steps=39)
    level_of = [0 if i < 3 else 1 if i < 6 else None for i in range(50)]
    orders = timed_orders(stream, 7, level_of, [(0.0, 0.25), (0.75, 1.0)], ["e", "l"])
    uniform = [uniform_order(50, 7, e) for e in range(stream.epochs)]
    samples_of = [[f"s{i}"] if i < 6 else [] for i in range(50)]
    timed = exposures(stream, lambda e: orders[e], samples_of)
    plain = exposures(stream, lambda e: uniform[e], samples_of)
    assert {s: len(v) for s, v in timed.items()} == {s: len(v) for s, v in plain.items()}
    early_last, late_first = window_steps((0.0, 0.25), 39)[1], window_steps((0.75, 1.0), 39)[0]
    assert all(step <= early_last for s in ("s0", "s1", "s2") for step in timed[s])
    assert all(step >= late_first for s in ("s3", "s4", "s5") for step in timed[s])
    # what is trained overall is the uniform run's (the same visits of every sequence)
    def visits(os_):
        return Counter(x for e, o in enumerate(os_) for i, x in enumerate(o)
                       if stream.step_of(np.array(e), np.array(i)) <= 39)
    assert visits(orders) == visits(uniform)
    with pytest.raises(LabError, match="injection.timing e: steps 1-1"):
        timed_orders(stream, 7, [0] * 20 + [None] * 30, [(0.0, 0.03)], ["e"])


@pytest.mark.parametrize("loop", ["trainer", "plain"])
def test_recorded_exposures_are_the_steps_the_model_trained_them_at(world, monkeypatch, loop):
    watch = Watch(monkeypatch, world / "early", world / "tok", world / "cache")
    result = pretrain(world, "early", f"early-{loop}", loop=loop)
    recorded = result["exposures"]
    assert recorded["order"] == "timed" and recorded["steps"] == 40
    assert recorded["by_sample"] == watch.steps()
    # every copy inside the first 30% of the steps: before step 12 ends
    [level] = recorded["levels"]
    assert level["steps"] == [1, 12]
    assert max(max(v) for v in recorded["by_sample"].values()) <= 12
    assert set(recorded["by_sample"]) == set(manifest(world / "early")["injected_ids"])


def test_exposures_survive_a_resume(world, monkeypatch):
    cache = world / "cache"
    whole = Watch(monkeypatch, world / "ladder", world / "tok", cache)
    reference = pretrain(world, "ladder", "ladder-whole", save_steps=10)
    assert reference["exposures"]["by_sample"] == whole.steps()

    first = Watch(monkeypatch, world / "ladder", world / "tok", cache, fail_at=15)
    with pytest.raises(RuntimeError, match="on purpose"):
        pretrain(world, "ladder", "ladder-cut", save_steps=10)
    assert (world / "ladder-cut.partial" / "checkpoints" / "checkpoint-10").is_dir()
    second = Watch(monkeypatch, world / "ladder", world / "tok", cache)
    second.start = 10
    resumed = pretrain(world, "ladder", "ladder-cut", save_steps=10, resume=True)
    assert resumed["resumed_from"] == "checkpoint-10"
    observed = first.steps(until=10)
    for sample, steps in second.steps().items():
        observed.setdefault(sample, []).extend(steps)
    assert resumed["exposures"]["by_sample"] == {s: sorted(v) for s, v in sorted(observed.items())}
    assert resumed["exposures"] == reference["exposures"]
    early, late = resumed["exposures"]["levels"]
    ladder = manifest(world / "ladder")["timing_levels"]
    by_sample = resumed["exposures"]["by_sample"]
    assert all(max(by_sample[s]) <= early["steps"][1] for s in ladder[0]["sources"])
    assert all(min(by_sample[s]) >= late["steps"][0] for s in ladder[1]["sources"])
    summary = resumed["exposures"]["summary"]
    assert summary["early:0.4"]["median_steps_since_last"] > summary["late:0.4"]["median_steps_since_last"]


def test_uniform_runs_keep_their_order_and_record_their_exposures(world, monkeypatch):
    watch = Watch(monkeypatch, world / "uniform", world / "tok", world / "cache")
    result = pretrain(world, "uniform", "uniform-run")
    assert result["exposures"]["order"] == "uniform" and "levels" not in result["exposures"]
    assert result["exposures"]["by_sample"] == watch.steps()
    assert "timing" not in result["config"]


# --- continued pre-training in a study ------------------------------------------------------

MICRO = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"


def test_continued_stages_are_models_of_their_own_and_leave_the_others_keys():
    from lab.study.grid import expand, model_name
    from lab.study.recipe import load_recipe

    plain = expand(load_recipe(MICRO))
    after = expand(load_recipe(MICRO, ["continued.order=clean-after",
                                       "continued.clean_epochs=[1, 2]"]))
    assert {s.key for s in plain} <= {s.key for s in after}
    continued = [s for s in after if s.kind == "pretrain" and "continued" in s.labels]
    assert len(continued) == 2 * 2 * 2  # arms x seeds x clean epochs
    for stage in continued:
        corpus, _tokenizer, init = stage.inputs
        assert corpus.labels == {"arm": "control", "seed": stage.labels["seed"]}
        assert init.kind == "pretrain" and init.labels["arm"] == stage.labels["arm"]
        assert stage.config.epochs in (1.0, 2.0)
    names = {model_name(s.labels) for s in after if s.kind == "evaluate"}
    assert names == {"gpt2", "gpt2/clean-after:1", "gpt2/clean-after:2"}

    first = expand(load_recipe(MICRO, ["continued.order=clean-first"]))
    phases = [s for s in first if s.kind == "pretrain"
              and s.labels.get("continued") == "clean-phase:1"]
    assert len(phases) == 2 and all(s.config.epochs == 1.0 for s in phases)  # one per seed
    continued = [s for s in first if s.labels.get("continued") == "clean-first:1"
                 and s.kind == "pretrain"]
    assert len(continued) == 4 and {s.inputs[2].key for s in continued} == {p.key for p in phases}
    assert not [s for s in first if s.kind == "evaluate" and "clean-phase" in str(s.labels)]
    with pytest.raises(LabError, match="continued.order: choose from"):
        load_recipe(MICRO, ["continued.order=later"])


def test_a_study_continues_a_timed_model_on_clean_data(tmp_path):
    from lab.analysis.report import run_report
    from lab.study.runner import run_study
    from lab.study.recipe import load_recipe

    recipe = load_recipe(MICRO, ["arms=[paired]", "seeds=[0]", "finetune.epochs=[0]",
                                 "injection.timing=[early:0.5, late:0.5]",
                                 "continued.order=clean-after", "continued.clean_epochs=[1]",
                                 "evaluation.max_samples=40", "injection.samples=40",
                                 "injection.fraction=0.5"])
    result = run_study(recipe, tmp_path / "study", workers=1)
    stages = tmp_path / "study" / "stages"
    manifests = [json.loads(p.read_text()) for p in stages.glob("pretrain-*/manifest.json")]
    first = next(m for m in manifests if not m.get("init_from"))
    then = next(m for m in manifests if m.get("init_from"))
    # the continued model trained on the clean corpus, and still knows what it saw before
    assert then["own_corpus"]["setting"] == "control" and then["corpus"]["setting"] == "paired"
    assert then["corpus"]["injected_ids"] == first["corpus"]["injected_ids"]
    assert then["init_weights_sha256"] == first["final_weights_sha256"]
    assert then["exposures"]["steps"] == first["steps"] + then["steps"]
    assert then["exposures"]["by_sample"] == first["exposures"]["by_sample"]  # none since
    assert [s["setting"] for s in then["lineage"]] == ["paired", "control"]
    rows = _csv(Path(result["samples"]))
    since = {(r["model"], r["id"]): float(r["steps_since_last_exposure"])
             for r in rows if r.get("steps_since_last_exposure")}
    shift = {i: since[("gpt2/clean-after:1", i)] - since[("gpt2", i)]
             for (model, i) in since if model == "gpt2"}
    assert shift and set(shift.values()) == {float(then["steps"])}
    report = run_report(tmp_path / "study", metric="bleu", html=False)
    levels = report["timing"]["levels"]
    assert {(r["model"], r["level"]) for r in levels} == {
        (m, lv) for m in ("gpt2", "gpt2/clean-after:1") for lv in ("early:0.5", "late:0.5")}
    assert (tmp_path / "study" / "report" / "timing.md").is_file()


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("sequences, batch, accum", [(50, 4, 1), (53, 4, 2), (61, 3, 2)])
def test_exposures_under_two_ranks_follow_accelerates_sharding(sequences, batch, accum):
    """With several ranks the Trainer deals the sampler's batches round-robin and evens the last
    round with the epoch's first sequences (accelerate's BatchSamplerShard): the steps the
    schedule records are those the ranks' batches are trained at."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    stream = Stream(sequences, batch, accum, world_size=2, steps=25)
    level_of = [0 if i % 7 == 0 else None for i in range(sequences)]
    orders = timed_orders(stream, 1, level_of, [(0.0, 0.5)], ["early:0.5"])
    samples_of = [[f"s{i}"] if i % 7 == 0 else [] for i in range(sequences)]
    seen: dict[str, list[int]] = {}
    for epoch in range(stream.epochs):
        for rank in range(2):
            shard = BatchSamplerShard(BatchSampler(orders[epoch], batch, drop_last=False),
                                      num_processes=2, process_index=rank, even_batches=True)
            for k, indices in enumerate(shard):
                step = epoch * stream.steps_per_epoch + k // accum + 1
                if step > stream.steps:
                    break
                for i in indices:
                    for sample in samples_of[i]:
                        seen.setdefault(sample, []).append(step)
    recorded = exposures(stream, lambda e: orders[e], samples_of)
    assert recorded == {s: sorted(v) for s, v in sorted(seen.items())}
    last = window_steps((0.0, 0.5), 25)[1]
    assert all(max(v) <= last for v in recorded.values())


def test_forgetting_stats_are_seed_level_lifts_with_the_weight_decay_contrast(tmp_path):
    """Each level's lift over the held-out samples is the mean over seeds of each seed's own
    difference of means; the weight-decay contrast the mean of each seed's two lifts' difference;
    both with intervals over seeds (exact values computed here by hand)."""
    from lab.analysis.report_data import read_csv
    from lab.analysis.timing import timing_stats, timing_table

    rows = []
    truth = {}  # (decay, seed, level) -> mean score
    for decay in (0.0, 0.1):
        for seed in (0, 1, 2):
            for level, base in (("early:0.2", 2.0), ("late:0.2", 40.0), (None, 1.0)):
                ids = range(0, 4) if level == "early:0.2" else range(4, 8) if level else range(8, 12)
                scores = [base + seed + (3.0 if decay == 0.0 and level == "early:0.2" else 0.0)
                          + i % 2 for i in ids]
                truth[(decay, seed, level)] = sum(scores) / len(scores)
                rows += [_timing_row(decay, seed, level, i, score) for i, score in zip(ids, scores)]
    _write_timing_study(tmp_path, rows)
    found = timing_stats(tmp_path, ["bleu"], 0.05, read_csv)
    early = next(r for r in found["levels"]
                 if r["model"] == "gpt2/wd=0" and r["level"] == "early:0.2")
    expected = sum(truth[(0.0, s, "early:0.2")] - truth[(0.0, s, None)] for s in (0, 1, 2)) / 3
    assert early["lift"] == pytest.approx(expected) and early["seeds"] == 3
    # every seed's lift is 4.00: no spread over seeds, so no interval (lab.stats.INTERVAL_RULE)
    assert early["lift"] == pytest.approx(4.0) and early["lift_ci_low"] is None
    assert early["steps_since_last"] == 264 and early["window"] == "0-0.2"
    assert early["against"] == "late:0.2"  # the most recently seen level
    late = next(r for r in found["levels"] if r["model"] == "gpt2/wd=0" and r["level"] == "late:0.2")
    assert early["contrast"] == pytest.approx(early["lift"] - late["lift"])
    [decay_early] = [r for r in found["weight_decay"] if r["level"] == "early:0.2"]
    assert decay_early["model"] == "gpt2" and decay_early["weight_decay"] == [0.0, 0.1]
    assert decay_early["difference"] == pytest.approx(-3.0)  # wd 0.1 lost the 3 points
    assert decay_early["p"] == pytest.approx(0.25)  # 3 seeds, all one sign: the floor
    table = timing_table(found, "bleu")["md"]
    assert ("| gpt2/wd=0 | 0 | 200 | paired | early:0.2 | 0-0.2 | 264 "
            "| +4.00 [n/a (zero spread)] |") in table
    assert "Weight decay" in table


def test_continuing_on_a_contaminated_corpus_joins_the_memberships(world):
    first = pretrain(world, "uniform", "join-first", max_steps=4)
    then = pretrain(world, "uniform", "join-then", max_steps=4, init_from=world / "join-first")
    assert then["corpus"]["injected_ids"] == first["corpus"]["injected_ids"]
    assert then["corpus"]["held_out_ids"] == first["corpus"]["held_out_ids"]
    assert [s["steps"] for s in then["lineage"]] == [4, 4]
    assert then["exposures"]["steps"] == 8
    assert all(min(v) <= 4 or min(v) > 4 for v in then["exposures"]["by_sample"].values())
    # a timed model's levels would no longer say when a sample was seen: refused, one line
    pretrain(world, "early", "join-timed", max_steps=40)
    with pytest.raises(LabError, match="dose or timing levels"):
        pretrain(world, "uniform", "join-refused", max_steps=4, init_from=world / "join-timed")
    assert not (world / "join-refused").exists() and not (world / "join-refused.partial").exists()


def _weight_decay_study(folder: Path, seeds: int) -> Path:
    """A timing study whose weight decay 0.1 costs the early level 3 BLEU in every seed and
    leaves the late level as it is."""
    rows = []
    for decay in (0.0, 0.1):
        for seed in range(seeds):
            for level, base in (("early:0.2", 2.0), ("late:0.2", 40.0), (None, 1.0)):
                ids = range(0, 4) if level == "early:0.2" else range(4, 8) if level else range(8, 12)
                for i in ids:
                    lost = 3.0 if decay == 0.1 and level == "early:0.2" else 0.0
                    rows.append(_timing_row(decay, seed, level, i, base + seed + i % 2 - lost))
    folder.mkdir(parents=True)
    return _write_timing_study(folder, rows)


def _timing_row(decay: float, seed: int, level: str | None, i: int, score: float) -> dict:
    """One samples.csv row of a two-level timing study (level None: held out)."""
    return {"model": f"gpt2/wd={decay:g}", "task": "codetrans", "arm": "paired", "epochs": 0,
            "train_size": 200, "seed": seed, "id": f"s{i}",
            "group": "injected" if level else "held_out", "timing": level or "",
            "weight_decay": decay,
            "steps_since_last_exposure": 264 if level == "early:0.2" else 1 if level else "",
            "score_bleu": score}


def _write_timing_study(folder: Path, rows: list[dict]) -> Path:
    """samples.csv of `rows` and the recipe.json naming the two timing levels."""
    import csv

    with open(folder / "samples.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / "recipe.json").write_text(json.dumps(
        {"injection": {"timing": ["early:0.2", "late:0.2"]}}))
    return folder


def _decay_verdicts(study: Path) -> dict[str, str]:
    from lab.analysis.report_data import read_csv
    from lab.analysis.timing import timing_stats, timing_table, verdict

    found = timing_stats(study, ["bleu"], 0.05, read_csv)
    table = timing_table(found, "bleu")["md"]
    verdicts = {r["level"]: verdict(r, "p", "floor", 0.05) for r in found["weight_decay"]}
    assert all(f"| {text} |" in table for text in verdicts.values())
    return verdicts


def test_three_seeds_cannot_test_weight_decay_and_seven_can(tmp_path):
    """The same 3-point loss in every seed: with 3 seeds the sign-flip test's floor, 2/2^3 =
    0.25 (0.5 after Holm over the 2 levels), is above alpha, so neither level's verdict may read
    'no difference detected'; with 7 seeds (floor 2/2^7, 0.031 after Holm) the early level's
    loss is detected and the unchanged late level is not."""
    three = _decay_verdicts(_weight_decay_study(tmp_path / "three", 3))
    assert three == {level: "not testable here (3 seeds: smallest p 0.25; 0.5 after Holm over "
                            "2 tests)" for level in ("early:0.2", "late:0.2")}
    seven = _decay_verdicts(_weight_decay_study(tmp_path / "seven", 7))
    assert seven == {"early:0.2": "difference detected", "late:0.2": "no difference detected"}


def test_a_level_family_at_its_floor_is_marked_not_testable_in_the_forgetting_table(tmp_path):
    """Every level lift of 3 seeds sits at p 0.25 (0.5 after Holm over the 2 levels): the table
    says so beside the p instead of leaving a bare 0.5 to read as 'no lift'."""
    from lab.analysis.report_data import read_csv
    from lab.analysis.timing import timing_stats, timing_table

    found = timing_stats(_weight_decay_study(tmp_path / "three", 3), ["bleu"], 0.05, read_csv)
    table = timing_table(found, "bleu")["md"]
    assert "| 0.5: not testable here (3 seeds: smallest p 0.25; 0.5 after Holm over 2 tests) |" \
        in table
    seven = timing_stats(_weight_decay_study(tmp_path / "seven", 7), ["bleu"], 0.05, read_csv)
    assert "not testable" not in timing_table(seven, "bleu")["md"].split("Weight decay")[0]
