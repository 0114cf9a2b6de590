"""`lab study` end to end on the micro recipe: grid, cache, kill-and-resume, results table."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.study.recipe import load_recipe
from lab.study.runner import expand, run_study

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "mini" / "micro.yaml"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_grid_of_the_micro_recipe():
    stages = expand(load_recipe(RECIPE))
    kinds = [s.kind for s in stages]
    assert kinds.count("inject") == 4 and kinds.count("tokenizer") == 1
    assert kinds.count("pretrain") == 4 and kinds.count("finetune") == 8 == kinds.count("evaluate")
    # One probe per pre-trained model; the control's is on the paired arm's samples.
    probes = [s for s in stages if s.kind == "probe"]
    assert len(probes) == 4 and all(s.labels["groups"] == "paired" for s in probes)
    assert [len(s.inputs) for s in probes if s.labels["arm"] == "control"] == [2, 2]
    assert len({s.key for s in stages}) == len(stages)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_study_killed_midway_resumes_to_the_same_results(tmp_path):
    recipe = load_recipe(RECIPE)
    reference = run_study(recipe, tmp_path / "whole")
    assert len(reference["ran"]) == len(expand(recipe)) == 29
    again = run_study(recipe, tmp_path / "whole")
    assert again["ran"] == []  # every stage cached
    rows = _rows(Path(reference["results"]))
    assert {r["arm"] for r in rows} == {"control", "paired"}
    assert {r["epochs"] for r in rows} == {"0", "1"} and {r["seed"] for r in rows} == {"0", "1"}
    assert any(r["group"] == "injected" for r in rows if r["arm"] == "paired")

    killed = tmp_path / "killed"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--out", str(killed)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if len(list((killed / "stages").glob("finetune-*"))) >= 2:
            break
        time.sleep(0.1)
    workers = _children(proc.pid)
    assert workers  # the pool's processes
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The default local executor ran stages in worker processes: they die with the runner
    # instead of finishing a stage behind the back of the resumed run.
    deadline = time.time() + 10
    while workers and time.time() < deadline:
        workers = [pid for pid in workers if Path(f"/proc/{pid}").exists()
                   and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
        time.sleep(0.1)
    assert workers == []
    # Resumed with the local pool: two worker processes, one thread each.
    resumed = run_study(recipe, killed, workers=2)
    assert resumed["workers"] == 2 and 0 < len(resumed["ran"]) < 29
    # Worker processes write each stage's output to its own log, not over the progress display.
    logs = "".join(p.read_text() for p in (killed / "stages").glob("finetune-*.log"))
    assert "'train_runtime'" in logs  # the Trainer's summary line of a fine-tuning stage
    assert Path(resumed["results"]).read_text() == Path(reference["results"]).read_text()
    assert Path(resumed["samples"]).read_text() == Path(reference["samples"]).read_text()
    probes = _rows(Path(reference["probes"]))
    assert {(r["arm"], r["groups"]) for r in probes} == {("paired", "paired"), ("control", "paired")}
    # Probe scores are float sums whose order depends on the thread count (the resumed workers
    # ran one thread each, the reference two): equal to float precision, not bit for bit.
    again = _rows(Path(resumed["probes"]))
    assert [(r["stage"], r["id"]) for r in again] == [(r["stage"], r["id"]) for r in probes]
    for old, new in zip(probes, again):
        for column in ("loss", "min_k", "infill", "extraction_bleu"):
            assert float(new[column] or 0) == pytest.approx(float(old[column] or 0), rel=1e-4, abs=1e-5)

    from lab.study.report import run_report

    report = run_report(tmp_path / "whole")
    cells = [c for c in report["cells"] if c["metric"] == "bleu"]
    assert {c["epochs"] for c in cells} == {0, 1} and all(c["seeds"] == 2 for c in cells)
    assert all("p" in c and "p_holm" in c and "p_within" in c for c in cells)
    assert "Mann-Whitney U, two-sided, exact" in report["markdown"]
    assert all(p.stat().st_size > 0 for p in report["figure"] + report["tables"])

    # The analysis notebook runs on this study's output.
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" /
                             "contamination_decay.ipynb", as_version=4)
    os.environ["LAB_STUDY"] = str(tmp_path / "whole")
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    finally:
        del os.environ["LAB_STUDY"]
    assert (tmp_path / "whole" / "decay-bleu-notebook.png").is_file()


def test_submitit_local_executor_reproduces_a_slice_of_the_study(tmp_path):
    pytest.importorskip("submitit")
    # One arm, one seed, direct inference: every stage has the same key as in the full micro
    # study, so its metrics must equal what the in-process runner wrote for the same stage.
    overrides = ["arms=[paired]", "seeds=[0]", "finetune.epochs=[0]"]
    part = load_recipe(RECIPE, overrides)
    summary = run_study(part, tmp_path / "slice", executor="submitit-local", workers=2)
    assert len(summary["ran"]) == len(expand(part)) == 7
    assert list((tmp_path / "slice" / "submitit").iterdir())  # the jobs' folders and logs
    inline = run_study(part, tmp_path / "inline")
    assert Path(summary["results"]).read_text() == Path(inline["results"]).read_text()


def test_dry_run_prints_the_grid_and_its_cost(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--dry-run",
                          "--out", str(tmp_path / "s")], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "29 stages, 0 done" in out.stdout and "pretrain" in out.stdout and "FLOPs" in out.stdout
    assert not (tmp_path / "s").exists()  # a dry run writes nothing


def test_report_refuses_a_study_without_finished_runs(tmp_path):
    from lab.common import LabError
    from lab.study.report import run_report

    (tmp_path / "empty").mkdir()
    with pytest.raises(LabError, match="no such file"):
        run_report(tmp_path / "empty")
    (tmp_path / "empty" / "results.csv").write_text("study,group\n")
    with pytest.raises(LabError, match="no finished runs"):
        run_report(tmp_path / "empty")


def test_a_study_folder_keeps_its_recipe(tmp_path):
    import json

    from lab.common import LabError
    from lab.study.recipe import recipe_dict, recipe_from_dict

    recipe = load_recipe(RECIPE)
    study = tmp_path / "s"
    study.mkdir()
    other = recipe_dict(load_recipe(RECIPE, ["seeds=[0]", "pretrain.lr=0.001"]))
    (study / "recipe.json").write_text(json.dumps(other))
    with pytest.raises(LabError, match=r"differs in pretrain\.lr, seeds; use a new --out"):
        run_study(recipe, study)
    assert not (study / "stages").exists()
    # A study recorded before a section existed (here: probe) resumes with its defaults.
    older = recipe_dict(recipe)
    del older["probe"]
    assert recipe_dict(recipe_from_dict(older)) == recipe_dict(recipe)
    older["colour"] = "blue"
    (study / "recipe.json").write_text(json.dumps(older))
    with pytest.raises(LabError, match="a recipe this lab cannot read.*colour: unknown key"):
        run_study(recipe, study)
