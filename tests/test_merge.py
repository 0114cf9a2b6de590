"""Shards of one study (`lab study --seeds`) run apart and joined by `lab merge`: the same stage
keys as the whole study, the whole study's tables again, and refusals of what cannot be one
study."""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.study.merge import merge_studies
from lab.study.recipe import load_recipe
from lab.study.grid import expand
from lab.study.runner import run_study

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"


def test_a_seed_shard_keeps_the_whole_studys_keys():
    recipe = load_recipe(RECIPE)
    whole = {stage.key: stage for stage in expand(recipe)}
    shards = [expand(recipe, [seed]) for seed in recipe.seeds]
    for shard in shards:
        assert {stage.key for stage in shard} < set(whole)
    assert set().union(*({stage.key for stage in shard} for shard in shards)) == set(whole)
    # Seed 1's shard reads the study's one tokenizer, trained on seed 0's control corpus, and
    # runs nothing else of seed 0.
    second = expand(recipe, [1])
    assert [s.kind for s in second].count("tokenizer") == 1
    assert [(s.kind, s.labels["arm"]) for s in second if s.labels.get("seed") == 0] == [
        ("inject", "control")]
    assert {s.labels["seed"] for s in second if s.kind == "evaluate"} == {1}
    # Inputs come before the stages that read them, as in the whole study.
    seen: set[str] = set()
    for stage in second:
        assert all(source.key in seen for source in stage.inputs)
        seen.add(stage.key)
    with pytest.raises(LabError, match=r"--seeds 7: not among the recipe's seeds \[0, 1\]"):
        expand(recipe, [1, 7])


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.long
@pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
def test_shards_run_apart_merge_into_the_whole_study(tmp_path):
    # One thread a stage: CI runs two tests at once on two cores.
    recipe = load_recipe(RECIPE, ["resources.threads=1"])
    whole = run_study(recipe, tmp_path / "whole", workers=1)
    # Each seed in a folder of its own, as on two machines; the second through the CLI.
    # seed 0's folder is a study begun with one seed (grown below), not a shard: its plan is 1
    first = run_study(dataclasses.replace(recipe, seeds=[0]), tmp_path / "seed0", workers=1)
    assert first["stages"] == len(expand(recipe, [0]))
    assert first["analysis"]["statistics"]["planned_seeds"] == 1
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--out",
                           str(tmp_path / "seed1"), "--seeds", "1", "--no-report",
                           "--threads", "1"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {r["seed"] for r in _rows(tmp_path / "seed1" / "results.csv")} == {"1"}

    # Two plans (2 seeds and 1): neither source's order decides; the one named is recorded.
    with pytest.raises(LabError, match=r"seed0: another analysis than .*seed1's "
                                       r"\(statistics.planned_seeds: 2 -> 1\).*--plan-from"):
        merge_studies([tmp_path / "seed1", tmp_path / "seed0"], tmp_path / "merged")
    record = merge_studies([tmp_path / "seed1", tmp_path / "seed0"], tmp_path / "merged",
                           plan_from=tmp_path / "seed1")
    assert record["analysis"]["plan_from"] == str(tmp_path / "seed1")
    assert record["seeds"] == [0, 1] and [s["seeds"] for s in record["sources"]] == [[1], [0]]
    assert record["evaluations"] == len([s for s in expand(recipe) if s.kind == "evaluate"])
    assert all(s["from"] == "stages" and s["git_commits"] and s["cpus"] and s["cpu_capabilities"]
               for s in record["sources"])
    merged = tmp_path / "merged"
    # The whole study's tables, byte for byte, whichever order the shards are given in.
    for name in ("results.csv", "samples.csv", "probes.csv"):
        assert (merged / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    # The whole study's recipe, with the plan it ran by stated (issue 58): the seeds it listed.
    merged_recipe = json.loads((merged / "recipe.json").read_text())
    whole_recipe = json.loads((tmp_path / "whole" / "recipe.json").read_text())
    assert merged_recipe["statistics"]["planned_seeds"] == len(whole_recipe["seeds"]) == 2
    assert merged_recipe == whole_recipe

    from lab.analysis.report import run_report

    ours = run_report(merged)  # its HTML page too, without the stages' predictions
    theirs = run_report(tmp_path / "whole", html=False)
    assert ours["markdown"] == theirs["markdown"] and Path(ours["html"]).is_file()

    # One seed of the whole study (e.g. a running study's finished seeds): that seed's shard.
    merge_studies([tmp_path / "whole"], tmp_path / "first", seeds=[0])
    for name in ("results.csv", "samples.csv", "probes.csv"):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "seed0" / name).read_bytes()
    with pytest.raises(LabError, match=r"no finished evaluation in .*whole of seeds \[5\]"):
        merge_studies([tmp_path / "whole"], tmp_path / "none", seeds=[5])

    # A merge is a source too (shards travel as tables, without their stages), and a stage
    # found in two sources with the same numbers counts once.
    tables_only = tmp_path / "tables-only"
    shutil.copytree(merged, tables_only)
    again = merge_studies([tables_only, tmp_path / "seed0"], tmp_path / "merged", force=True,
                          plan_from=tables_only)
    assert again["sources"][0]["from"] == "tables" and again["evaluations"] == record["evaluations"]
    assert again["sources"][0]["git_commits"] == record["sources"][0]["git_commits"]
    assert (merged / "results.csv").read_bytes() == (tmp_path / "whole" / "results.csv").read_bytes()

    # The same stage with other numbers is a reproducibility failure, named (the tables
    # written whole by the lab, as another machine's run would: a table edited by hand is
    # refused before, as not what the lab wrote: tests/test_one_source.py).
    from lab.analysis.collect import write_tables
    from lab.study.merge import TABLES as MERGED_TABLES, _read_table

    tables = {name: _read_table(tables_only / name, identity, True)
              for name, identity in MERGED_TABLES}
    rows = tables["results.csv"]
    rows[0]["bleu"] += 1.0
    write_tables(tables_only, tables, recipe)
    with pytest.raises(LabError, match=rf"results.csv row {rows[0]['stage']}/all differs"):
        merge_studies([tmp_path / "seed0", tables_only], tmp_path / "merged2",
                      plan_from=tables_only)
    assert not (tmp_path / "merged2").exists()
    assert whole["results"]

    # The analysis cannot move after the data (issue 69). A finished study refuses another
    # statistics section, in one line naming the field, and writes nothing.
    recorded = (tmp_path / "whole" / "recipe.json").read_bytes()
    done = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--out",
                           str(tmp_path / "whole"), "--threads", "1", "--set", "statistics.alpha=0.5",
                           "--set", "statistics.descriptive=false"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "statistics.alpha: 0.05 -> 0.5 (and 1 more): the analysis was frozen" in done.stderr
    assert (tmp_path / "whole" / "recipe.json").read_bytes() == recorded
    # An edited record is refused by every reader.
    edited = json.loads(recorded)
    edited["statistics"]["descriptive"] = False
    (tmp_path / "whole" / "recipe.json").write_text(json.dumps(edited))
    with pytest.raises(LabError, match=r"statistics.descriptive: true -> false is not the "
                                       r"analysis frozen"):
        run_report(tmp_path / "whole")
    # Grown from one seed to two: the seeds run are the whole study's, the plan stays one seed
    # (so the report is exploratory), and every later write keeps what the growth recorded.
    grown = run_study(recipe, tmp_path / "seed0", workers=1)
    assert grown["analysis"] == first["analysis"] and grown["grown"][0]["differs_in"] == ["seeds"]
    assert (tmp_path / "seed0" / "results.csv").read_bytes() == \
        (tmp_path / "whole" / "results.csv").read_bytes()
    assert json.loads((tmp_path / "seed0" / "recipe.json").read_text())[
        "statistics"]["planned_seeds"] == 1
    assert "Exploratory, not confirmatory" in run_report(tmp_path / "seed0")["markdown"]
    resumed = run_study(recipe, tmp_path / "seed0", workers=1)
    assert resumed["grown"] == grown["grown"] and resumed["analysis"] == first["analysis"]


def _table_study(folder: Path, recipe_data: dict, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps(recipe_data))
    with open(folder / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def test_merge_refuses_what_cannot_be_one_study(tmp_path):
    from lab.study.recipe import recipe_dict

    data = recipe_dict(load_recipe(RECIPE))
    row = {"stage": "evaluate-1", "group": "all", "model": "gpt2", "task": "codetrans",
           "arm": "control", "seed": 0, "epochs": 0, "train_size": 16, "bleu": 1.5}
    a = _table_study(tmp_path / "a", data, [row])
    other = _table_study(tmp_path / "b", {**data, "arms": ["control", "input-only"]}, [row])
    with pytest.raises(LabError, match=r"b/recipe.json: another recipe than .*a/recipe.json "
                                       r"\(differs in arms\)"):
        merge_studies([a, other], tmp_path / "out")
    # Where a stage runs is not what it is: resources may differ.
    elsewhere = _table_study(tmp_path / "c", {**data, "resources": {**data["resources"],
                                                                    "threads": 8}},
                             [{**row, "stage": "evaluate-2", "seed": 1}])
    assert merge_studies([a, elsewhere], tmp_path / "out", force=True)["seeds"] == [0, 1]
    # More seeds of the same study (what reaching alpha takes) merge; the record lists them all.
    more = _table_study(tmp_path / "e", {**data, "seeds": [0, 1, 2, 3]},
                        [{**row, "stage": "evaluate-3", "seed": 3}])
    # Listed up front, those seeds were its plan (4 seeds, not 2): a plan is named, not taken
    # from the first source given.
    with pytest.raises(LabError, match=r"statistics.planned_seeds: 2 -> 4\): name the plan"):
        merge_studies([a, more], tmp_path / "out", force=True)
    assert merge_studies([a, more], tmp_path / "out", force=True, plan_from=a)["seeds"] == [0, 3]
    assert json.loads((tmp_path / "out" / "recipe.json").read_text())["seeds"] == [0, 1, 2, 3]
    shifted = _table_study(tmp_path / "f", {**data, "seeds": [1, 2]}, [{**row, "seed": 1}])
    with pytest.raises(LabError, match=r"differs in seeds\[0\]"):
        merge_studies([a, shifted], tmp_path / "out", force=True)
    (tmp_path / "plain").mkdir()
    with pytest.raises(LabError, match="plain: not a study folder"):
        merge_studies([a, tmp_path / "plain"], tmp_path / "out", force=True)
    with pytest.raises(LabError, match="plain: output directory exists"):
        merge_studies([a], tmp_path / "plain")
    with pytest.raises(LabError, match="plain: --force refused: not a previous lab-merged"):
        merge_studies([a], tmp_path / "plain", force=True)
    # An earlier merge is replaced only with --force; never a source nor a folder inside one.
    with pytest.raises(LabError, match="out: output directory exists"):
        merge_studies([a], tmp_path / "out")
    with pytest.raises(LabError, match="lies inside an input"):
        merge_studies([a], a / "merged", force=True)
    broken = _table_study(tmp_path / "d", data, [row])
    with open(broken / "results.csv", "a", encoding="utf-8") as handle:
        handle.write("evaluate-3,all,gpt2,codetrans,control,0,0,16,1.0,extra\n")
    with pytest.raises(LabError, match="d/results.csv: line 3 has more cells than the header"):
        merge_studies([a, broken], tmp_path / "out", force=True)
    # Text where numbers belong, or a short line: one line each, not a TypeError or ArrowInvalid.
    for name, line, message in (
            ("g", "evaluate-3,all,gpt2,codetrans,control,x,0,16,1.0\n",
             r"g/results.csv: line 3, column seed: 'x' is text, where line 2 holds a number"),
            ("h", "evaluate-3,all,gpt2\n", r"h/results.csv: line 3 has fewer cells")):
        damaged = _table_study(tmp_path / name, data, [row])
        with open(damaged / "results.csv", "a", encoding="utf-8") as handle:
            handle.write(line)
        with pytest.raises(LabError, match=message):
            merge_studies([a, damaged], tmp_path / "out", force=True)
    # The CLI: one line, exit 2, the merged folder as it was.
    before = (tmp_path / "out" / "results.csv").read_bytes()
    done = subprocess.run([sys.executable, "-m", "lab.cli", "merge", str(a), str(broken),
                           "--out", str(tmp_path / "out"), "--force"], capture_output=True,
                          text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "more cells" in done.stderr
    assert (tmp_path / "out" / "results.csv").read_bytes() == before
    assert not list(tmp_path.glob(".out.merging-*"))
