"""Evaluation groups (issue 13, items 4-6): injected samples cut at the pre-training block size,
test samples seen in the fine-tuning data, the `clean` set of the arm-vs-control comparison,
lengths within the pre-trained positions, and -paper subsets evaluated on themselves.

Most tests fake the model (generation is not what they check) and write small benchmark files;
two run micro models on the real corpora."""
from __future__ import annotations

import csv
import json
import os
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lab.common import LabError  # noqa: E402
from lab.eval import generate as generate_mod  # noqa: E402
from lab.tasks import TASKS  # noqa: E402
from lab.train.finetune import FinetuneConfig, _training_samples  # noqa: E402

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
needs_corpora = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")


def _java(i: int) -> str:
    return f"public int get{i}() {{return value{i} + {i};}}"


def _cs(i: int) -> str:
    return f"public virtual int Get{i}(){{return value{i} + {i};}}"


def write_codetrans(root: Path, train: list[tuple[str, str]], test: list[tuple[str, str]]) -> Path:
    """A CodeTrans folder (original line layout) with the given train and test pairs."""
    folder = root / "codetrans"
    folder.mkdir(parents=True)
    for split, pairs in (("train", train), ("valid", train[:2]), ("test", test)):
        (folder / f"{split}.java-cs.txt.java").write_text("".join(j + "\n" for j, _ in pairs))
        (folder / f"{split}.java-cs.txt.cs").write_text("".join(c + "\n" for _, c in pairs))
    return root


def fake_model(monkeypatch, manifest: dict, predictions: dict[str, str] | None = None) -> list:
    """lab evaluate on a stand-in model: the manifest as given; a prediction per source (its
    reference's text for sources listed in `predictions`, else 'return 0;')."""
    calls: list[dict] = []

    def generate(model, tokenizer, architecture, sources, *args, **kwargs):
        calls.append({"args": args, **kwargs})
        return [(predictions or {}).get(s, "return 0;") for s in sources]

    model = SimpleNamespace(config=SimpleNamespace(n_positions=256))  # a GPT-2's positions
    monkeypatch.setattr(generate_mod, "generator_manifest",
                        lambda model_dir: (manifest, "causal-lm"))
    monkeypatch.setattr(generate_mod, "load_generator",
                        lambda model_dir: (model, None, manifest, "causal-lm"))
    monkeypatch.setattr(generate_mod, "generate", generate)
    return calls


def pretrained_record(injected, held_out, truncated=None, pre_existing=(), benchmark="codetrans",
                      block_size=128) -> dict:
    corpus = {"benchmark": benchmark, "benchmark_split": "test", "injected_ids": list(injected),
              "held_out_ids": list(held_out), "pre_existing_verbatim": list(pre_existing)}
    if truncated is not None:
        corpus["truncated_ids"] = sorted(truncated)
    return {"config": {"block_size": block_size}, "corpus": corpus}


def finetuned_manifest(corpora: Path, pretrained: dict, epochs: int, train_size: int | None,
                       seed: int = 0) -> dict:
    """A fine-tuned model's manifest as lab finetune writes it (its data note from the same
    function), without training anything."""
    task = TASKS["translation"]
    cfg = FinetuneConfig(pretrained=Path("unused"), task="translation", epochs=epochs,
                         out=Path("unused"), seed=seed, train_size=train_size, corpora_dir=corpora,
                         max_source_length=64, max_target_length=32)
    _train, _valid, note = _training_samples(task, cfg)
    return {"kind": "lab-finetuned", "config": {k: (str(v) if isinstance(v, Path) else v)
                                                for k, v in asdict(cfg).items()},
            "task": asdict(task), "data": note, "pretrained": pretrained}


def rows_of(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())}


# ---- item 4: truncated injected samples ---------------------------------------------------

def test_truncated_injected_samples_are_their_own_group(tmp_path, monkeypatch):
    test = [(_java(i), _cs(i)) for i in range(8)]
    corpora = write_codetrans(tmp_path / "c", [(_java(100 + i), _cs(100 + i)) for i in range(6)], test)
    ids = [f"codetrans:test:{i}" for i in range(8)]
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"},
                **pretrained_record(ids[:4], ids[4:], truncated=[ids[1], ids[3]],
                                    pre_existing=[f"{ids[5]}/input"])}
    calls = fake_model(monkeypatch, manifest, {_java(i): _cs(i) for i in range(8)})
    result = generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                                       metrics=("bleu", "em"), out=tmp_path / "e")
    rows = rows_of(tmp_path / "e")
    assert [rows[i]["group"] for i in ids] == ["injected", "injected_truncated", "injected",
                                               "injected_truncated", "held_out", "pre_existing",
                                               "held_out", "held_out"]
    assert rows[ids[1]]["injected"] is True  # it was injected, only not whole
    saved = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert {g: v["samples"] for g, v in saved["by_group"].items()} == {
        "pre_existing": 1, "injected_truncated": 2, "injected": 2, "held_out": 3, "clean": 7}
    assert saved["groups"]["precedence"] == ["in_finetune_data", "pre_existing",
                                             "injected_truncated", "held_out_truncated",
                                             "injected", "held_out", "unknown"]
    assert saved["groups"]["reasons"]["injected_truncated"] == 2
    assert saved["groups"]["truncated_ids_recorded"] is True
    assert result["by_group"]["clean"]["samples"] == 7  # truncated samples stay in `clean`
    # Direct inference within the 128 pre-trained positions (of the model's 256): half for
    # the prompt, and generation bounded by the block.
    _decoding, max_source, _max_new, _batch = calls[0]["args"]
    assert calls[0]["positions"] == 128 and max_source == (128 - 3) // 2

    # An older manifest without corpus.truncated_ids: nothing is computed, no such group.
    del manifest["corpus"]["truncated_ids"]
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "old")
    old = json.loads((tmp_path / "old" / "metrics.json").read_text())
    assert "injected_truncated" not in old["by_group"] and old["by_group"]["injected"]["samples"] == 4
    assert old["groups"]["truncated_ids_recorded"] is False


def test_held_out_samples_too_long_for_a_block_are_left_out_like_truncated_injected_ones(
        tmp_path, monkeypatch):
    """A held-out sample whose paired document would not fit a block (had it been injected) is
    `held_out_truncated`, so the within-model test compares halves of the same length range."""
    long_java = "public int sum() {return " + " + ".join(f"a{k}" for k in range(12)) + ";}"
    test = [(_java(i), _cs(i)) for i in range(6)] + [(long_java, _cs(6))]
    corpora = write_codetrans(tmp_path / "c", [(_java(100 + i), _cs(100 + i)) for i in range(6)], test)
    ids = [f"codetrans:test:{i}" for i in range(7)]
    record = pretrained_record(ids[:3], ids[3:], truncated=[], block_size=20)
    record["corpus"]["setting"] = "paired"
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"}, **record}
    fake_model(monkeypatch, manifest)

    def whitespace_tokenizer(texts, add_special_tokens=True):
        assert add_special_tokens is False  # as the pre-training token cache
        return {"input_ids": [text.split() for text in texts]}

    model = SimpleNamespace(config=SimpleNamespace(n_positions=256))
    monkeypatch.setattr(generate_mod, "load_generator",
                        lambda model_dir: (model, whitespace_tokenizer, manifest, "causal-lm"))
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e")
    rows = rows_of(tmp_path / "e")
    # `java <SEP> c#` of the short samples: 15 whitespace tokens, within the 18 a block keeps.
    assert [rows[i]["group"] for i in ids] == ["injected"] * 3 + ["held_out"] * 3 + ["held_out_truncated"]
    saved = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert saved["groups"]["reasons"]["held_out_truncated"] == 1
    assert saved["by_group"]["held_out"]["samples"] == 3 and saved["by_group"]["clean"]["samples"] == 7

    # A control (no form) or an arm without a split has no such group.
    record["corpus"]["setting"] = "control"
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "c2")
    assert "held_out_truncated" not in json.loads((tmp_path / "c2" / "metrics.json").read_text())["by_group"]


def _long_java(k: int) -> str:
    return f"public int sum{k}() {{return " + " + ".join(f"a{j}" for j in range(12)) + ";}"


def _whitespace_model(monkeypatch, manifest: dict) -> None:
    def whitespace_tokenizer(texts, add_special_tokens=True):
        assert add_special_tokens is False  # as the pre-training token cache
        return {"input_ids": [text.split() for text in texts]}

    fake_model(monkeypatch, manifest)
    model = SimpleNamespace(config=SimpleNamespace(n_positions=256))
    monkeypatch.setattr(generate_mod, "load_generator",
                        lambda model_dir: (model, whitespace_tokenizer, manifest, "causal-lm"))


def test_a_decontaminated_arm_judges_the_samples_it_removed_by_the_block_rule(tmp_path, monkeypatch):
    """Intention to treat keeps a removed sample in the injected half; the block-size rule
    applies to it as it would have as built: a long one is injected_truncated, as the
    as-built arm's copy was, so both arms compare the same length range."""
    test = [(_java(i), _cs(i)) for i in range(4)] + [(_long_java(4), _cs(4)), (_long_java(5), _cs(5)),
                                                     (_long_java(6), _cs(6))]
    corpora = write_codetrans(tmp_path / "c", [(_java(100 + i), _cs(100 + i)) for i in range(6)], test)
    ids = [f"codetrans:test:{i}" for i in range(7)]
    # ids 0, 1, 4 and 5 assigned; the decontaminator removed 1 (short) and 5 (long); 4 is long
    # and was cut in the corpus; 6 is long and held out.
    record = pretrained_record([ids[0], ids[4]], [ids[2], ids[3], ids[6]], truncated=[ids[4]],
                               block_size=20)
    record["corpus"].update(setting="paired", intended_injected_ids=[ids[0], ids[1], ids[4], ids[5]],
                            decontamination={"method": "exact", "removed_injected_ids": [ids[1], ids[5]]})
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"}, **record}
    _whitespace_model(monkeypatch, manifest)
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e")
    rows = rows_of(tmp_path / "e")
    assert [rows[i]["group"] for i in ids] == [
        "injected", "injected", "held_out", "held_out", "injected_truncated", "injected_truncated",
        "held_out_truncated"]
    assert [rows[i].get("removed_by_decontamination", False) for i in ids[:2]] == [False, True]
    assert [rows[i]["injected"] for i in (ids[1], ids[4], ids[5])] == [False, True, False]
    saved = json.loads((tmp_path / "e" / "metrics.json").read_text())["groups"]
    assert saved["truncation"] == {"rule": "verbatim documents", "tokens_kept": 18,
                                   "checked_on_trained_samples": 2, "differ_from_recorded": []}

    # A rule that disagrees with what pre-training recorded for a sample it trained on would
    # judge the two halves differently: the evaluation refuses, naming the sample, and writes
    # nothing.
    record["corpus"]["truncated_ids"] = [ids[0], ids[4]]
    with pytest.raises(LabError, match=rf"judges 1 of 2 trained samples .*: {ids[0]};"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                                  metrics=("bleu",), out=tmp_path / "e2")
    assert not (tmp_path / "e2").exists()


def test_the_block_rule_writes_documents_in_the_arms_form_with_its_seed(tmp_path, monkeypatch):
    """A partial arm's documents are half as long: a held-out sample whose verbatim document
    would not fit but whose partial one does stays held out, as its injected twins do. The
    form is seeded by the arm's seed (corpus.seed; else the arm's manifest, only if its corpus
    sha256 is the recorded one); without it, the rule falls back to verbatim, which here
    disagrees with what pre-training recorded, and the evaluation refuses."""
    from lab.contamination import soft, settings

    test = [(_java(i), _cs(i)) for i in range(3)] + [(_long_java(i), _cs(i)) for i in range(3, 6)]
    corpora = write_codetrans(tmp_path / "c", [(_java(100 + i), _cs(100 + i)) for i in range(6)], test)
    ids = [f"codetrans:test:{i}" for i in range(6)]
    record = pretrained_record([ids[0], ids[3]], [ids[1], ids[2], ids[4], ids[5]], truncated=[],
                               block_size=20)
    record["corpus"].update(setting="paired", contamination_form="partial:0.5", seed=3,
                            options={"base": "csn-java"})
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"}, **record}
    _whitespace_model(monkeypatch, manifest)
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e")
    rows = rows_of(tmp_path / "e")
    partial = soft.FormedSetting.of(settings.get("paired"), soft.parse_form("partial:0.5"), 3,
                                    "codetrans", "csn-java")
    from lab.corpora import load_samples
    samples = {s.id: s for s in load_samples("codetrans", "test", corpora).records}
    fits = {i: all(len(text.split()) <= 18 for _side, text in partial.documents(samples[i]))
            for i in ids}
    assert fits[ids[4]] and not all(len(t.split()) <= 18
                                    for _s, t in settings.get("paired").documents(samples[ids[4]]))
    held = [ids[1], ids[2], ids[4], ids[5]]
    assert [rows[i]["group"] for i in held] == [
        "held_out" if fits[i] else "held_out_truncated" for i in held]
    truncation = json.loads((tmp_path / "e" / "metrics.json").read_text())["groups"]["truncation"]
    assert truncation["rule"] == "partial documents, seeded by the model's corpus.seed"
    assert truncation["differ_from_recorded"] == []

    # No seed in the record: the arm's manifest gives it only if its corpus is the recorded one.
    del record["corpus"]["seed"]
    from lab.corpora.shards import shards_digest, write_shards

    arm = tmp_path / "arm"
    shards = write_shards(arm / "corpus", [{"id": "d0", "text": "class A {}"}], 10)
    digest = shards_digest(shards)
    (arm / "manifest.json").write_text(json.dumps({"shards": shards, "seed": 3,
                                                   "corpus_sha256": digest}))
    record["corpus"].update(path=str(arm), sha256="a" * 64)  # another corpus at that path now
    # The verbatim fallback cuts what the arm's partial documents kept: refused, not reported.
    with pytest.raises(LabError, match=r"verbatim documents: the arm's seed is unknown.*"
                                       rf"judges 1 of 2 trained samples .*: {ids[3]};"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                                  metrics=("bleu",), out=tmp_path / "e2")
    record["corpus"]["sha256"] = digest
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e3")
    checked = json.loads((tmp_path / "e3" / "metrics.json").read_text())["groups"]["truncation"]
    assert checked["rule"].startswith("partial documents, seeded by the arm's manifest")
    assert {i: r["group"] for i, r in rows_of(tmp_path / "e3").items()} == \
        {i: r["group"] for i, r in rows.items()}


# ---- item 5: the fine-tuning data -----------------------------------------------------------

def test_samples_in_the_finetuning_data_are_their_own_group(tmp_path, monkeypatch):
    # Train holds test 0's input (other whitespace) and test 1's output in rows 3 and 6, which
    # the seeded subset of 5 draws (rows 2, 3, 5, 6, 7 with seed 0), and test 2's input in row
    # 0, which it does not: only what the model was fine-tuned on counts.
    train = [(_java(100 + i), _cs(100 + i)) for i in range(10)]
    test = [(_java(i), _cs(i)) for i in range(6)]
    train[3] = ("  " + _java(0).replace(" {", "   {") + " ", _cs(300))
    train[6] = (_java(301), _cs(1))
    train[0] = (_java(2), _cs(302))
    corpora = write_codetrans(tmp_path / "c", train, test)
    ids = [f"codetrans:test:{i}" for i in range(6)]
    seed, size = 0, 5
    pretrained = pretrained_record(ids[:3], ids[3:])
    manifest = finetuned_manifest(corpora, pretrained, epochs=1, train_size=size, seed=seed)
    used, _valid, _note = _training_samples(
        TASKS["translation"], FinetuneConfig(pretrained=Path("x"), task="translation", epochs=1,
                                             out=Path("x"), seed=seed, train_size=size,
                                             corpora_dir=corpora))
    assert sorted(train.index((s.input, s.output)) for s in used) == [2, 3, 5, 6, 7]
    # The subset the group compares against is drawn as lab finetune drew it.
    drawn, note = generate_mod.finetuning_samples(manifest, tmp_path / "m", corpora)
    assert drawn == used and note["samples"] == size

    fake_model(monkeypatch, manifest, {_java(i): _cs(i) for i in range(6)})
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu", "em"), out=tmp_path / "e")
    rows = rows_of(tmp_path / "e")
    # Precedence: the fine-tuning data before injected / held out.
    assert rows[ids[0]]["group"] == "in_finetune_data" and rows[ids[0]]["in_finetune_data"] == ["input"]
    assert rows[ids[1]]["group"] == "in_finetune_data" and rows[ids[1]]["in_finetune_data"] == ["output"]
    assert [rows[i]["group"] for i in ids[2:]] == ["injected", "held_out", "held_out", "held_out"]
    saved = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert saved["by_group"]["in_finetune_data"]["samples"] == 2
    assert saved["by_group"]["clean"]["samples"] == 4 and "em" in saved["by_group"]["clean"]
    assert saved["groups"]["finetune_data"]["samples"] == size

    # Direct inference (E = 0) saw no fine-tuning data: the same samples are injected again.
    zero = finetuned_manifest(corpora, pretrained, epochs=0, train_size=size, seed=seed)
    fake_model(monkeypatch, zero)
    generate_mod.run_evaluate(tmp_path / "m0", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e0")
    assert [r["group"] for r in rows_of(tmp_path / "e0").values()][:2] == ["injected", "injected"]

    # The data changed since fine-tuning: the overlap cannot be told, so it is refused.
    (corpora / "codetrans" / "train.java-cs.txt.cs").write_text(
        "".join(c + " \n" for _j, c in train))
    fake_model(monkeypatch, manifest)
    with pytest.raises(LabError, match="not the one it was fine-tuned on"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                                  metrics=("bleu",), out=tmp_path / "e2")


@needs_corpora
def test_finetune_overlap_counts_on_codetrans():
    """CodeTrans train holds 43 test inputs and 59 test outputs verbatim (whitespace-normalised;
    the lexer-normalised audit finds 60 outputs): 78 samples in all."""
    from lab.corpora import load_samples

    test = load_samples("codetrans", "test").records
    found = generate_mod.finetune_overlap(test, load_samples("codetrans", "train").records)
    assert len(found) == 78
    assert sum("input" in sides for sides in found.values()) == 43
    assert sum("output" in sides for sides in found.values()) == 59


# ---- the split-half guard and -paper subsets (item 6) -----------------------------------------

def test_split_half_refuses_samples_it_did_not_split(tmp_path, monkeypatch):
    test = [(_java(i), _cs(i)) for i in range(6)]
    corpora = write_codetrans(tmp_path / "c", [(_java(100 + i), _cs(100 + i)) for i in range(4)], test)
    ids = [f"codetrans:test:{i}" for i in range(6)]
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"},
                **pretrained_record(ids[:2], ids[2:4])}
    fake_model(monkeypatch, manifest)
    with pytest.raises(LabError, match=r"2 of 6 evaluated samples are neither injected, held out "
                                       r"nor pre-existing.*codetrans:test:4, codetrans:test:5"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                                  metrics=("bleu",), out=tmp_path / "e")
    assert not (tmp_path / "e").exists()
    # A control (nothing injected) is not split-half: the others are simply unknown... held out.
    manifest.update(pretrained_record([], ids[:4]))
    generate_mod.run_evaluate(tmp_path / "m", "translation", corpora_dir=corpora,
                              metrics=("bleu",), out=tmp_path / "e")
    assert [r["group"] for r in rows_of(tmp_path / "e").values()] == ["held_out"] * 4 + ["unknown"] * 2


@needs_corpora
def test_a_paper_subset_model_is_evaluated_on_the_subset(tmp_path, monkeypatch):
    from lab.corpora import load_samples

    paper = load_samples("codetrans-paper", "test", require_references=True).records
    assert len(paper) == 1000 and all(s.output for s in paper)  # a test split with references
    ids = [s.id for s in paper[:6]]
    manifest = {"kind": "lab-pretrained", "model": {"family": "gpt2"},
                **pretrained_record(ids[:3], ids[3:6], benchmark="codetrans-paper")}
    fake_model(monkeypatch, manifest)
    listed = tmp_path / "ids.txt"
    listed.write_text("\n".join(ids) + "\n")
    result = generate_mod.run_evaluate(tmp_path / "m", "translation", ids=listed,
                                       metrics=("bleu",), out=tmp_path / "e")
    assert result["benchmark"] == "codetrans-paper"
    assert [r["group"] for r in rows_of(tmp_path / "e").values()] == ["injected"] * 3 + ["held_out"] * 3
    # The base benchmark's samples are not those the arm split: refused, not `unknown`.
    with pytest.raises(LabError, match="neither injected, held out nor pre-existing"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", benchmark="codetrans",
                                  metrics=("bleu",), out=tmp_path / "e2")
    with pytest.raises(LabError, match="not a benchmark of task translation"):
        generate_mod.run_evaluate(tmp_path / "m", "translation", benchmark="concode-paper",
                                  metrics=("bleu",), out=tmp_path / "e3")


@needs_corpora
def test_a_paper_subset_study_groups_its_samples(tmp_path):
    """A micro -paper study: its evaluate stage scores the subset it injected (injected /
    held_out), not the base benchmark's test split (every sample `unknown`)."""
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand
    from lab.study.runner import run_study

    recipe = load_recipe(RECIPES / "mini" / "micro.yaml", [
        "benchmark=codetrans-paper", "arms=[paired]", "seeds=[0]", "finetune.epochs=[0]",
        "injection.samples=12", "injection.fraction=0.5", "evaluation.max_samples=12",
        "probe.enabled=false", "resources.threads=1"])
    evaluation = next(s for s in expand(recipe) if s.kind == "evaluate")
    assert evaluation.config.task == "translation"
    summary = run_study(recipe, tmp_path / "s", workers=1)
    with open(summary["samples"], newline="") as handle:
        samples = list(csv.DictReader(handle))
    assert len(samples) == 12 and all(s["id"].startswith("codetrans-paper:test:") for s in samples)
    groups = [s["group"] for s in samples]
    assert "unknown" not in groups and groups.count("injected") + groups.count(
        "injected_truncated") + groups.count("pre_existing") >= 5 and "held_out" in groups
    with open(summary["results"], newline="") as handle:
        results = {r["group"]: r for r in csv.DictReader(handle)}
    assert {"all", "clean", "held_out"} <= set(results)
    assert results["clean"]["samples"] == "12"  # E = 0: no fine-tuning data


# ---- lengths within the pre-trained positions (item 4) --------------------------------------

def test_fitted_lengths_stay_within_the_pretraining_block():
    from lab.train.finetune import fitted_lengths, longest_kept_target

    # GPT-2: <s> source <SEP> target </s> in the block; the source is cut first, down to a
    # quarter of the budget.
    assert fitted_lengths("gpt2", 256, 256, 128) == (125, 128)  # the quickstart
    assert fitted_lengths("gpt2", 256, 256, 256) == (63, 190)
    assert fitted_lengths("gpt2", 256, 40, 300) == (40, 213)
    assert fitted_lengths("gpt2", 512, 100, 100) == (100, 100)
    assert fitted_lengths("gpt2", 128, 256, 16) == (109, 16)  # the micro recipe
    assert fitted_lengths("roberta", 256, 300, 512) == (256, 256)
    for family, limit in (("gpt2", 128), ("gpt2", 256), ("gpt2", 512), ("roberta", 256)):
        kept = longest_kept_target(family, limit)
        source, target = fitted_lengths(family, limit, 256, kept)
        assert target == kept and fitted_lengths(family, limit, 256, kept + 1)[1] < kept + 1
        assert (source + target + 3 if family == "gpt2" else max(source, target)) <= limit


@pytest.mark.parametrize("overrides, message", [
    (["evaluation.max_new_tokens=512"], "evaluation.max_new_tokens: 512: gpt2 fine-tunes "
     "`<s> source <SEP> target </s>` within pretrain.block_size 256"),
    (["evaluation.max_new_tokens=191"], "the target fits in at most 190"),
    (["models=[roberta]", "finetune.epochs=[1]", "evaluation.max_new_tokens=257"],
     "257: larger than pretrain.block_size 256, the positions roberta was pre-trained on"),
    (["evaluation.max_samples=81"], "evaluation.max_samples: 81: a split-half arm splits the "
     "first 80 test samples"),
    (["evaluation.max_samples=null"], "evaluation.max_samples: null: a split-half arm"),
])
def test_recipes_whose_lengths_or_samples_do_not_fit_are_refused(overrides, message):
    from lab.study.recipe import load_recipe

    with pytest.raises(LabError, match="^" + str(RECIPES / "quickstart.yaml").replace(".", r"\.")) as info:
        load_recipe(RECIPES / "quickstart.yaml", overrides)
    assert message in str(info.value)
    load_recipe(RECIPES / "quickstart.yaml", ["evaluation.max_new_tokens=190"])


def test_every_shipped_recipe_fits_and_the_concode_paper_recipe_loads():
    from lab.study.recipe import load_recipe
    from lab.study.grid import expand

    for path in sorted(RECIPES.rglob("*.yaml")):
        load_recipe(path)
    recipe = load_recipe(RECIPES / "paper" / "concode-paper.yaml")
    assert recipe.benchmark == "concode-paper"
    stages = expand(recipe)
    assert {s.config.task for s in stages if s.kind in ("finetune", "evaluate")} == {"generation"}
    assert {s.config.benchmark for s in stages if s.kind == "inject"} == {"concode-paper"}


@needs_corpora
def test_finetune_and_evaluation_use_only_pretrained_positions(micro_world, tmp_path):
    """A micro GPT-2 has 256 positions but was pre-trained on blocks of 128: lab finetune fits
    its lengths to 128 and says so; evaluation never prompts or generates past 128."""
    from lab.train.finetune import run_finetune
    from lab.train.pretrain import PretrainConfig, run_pretrain

    run_pretrain(PretrainConfig(
        model="gpt2", corpus=micro_world / "paired", tokenizer=micro_world / "tok",
        out=tmp_path / "pt", preset="micro", max_steps=2, lr=3e-3, batch_size=8, block_size=128,
        seed=0, save_steps=100, cache_dir=tmp_path / "cache"))
    manifest = run_finetune(FinetuneConfig(pretrained=tmp_path / "pt", task="translation",
                                           epochs=0, out=tmp_path / "e0"))
    lengths = manifest["lengths"]
    assert lengths["model_positions"] == 256 and lengths["limit"] == 128
    assert lengths["action"] == "fitted" and lengths["requested"]["max_source_length"] == 256
    used = manifest["config"]
    assert used["max_source_length"] + used["max_target_length"] + 3 <= 128
    assert (used["max_source_length"], used["max_target_length"]) == (31, 94)

    captured = []
    original = generate_mod.generate

    def spy(*args, **kwargs):
        captured.append((args, kwargs))
        return original(*args, **kwargs)

    ids = tmp_path / "ids.txt"
    ids.write_text("codetrans:test:0\ncodetrans:test:1\n")
    import unittest.mock

    with unittest.mock.patch.object(generate_mod, "generate", spy):
        result = generate_mod.run_evaluate(tmp_path / "e0", "translation", ids=ids,
                                           max_new_tokens=500, metrics=("bleu",),
                                           out=tmp_path / "ev")
        direct = generate_mod.run_evaluate(tmp_path / "pt", "translation", ids=ids,
                                           metrics=("bleu",), out=tmp_path / "direct")
    assert result["lengths"]["position_limit"] == 128 == captured[0][1]["positions"]
    assert direct["lengths"]["max_source_length"] == (128 - 3) // 2  # half the block, not 256's


# ---- the report: arm vs control on `clean`, counts of what was left out --------------------

def _write_results(study: Path, clean_stages: set[str] | None = None) -> Path:
    """A study folder (results.csv, samples.csv as lab study collects them): control and paired
    arm, 4 seeds, E in {0, 1}. `all` and `clean` disagree, so the test shows which is used;
    E = 1 evaluations have 2 samples in the fine-tuning data; every paired run 3 truncated."""
    study.mkdir()
    results, samples = [], []
    for arm, base in (("control", 1.0), ("paired", 5.0)):
        for seed in range(4):
            for epochs in (0, 1):
                stage = f"evaluate-{arm}-{seed}-{epochs}"
                labels = {"study": "s", "benchmark": "codetrans", "task": "translation",
                          "model": "gpt2", "arm": arm, "seed": seed, "epochs": epochs,
                          "train_size": "", "stage": stage}
                finetune = 2 if epochs else 0
                truncated = 3 if arm == "paired" else 0
                results.append({**labels, "group": "all", "samples": 40, "bleu": 50.0 + seed})
                groups = {"pre_existing": 1, "in_finetune_data": finetune}
                if arm == "paired":
                    groups.update(injected_truncated=truncated, injected=18 - truncated,
                                  held_out=21 - finetune)
                else:
                    groups.update(held_out=39 - finetune)
                for group, count in groups.items():
                    if count:
                        results.append({**labels, "group": group, "samples": count, "bleu": 7.0})
                        samples += [{**labels, "id": f"{group}-{i}", "group": group,
                                     "score_bleu": 20.0 + i + (10 if group == "injected" else 0)}
                                    for i in range(count)]
                if clean_stages is None or stage in clean_stages:
                    results.append({**labels, "group": "clean", "samples": 39 - finetune,
                                    "bleu": base + seed})
    for name, rows in (("results.csv", results), ("samples.csv", samples)):
        columns = list(dict.fromkeys(k for row in rows for k in row))
        with open(study / name, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    return study


def test_the_report_compares_arms_on_clean_samples_and_counts_what_it_left_out(tmp_path):
    from lab.analysis.report import run_report, study_stats

    study = _write_results(tmp_path / "s")
    cells = {(c["arm"], c["epochs"]): c for c in study_stats(study, include_control=True)
             if c["metric"] == "bleu"}
    paired, control = cells[("paired", 1)], cells[("control", 1)]
    # The clean metric (5.0 + seed vs 1.0 + seed), not `all` (50 + seed for both arms).
    assert paired["sample_set"] == "clean" and paired["mean"] == pytest.approx(6.5)
    assert paired["control"] == pytest.approx(2.5) and paired["lift"] == pytest.approx(4.0)
    assert paired["samples_compared"] == 37 and control["samples_compared"] == 37
    assert paired["left_out_in_finetune_data"] == 2 and cells[("paired", 0)]["left_out_in_finetune_data"] == 0
    assert paired["left_out_pre_existing"] == 1 and paired["left_out_injected_truncated"] == 3
    assert control["left_out_injected_truncated"] == 0
    # The within-model test: injected against held_out only (15 vs 19 samples a seed at E = 1).
    assert paired["injected_samples"] == 4 * 15 and paired["held_out_samples"] == 4 * 19
    report = run_report(study)
    assert ("left out per evaluation: 0-2 in the fine-tuning data, 1 pre-existing" in
            report["markdown"]) and "block size (3 per evaluation)" in report["markdown"]

    # Evaluations from before `clean` beside newer ones: refused, not compared on two sets.
    mixed = _write_results(tmp_path / "mixed", clean_stages={"evaluate-paired-0-0"})
    with pytest.raises(LabError, match=r"15 evaluation\(s\) predate the `clean` group"):
        study_stats(mixed)
