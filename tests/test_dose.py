"""Dose ladders (injection.doses): the injected corpus per level, its nesting with the one-level
options, and the per-level statistics, table and figure of lab report."""
from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from lab.codetokens import whitespace_hash
from lab.common import LabError
from lab.contamination import paired_document, segments
from lab.corpora.shards import read_corpus
from lab.contamination.inject import InjectConfig, run_inject
from lab.corpora import load_samples

needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
LIMIT = 4500  # CSN-format valid documents: room for the 3,000 an unpaired 0,1,3,2 ladder removes


def make(tmp_path: Path, name: str, **overrides) -> tuple[dict, Path]:
    options = dict(benchmark="codetrans", setting="paired", seed=5, out=tmp_path / name,
                   base_splits=("valid",), limit=LIMIT)
    options.update(overrides)
    cfg = InjectConfig(**options)
    return run_inject(cfg), cfg.out


def texts_of(folder: Path) -> list[str]:
    return [record["text"] for record in read_corpus(folder)]


@pytest.fixture(scope="module")
def codetrans():
    if not os.environ.get("LAB_CORPORA"):
        pytest.skip("needs LAB_CORPORA")
    return {s.id: s for s in load_samples("codetrans", "test").records}


# --- the injected corpus ------------------------------------------------------------------------

@needs_corpora
def test_every_level_is_injected_its_dose_and_duplicates_stay_in_one_level(tmp_path, codetrans):
    doses = (0, 1, 3, 2)
    manifest, out = make(tmp_path, "ladder", setting="unpaired", doses=doses)  # all 1,000
    levels = manifest["dose_levels"]
    assert [level["dose"] for level in levels] == list(doses)
    ids = [set(level["ids"]) for level in levels]
    assert sum(map(len, ids)) == len(codetrans) == len(set().union(*ids))
    assert all(abs(len(level) - len(codetrans) / 4) <= 2 for level in ids)  # equal groups, up to duplicates
    assert set(manifest["held_out_ids"]) == ids[0]
    assert set(manifest["injected_ids"]) == ids[1] | ids[2] | ids[3]
    counts = manifest["counts"]
    expected = sum(2 * dose * len(level) for dose, level in zip(doses, ids))  # unpaired: 2 docs
    assert counts["injected_documents"] == expected == counts["removed_documents"]
    assert counts["final_documents"] == LIMIT
    assert [level["documents"] for level in levels] == [2 * d * len(i) for d, i in zip(doses, ids)]
    assert manifest["guards"]["samples_per_dose"] == {str(d): len(i) for d, i in zip(doses, ids) if d}

    # Each sample's output occurs (at least, as outputs may repeat) dose times; held-out
    # samples' sides never occur.
    present = Counter(whitespace_hash(part) for text in texts_of(out) for part in segments(text))
    for dose, level in zip(doses, ids):
        for sample_id in level:
            sample = codetrans[sample_id]
            if dose:
                assert present[whitespace_hash(sample.output)] >= dose, sample_id
            else:
                assert present[whitespace_hash(sample.input)] == 0, sample_id
                assert present[whitespace_hash(sample.output)] == 0, sample_id
    exact = Counter()
    for dose, level in zip(doses, ids):
        for sample_id in level:
            exact[whitespace_hash(codetrans[sample_id].output)] += dose
    assert sum(present[key] == times for key, times in exact.items()) >= 0.95 * len(exact)

    # A duplicated Java function never straddles two levels (its copies would leak dose 0).
    by_input: dict[bytes, set[str]] = {}
    for sample_id in set().union(*ids):
        by_input.setdefault(whitespace_hash(codetrans[sample_id].input), set()).add(sample_id)
    assert any(len(group) > 1 for group in by_input.values())
    for group in by_input.values():
        assert sum(bool(group & level) for level in ids) == 1


@needs_corpora
def test_a_ladder_is_deterministic_per_seed(tmp_path):
    first, out1 = make(tmp_path, "a", doses=(0, 1, 2), samples=120)
    second, out2 = make(tmp_path, "b", doses=(0, 1, 2), samples=120)
    other, _ = make(tmp_path, "c", doses=(0, 1, 2), samples=120, seed=6)
    assert first["corpus_sha256"] == second["corpus_sha256"]
    for shard in first["shards"]:
        assert (out1 / shard["file"]).read_bytes() == (out2 / shard["file"]).read_bytes()
    assert first["dose_levels"] == second["dose_levels"]
    assert other["corpus_sha256"] != first["corpus_sha256"]
    assert other["dose_levels"][1]["ids"] != first["dose_levels"][1]["ids"]


@needs_corpora
def test_one_level_ladders_are_the_one_level_options(tmp_path):
    """[0, K] injects what --fraction 0.5 --repeat K does, [K] what --repeat K does: byte for byte."""
    half, _ = make(tmp_path, "half", doses=(0, 3), samples=100)
    fraction, _ = make(tmp_path, "fraction", fraction=0.5, repeat=3, samples=100)
    assert half["corpus_sha256"] == fraction["corpus_sha256"]
    assert set(half["injected_ids"]) == set(fraction["injected_ids"])
    whole, _ = make(tmp_path, "whole", doses=(2,), samples=100)
    repeat, _ = make(tmp_path, "repeat", repeat=2, samples=100)
    assert whole["corpus_sha256"] == repeat["corpus_sha256"]


@needs_corpora
def test_a_placebo_ladder_injects_other_samples_at_the_same_doses(tmp_path, codetrans):
    arm, _ = make(tmp_path, "arm", doses=(0, 1, 4), samples=90)
    placebo, out = make(tmp_path, "placebo", setting="paired-placebo", doses=(0, 1, 4), samples=90)
    assert [lv["ids"] for lv in placebo["dose_levels"]] == [lv["ids"] for lv in arm["dose_levels"]]
    assert placebo["counts"]["injected_documents"] == arm["counts"]["injected_documents"]
    present = Counter(whitespace_hash(t) for t in texts_of(out))
    for level in placebo["dose_levels"][1:]:
        assert len(level["placebo_ids"]) == level["samples"]
        assert not set(level["placebo_ids"]) & set(codetrans)
        for sample_id in level["ids"]:  # the test samples themselves never occur
            sample = codetrans[sample_id]
            assert present[whitespace_hash(paired_document(sample.input, sample.output))] == 0


@needs_corpora
@pytest.mark.parametrize("doses, options, message", [
    ((0, 0), {}, "a dose is listed twice"),
    ((0,), {}, "no level is injected"),
    ((0, -2), {}, "whole numbers >= 0"),
    ((0, 2), {"repeat": 2}, "--doses and --repeat"),
    ((0, 2), {"fraction": 0.3}, "--doses and --fraction"),
    ((0, 1, 2, 3, 4), {"samples": 4}, "leave dose"),
])
def test_impossible_ladders_are_refused_before_anything_is_written(tmp_path, doses, options, message):
    with pytest.raises(LabError, match=message):
        make(tmp_path, "bad", doses=doses, **options)
    assert list(tmp_path.iterdir()) == []


def test_recipe_ladders_are_checked_with_the_key_named(tmp_path):
    from lab.study.recipe import load_recipe
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "dose-response.yaml"
    assert list(load_recipe(recipe).injection.doses) == [0, 1, 2, 4, 6]
    for override, fragment in [("injection.doses=[0,0]", "a dose is listed twice"),
                               ("injection.fraction=0.5", "injection.doses"),
                               ("injection.doses=[0,x]", "injection.doses")]:
        with pytest.raises(LabError, match="dose-response.yaml") as caught:
            load_recipe(recipe, [override])
        assert fragment in str(caught.value), (override, caught.value)


# --- per-level statistics, table and figure (synthetic study folders) ---------------------------

DOSES = (0, 1, 4, 16)
LIFT = {0: 0.0, 1: 0.0, 4: 8.0, 16: 20.0}  # at E=0; fine-tuning (E=1) erases it
LABELS = ["study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size", "stage"]


def _write_csv(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)


def write_ladder_study(root: Path, seeds: int = 8, per_level: int = 15, epochs=(0, 1),
                       lift=lambda dose, seed: LIFT[dose], convention: str | None = None) -> Path:
    """A study folder as collect writes it: a control arm and a paired arm with a 4-level ladder
    (ids fixed per level across seeds), per-sample BLEU = 20 + lift(dose, seed) (E=0) + noise,
    the control scoring the same samples without the lift; probes whose loss falls with the
    dose; pre-training 10 epochs, the recipe's statistics.convention if given."""
    import random
    rng = random.Random(1)
    root.mkdir(parents=True)
    (root / "recipe.json").write_text(json.dumps(
        {"pretrain": {"epochs": 10.0}, **({"statistics": {"convention": convention}}
                                          if convention else {})}))
    results, samples, probes = [], [], []
    shares = {0: 0.0, 1: 0.02, 4: 0.08, 16: 0.3}
    for arm in ("control", "paired"):
        for seed in range(seeds):
            for epoch in epochs:
                base = dict(zip(LABELS, ["s", "codetrans", "translation", "gpt2", arm, seed, epoch,
                                         "", f"evaluate-{arm}-{seed}-{epoch}"]))
                every = []
                for dose in DOSES:
                    shift = lift(dose, seed) if arm == "paired" and epoch == 0 and dose else 0.0
                    scores = [max(0.0, rng.gauss(20.0 + shift, 3.0)) for _ in range(per_level)]
                    every += scores
                    group = "injected" if dose else "held_out"
                    samples += [{**base, "id": f"d{dose}-{i}", "group": group, "dose": dose,
                                 "score_bleu": s} for i, s in enumerate(scores)]
                    if arm == "paired":
                        results.append({**base, "group": f"dose={dose}", "samples": per_level,
                                        "bleu": sum(scores) / per_level + 0.3,
                                        "injected_token_fraction": shares[dose]})
                results.append({**base, "group": "all", "samples": len(every),
                                "bleu": sum(every) / len(every),
                                "injected_token_fraction": 0.0 if arm == "control" else 0.4})
            for dose in DOSES:
                for i in range(per_level):
                    loss = rng.gauss(3.0 - (0.1 * dose if arm == "paired" else 0.0), 0.3)
                    probes.append({"study": "s", "benchmark": "codetrans", "model": "gpt2",
                                   "arm": arm, "seed": seed, "groups": "paired", "form": "paired",
                                   "stage": f"probe-{arm}-{seed}", "id": f"d{dose}-{i}",
                                   "group": "injected" if dose else "held_out", "dose": dose,
                                   "tokens": 50, "loss": loss})
    _write_csv(root / "results.csv", results)
    _write_csv(root / "samples.csv", samples)
    _write_csv(root / "probes.csv", probes)
    return root


def _level(found, dose, epochs=0, metric="bleu"):
    [record] = [r for r in found["levels"]
                if (r["dose"], r["epochs"], r["metric"]) == (dose, epochs, metric)]
    return record


def _cell(found, epochs=0):
    [cell] = [c for c in found["cells"] if c["epochs"] == epochs]
    return cell


def _scores(study: Path, arm: str = "paired", epochs: int = 0) -> dict[tuple[str, int], dict[str, float]]:
    """(seed, dose) -> sample id -> BLEU, read back from samples.csv."""
    found: dict = {}
    for r in csv.DictReader(open(study / "samples.csv")):
        if r["arm"] == arm and r["epochs"] == str(epochs):
            found.setdefault((r["seed"], int(r["dose"])), {})[r["id"]] = float(r["score_bleu"])
    return found


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_each_level_against_dose_zero_over_seeds_with_holm_and_the_threshold(tmp_path):
    from itertools import product

    from scipy.stats import mannwhitneyu

    from lab.analysis.report import run_stats
    study = write_ladder_study(tmp_path / "s")
    found = run_stats(study)["doses"]
    assert {r["dose"] for r in found["levels"]} == set(DOSES)
    assert found["alternative"] == "two-sided"  # the recipe's default convention
    scores = _scores(study)
    seeds = sorted({seed for seed, _dose in scores})
    raw = []
    for dose in DOSES[1:]:
        record = _level(found, dose)
        seed_lifts = [_mean(scores[(s, dose)].values()) - _mean(scores[(s, 0)].values())
                      for s in seeds]
        assert record["samples"] == 15 * 8 and record["unit"] == "seed"
        assert record["lift"] == pytest.approx(_mean(seed_lifts))
        # The level's p: the sign-flip test over the 8 per-seed lifts, all 2^8 flips counted.
        flipped = [abs(sum(f * g for f, g in zip(flips, seed_lifts)))
                   for flips in product((1, -1), repeat=len(seed_lifts))]
        assert record["p"] == pytest.approx(
            sum(v >= abs(sum(seed_lifts)) - 1e-9 for v in flipped) / 2 ** len(seed_lifts))
        # The pooled (seed, sample) test stays, as a description only.
        pooled = [v for s in seeds for v in scores[(s, dose)].values()]
        held = [v for s in seeds for v in scores[(s, 0)].values()]
        assert record["p_pooled_description"] == pytest.approx(
            mannwhitneyu(pooled, held, alternative="greater").pvalue, rel=1e-6)
        assert record["p_holm"] >= record["p"]
        assert record["lift_ci_low"] <= record["lift"] <= record["lift_ci_high"]
        assert record["times_seen"] == 10 * dose
        assert record["token_share"] == pytest.approx({1: 0.02, 4: 0.08, 16: 0.3}[dose])
        assert record["lift_vs_control"] == pytest.approx(record["lift"], abs=3.0)
        assert record["lift_vs_control_ci_low"] <= record["lift_vs_control"] \
            <= record["lift_vs_control_ci_high"]
        assert record["p_vs_control_holm"] >= record["p_vs_control"]
        assert record["probe_auc"] > 0.5 if dose >= 4 else True
        raw.append(record["p"])
    # Holm over the three levels of the cell, in the order of their p: 8 agreeing seeds give
    # the smallest two-sided p, 2/2^8.
    assert min(raw) == pytest.approx(2 / 2 ** 8)
    assert min(_level(found, d)["p_holm"] for d in DOSES[1:]) == pytest.approx(3 * min(raw))
    assert _level(found, 4)["p_holm"] < 0.05 and _level(found, 16)["p_holm"] < 0.05
    assert _level(found, 1)["p_holm"] > 0.05
    cell = _cell(found)
    assert cell["threshold"] == 4 and cell["threshold_times_seen"] == 40 and cell["unit"] == "seed"
    assert cell["monotone_fit"]["top"] > 10 and cell["non_monotone"] is False
    # After fine-tuning the lift is gone: no dose crosses the threshold.
    assert _cell(found, epochs=1)["threshold"] is None
    assert _level(found, 16, epochs=1)["probe_auc"] > 0.5  # the probe is on the pre-trained model


SPLIT_SEEDS = [8.0, 7.0, -6.0, 0.5, 8.0, 7.0, -6.0, 0.5]  # the seeds disagree: some lose


def test_a_pooled_lift_the_seeds_disagree_on_declares_no_threshold(tmp_path):
    """Many samples per seed make the pooled per-sample test fire on a lift that half the seeds
    do not show: the seed-level test, which decides, does not."""
    study = write_ladder_study(tmp_path / "s", per_level=60, epochs=(0,),
                               lift=lambda dose, seed: SPLIT_SEEDS[seed])
    from lab.analysis.report import run_stats
    result = run_stats(study)
    found = result["doses"]
    for dose in DOSES[1:]:
        record = _level(found, dose)
        assert record["p_pooled_description"] < 1e-6
        assert record["p"] > 0.05 and record["p_holm"] > 0.05
        assert record["lift_ci_low"] < 0 < record["lift_ci_high"]
    assert _cell(found)["threshold"] is None
    assert _cell(found)["holm_floor"] == pytest.approx(3 * 2 / 2 ** 8)  # 8 seeds could have
    table = result["dose_tables"]["bleu"]["md"]
    assert "threshold none of the doses;" in table
    assert "*" not in table.split("\n\n")[0]  # nothing starred, the pooled p least of all


def test_seeds_that_agree_give_the_threshold_under_the_recipes_alternative(tmp_path):
    """Six seeds that agree reach the one-sided sign-flip floor 1/64 (Holm x3: 0.047) under the
    replication package's convention, which the levels' tests take from the recipe."""
    study = write_ladder_study(tmp_path / "s", seeds=6, per_level=40, epochs=(0,),
                               lift=lambda dose, seed: {1: 0.0, 4: 6.0 + seed, 16: 12.0}[dose],
                               convention="replication-package")
    from lab.analysis.report import run_stats
    found = run_stats(study)["doses"]
    assert found["alternative"] == "greater" and "greater" in found["within_test"]
    assert _level(found, 4)["p"] == pytest.approx(1 / 64)
    assert _level(found, 4)["p_holm"] == pytest.approx(3 / 64)
    assert _cell(found)["threshold"] == 4
    assert _cell(found)["holm_floor"] == pytest.approx(3 / 64) and _cell(found)["seeds_for_alpha"] == 6


def test_too_few_seeds_for_any_threshold_are_named(tmp_path):
    """Four seeds and three levels: two-sided, no level's Holm p can go below 3 x 2/2^4."""
    study = write_ladder_study(tmp_path / "s", seeds=4, epochs=(0,))
    from lab.analysis.report import run_stats
    result = run_stats(study)
    assert _cell(result["doses"])["holm_floor"] == pytest.approx(0.375)
    assert ("detection threshold not testable here (at best Holm p 0.375 with these seeds; "
            "7 seeds would let a level reach 0.05)") in result["dose_tables"]["bleu"]["md"]


def test_a_u_shaped_ladder_is_bent_by_the_unconstrained_fit_and_flagged(tmp_path):
    """A dip below dose 0 at one copy, then a rise (Jiang et al.'s U): the monotone curve cannot
    follow it, the unconstrained one can, and the levels' intervals flag the ladder."""
    u_shape = {1: -8.0, 4: 0.0, 16: 14.0}
    study = write_ladder_study(tmp_path / "s", per_level=30, epochs=(0,),
                               lift=lambda dose, seed: u_shape[dose])
    from lab.analysis.report import run_report
    found = run_report(study)["doses"]
    cell = _cell(found)
    assert cell["unconstrained_fit"]["rmse"] < cell["monotone_fit"]["rmse"]
    assert cell["unconstrained_fit"]["linear"] < 0 < cell["unconstrained_fit"]["quadratic"]
    assert 0 < cell["unconstrained_fit"]["turning_point"] < 16
    assert cell["non_monotone"] is True
    assert [0, 1] in cell["falls"] and [1, 16] in cell["rises"]
    curve = cell["curve"]["unconstrained"]
    assert min(curve) < 0 < curve[-1]  # the drawn curve dips, then rises
    assert "NON-MONOTONE" in (study / "report" / "dose.md").read_text()
    # The band redraws seeds, then samples within seed.
    assert cell["band"]["seeds"] == 8 and len(cell["band"]["unconstrained"]["low"]) == 40


def test_the_dose_is_copies_per_corpus_epoch_relative_to_a_base_document(tmp_path):
    from lab.analysis.report import run_report
    study = write_ladder_study(tmp_path / "s")
    result = run_report(study)
    report = study / "report"
    for name in ("dose.md", "dose.csv", "dose.json", "dose-bleu.png", "dose-bleu.svg"):
        assert (report / name).stat().st_size > 0, name
    table = (report / "dose.md").read_text()
    assert "| dose: copies per corpus epoch (a base document: 1) | times seen |" in table
    assert "token share" in table and "30.0%" in table
    assert "threshold dose 4 copies/epoch (40 times seen)" in table
    assert "threshold none of the doses" in table
    assert "## Dose-response" in result["markdown"]
    with open(report / "dose.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(DOSES) * 2  # levels x fine-tuning epochs, one metric
    assert [(r["dose"], r["times_seen"]) for r in rows[:4]] == [("0", "0"), ("1", "10"),
                                                                ("4", "40"), ("16", "160")]
    assert "exposures" not in rows[0]
    saved = json.loads((report / "dose.json").read_text())
    assert saved["dose_scale"] == "copies per corpus epoch (a base document: 1)"
    cell = saved["cells"][0]
    assert cell["curve"]["copies_per_epoch"][0] == pytest.approx(1)
    assert cell["curve"]["copies_per_epoch"][-1] == pytest.approx(16)
    assert cell["band"]["monotone"]["low"] and cell["curve"]["unconstrained"]
    assert 1 < cell["monotone_fit"]["midpoint"] < 16  # in copies per epoch, not times seen
    from PIL import Image
    assert Image.open(report / "dose-bleu.png").size[0] > 800


def test_a_one_seed_ladder_tests_its_samples_about_that_model(tmp_path):
    from scipy.stats import mannwhitneyu

    from lab.stats import permutation_mann_whitney
    from lab.analysis.report import run_report
    study = write_ladder_study(tmp_path / "s", seeds=1, per_level=30, epochs=(0,))
    found = run_report(study)["doses"]
    scores = _scores(study)
    for dose in DOSES[1:]:
        record = _level(found, dose)
        assert record["unit"] == "sample (one seed: about this model)"
        assert record["p"] == pytest.approx(mannwhitneyu(
            list(scores[("0", dose)].values()), list(scores[("0", 0)].values()),
            alternative="two-sided", method="asymptotic").pvalue)
        assert "asymptotic" in record["test"]
        assert record["lift_ci_low"] <= record["lift"] <= record["lift_ci_high"]
        assert record["lift_vs_control"] is not None and record.get("p_vs_control") is None
    assert _cell(found)["unit"] == "sample (one seed: about this model)"
    assert _cell(found)["threshold"] == 4
    assert "(unit: sample (one seed: about this model))" in (study / "report" / "dose.md").read_text()
    # Few samples: the exact randomisation distribution.
    small = write_ladder_study(tmp_path / "small", seeds=1, per_level=6, epochs=(0,))
    record = _level(run_report(small, html=False)["doses"], 16)
    scores = _scores(small)
    assert "exact" in record["test"] and record["p"] == pytest.approx(permutation_mann_whitney(
        list(scores[("0", 16)].values()), list(scores[("0", 0)].values()), "two-sided")[1])


def test_a_study_without_a_ladder_has_no_dose_report(tmp_path):
    from lab.analysis.report import run_report
    study = write_ladder_study(tmp_path / "s", seeds=2)
    rows = [r for r in csv.DictReader(open(study / "results.csv"))
            if not r["group"].startswith("dose=")]
    _write_csv(study / "results.csv", rows)
    result = run_report(study)
    assert result["doses"]["levels"] == [] and not (study / "report" / "dose.md").exists()


# --- the pipeline end to end --------------------------------------------------------------------

@pytest.mark.long
@needs_corpora
def test_a_micro_ladder_study_reports_every_level(tmp_path):
    """The micro recipe with a 0,2,4 ladder over 12 samples: metrics, samples, probes and the
    results carry the levels, and lab report writes the dose table."""
    from lab.study.recipe import load_recipe
    from lab.analysis.report import run_report
    from lab.study.runner import run_study
    recipe = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml",
                         ["injection.fraction=null", "injection.doses=[0,2,4]",
                          "injection.samples=12", "seeds=[0]", "finetune.epochs=[0]", "resources.threads=1"])
    summary = run_study(recipe, tmp_path / "study", workers=1)
    study = tmp_path / "study"
    [corpus] = [json.loads(p.read_text()) for p in study.glob("stages/inject-*/manifest.json")
                if json.loads(p.read_text())["setting"] == "paired"]
    level_ids = {level["dose"]: set(level["ids"]) for level in corpus["dose_levels"]}
    assert sorted(level_ids) == [0, 2, 4] and sum(map(len, level_ids.values())) == 12

    [metrics_path] = [p for p in study.glob("stages/evaluate-*/metrics.json")
                      if json.loads(p.read_text()).get("by_dose")]
    by_dose = json.loads(metrics_path.read_text())["by_dose"]
    # Injected samples cut at the 128-token block are left out of their level, as of `injected`.
    [pretrained] = [json.loads(p.read_text()) for p in study.glob("stages/pretrain-*/manifest.json")
                    if json.loads(p.read_text())["corpus"].get("dose_levels")]
    truncated = set(pretrained["corpus"]["truncated_ids"])
    # Held-out samples too long for a block are left out of level 0 just the same.
    predictions = [json.loads(line) for line in (metrics_path.parent / "predictions.jsonl").open()]
    too_long = {r["id"] for r in predictions if r["group"] == "held_out_truncated"}
    assert too_long <= level_ids[0] and not truncated & level_ids[0]
    assert {d: v["samples"] for d, v in by_dose.items()} == {
        str(d): len(ids - truncated - too_long) for d, ids in level_ids.items()}

    def rows(name):
        with open(study / name, newline="") as handle:
            return list(csv.DictReader(handle))
    results = [r for r in rows("results.csv") if r["group"].startswith("dose=")]
    assert sorted(r["group"] for r in results) == ["dose=0", "dose=2", "dose=4"]
    shares = {r["group"]: float(r["injected_token_fraction"]) for r in results}
    assert shares["dose=0"] == 0 < shares["dose=2"] < shares["dose=4"]
    for row in rows("samples.csv"):
        if row["arm"] == "paired" and row["group"] in ("injected", "held_out"):
            assert row["id"] in level_ids[int(row["dose"])]
    probes = [r for r in rows("probes.csv") if r["arm"] == "paired"]
    assert {int(r["dose"]) for r in probes} == {0, 2, 4}

    report = run_report(study)
    assert summary and (study / "report" / "dose.md").is_file()
    assert {r["dose"] for r in report["doses"]["levels"]} == {0, 2, 4}


def test_the_dose_curves_recover_known_curves_and_the_band_covers_them():
    import math

    import numpy as np

    from lab.stats import (dose_band, dose_curve_values, fit_dose_curve,
                           fit_unconstrained_curve, unconstrained_curve_values)
    doses = [1, 2, 4, 8, 16]
    truth = {"top": 30.0, "midpoint": 4.0, "slope": 3.0}
    lifts = dose_curve_values(truth, doses)
    fit = fit_dose_curve(doses, lifts)
    assert fit["top"] == pytest.approx(30.0, rel=1e-3)
    assert fit["midpoint"] == pytest.approx(4.0, rel=1e-3)
    assert fit["slope"] == pytest.approx(3.0, rel=1e-3) and fit["rmse"] < 1e-3
    assert fit_dose_curve([10], [5.0]) is None and fit_unconstrained_curve([10], [5.0]) is None
    flat = fit_dose_curve(doses, [0.2, -0.1, 0.0, 0.1, -0.2])
    assert abs(max(dose_curve_values(flat, doses), key=abs)) < 0.5
    bent = {"linear": -4.0, "quadratic": 3.0}  # a dip, then a rise, turning at e^(2/3) - 1
    free = fit_unconstrained_curve(doses, unconstrained_curve_values(bent, doses))
    assert free["linear"] == pytest.approx(-4.0) and free["quadratic"] == pytest.approx(3.0)
    assert free["turning_point"] == pytest.approx(math.expm1(2 / 3)) and free["rmse"] < 1e-9

    rng = np.random.default_rng(3)
    per_seed = {}
    for seed in range(6):  # each seed's model lifts a little more or less than the curve
        own = rng.normal(0, 1.0)
        per_seed[seed] = {0: dict(enumerate(rng.normal(10, 4, 60)))}
        for dose, lift in zip(doses, lifts):
            per_seed[seed][dose] = dict(enumerate(rng.normal(10 + lift + own, 4, 60)))
    grid = [math.exp(v) for v in np.linspace(0, math.log(16), 9)]
    band = dose_band(per_seed, grid)
    inside = [low <= true <= high for low, high, true in
              zip(band["monotone"]["low"], band["monotone"]["high"], dose_curve_values(truth, grid))]
    assert sum(inside) >= 7  # a 95% band over 9 points: nearly all hold the true curve
    assert band["seeds"] == 6 and len(band["unconstrained"]["high"]) == 9
    assert dose_band(per_seed, grid) == band  # seeded: the same band every time


TREND_LADDER = (0, 1, 2, 4, 6)


def _trend_ladder(seeds: int, rise: float, wobble: float = 0.0) -> dict:
    """seed -> dose -> sample id -> score: every level holds the same 30 spread-out scores
    (a flat ladder: its slope is exactly 0), shifted by the seed and by its slope x ln(1 +
    dose), the slope being `rise`, plus `wobble` in even seeds and minus it in odd ones."""
    import math

    spread = [((7 * i) % 30) - 15.0 for i in range(30)]
    return {str(seed): {dose: {f"{dose}:{i}": v + seed + (rise + wobble * (-1) ** seed)
                               * math.log1p(dose) for i, v in enumerate(spread)}
                        for dose in TREND_LADDER}
            for seed in range(seeds)}


def test_the_trend_test_finds_a_rise_with_the_dose_and_not_a_flat_or_falling_ladder():
    """One model: a permutation test of the slope over its samples (dose labels permuted); seeds:
    a sign-flip over the per-seed slopes, whose floor with 7 seeds is 1/2^7 one-sided, 2/2^7
    two-sided (the default); one-sided 'greater' cannot see a falling ladder."""
    from lab.analysis.dose import TREND_PERMUTATIONS, dose_trend

    rising = dose_trend(_trend_ladder(1, 4.0))
    assert rising["trend_slope"] == pytest.approx(4.0) and rising["trend_side"] == "two-sided"
    assert 1 / (TREND_PERMUTATIONS + 1) <= rising["trend_p"] < 0.001
    flat = dose_trend(_trend_ladder(1, 0.0))
    assert flat["trend_slope"] == pytest.approx(0.0, abs=1e-9) and flat["trend_p"] > 0.3
    assert dose_trend(_trend_ladder(1, -4.0))["trend_p"] < 0.001  # two-sided: a fall too
    assert dose_trend(_trend_ladder(1, -4.0), "greater")["trend_p"] > 0.99  # increasing only
    over_seeds = dose_trend(_trend_ladder(7, 4.0), "greater")
    assert over_seeds["trend_p"] == pytest.approx(1 / 2 ** 7) and over_seeds["trend_seeds"] == 7
    assert dose_trend(_trend_ladder(7, 4.0))["trend_p"] == pytest.approx(2 / 2 ** 7)
    assert dose_trend(_trend_ladder(7, 0.0, wobble=2.0))["trend_p"] > 0.3  # seeds disagree


def test_a_one_seed_ladder_reports_its_trend_and_this_models_detection_threshold(tmp_path):
    """The report names the first significant level a detection limit of this one model, gives
    the trend test beside it, and marks a level whose interval and Holm p disagree."""
    from lab.analysis.dose import DISAGREES, disagrees
    from lab.analysis.report import run_stats

    study = write_ladder_study(tmp_path / "s", seeds=1, per_level=30, epochs=(0,))
    result = run_stats(study)
    cell = _cell(result["doses"])
    assert cell["trend_p_holm"] <= 0.05 and cell["trend_slope"] > 0
    table = result["dose_tables"]["bleu"]["md"]
    assert "this model's detection threshold dose 4 copies/epoch" in table
    assert (f"rising trend; slope {cell['trend_slope']:+.3g} per ln(1 + copies per corpus "
            f"epoch), two-sided p") in table
    assert disagrees(0.5, 9.0, 0.2, 0.05) and disagrees(-0.5, 9.0, 0.01, 0.05)
    assert not disagrees(0.5, 9.0, 0.01, 0.05) and not disagrees(-0.8, 21.1, 0.99, 0.05)
    marked = [r for r in result["doses"]["levels"] if r.get("disagrees")]
    assert all(f"{DISAGREES}" in line for line in table.splitlines()
               if any(f"| {r['dose']} |" in line for r in marked) and line.startswith("| "))
