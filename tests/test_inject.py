"""Injection on the real shared corpora: counts, guards, determinism and audit recall."""
from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from lab.codetokens import code_tokens, whitespace_hash
from lab.common import LabError
from lab.contamination import paired_document, segments
from lab.contamination.audit import run_audit
from lab.corpora.shards import read_corpus
from lab.contamination import settings as settings_table
from lab.contamination.inject import InjectConfig, run_inject
from lab.contamination.placebo import load_placebo_splits, placebo_pool
from lab.corpora import dataset_manifest, get_spec, load_samples

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

BENCHMARKS = ("codetrans", "concode")
SETTINGS = ("control", "input-only", "output-only", "unpaired", "paired")
DOCS_PER_SAMPLE = {"control": 0, "input-only": 1, "output-only": 1, "unpaired": 2, "paired": 1}
LIMIT = 4500  # of CSN-format valid: enough to remove 2 x 2,000 CONCODE documents


def make(tmp_path: Path, name: str, **overrides) -> tuple[dict, Path]:
    options = dict(benchmark="codetrans", setting="paired", seed=11, out=tmp_path / name,
                   base_splits=("valid",), limit=LIMIT)
    options.update(overrides)
    cfg = InjectConfig(**options)
    return run_inject(cfg), cfg.out


def corpus_texts(folder: Path) -> list[str]:
    return [record["text"] for record in read_corpus(folder)]


@pytest.fixture(scope="module")
def samples():
    return {b: load_samples(b, "test").records for b in BENCHMARKS}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
@pytest.mark.parametrize("setting", SETTINGS)
def test_every_benchmark_and_setting(tmp_path, samples, benchmark, setting):
    manifest, out = make(tmp_path, f"{benchmark}-{setting}", benchmark=benchmark, setting=setting)
    tests = samples[benchmark]
    counts = manifest["counts"]
    n_docs = DOCS_PER_SAMPLE[setting] * len(tests)
    assert counts["final_documents"] == LIMIT == counts["arm_documents"]
    assert counts["injected_documents"] == n_docs == counts["removed_documents"]
    assert len(manifest["removed_base_ids"]) == n_docs
    assert counts["injected_samples"] == (0 if setting == "control" else len(tests))

    texts = corpus_texts(out)
    assert len(texts) == LIMIT
    present = Counter(whitespace_hash(t) for t in texts)
    segment_hashes = {whitespace_hash(part) for t in texts for part in segments(t)}
    for sample in tests:
        has_input = whitespace_hash(sample.input) in segment_hashes
        has_output = whitespace_hash(sample.output) in segment_hashes
        assert has_input == (setting in ("input-only", "unpaired", "paired")), sample.id
        assert has_output == (setting in ("output-only", "unpaired", "paired")), sample.id
        if setting == "paired":
            assert present[whitespace_hash(paired_document(sample.input, sample.output))] >= 1

    # The audit must flag every injected sample, from the corpus text alone.
    audit = run_audit(benchmark, ["test"], against=str(out), near=False)
    flagged = {row["id"] for row in audit["rows"] if row["leaked"]}
    assert set(manifest["injected_ids"]) <= flagged
    if setting == "control":
        assert flagged == set()


def _twice_and_other_seed(tmp_path, setting: str, fraction: float):
    """Manifests of one arm made twice with seed 0 (asserting identical shard bytes) and once
    with seed 12, and the first one's folder."""
    first, out1 = make(tmp_path, "a", setting=setting, fraction=fraction)
    second, out2 = make(tmp_path, "b", setting=setting, fraction=fraction)
    third, _ = make(tmp_path, "c", setting=setting, fraction=fraction, seed=12)
    for shard in first["shards"]:
        assert (out1 / shard["file"]).read_bytes() == (out2 / shard["file"]).read_bytes()
    return first, second, third, out1


def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path):
    first, second, third, out1 = _twice_and_other_seed(tmp_path, "unpaired", 0.5)
    assert first["corpus_sha256"] == second["corpus_sha256"]
    assert third["corpus_sha256"] != first["corpus_sha256"]
    assert third["injected_ids"] != first["injected_ids"]
    with gzip.open(out1 / first["shards"][0]["file"], "rb") as handle:
        assert json.loads(handle.readline())["text"]


def test_fraction_records_both_halves_and_keeps_duplicates_together(tmp_path, samples):
    manifest, out = make(tmp_path, "half", setting="paired", fraction=0.5)
    injected, held_out = set(manifest["injected_ids"]), set(manifest["held_out_ids"])
    tests = samples["codetrans"]
    assert injected.isdisjoint(held_out) and injected | held_out == {s.id for s in tests}
    assert abs(len(injected) - 500) <= 2
    # CodeTrans' test set repeats a few Java functions: both copies land on the same side.
    by_input: dict[bytes, set[str]] = {}
    for sample in tests:
        by_input.setdefault(whitespace_hash(sample.input), set()).add(sample.id)
    duplicated = [ids for ids in by_input.values() if len(ids) > 1]
    assert duplicated
    for ids in duplicated:
        assert ids <= injected or ids <= held_out
    segment_hashes = {whitespace_hash(p) for t in corpus_texts(out) for p in segments(t)}
    for sample in tests:
        assert (whitespace_hash(sample.output) in segment_hashes) == (sample.id in injected)


def test_repeat_injects_every_document_k_times(tmp_path, samples):
    manifest, out = make(tmp_path, "rep", setting="output-only", repeat=3, fraction=0.2)
    k = len(manifest["injected_ids"])
    assert manifest["counts"]["injected_documents"] == 3 * k == manifest["counts"]["removed_documents"]
    present = Counter(whitespace_hash(t) for t in corpus_texts(out))
    by_id = {s.id: s for s in samples["codetrans"]}
    expected = Counter(whitespace_hash(by_id[i].output) for i in manifest["injected_ids"])
    for key, times in expected.items():
        assert present[key] == 3 * times


def test_removals_are_nested_across_settings_of_one_seed(tmp_path):
    paired, _ = make(tmp_path, "p", setting="paired")
    unpaired, _ = make(tmp_path, "u", setting="unpaired")
    assert set(paired["removed_base_ids"]) < set(unpaired["removed_base_ids"])


def test_splitting_a_duplicate_group_is_refused(tmp_path, samples):
    tests = samples["codetrans"]
    seen: dict[bytes, str] = {}
    pair = None
    for sample in tests:
        key = whitespace_hash(sample.input)
        if key in seen:
            pair = (seen[key], sample.id)
            break
        seen[key] = sample.id
    assert pair is not None
    ids = tmp_path / "ids.txt"
    ids.write_text(pair[0] + "\n")
    with pytest.raises(LabError, match="occurs verbatim"):
        make(tmp_path, "split", setting="input-only", test_ids=ids)
    assert not (tmp_path / "split").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ids.txt"]


def test_inject_reads_test_ids_as_evaluate_reads_ids(tmp_path, samples):
    """One reader of sample ids (lab.corpora.base.read_sample_ids) for `lab inject --test-ids`
    and `lab evaluate --ids`: whole or bare ids, commas, comments; a bad id names the form."""
    from lab.contamination.selection import select_samples
    from lab.corpora.base import read_sample_ids

    tests = samples["codetrans"]
    ids = tmp_path / "ids.txt"
    ids.write_text("8, 3  # bare\n\ncodetrans:test:5\n3\n")
    cfg = InjectConfig(benchmark="codetrans", setting="paired", seed=1, out=tmp_path / "arm",
                       test_ids=ids)
    assert select_samples(tests, cfg) == read_sample_ids(ids, "--ids", tests) == [3, 5, 8]
    ids.write_text("3\ncodetrans:test:1000\n")
    with pytest.raises(LabError, match=re.escape(
            f"--test-ids {ids}:2: unknown sample id 'codetrans:test:1000' (ids are "
            "codetrans:test:N or N, N from 0 to 999)")):
        select_samples(tests, cfg)


def _planted_corpora(tmp_path: Path, samples) -> tuple[Path, str, str]:
    """A corpora folder whose CSN-format corpus holds a verbatim and a near copy of test samples."""
    shared = Path(os.environ["LAB_CORPORA"])
    root = tmp_path / "corpora"
    (root / "codetrans").mkdir(parents=True)
    for name in os.listdir(shared / "codetrans"):
        (root / "codetrans" / name).symlink_to(shared / "codetrans" / name)
    valid = root / "codesearchnet-java/java/final/jsonl/valid"
    valid.mkdir(parents=True)
    tests = samples["codetrans"]
    verbatim = tests[5].input
    near = max((s.input for s in tests[6:60]), key=len).replace("(", " ( ", 1)
    near_source = near
    # rename one identifier occurrence to make it a near (not exact) copy
    words = [w for w in set(near.replace("(", " ").replace(")", " ").split()) if w.isidentifier()]
    near = near.replace(sorted(words, key=len)[-1], "renamedIdentifierX", 1)
    records = [{"code": verbatim}, {"code": near}]
    records += [{"code": f"int helper{i}(int a{i}) {{ return a{i} * {i}; }}"} for i in range(300)]
    with gzip.open(valid / "java_valid_0.jsonl.gz", "wt", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return root, verbatim, near_source


def test_decontaminate_removes_pre_existing_copies(tmp_path, samples):
    root, _verbatim, _near = _planted_corpora(tmp_path, samples)
    dirty, out_dirty = make(tmp_path, "dirty", setting="control", corpora_dir=root, limit=None)
    assert "codetrans:test:5/input" in dirty["pre_existing_verbatim"]
    audit = run_audit("codetrans", ["test"], against=str(out_dirty))
    assert audit["counts"]["test"]["leaked"] >= 2

    clean, out_clean = make(tmp_path, "clean", setting="control", corpora_dir=root, limit=None,
                            decontaminate=True)
    assert clean["counts"]["decontaminated_removed"] == 2
    assert set(clean["decontaminated_ids"]) == {"csn-java:valid:0", "csn-java:valid:1"}
    assert clean["counts"]["final_documents"] == 300
    assert run_audit("codetrans", ["test"], against=str(out_clean))["counts"]["test"]["leaked"] == 0
    assert clean["pre_existing_verbatim"] == []


def test_manifest_is_complete(tmp_path):
    manifest, out = make(tmp_path, "m", setting="paired", fraction=0.5)
    for key in ("setting", "seed", "counts", "injected_ids", "held_out_ids", "removed_base_ids",
                "inputs", "shards", "corpus_sha256", "environment", "guards", "options"):
        assert key in manifest, key
    assert all(len(f["sha256"]) == 64 for f in manifest["inputs"]["benchmark"]["files"])
    assert all(len(f["sha256"]) == 64 for part in manifest["inputs"]["base"] for f in part["files"])
    assert manifest["environment"]["lab_version"]
    assert json.loads((out / "manifest.json").read_text())["corpus_sha256"] == manifest["corpus_sha256"]


# --- placebo arms ---------------------------------------------------------------------------------

PLACEBOS = ("input-only-placebo", "output-only-placebo", "unpaired-placebo", "paired-placebo")


@pytest.mark.parametrize("placebo", PLACEBOS)
def test_placebo_matches_its_base_arm(tmp_path, samples, placebo):
    """As many samples (the ones its base arm injects with this seed, counted), in the same form,
    repeated as often, removing the same base documents; no test sample injected."""
    base = placebo[: -len("-placebo")]
    arm, _ = make(tmp_path, "arm", setting=base, fraction=0.5, repeat=2)
    manifest, out = make(tmp_path, "placebo", setting=placebo, fraction=0.5, repeat=2)
    tests = samples["codetrans"]
    k = len(arm["injected_ids"])
    assert manifest["setting"] == placebo and manifest["placebo"]["base_setting"] == base
    assert manifest["placebo"]["matched_test_ids"] == arm["injected_ids"]
    assert manifest["counts"]["placebo_samples"] == k == len(manifest["placebo_ids"])
    for key in ("injected_documents", "removed_documents", "final_documents", "arm_documents"):
        assert manifest["counts"][key] == arm["counts"][key], key
    assert manifest["removed_base_ids"] == arm["removed_base_ids"]
    # No test sample is injected: every one is held out, as for the control.
    assert manifest["injected_ids"] == [] and manifest["counts"]["injected_samples"] == 0
    assert manifest["held_out_ids"] == [s.id for s in tests]
    # The manifest lists the placebo samples and their source split.
    listed = manifest["placebo"]["samples"]
    assert [s["id"] for s in listed] == manifest["placebo_ids"]
    assert {s["split"] for s in listed} <= {"train", "valid"}
    assert all(s["id"].startswith(f"codetrans:{s['split']}:") for s in listed)
    assert sum(manifest["placebo"]["by_split"].values()) == k
    pool = manifest["placebo"]["pool"]
    assert pool["splits"] == ["train", "valid"] and pool["candidates"] == 10_800
    assert pool["eligible"] == pool["candidates"] - pool["overlapping_test"] - pool["duplicates_dropped"]
    assert [p["split"] for p in manifest["inputs"]["placebo_pool"]] == ["train", "valid"]
    assert manifest["guards"]["placebo_disjoint_from_test"] is True
    assert manifest["guards"]["injected_multiplicity"] == 2
    # Same form: the documents of each placebo sample, each twice, with the arm's side labels.
    pool_samples = {s.id: s for split in ("train", "valid")
                    for s in load_samples("codetrans", split).records}
    docs = [r for r in read_corpus(out) if r["sample"]]
    arm_sides = Counter(r["side"] for r in read_corpus(tmp_path / "arm") if r["sample"])
    assert Counter(r["side"] for r in docs) == arm_sides
    present = Counter(whitespace_hash(r["text"]) for r in docs)
    for sample_id in manifest["placebo_ids"]:
        sample = pool_samples[sample_id]
        texts = {"input-only": [sample.input], "output-only": [sample.output],
                 "unpaired": [sample.input, sample.output],
                 "paired": [paired_document(sample.input, sample.output)]}[base]
        for text in texts:
            assert present[whitespace_hash(text)] >= 2


def test_placebo_corpus_holds_no_test_sample(tmp_path):
    """Neither exactly nor as a near-duplicate: 1,000 placebo samples drawn from 10,800
    candidates of which about 300 overlap the test split (a draw that ignored the audit would
    hit dozens)."""
    manifest, out = make(tmp_path, "placebo", setting="paired-placebo")
    control, out_control = make(tmp_path, "control", setting="control")
    pool = manifest["placebo"]["pool"]
    assert pool["overlapping_test_exact"] > 40 and pool["overlapping_test_near_only"] > 40
    assert len(manifest["placebo_ids"]) == 1000
    # An independent audit of the train and valid splits against the test split.
    overlap = run_audit("codetrans", ["train", "valid"], against="codetrans:test")
    leaked = {row["id"] for row in overlap["rows"] if row["leaked"]}
    assert len(leaked) == pool["overlapping_test"]
    assert leaked.isdisjoint(manifest["placebo_ids"])
    # The written corpus against the test split: no placebo document matches a test sample;
    # what matches is base documents the control holds too.
    audit = run_audit("codetrans", ["test"], against=str(out))
    assert not any(doc.startswith("inject:") for doc in audit["matched_documents"])
    control_audit = run_audit("codetrans", ["test"], against=str(out_control))
    flagged = {row["id"] for row in audit["rows"] if row["leaked"]}
    assert flagged <= {row["id"] for row in control_audit["rows"] if row["leaked"]}


def test_placebo_guard_refuses_a_near_duplicate_of_a_test_sample(tmp_path, monkeypatch):
    """Were the pool filtered on exact matches only, near-duplicates of test samples would slip
    in: the guard re-checks every placebo document and refuses the arm."""
    import lab.contamination.placebo as placebo

    real = placebo.audit_samples

    def exact_only(*args, **kwargs):
        rows = real(*args, **kwargs)
        for row in rows:
            row["leaked"] = row["exact"]
        return rows

    monkeypatch.setattr(placebo, "audit_samples", exact_only)
    with pytest.raises(LabError, match=r"guard: placebo sample codetrans:\w+:\d+ \(\w+\) matches "
                                       r"codetrans:test:\d+"):
        make(tmp_path, "placebo", setting="paired-placebo")
    assert not (tmp_path / "placebo").exists()


def test_a_placebo_can_draw_outside_the_fine_tuning_data(tmp_path):
    """By default a CodeTrans placebo draws from train + valid, so mostly from the pairs a study
    fine-tunes on; --placebo-from valid keeps it out of them, standing for the same test
    samples and removing the same base documents."""
    default, _ = make(tmp_path, "default", setting="paired-placebo", samples=200)
    valid, out = make(tmp_path, "valid", setting="paired-placebo", samples=200,
                      placebo_from=("valid",))
    assert default["placebo"]["by_split"]["train"] > 150
    assert valid["placebo"]["by_split"] == {"valid": 200}
    assert valid["placebo"]["pool"]["splits"] == ["valid"]
    assert valid["options"]["placebo_from"] == ["valid"] and "placebo_from" not in default["options"]
    assert valid["placebo"]["matched_test_ids"] == default["placebo"]["matched_test_ids"]
    assert valid["removed_base_ids"] == default["removed_base_ids"]
    train_ids = {s.id for s in load_samples("codetrans", "train").records}
    assert train_ids.isdisjoint(valid["placebo_ids"])
    assert valid["guards"]["placebo_disjoint_from_test"] is True
    # The alias names the same split; a barred or unknown split is refused before writing.
    alias, _ = make(tmp_path, "alias", setting="paired-placebo", samples=200,
                    placebo_from=("dev",))
    assert alias["placebo_ids"] == valid["placebo_ids"]
    for splits, message in ((("test",), "never draws from the test split"),
                            (("train", "gold"), "codetrans has no such split")):
        with pytest.raises(LabError, match=message):
            make(tmp_path, "refused", setting="paired-placebo", placebo_from=splits)
        assert not (tmp_path / "refused").exists()
    with pytest.raises(LabError, match="only a placebo setting draws from other splits"):
        make(tmp_path, "refused", setting="paired", placebo_from=("valid",))


def test_placebo_is_deterministic_and_seeded(tmp_path):
    first, second, third, _out = _twice_and_other_seed(tmp_path, "unpaired-placebo", 0.2)
    assert first["placebo_ids"] == second["placebo_ids"]
    assert third["placebo_ids"] != first["placebo_ids"]
    # Drawn at random, placebos of one seed draw the same samples, whatever their form; matched
    # on length, each matches the lengths of its own form.
    drawn = [make(tmp_path, setting, setting=setting, fraction=0.2, placebo_match="random")[0]
             for setting in ("unpaired-placebo", "paired-placebo")]
    assert drawn[0]["placebo_ids"] == drawn[1]["placebo_ids"] != first["placebo_ids"]


def test_placebo_mirrors_listed_test_ids_and_needs_a_large_enough_pool(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("3\n5\n8\n")
    manifest, _ = make(tmp_path, "listed", setting="output-only-placebo", test_ids=ids)
    assert manifest["placebo"]["matched_test_ids"] == [f"codetrans:test:{i}" for i in (3, 5, 8)]
    assert manifest["counts"]["injected_documents"] == 3 and manifest["injected_ids"] == []
    # CONCODE without its train split (offline): dev alone cannot hold 2,000 placebo samples.
    concode, _ = make(tmp_path, "concode", benchmark="concode", setting="input-only-placebo",
                      samples=500)
    pool = concode["placebo"]["pool"]
    assert "dev" in pool["splits"] and "test" not in pool["splits"]
    assert all(s["split"] in pool["splits"] for s in concode["placebo"]["samples"])
    if "train" in pool["splits_missing"]:
        with pytest.raises(LabError, match="2000 placebo samples needed, but concode dev holds only"):
            make(tmp_path, "too-many", benchmark="concode", setting="input-only-placebo")
        assert not (tmp_path / "too-many").exists()


# --- length-matched placebos (issue 43, item 5) -------------------------------------------------

# The mini recipes' arm (recipes/mini/base.yaml): the first 200 CodeTrans test samples, paired,
# in 700 CSN-format valid documents; seeds 0-3.
MINI_ARM = dict(setting="paired-placebo", samples=200, limit=700)
MINI_SEEDS = (0, 1, 2, 3)
POOLS = (None, ("valid",))


def paired_tokens(sample) -> int:
    return len(code_tokens(paired_document(sample.input, sample.output)))


@pytest.fixture(scope="module")
def mini_placebos(tmp_path_factory):
    """(placebo_match, placebo_from, seed) -> (manifest, folder) of the mini arm's placebo
    (about 2 s each from train + valid, 0.5 s from valid alone, on an idle machine)."""
    root = tmp_path_factory.mktemp("mini-placebos")
    return {(match, pool, seed): make(root, f"{match}-{pool}-{seed}", seed=seed,
                                      placebo_match=match, placebo_from=pool, **MINI_ARM)
            for match, pool, seed in itertools.product(("length", "random"), POOLS, MINI_SEEDS)}


@pytest.fixture(scope="module")
def codetrans_samples():
    return {s.id: s for split in ("train", "valid", "test")
            for s in load_samples("codetrans", split).records}


def test_a_length_matched_placebo_is_as_long_as_its_arm(mini_placebos, codetrans_samples):
    """Mean code tokens of the placebo's documents within 5% of its arm's for every seed, from
    train + valid and from valid alone; the uniform draw (the placebos before length matching:
    valid samples average 446 characters, test 397) misses by more for some seed."""
    made = mini_placebos
    missed = Counter()
    for (match, pool, seed), (manifest, _out) in made.items():
        arm = statistics.mean(paired_tokens(codetrans_samples[i])
                              for i in manifest["placebo"]["matched_test_ids"])
        placebo = statistics.mean(paired_tokens(codetrans_samples[i])
                                  for i in manifest["placebo_ids"])
        within = abs(placebo / arm - 1) <= 0.05
        assert within or match == "random", (pool, seed, arm, placebo)
        missed[match, pool] += not within
        # The manifest shows both distributions, in the same unit, and the shares.
        record = manifest["placebo"]["length_match"]
        assert record["method"] == match == manifest["options"]["placebo_match"]
        assert record["unit"] == "lab code tokens"
        assert record["arm"]["mean"] == round(arm, 1) and record["placebo"]["mean"] == round(placebo, 1)
        for side in ("arm", "placebo"):
            assert record[side]["samples"] == 200
            assert record[side]["p10"] <= record[side]["p50"] <= record[side]["p90"] <= record[side]["max"]
            assert record[side]["std"] > 0 and record[side]["mean_chars"] > record[side]["mean"]
        assert record["mean_ratio"] == round(record["placebo"]["mean"] / record["arm"]["mean"], 4)
        share = record["share_of_characters"]
        assert share["placebo"] == manifest["counts"]["injected_char_fraction"]
        assert share["relative_difference"] == pytest.approx(
            share["placebo"] / share["arm"] - 1, abs=1e-3)
        assert share["tolerance"] == 0.05 and share["checked"] == (match == "length")
        if match == "length":
            assert abs(share["relative_difference"]) <= 0.05
    assert all(missed["random", pool] >= 1 for pool in POOLS), missed


def test_the_arms_share_is_its_own_corpus_share(tmp_path, mini_placebos):
    """The placebo's manifest states its arm's share without the arm's corpus: the same seed
    keeps the same base documents, so it is exactly the share the arm's own manifest shows."""
    made = mini_placebos
    for seed in (0, 3):
        placebo, _out = made["length", None, seed]
        arm, _ = make(tmp_path, f"arm-{seed}", seed=seed, **{**MINI_ARM, "setting": "paired"})
        assert arm["removed_base_ids"] == placebo["removed_base_ids"]
        assert (placebo["placebo"]["length_match"]["share_of_characters"]["arm"]
                == arm["counts"]["injected_char_fraction"])


def test_a_length_matched_placebo_is_seeded_and_pairs_sample_by_sample(tmp_path, mini_placebos,
                                                                        codetrans_samples):
    """Same seed, same placebo samples; another seed, others. The i-th placebo sample stands for
    the i-th matched test sample: nearly always one of exactly its length."""
    made = mini_placebos
    again, _ = make(tmp_path, "again", seed=0, **MINI_ARM)
    first = made["length", None, 0][0]
    assert again["placebo_ids"] == first["placebo_ids"]
    assert made["length", None, 1][0]["placebo_ids"] != first["placebo_ids"]
    for pool in POOLS:
        manifest = made["length", pool, 0][0]
        gaps = [abs(paired_tokens(codetrans_samples[p]) - paired_tokens(codetrans_samples[t]))
                for p, t in zip(manifest["placebo_ids"], manifest["placebo"]["matched_test_ids"])]
        assert statistics.median(gaps) == 0 and len(set(manifest["placebo_ids"])) == 200
        assert all(i.startswith(("codetrans:train:", "codetrans:valid:"))
                   for i in manifest["placebo_ids"])


def test_a_dose_ladder_placebo_sample_takes_its_test_samples_dose(tmp_path, codetrans_samples):
    manifest, out = make(tmp_path, "ladder", seed=2, doses=(0, 1, 4), **MINI_ARM)
    dose_of = {i: level["dose"] for level in manifest["dose_levels"] for i in level["ids"]}
    copies = Counter(r["sample"] for r in read_corpus(out) if r["sample"])
    pairs = list(zip(manifest["placebo_ids"], manifest["placebo"]["matched_test_ids"]))
    assert {dose_of[t] for _p, t in pairs} == {1, 4} and len(pairs) == len(copies)
    for placebo_id, test_id in pairs:
        assert copies[placebo_id] == dose_of[test_id], (placebo_id, test_id)
    for level in manifest["dose_levels"][1:]:
        assert level["placebo_ids"] == [p for p, t in pairs if dose_of[t] == level["dose"]]
    gaps = [abs(paired_tokens(codetrans_samples[p]) - paired_tokens(codetrans_samples[t]))
            for p, t in pairs]
    assert statistics.median(gaps) == 0
    # Shares weigh every sample by its dose.
    share = manifest["placebo"]["length_match"]["share_of_characters"]
    assert share["placebo"] == manifest["counts"]["injected_char_fraction"]
    assert abs(share["relative_difference"]) <= share["tolerance"]


def test_a_placebo_off_its_arms_share_is_refused_with_the_numbers(tmp_path, monkeypatch):
    """Beyond the tolerance (here 0: no placebo is exactly its arm's share) the arm is refused
    in one line, and nothing is written; the uniform draw records its share unchecked."""
    import lab.contamination.record as record

    monkeypatch.setattr(record, "PLACEBO_SHARE_TOLERANCE", 0.0)
    with pytest.raises(LabError) as refused:
        make(tmp_path, "refused", seed=0, **MINI_ARM)
    message = str(refused.value)
    assert "\n" not in message
    assert re.fullmatch(
        r"--placebo-match length: the placebo injects 1[67]\.\d{4}% of its corpus's characters and "
        r"its arm 16\.9741% \([+-]\d\.\d%, tolerance 0%; mean length 81\.\d vs 81\.5 lab code "
        r"tokens\): the pool lacks samples of the arm's lengths \(draw from more splits with "
        r"--placebo-from, or lower --samples\)", message), message
    assert list(tmp_path.iterdir()) == []
    drawn, _ = make(tmp_path, "drawn", seed=0, placebo_match="random", **MINI_ARM)
    assert drawn["placebo"]["length_match"]["share_of_characters"]["checked"] is False
    with pytest.raises(LabError, match="--placebo-match nearest: choose from length, random"):
        make(tmp_path, "unknown", placebo_match="nearest", **MINI_ARM)


@pytest.mark.parametrize("benchmark", ("codetrans", "codetrans-paper", "concode", "concode-paper",
                                       "csn-summaries"))
def test_the_recorded_placebo_pools_are_measured(benchmark):
    """corpora/NAME.json's placebo_eligible (what a recipe's placebo may draw on, checked before
    a study starts) is what lab inject finds: each split against the whole test split."""
    recorded = dataset_manifest(benchmark)["placebo_eligible"]
    tests = load_samples(benchmark, "test").records
    setting = settings_table.get("input-only-placebo")
    for split, count in recorded.items():
        base = {"base_splits": ("train",)} if get_spec(benchmark).drawn_from else {}
        cfg = InjectConfig(benchmark=benchmark, setting=setting.name, seed=0,
                           out=Path("unused"), placebo_from=(split,), **base)
        pool = placebo_pool(cfg, get_spec(benchmark), setting, tests, load_placebo_splits(cfg))
        assert pool.record["eligible"] == count, split


def test_arm_corpora_load_with_datasets_across_shards_without_injected_documents(tmp_path):
    """Every line has every field with one type: shards holding no injected document load
    with the others under one schema (a null column would be typed from the first shard)."""
    datasets = pytest.importorskip("datasets")
    manifest, folder = make(tmp_path, "sharded", samples=20, fraction=0.25, limit=1200,
                            shard_size=100)
    files = sorted(str(p) for p in (folder / "corpus").glob("*.jsonl.gz"))
    injected_per_shard = [sum(1 for line in gzip.open(f) if json.loads(line)["sample"])
                          for f in files]
    assert len(files) == 12 and 0 in injected_per_shard and sum(injected_per_shard) == 5
    loaded = datasets.load_dataset("json", data_files=files, split="train",
                                   cache_dir=str(tmp_path / "hf-cache"))
    assert loaded.num_rows == manifest["counts"]["final_documents"] == 1200
    assert {name: str(f.dtype) for name, f in loaded.features.items()} == {
        "id": "string", "text": "string", "sample": "string", "side": "string", "copy": "int64"}
    rows = loaded.to_list()
    assert sorted(r["sample"] for r in rows if r["sample"]) == sorted(
        sample for sample in manifest["injected_ids"])
    assert all(r["side"] == "base" and r["copy"] == 0 for r in rows if not r["sample"])
    assert [r["text"] for r in rows] == corpus_texts(folder)
