"""Recipe validation: every refusal names the file and the key's path."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.common import LabError
from lab.study.recipe import load_recipe


@pytest.fixture
def recipe_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: t\narms: [control, paired]\nseeds: [0, 1]\nfinetune:\n  epochs: [0, 1]\n"
                    "corpus:\n  limit: 1000\ninjection:\n  samples: 200\n  repeat: 3\n")
    return path


def test_valid_recipe_and_defaults(recipe_file):
    recipe = load_recipe(recipe_file)
    assert recipe.arms == ["control", "paired"] and recipe.seeds == [0, 1]
    assert recipe.pretrain.block_size == 256 and recipe.statistics.convention == "exact-two-sided"
    assert load_recipe(recipe_file, ["pretrain.lr=0.002", "seeds=[3]"]).pretrain.lr == 0.002


@pytest.mark.parametrize("override, message", [
    ("finetune.epochs=[0, 1, ten]", "finetune.epochs[2]: expected int >= 0, got 'ten'"),
    ("finetune.train_sizes=[many]", "finetune.train_sizes[0]: expected int >= 1 or null"),
    ("seeds=[0, x]", "seeds[1]: expected int, got 'x'"),
    ("corpus.limit=500", "corpus.limit: 500 documents cannot take 600 injected ones"),
    ("arms=[control, unpaired]", "corpus.limit: 1000 documents cannot take 1200 injected ones"),
    ("injection.samples=5000", "injection.samples: 5000: codetrans's test split holds 1000"),
    ("pretrain.block_size=4096", "pretrain.block_size: larger than the gpt2 tiny preset's 512"),
    ("pretrain.lr_scheduler=steep", "pretrain.lr_scheduler: unknown 'steep'"),
    ("tokenizer.vocab_size=100", "tokenizer.vocab_size: expected int >= 300"),
    ("evaluation.split=dev", "evaluation.split: unknown split 'dev'"),
    ("evaluation.metrics=[bleu, rouge]", "evaluation.metrics[1]: unknown metric 'rouge'"),
    ("evaluation.decoding=beam:0", "evaluation.decoding: 'beam:0'"),
    ("evaluation.max_samples=0", "evaluation.max_samples: expected int >= 1 or null"),
    ("finetune.batch_size=0", "finetune.batch_size: expected int >= 1"),
    ("pretrain.lr=0", "pretrain.lr: expected a number > 0"),
    ("statistics.alpha=1.5", "statistics.alpha: expected a number in (0, 1)"),
    ("benchmark=csn-java", "benchmark: 'csn-java' is not a benchmark"),
    ("finetune.epochs=[0, -1]", "finetune.epochs[1]: expected int >= 0"),
    ("bogus=1", "bogus: unknown key"),
    ("pretrain.warmup=3", "pretrain.warmup: unknown key"),
    ("seeds=[]", "seeds: needs at least one seed"),
    ("arms=[control, pared]", "arms[1]: unknown arm 'pared'"),
    ("arms=[control, placebo]", "(choose from control, input-only, output-only, unpaired, paired, "
                                "input-only-placebo, output-only-placebo, unpaired-placebo, "
                                "paired-placebo)"),
    ("arms=[control, paired-placebo]",
     "arms[1]: 'paired-placebo' is the placebo of 'paired': list 'paired' in arms too"),
    ("arms=[control, paired, unpaired-placebo]", "arms[2]: 'unpaired-placebo' is the placebo of "
                                                  "'unpaired'"),
    ("arms=[control, paired, paired-placebo, unpaired-placebo, unpaired]",
     "corpus.limit: 1000 documents cannot take 1200 injected ones (injection.samples x fraction x "
     "repeat x 2 documents per sample of 'unpaired-placebo')"),
    ("pretrain.lr=fast", "pretrain.lr: expected float"),
    ("injection.fraction=1.5", "injection.fraction: expected a number in (0, 1]"),
    ("models=[roberta]", "finetune.epochs[0]: 0 (direct inference) is defined for GPT-2 only"),
])
def test_invalid_values_name_the_key(recipe_file, override, message):
    with pytest.raises(LabError) as info:
        load_recipe(recipe_file, [override])
    assert str(info.value).startswith(str(recipe_file)) and message in str(info.value)


def test_placebo_arms(recipe_file):
    recipe = load_recipe(recipe_file, ["arms=[control, paired, paired-placebo]"])
    assert recipe.arms == ["control", "paired", "paired-placebo"]
    # A placebo injects as many documents as its base arm: the same limit holds both.
    load_recipe(recipe_file, ["arms=[control, unpaired, unpaired-placebo]", "corpus.limit=1201"])
    with pytest.raises(LabError, match="1200 documents cannot take 1200 injected ones"):
        load_recipe(recipe_file, ["arms=[control, unpaired-placebo, unpaired]", "corpus.limit=1200"])


def test_study_recipes_carry_a_placebo_for_every_contaminated_arm():
    from lab.contamination import settings

    studies = [p for p in RECIPES if p.parent.name in ("mini", "paper") and p.name.startswith("rq")]
    assert len(studies) == 10
    for path in studies:
        arms = yaml.safe_load(path.read_text(encoding="utf-8"))["arms"]
        contaminated = [a for a in arms if settings.get(a).injects_test]
        assert contaminated and "control" in arms, path
        assert sorted(arms) == sorted(["control", *contaminated,
                                       *(settings.placebo_of(a) for a in contaminated)]), path


def test_malformed_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: [control\nseeds: 1\n")
    with pytest.raises(LabError, match="malformed YAML"):
        load_recipe(bad)
    with pytest.raises(LabError, match="no such recipe file"):
        load_recipe(tmp_path / "missing.yaml")


RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").rglob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.name for p in RECIPES])
def test_shipped_recipes_are_valid(path):
    recipe = load_recipe(path)
    assert recipe.seeds and recipe.arms


def test_reference_recipe_spells_out_the_defaults():
    from lab.study.recipe import Recipe, recipe_dict

    reference = next(p for p in RECIPES if p.name == "reference.yaml")
    assert recipe_dict(load_recipe(reference)) == recipe_dict(Recipe())
