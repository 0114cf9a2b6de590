"""One source of truth per fact: options and recipe fields derive from the stage configs, recipes
include a base, the reference recipe is generated, statistics sit below their users, and the
stage keys (hence every existing study folder) are those of earlier studies."""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import sys
import typing
from pathlib import Path

import pytest
import typer

from lab.common import LabError
from lab.study.recipe import (STUDY_DEFAULTS, SWEEPS, Recipe, load_recipe, recipe_dict, recipe_from_dict,
                              reference_yaml, study_differences)
from lab.study.grid import expand

ROOT = Path(__file__).resolve().parents[1]

# sha256 (first 16 hex digits) of the space-joined stage keys of each recipe, as the lab made
# them before the configs were declared once (main at 390fa55). Equal keys: every stage a study
# folder of that lab finished is found done, and nothing is run again.
EARLIER_STAGE_KEYS = {
    "recipes/quickstart.yaml": (11, "ff8b11e70049813d"),
    "recipes/mini/micro.yaml": (29, "e56367c3534be04d"),
    "recipes/mini/rq1-input-only.yaml": (109, "829bdf1c58bdd2c4"),
    "recipes/mini/rq2-output-only.yaml": (109, "b0c461031a1adfa2"),
    "recipes/mini/rq3-unpaired.yaml": (109, "d9dc736ef8f7156c"),
    "recipes/mini/rq4-paired.yaml": (109, "016e56551bd3db2f"),
    "recipes/mini/rq5-epoch-sweep.yaml": (109, "c1181945b9d9266e"),
    "recipes/paper/concode-paper.yaml": (256, "e7f741c5396d8df1"),
    "recipes/paper/rq1-input-only.yaml": (136, "1736f32c8403626a"),
    "recipes/paper/rq2-output-only.yaml": (136, "5202b1dd67690c41"),
    "recipes/paper/rq3-unpaired.yaml": (136, "01c88991e288fe5f"),
    "recipes/paper/rq4-paired.yaml": (136, "d20d7da7c80c1f37"),
    "recipes/paper/rq5-epoch-sweep.yaml": (226, "f85df317702cb1e6"),
}

# STUDY/recipe.json of a quickstart study made by that lab.
EARLIER_QUICKSTART_RECORD = {
    "name": "quickstart", "benchmark": "codetrans", "arms": ["paired"], "models": ["gpt2"],
    "preset": "tiny", "seeds": [0],
    "corpus": {"base": "csn-java", "base_splits": ["valid"], "limit": 700},
    "injection": {"repeat": 6, "fraction": 0.5, "samples": 200, "decontaminate": False},
    "tokenizer": {"vocab_size": 4000},
    "pretrain": {"epochs": 10.0, "lr": 0.003, "batch_size": 16, "block_size": 256,
                 "warmup_steps": 30, "lr_scheduler": "linear", "bf16": True, "compile": False,
                 "cross_document_attention": False},
    "finetune": {"epochs": [0, 1, 5], "train_sizes": [200], "lr": 0.0005, "batch_size": 8,
                 "select": "last", "bf16": True},
    "evaluation": {"split": "test", "decoding": "greedy", "metrics": ["bleu", "meteor", "em"],
                   "max_new_tokens": 128, "max_samples": 200},
    "probe": {"enabled": True, "min_k": 0.2, "max_samples": 200, "max_names": 32},
    "statistics": {"convention": "exact-two-sided", "alpha": 0.05},
    "resources": {"threads": None},
}


def _keys_digest(recipe: Recipe) -> tuple[int, str]:
    keys = [stage.key for stage in expand(recipe)]
    return len(keys), hashlib.sha256(" ".join(keys).encode()).hexdigest()[:16]


# The paper recipes now pre-train on 8 GPUs (ZeRO-2, bf16, 4 sequences per rank) and infer on a
# GPU: other numbers, so other keys. Asked to run as the earlier studies did, they find them.
# The mini RQ recipes now fine-tune above the trivial baselines (all 10,300 pairs, 3 epochs,
# bf16, length-grouped) and pre-train RoBERTa longer (issue 20): asked to run as before, the
# same.
# Placebos are now length-matched (issue 43): earlier ones were drawn at random; and drawn from
# the splits no model fine-tunes on (issue 58): earlier ones from train and valid. And the paper
# recipes run the seeds their primary tests need. Every probe of a seed now leaves the seed's
# placebo samples out of its reference pool (issue 69): earlier ones only the model's own.
MINI_AS_EARLIER = ["pretrain.bf16=false", "finetune.bf16=false", "finetune.group_by_length=false",
                   "by_model.roberta.pretrain={}", "injection.placebo_match=random",
                   "injection.placebo_from=[train, valid]", "probe.shared_pool=false"]
# The quickstart now runs in float32 (bf16 is emulated on CPUs without bfloat16 instructions),
# and on 80 samples, 100 fine-tuning pairs and E in {0, 5} (issue 59: half the wall time).
QUICKSTART_AS_EARLIER = ["pretrain.bf16=true", "finetune.bf16=true", "corpus.limit=700",
                         "injection.samples=200", "pretrain.batch_size=16",
                         "pretrain.warmup_steps=30", "finetune.epochs=[0,1,5]", "finetune.train_sizes=[200]",
                         "evaluation.max_samples=200"]
PAPER_AS_EARLIER = ["resources.pretrain.processes=1", "resources.pretrain.deepspeed=null",
                    "pretrain.batch_size=32", "pretrain.bf16=false", "finetune.bf16=false",
                    "resources.device=cpu", "injection.placebo_match=random", "seeds=[0,1,2,3,4]"]
AS_EARLIER = {"recipes/quickstart": QUICKSTART_AS_EARLIER,
              "recipes/paper/concode": PAPER_AS_EARLIER,  # no placebo arm: no placebo pool
              "recipes/paper/": [*PAPER_AS_EARLIER, "injection.placebo_from=[train, valid]",
                                 "probe.shared_pool=false"],
              "recipes/mini/rq5": [*MINI_AS_EARLIER, "finetune.epochs=[0,1,5]",
                                   "finetune.train_sizes=[200]"],
              "recipes/mini/rq": [*MINI_AS_EARLIER, "finetune.epochs=[2]", "finetune.train_sizes=[300]"]}


@pytest.mark.parametrize("path", sorted(EARLIER_STAGE_KEYS))
def test_every_recipe_keeps_the_stage_keys_of_earlier_studies(path):
    overrides = next((o for prefix, o in AS_EARLIER.items() if path.startswith(prefix)), [])
    assert _keys_digest(load_recipe(ROOT / path, overrides)) == EARLIER_STAGE_KEYS[path]


def test_a_study_recorded_by_the_earlier_lab_reads_as_the_same_recipe():
    recorded = recipe_from_dict(json.loads(json.dumps(EARLIER_QUICKSTART_RECORD)))
    current = load_recipe(ROOT / "recipes/quickstart.yaml", QUICKSTART_AS_EARLIER)
    assert study_differences(recorded, current) == []
    # compile recorded false; today unset, which a CPU study resolves to false
    assert recipe_dict(current)["pretrain"]["compile"] is None
    assert recipe_dict(recorded) == {**recipe_dict(current), "pretrain": {
        **recipe_dict(current)["pretrain"], "compile": False}}

    def within(earlier, now):  # every recorded field as it was (newer fields take defaults)
        if isinstance(earlier, dict):
            return all(key in now and within(value, now[key]) for key, value in earlier.items())
        return earlier == now

    assert within(EARLIER_QUICKSTART_RECORD, recipe_dict(recorded))
    assert _keys_digest(recorded) == EARLIER_STAGE_KEYS["recipes/quickstart.yaml"]


# --- include ------------------------------------------------------------------------------------

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_include_merges_sections_beneath_the_recipe_and_set_applies_on_top(tmp_path):
    _write(tmp_path / "bases" / "base.yaml",
           "seeds: [0, 1]\npretrain: {epochs: 2.0, lr: 0.002}\nevaluation: {max_samples: 20}\n")
    recipe = _write(tmp_path / "study" / "r.yaml",
                    "include: ../bases/base.yaml\nname: r\npretrain: {lr: 0.004}\n")
    loaded = load_recipe(recipe, ["seeds=[3]"])
    assert loaded.name == "r"
    assert loaded.seeds == [3]                    # --set over the include
    assert loaded.pretrain.epochs == 2.0          # from the include
    assert loaded.pretrain.lr == 0.004            # the recipe's own, key by key
    assert loaded.evaluation.max_samples == 20
    assert loaded.pretrain.batch_size == Recipe().pretrain.batch_size
    # What a study records (recipe.json) is the resolved recipe, with no include left in it.
    flat = _write(tmp_path / "flat.yaml", "name: r\nseeds: [3]\npretrain: {epochs: 2.0, lr: 0.004}\n"
                  "evaluation: {max_samples: 20}\n")
    assert recipe_dict(loaded) == recipe_dict(load_recipe(flat))
    assert "include" not in recipe_dict(loaded)


def test_a_list_of_includes_applies_in_order(tmp_path):
    _write(tmp_path / "a.yaml", "seeds: [1]\npretrain: {epochs: 5.0}\n")
    _write(tmp_path / "b.yaml", "seeds: [2]\n")
    recipe = _write(tmp_path / "r.yaml", "include: [a.yaml, b.yaml]\nname: r\n")
    loaded = load_recipe(recipe)
    assert (loaded.seeds, loaded.pretrain.epochs) == ([2], 5.0)


def test_include_is_relative_to_the_including_file_not_the_working_directory(tmp_path, monkeypatch):
    _write(tmp_path / "recipes" / "base.yaml", "seeds: [7]\n")
    recipe = _write(tmp_path / "recipes" / "r.yaml", "include: base.yaml\nname: r\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_recipe(recipe).seeds == [7]


@pytest.mark.parametrize("files, expected", [
    ({"r.yaml": "include: r.yaml\n"}, "include: cycle (r.yaml -> r.yaml)"),
    ({"r.yaml": "include: a.yaml\n", "a.yaml": "include: r.yaml\n"},
     "include: cycle (r.yaml -> a.yaml -> r.yaml)"),
    ({"r.yaml": "include: missing.yaml\n"}, "missing.yaml: no such recipe file"),
    ({"r.yaml": "include: {a: 1}\n"}, "include: expected a file name or a list of them"),
    ({"r.yaml": "include: []\n"}, "include: expected a file name or a list of them"),
    ({"r.yaml": "include: a.yaml\n", "a.yaml": "seeds: [1\n"}, "a.yaml:2: malformed YAML"),
    ({"r.yaml": "include: a.yaml\n", "a.yaml": "- 1\n"}, "a.yaml: a recipe is a mapping"),
])
def test_bad_includes_are_refused_in_one_line_naming_the_file(tmp_path, files, expected):
    for name, text in files.items():
        _write(tmp_path / name, text)
    with pytest.raises(LabError) as info:
        load_recipe(tmp_path / "r.yaml")
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_the_rq_recipes_state_only_what_differs_from_their_base():
    for folder in ("mini", "paper"):
        for path in sorted((ROOT / "recipes" / folder).glob("rq*.yaml")):
            lines = [line for line in path.read_text(encoding="utf-8").splitlines()
                     if line.strip() and not line.startswith("#")]
            assert lines[0] == "include: base.yaml", path
            assert len(lines) <= 8, (path, lines)


# --- the reference recipe -----------------------------------------------------------------------

def test_reference_recipe_is_generated_from_the_schema():
    written = (ROOT / "recipes" / "reference.yaml").read_text(encoding="utf-8")
    assert written == reference_yaml(), "regenerate: python -m lab.study.recipe > recipes/reference.yaml"
    loaded = load_recipe(ROOT / "recipes" / "reference.yaml")
    assert recipe_dict(loaded) == recipe_dict(Recipe())


def test_every_recipe_field_has_its_meaning():
    def missing(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[item.name]):
                yield from missing(hints[item.name], f"{item.name}.")
            elif not item.metadata.get("help"):
                yield prefix + item.name

    assert not list(missing(Recipe))


# --- parameters declared once -------------------------------------------------------------------

def _configs():
    from lab.contamination.inject import InjectConfig
    from lab.eval.generate import EvaluateConfig
    from lab.detect.probe import ProbeConfig
    from lab.llm.llm_eval import LlmEvalConfig
    from lab.llm.perturb import PerturbConfig
    from lab.tokenizer import TokenizerConfig
    from lab.train.finetune import FinetuneConfig
    from lab.train.pretrain import PretrainConfig

    return {"tokenizer": TokenizerConfig, "inject": InjectConfig, "pretrain": PretrainConfig, "finetune": FinetuneConfig,
            "evaluate": EvaluateConfig, "probe": ProbeConfig, "perturb": PerturbConfig,
            "llm-eval": LlmEvalConfig}


@pytest.mark.parametrize("command", ["tokenizer", "inject", "pretrain", "finetune", "evaluate",
                                     "probe", "perturb", "llm-eval"])
def test_command_options_are_the_config_fields_with_their_defaults_and_help(command):
    from lab.cli import app

    config = _configs()[command]
    click_command = typer.main.get_command(app).commands[command]
    if command == "tokenizer":
        click_command = click_command.commands["train"]
    options = {param.name: param for param in click_command.params}
    shown = [f for f in dataclasses.fields(config) if f.metadata.get("cli", True)]
    assert set(options) == {f.name for f in shown}
    for field in shown:
        option = options[field.name]
        if field.default is dataclasses.MISSING:
            assert option.required, field.name
            continue
        default = field.default
        if isinstance(default, tuple):
            default = ",".join(default)
        assert option.default == default, field.name
        assert option.help.startswith(field.metadata["help"]), field.name


@pytest.mark.parametrize("section, command", [
    ("tokenizer", "tokenizer"), ("corpus", "inject"), ("injection", "inject"), ("pretrain", "pretrain"),
    ("finetune", "finetune"), ("evaluation", "evaluate"), ("probe", "probe")])
def test_recipe_sections_take_the_command_defaults_except_the_study_defaults(section, command):
    config = _configs()[command]
    fields = config.__dataclass_fields__
    study_defaults = STUDY_DEFAULTS.get(section, {})
    grid = set(SWEEPS.get(section, {}))  # a list of the config's values
    if section == "pretrain":  # its sweep's default: the command's one value
        assert Recipe().pretrain.weight_decay == [fields["weight_decay"].default]
    shared = [f for f in dataclasses.fields(type(getattr(Recipe(), section)))
              if f.name in fields and f.name not in grid]
    assert shared
    for field in shared:
        value = getattr(getattr(Recipe(), section), field.name)
        expected = study_defaults.get(field.name, fields[field.name].default)
        assert value == (list(expected) if isinstance(expected, tuple) else expected), field.name
        assert field.metadata["help"] == fields[field.name].metadata["help"]


def test_each_recipe_section_is_declared_beside_its_stage_config():
    """A section made of a stage's config is declared in that config's module, with its study
    defaults, key-neutral fields and sweeps (lab.recipe_sections.section); the recipe schema
    only assembles them and reads those facts back."""
    from lab.study import recipe_schema

    hints = typing.get_type_hints(Recipe)
    sections = {name: hints[name] for name in recipe_schema.stage_sections()}
    assert set(sections) == {"corpus", "injection", "tokenizer", "pretrain", "finetune",
                             "evaluation", "probe", "detect"}
    for name, section in sections.items():
        assert section.__module__ == section.stage_config.__module__, name
        assert section.__module__ != recipe_schema.__name__, name
        assert getattr(sys.modules[section.__module__], section.__name__) is section, name
        own = {f.name for f in dataclasses.fields(section)}
        assert set(section.study_defaults) <= own and set(section.key_neutral) <= own, name
        assert set(section.sweeps) <= own, name
    for fact, derived in (("study_defaults", STUDY_DEFAULTS), ("sweeps", SWEEPS),
                          ("key_neutral", recipe_schema.KEY_NEUTRAL_DEFAULTS)):
        assert derived == {name: s.__dict__[fact] for name, s in sections.items()
                           if s.__dict__[fact]}, fact


def test_config_commands_take_their_config_and_nothing_else():
    commands = {node.name: node for room in sorted((ROOT / "lab" / "cli").glob("*.py"))
                for node in ast.parse(room.read_text(encoding="utf-8")).body
                if isinstance(node, ast.FunctionDef)}
    for command in _configs():
        name = {"tokenizer": "tokenizer_train"}.get(command, command.replace("-", "_"))
        args = commands[name].args
        assert [a.arg for a in args.args] == ["cfg"] and not args.kwonlyargs, name


# --- layers -------------------------------------------------------------------------------------

def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_evaluation_module_imports_the_study_layer():
    offenders = {str(path.relative_to(ROOT)): sorted(m for m in _imports(path)
                                                    if m.startswith(("lab.study", "lab.analysis")))
                 for path in (ROOT / "lab" / "eval").rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_statistics_import_no_stage_module():
    """lab.stats (a package, one module per concern) reads only lab.common and itself."""
    assert not {str(path.relative_to(ROOT)): found
                for path in (ROOT / "lab" / "stats").glob("*.py")
                if (found := [m for m in _imports(path) if m.startswith("lab.")
                              and m != "lab.common" and not m.startswith("lab.stats.")])}


# ---- a study's tables come from one source: its stages (issue 59) -----------------------------

MICRO = ROOT / "recipes" / "mini" / "micro.yaml"


def fake_study(folder: Path) -> Path:
    """A micro study folder as `lab study` leaves it, without training: its evaluate stages and
    the pre-training manifests they read, written by hand, then recipe.json and the tables
    (lab.analysis.collect) from them."""
    from lab.analysis.collect import collect

    recipe = load_recipe(MICRO)
    stages = expand(recipe)
    for number, stage in enumerate(s for s in stages if s.kind == "evaluate"):
        pretrain = stage.inputs[0].inputs[0].out(folder)
        pretrain.mkdir(parents=True, exist_ok=True)
        seed = stage.labels["seed"]
        (pretrain / "manifest.json").write_text(json.dumps({
            "seed": seed, "init_weights_sha256": f"w{seed}", "first_batch_sha256": f"b{seed}",
            "packing": {"injected_token_fraction": 0.1}, "loss": {"final": 2.0}, "corpus": {}}))
        out = stage.out(folder)
        out.mkdir(parents=True)
        rows = [{"id": f"codetrans:test:{i}", "group": group, "scores": {"bleu": number + i},
                 "source": f"int a{i};", "reference": f"int b{i};", "prediction": f"p{number}-{i}"}
                for i, group in enumerate(("injected", "held_out"))]
        (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (out / "metrics.json").write_text(json.dumps({
            "task": "translation", "samples": 2, "metrics": {"bleu": number + 0.5},
            "by_group": {r["group"]: {"samples": 1, "bleu": r["scores"]["bleu"]} for r in rows}}))
    (folder / "recipe.json").write_text(json.dumps(recipe_dict(recipe)))
    collect(recipe, stages, folder)
    return folder


def _plus_fifty(path: Path, arm: str = "paired") -> int:
    """+50 on `arm`'s first `all` row's bleu in a results CSV; its line number."""
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    index = next(i for i, r in enumerate(rows) if r["arm"] == arm and r["group"] == "all")
    rows[index]["bleu"] = str(float(rows[index]["bleu"]) + 50)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return index + 2


def test_a_table_that_is_not_what_the_stages_give_is_refused_by_file_line_and_column(tmp_path):
    from lab.analysis.collect import TABLES_RECORD, check_tables
    from lab.analysis.report import run_report, run_stats

    study = fake_study(tmp_path / "s")
    original = (study / "results.csv").read_bytes()
    assert check_tables(study).name == "micro"  # as lab wrote it: the record's digests agree
    line = _plus_fifty(study / "results.csv")
    edited = (rf"s/results.csv: line {line} \(stage evaluate-\w+, group all\), column bleu: "
              rf"'5\d\.5' where the stages give '\d\.5': `lab merge .*s --out NEW` rebuilds")
    for read in (check_tables, run_stats, run_report):
        with pytest.raises(LabError, match=edited):
            read(study)
    # Without the record (deleted, or tables older than it) the stages are still the source.
    record = (study / TABLES_RECORD).read_bytes()
    (study / TABLES_RECORD).unlink()
    with pytest.raises(LabError, match=edited):
        check_tables(study)
    # Tables equal to what the stages give stand, whatever the record says (two runners of
    # one study write the tables and the record in turn).
    (study / "results.csv").write_bytes(original)
    (study / TABLES_RECORD).write_text(record.decode().replace('"results.csv": "', '"results.csv": "0'))
    check_tables(study)
    # The Parquet copy is held to them too, and a table cut short is named as such.
    from lab.analysis.collect import write_table

    write_table(tmp_path / "results.csv", [{"stage": "evaluate-x", "group": "all", "bleu": 1.0}])
    (study / "results.parquet").write_bytes((tmp_path / "results.parquet").read_bytes())
    with pytest.raises(LabError, match=r"s/results.parquet: columns differ from those the stages "
                                       r"give \(missing: study, benchmark, task\)"):
        check_tables(study)
    (study / "results.csv").write_bytes(original[:len(original) // 2])
    with pytest.raises(LabError, match=r"s/results.csv: truncated \(line \d+ ends without a line "
                                       r"break"):
        check_tables(study)


def test_tables_without_stages_are_held_to_the_record_and_their_parquet_copies(tmp_path):
    import shutil

    from lab.analysis.collect import check_tables

    study = fake_study(tmp_path / "s")
    shard = tmp_path / "tables"  # as a shard's results travel: the tables without the stages
    shard.mkdir()
    for path in study.iterdir():
        if path.is_file():
            shutil.copy(path, shard / path.name)
    check_tables(shard)
    line = _plus_fifty(shard / "results.csv")
    with pytest.raises(LabError, match=rf"tables/results.csv: line {line} \(.*\), column bleu: "
                                       r"'5\d\.5' where results.parquet holds '\d\.5'$"):
        check_tables(shard)
    with pytest.raises(LabError, match=rf"tables/results.csv: line {line} "):
        merge_studies = __import__("lab.study.merge", fromlist=["merge_studies"]).merge_studies
        merge_studies([shard], tmp_path / "merged")
    # Both copies changed alike: only the record tells, and there are no stages to ask.
    from lab.analysis.collect import write_table
    from lab.study.merge import _read_table

    write_table(shard / "results.csv", _read_table(shard / "results.csv", (), True))
    with pytest.raises(LabError, match=r"tables/results.csv: not the file lab wrote \(its sha256 "
                                       r"differs from .*tables.json's\) and no stages/"):
        check_tables(shard)


def test_samples_parquet_holds_each_samples_text_joinable_by_id(tmp_path):
    import pyarrow.parquet as pq

    from lab.analysis.collect import SAMPLE_TEXT
    from lab.study.merge import merge_studies

    study = fake_study(tmp_path / "s")
    merged = Path(merge_studies([study], tmp_path / "merged")["out"])
    # A merge's tables travel without stages and merge again: the text comes along.
    again = Path(merge_studies([merged], tmp_path / "again")["out"])
    for folder in (study, merged, again):
        table = pq.read_table(Path(folder) / "samples.parquet").to_pylist()
        assert table and all(row[c] for row in table for c in SAMPLE_TEXT)
        for row in table:  # the text its evaluation scored, by stage and sample id
            written = [json.loads(line) for line in
                       (study / "stages" / row["stage"] / "predictions.jsonl").open()]
            [sample] = [w for w in written if w["id"] == row["id"]]
            assert {c: row[c] for c in SAMPLE_TEXT} == {c: sample[c] for c in SAMPLE_TEXT}
        # samples.csv stays the scores lab stats reads
        header = (Path(folder) / "samples.csv").read_text().splitlines()[0].split(",")
        assert "id" in header and not set(SAMPLE_TEXT) & set(header)
    # The HTML page's sample browser shows a merge's predictions from there.
    from lab.analysis.report_data import study_page_data

    page = study_page_data(again)["data"]
    assert page["evaluations"] and all(prediction.startswith("p") for e in page["evaluations"]
                                       for prediction in e["predictions"])
    assert page["samples"]["codetrans:test:0"] == ["int a0;", "int b0;"]


def test_merge_refuses_a_source_whose_recipe_is_not_the_one_its_stages_ran_by(tmp_path):
    from lab.analysis.collect import TABLES_RECORD
    from lab.study.merge import merge_studies
    from lab.analysis.report import run_stats

    study = fake_study(tmp_path / "s")
    (study / "recipe.json").write_text('{"name": "micro"}')
    replaced = (r"s/recipe.json: not the recipe .*/s's stages ran by \(differs from the one "
                r"tables.json recorded in \d+ section\(s\): corpus, evaluation, ")
    for read in (lambda s: merge_studies([s], tmp_path / "out"), run_stats):
        with pytest.raises(LabError, match=replaced):
            read(study)
    (study / TABLES_RECORD).unlink()  # the stages' own keys still tell
    with pytest.raises(LabError, match=r"s/recipe.json: not the recipe .*/s's stages ran by "
                                       r"\(\d+ evaluation\(s\) of results.csv are not stages of it"):
        merge_studies([study], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # A merge travels without stages: its tables.json still tells (the lab before merged it,
    # rc 0, its recipe the replaced one).
    merged = Path(merge_studies([fake_study(tmp_path / "t")], tmp_path / "merged")["out"])
    (merged / "recipe.json").write_text('{"name": "micro"}')
    with pytest.raises(LabError, match=r"merged/recipe.json: not the recipe .*merged's stages ran "
                                       r"by \(differs from the one tables.json recorded in"):
        merge_studies([merged], tmp_path / "out")


def test_a_recorded_recipe_of_wrong_types_is_refused_alike_by_stats_report_and_merge(tmp_path):
    from lab.study.merge import merge_studies
    from lab.analysis.report import run_report, run_stats

    study = fake_study(tmp_path / "s")
    (study / "recipe.json").write_text(json.dumps({**json.loads(
        (study / "recipe.json").read_text()), "seeds": "0, 1"}))
    messages = set()
    for read in (run_stats, run_report, lambda s: merge_studies([s], tmp_path / "out")):
        with pytest.raises(LabError) as refused:
            read(study)
        messages.add(str(refused.value))
    assert messages == {f"{study / 'recipe.json'}: a recipe this lab cannot read (seeds: "
                        "expected a list, got '0, 1')"}


def test_a_truncated_results_table_is_named_as_such(tmp_path):
    from lab.analysis.report import run_stats
    from tests.test_report import CONTROL, PAIRED, write_study

    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    results = study / "results.csv"
    for keep in (100, len(results.read_bytes()) // 2):  # in the header; in a row
        results.write_bytes(results.read_bytes()[:keep])
        with pytest.raises(LabError, match=r"s/results.csv: truncated \(line \d+ ends without a "
                                           r"line break; lab writes whole lines\)$"):
            run_stats(study)
