"""Every shipped recipe runs end to end: `lab study RECIPE --smoke` on each file under recipes/
(the folder is listed, so a new recipe is covered without touching this test), the paper
recipes included; a recipe that is another's study under another name (a base run alone is
the recipe that includes it) is checked to be so and runs once. Each run is read back: its stages are the real recipe's kinds and swept
values, every declared question keeps its rows, every report table says it is a smoke run,
fine-tunings beside a placebo record its overlap, an arm that injects samples scores some of
them, and `lab merge` refuses the folder."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.common import LabError
from lab.study.grid import evaluated_models, expand
from lab.study.merge import merge_studies
from lab.analysis.questions import power_plan
from lab.study.recipe import load_recipe
from lab.analysis.study_record import BANNER
from lab.study.smoke import smoke_recipe

pytestmark = [pytest.mark.long,
              pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")]
RECIPES = Path(__file__).resolve().parents[1] / "recipes"
# What names a swept value in a stage's labels: the smoke run must keep every one the recipe has.
SWEPT = ("arm", "model", "preset", "epochs", "form", "decontam", "weight_decay", "continued",
         "groups")


def _studies() -> list[Path]:
    """Every recipe under recipes/: the bases others include run too."""
    return sorted(RECIPES.rglob("*.yaml"))


@functools.cache
def _same_study(recipe: Path) -> str:
    """What a recipe's smoke run is a function of: its whole recorded recipe but its name."""
    from lab.study.recipe import recipe_dict

    data = recipe_dict(smoke_recipe(load_recipe(recipe)))
    return json.dumps({k: v for k, v in data.items() if k != "name"}, sort_keys=True)


def _distinct(studies: list[Path]) -> tuple[list[Path], dict[Path, Path]]:
    """The recipes whose smoke runs differ, and each other recipe -> the one it equals but for
    its name (a base run alone as the recipe that includes it: the same stages, questions and
    report), so that CI runs each study once."""
    run: list[Path] = []
    same: dict[Path, Path] = {}
    for recipe in studies:
        twin = next((r for r in run if _same_study(r) == _same_study(recipe)), None)
        if twin is None:
            run.append(recipe)
        else:
            same[recipe] = twin
    return run, same


def _swept(stages: list, ranked: bool = False) -> set[tuple[str, str, str]]:
    """(kind, label, value) of every swept value; `ranked`: fine-tuning epochs as their rank
    among the grid's counts, 0 staying 0 (what the smoke rule makes of them)."""
    counts = sorted({s.labels["epochs"] for s in stages if "epochs" in s.labels} | {0})

    def value(stage, name):
        held = stage.labels[name]
        return counts.index(held) if ranked and name == "epochs" else held

    return {(s.kind, name, str(value(s, name))) for s in stages for name in SWEPT
            if name in s.labels}


def test_a_recipe_not_run_is_the_same_study_as_one_that_is():
    """Every recipe is run, or is a run one's study under another name: same stage keys too."""
    run, same = _distinct(_studies())
    assert set(run) | set(same) == set(_studies()) and len(run) < len(_studies())
    for recipe, twin in same.items():
        assert {s.key for s in expand(smoke_recipe(load_recipe(recipe)))} == \
            {s.key for s in expand(smoke_recipe(load_recipe(twin)))}, (recipe, twin)


def _own_corpora(recipe, tmp_path: Path) -> list[str]:
    """A recipe on the Python track reads a corpus no shared folder holds: this interpreter's
    standard library, extracted here (`lab corpora extract --from stdlib`), is its --corpora
    (searched before LAB_CORPORA, which still gives the rest)."""
    from lab.corpora import csn
    from lab.corpora.extract import ExtractConfig, run_extract

    if recipe.corpus.base != csn.PYTHON_NAME:
        return []
    folder = tmp_path / "corpora"
    run_extract(ExtractConfig(language="python", from_dir=Path("stdlib"),
                              out=folder / csn.PYTHON_SPEC.subdir))
    return ["--corpora", str(folder)]


@pytest.mark.parametrize("recipe", _distinct(_studies())[0],
                         ids=lambda p: str(p.relative_to(RECIPES)))
def test_every_recipe_runs_end_to_end_as_a_smoke_run(recipe, tmp_path):
    real = load_recipe(recipe)
    smoke = smoke_recipe(real)
    shrunk = expand(smoke)
    # Only sizes shrink: every kind of stage, arm, model and swept value of the real grid.
    assert {s.kind for s in shrunk} == {s.kind for s in expand(real)}
    assert _swept(shrunk) == _swept([s for s in expand(real) if s.labels.get("seed") in
                                     smoke.seeds or "seed" not in s.labels], ranked=True)
    out = tmp_path / "smoke"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(recipe), "--smoke",
                           "--out", str(out), "--workers", "1", *_own_corpora(real, tmp_path)],
                          capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"smoke {recipe.relative_to(RECIPES)}: {took:.0f} s, {len(shrunk)} stages")
    assert "smoke run: the recipe's whole shape on toy sizes" in done.stdout
    summary = json.loads((out / "study.json").read_text())
    assert summary["smoke"]["rules"] and len(summary["ran"]) == len(shrunk)
    # Every declared question keeps its rows: as many as the dry run's family, each either
    # tested or saying why not.
    stats = json.loads((out / "report" / "stats.json").read_text())
    assert stats["smoke"] == BANNER
    rows = stats["primary"]["rows"]
    assert len(rows) == len(power_plan(smoke, False, evaluated_models(shrunk))["tests"])
    assert all(r.get("estimate") is not None or r.get("missing") for r in rows)
    # Every table of the report is marked.
    tables = [p for p in (out / "report").iterdir() if p.suffix in (".md", ".csv", ".tex")]
    assert tables and all(BANNER in p.read_text() for p in tables)
    assert BANNER in (out / "report" / "report.html").read_text()
    # A fine-tuning beside a placebo counts the pairs the placebo injected: none, by default.
    for manifest in (out / "stages").glob("finetune-*/manifest.json"):
        data = json.loads(manifest.read_text())["data"]
        if any(a.endswith("-placebo") for a in smoke.arms):
            assert data["placebo_overlap"] == 0, manifest
    # A study that injects samples scores some of them: blocks are seen at the block size (an
    # embedded arm once hid every block past its host's kept tokens, and nothing failed). Per
    # study, not per arm: CONCODE's inputs are longer than a smoke block, so an arm carrying
    # them can have every copy cut, as its real run would at a smaller block size.
    injecting = [json.loads(m.read_text())["groups"]["counts"]
                 for m in (out / "stages").glob("evaluate-*/metrics.json")]
    injecting = [c for c in injecting if c["injected"] + c["injected_truncated"]]
    assert not injecting or any(c["injected"] > 0 for c in injecting), injecting
    with pytest.raises(LabError, match="a smoke study"):
        merge_studies([out], tmp_path / "merged")
