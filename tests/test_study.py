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
    assert len({s.key for s in stages}) == len(stages)


def test_study_killed_midway_resumes_to_the_same_results(tmp_path):
    recipe = load_recipe(RECIPE)
    reference = run_study(recipe, tmp_path / "whole", progress=lambda _m: None)
    assert len(reference["ran"]) == len(expand(recipe)) == 25
    again = run_study(recipe, tmp_path / "whole", progress=lambda _m: None)
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
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = run_study(recipe, killed, progress=lambda _m: None)
    assert 0 < len(resumed["ran"]) < 25
    assert Path(resumed["results"]).read_text() == Path(reference["results"]).read_text()
    assert Path(resumed["samples"]).read_text() == Path(reference["samples"]).read_text()

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


def test_report_refuses_a_study_without_finished_runs(tmp_path):
    from lab.common import LabError
    from lab.study.report import run_report

    (tmp_path / "empty").mkdir()
    with pytest.raises(LabError, match="no such file"):
        run_report(tmp_path / "empty")
    (tmp_path / "empty" / "results.csv").write_text("study,group\n")
    with pytest.raises(LabError, match="no finished runs"):
        run_report(tmp_path / "empty")
