"""One pool of never-seen samples per seed (lab.detect.probe.SHARED_POOL_RULE): the arm, its placebo
and the control of a seed are set against the same validation samples, none of which any arm of
the seed injected or pre-trained on; a study hands every probe and detect stage its seed's
placebo corpora."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.common import LabError

MICRO = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"
TARGETS = 6  # members set against the draw: fewer than the tiny pool, so the draw chooses


@pytest.fixture
def seed_arms(tiny_corpora, tmp_path):
    """A paired arm and its placebo of one seed (the placebo pre-trains on validation samples),
    the pre-training records of their models and of the control, and the scored samples."""
    from lab.contamination.inject import InjectConfig, run_inject
    from lab.corpora import load_samples

    common = dict(benchmark="codetrans", seed=2, fraction=0.5, corpora_dir=tiny_corpora)
    arm = run_inject(InjectConfig(setting="paired", out=tmp_path / "paired", **common))
    placebo = run_inject(InjectConfig(setting="paired-placebo", out=tmp_path / "placebo",
                                      **common))
    assert any(":valid:" in i for i in placebo["placebo_ids"])  # some would be drawn

    def model(corpus: dict, folder: Path) -> dict:
        return {"kind": "lab-pretrained", "seed": 2,
                "corpus": {"setting": corpus["setting"], "path": str(folder),
                           "sha256": corpus["corpus_sha256"]}}

    tests = load_samples("codetrans", "test", tiny_corpora).records
    injected = set(arm["injected_ids"])
    return {"models": {"paired": model(arm, tmp_path / "paired"),
                       "paired-placebo": model(placebo, tmp_path / "placebo"),
                       "control": {"kind": "lab-pretrained", "seed": 2}},
            "placebo_corpus": tmp_path / "placebo", "tests": tests,
            "members": [s for s in tests if s.id in injected][:TARGETS],
            "arm_samples": injected | set(placebo["placebo_ids"])}


def _draws(seed_arms, tiny_corpora, seed_corpora):
    """Each model's validation draw against the paired arm's members, as lab detect makes it."""
    from lab.detect.run import _valid_samples
    from lab.detect.probe import seed_arm_samples

    chosen = {"benchmark": "codetrans", "split": "test"}
    others = seed_arm_samples(seed_corpora, "codetrans")
    return {arm: _valid_samples(chosen, seed_arms["tests"], seed_arms["members"], manifest,
                                "paired", 2, tiny_corpora, others)
            for arm, manifest in seed_arms["models"].items()}


def test_every_arm_of_a_seed_draws_the_same_never_seen_samples(seed_arms, tiny_corpora):
    from lab.detect.probe import SHARED_POOL_RULE

    draws = _draws(seed_arms, tiny_corpora, [seed_arms["placebo_corpus"]])
    ids = {arm: [s.id for s in drawn] for arm, (drawn, _record) in draws.items()}
    assert len(ids["paired"]) == TARGETS
    assert ids["paired"] == ids["paired-placebo"] == ids["control"]
    assert not set(ids["paired"]) & seed_arms["arm_samples"]
    for _drawn, record in draws.values():
        eligibility = record["eligibility"]
        assert eligibility["seed_arms"]["rule"] == SHARED_POOL_RULE
        assert eligibility["excluded"] >= eligibility["seed_arms"]["samples_in_split"] > 0
        assert record["pool"] < record["eligibility"]["candidates"]


def test_without_the_seeds_corpora_a_placebo_draws_from_another_pool(seed_arms, tiny_corpora):
    """What the shared pool fixes: the placebo's own samples left out of its pool alone."""
    draws = _draws(seed_arms, tiny_corpora, [])
    pools = {arm: record["pool"] for arm, (_drawn, record) in draws.items()}
    assert pools["paired"] == pools["control"] > pools["paired-placebo"]
    assert "seed_arms" not in draws["paired"][1]["eligibility"]


def test_the_probes_reference_samples_are_shared_too(seed_arms, tiny_corpora):
    from lab.detect.probe import reference_samples, seed_arm_samples

    chosen = {"benchmark": "codetrans", "split": "test"}
    others = seed_arm_samples([seed_arms["placebo_corpus"]], "codetrans")
    picked = {arm: [s.id for s in reference_samples(chosen, seed_arms["tests"], TARGETS, True,
                                                    manifest, tiny_corpora, others)[0]]
              for arm, manifest in seed_arms["models"].items()}
    assert picked["paired"] == picked["paired-placebo"] == picked["control"]
    assert len(picked["paired"]) == TARGETS
    assert not set(picked["paired"]) & seed_arms["arm_samples"]


def test_seed_corpora_must_be_corpora_of_the_scored_benchmark(seed_arms, tmp_path):
    from lab.detect.probe import seed_arm_samples

    with pytest.raises(LabError, match="--seed-corpora"):
        seed_arm_samples([tmp_path / "nowhere"], "codetrans")
    with pytest.raises(LabError, match="--seed-corpora .*injects codetrans"):
        seed_arm_samples([seed_arms["placebo_corpus"]], "concode")


def test_a_study_hands_every_probe_and_detect_stage_its_seeds_placebo_corpora(tmp_path):
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe
    from lab.study.stages import bind, keyed_inputs

    arms = "arms=[control, paired, paired-placebo]"
    stages = expand(load_recipe(MICRO, [arms, "detect.enabled=true", "detect.epochs=[1]"]))
    scoring = [s for s in stages if s.kind in ("probe", "detect")]
    assert {s.labels["arm"] for s in scoring} == {"control", "paired", "paired-placebo"}
    for stage in scoring:
        placebo = stage.inputs[-1]
        assert placebo.kind == "inject" and placebo.config.setting == "paired-placebo"
        assert placebo.labels["seed"] == stage.labels["seed"]
        bound = bind(stage, tmp_path)
        assert bound.seed_corpora == (placebo.out(tmp_path),)
        assert bound.model == Path(stage.inputs[0].out(tmp_path))
        if stage.kind == "detect" and stage.labels["arm"] == "control":
            assert bound.reference is None  # the control has no reference: not the corpus
        # the corpora name the stage: a placebo that injected other samples is scored again
        assert keyed_inputs(stage.kind, stage.config, stage.inputs)[-1] is placebo


def test_a_study_without_placebos_keeps_its_probe_keys():
    """No placebo arm: no sample of the pool is any arm's, so the probe stages (whose draw has no
    name in their key) keep their keys and stay done."""
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    probes = [s for s in expand(load_recipe(MICRO)) if s.kind == "probe"]
    assert probes
    for stage in probes:
        assert stage.config.seed_corpora == ()
        # the model, and for the control the arm's corpus: no placebo corpus
        assert len(stage.inputs) == (1 if stage.labels["arm"] == "paired" else 2)


def test_probe_shared_pool_false_probes_as_studies_before_it_did():
    """probe.shared_pool: false passes no placebo corpus to the probes (their earlier keys and
    pools); detect stages share the pool regardless (their draw's name is in their key)."""
    from lab.study.grid import expand
    from lab.study.recipe import load_recipe

    arms = "arms=[control, paired, paired-placebo]"
    shared, apart = (expand(load_recipe(MICRO, [arms, "detect.enabled=true", *extra]))
                     for extra in ([], ["probe.shared_pool=false"]))
    probes = [s for s in apart if s.kind == "probe"]
    assert probes and all(s.config.seed_corpora == () for s in probes)
    # the only corpus a probe reads is the arm's whose samples it scores (--groups)
    assert all(source.labels["arm"] == "paired" for s in probes for source in s.inputs
               if source.kind == "inject")
    assert {s.key for s in probes}.isdisjoint(s.key for s in shared if s.kind == "probe")
    detects = {s.key for s in shared if s.kind == "detect"}
    assert detects == {s.key for s in apart if s.kind == "detect"}
