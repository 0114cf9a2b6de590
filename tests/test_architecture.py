"""The package's shape: no import circles and no import that runs up the layers
(scripts/architecture.py states the layers and prints the measures)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def architecture():
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "scripts" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["architecture"]


def test_the_package_has_no_import_circle(architecture):
    found = architecture.measures()
    assert found["circles"] == [], found["circles"]


def test_no_import_runs_up_the_layers(architecture):
    found = architecture.measures()
    assert [f"{a.source}:{a.line} -> {a.target}" for a in found["upward"]] == []


def test_every_module_has_a_layer(architecture):
    for module in architecture.module_files():
        architecture.layer_of(module)


def test_the_checker_finds_a_circle_and_an_upward_import(architecture):
    """The measures can fail: a made-up graph with one circle and one import from the data
    layer up to the study layer."""
    Arrow = architecture.Arrow
    arrows = [Arrow("lab.corpora", "lab.study.runner", 1), Arrow("lab.study.runner", "lab.corpora", 2),
              Arrow("lab.common", "lab.stats", 3)]
    assert architecture.circles(["lab.common", "lab.corpora", "lab.stats", "lab.study.runner"],
                                arrows) == [["lab.corpora", "lab.study.runner"]]
    assert [(a.source, a.target) for a in architecture.upward(arrows)] == [("lab.corpora", "lab.study.runner")]


def test_reading_a_study_sits_between_its_recipe_and_running_it(architecture):
    """Two rooms (issue 71): lab.analysis reads a study and never imports lab.study's running
    modules; both read the recipe's types and the stage grid, which sit below them."""
    layer = architecture.layer_of
    plan = {layer(m) for m in ("lab.study.recipe", "lab.study.grid", "lab.study.stages",
                               "lab.study.evaluate", "lab.analysis.questions")}
    reading = {layer(m) for m in architecture.module_files()
               if m.startswith("lab.analysis") and m != "lab.analysis.questions"}
    running = {layer(m) for m in architecture.module_files() if m.startswith("lab.study")} - plan
    assert len(plan) == len(reading) == len(running) == 1
    assert max(plan) < min(reading) < min(running)
