"""The package's shape: no import circles and no import that runs up the layers
(scripts/architecture.py states the layers and prints the measures)."""
from __future__ import annotations

import importlib.util
import re
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


DESIGN = ROOT / "docs" / "design.md"
LONG_MODULE = 600  # lines; a module longer than this says why in its first lines
LONG_REASON = "longer than 600 lines"  # what those lines say, with the reason after it


def _section(title: str) -> str:
    text = DESIGN.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def design_layout() -> dict[str, str]:
    """docs/design.md's Layout block: each `lab/...` entry -> its description (continuation
    lines joined)."""
    block = _section("Layout").split("```", 2)[1]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        if line[:1].strip():
            current = line.split()[0]
            entries[current] = line[len(current):]
        elif current is not None:
            entries[current] += " " + line.strip()
    return {path: text for path, text in entries.items() if path.startswith("lab/")}


def design_layers() -> list[tuple[str, tuple[str, ...]]]:
    """docs/design.md's Layers list: `N. name: module, module` lines, lowest first."""
    found = re.findall(r"^\d+\. \*\*(.+?)\*\*: (.+?)\.?$", _section("Layers"), re.M)
    return [(name, tuple(m.strip(" `") for m in modules.split(","))) for name, modules in found]


def test_the_design_map_is_the_code(architecture):
    """docs/design.md's Layout names every module and package of lab/ (and, inside a
    package's entry, every module of it) and nothing that is not there; its Layers list is
    scripts/architecture.py's LAYERS, in order."""
    layout = design_layout()
    top = {p.name + "/" if p.is_dir() else p.name for p in (ROOT / "lab").iterdir()
           if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
           or (p.is_dir() and (p / "__init__.py").is_file())}
    assert {path.removeprefix("lab/") for path in layout} == top
    for path, text in layout.items():
        if path.endswith("/"):
            named = set(re.findall(r"\b(\w+\.py)\b", text)) - {"__init__.py", "__main__.py"}
            present = {p.name for p in (ROOT / path).glob("*.py")
                       if p.stem not in ("__init__", "__main__")}
            assert named == present, (path, sorted(named ^ present))
    assert design_layers() == [(name, tuple(prefixes)) for name, prefixes in architecture.LAYERS]


def test_no_module_is_longer_than_600_lines_unless_it_says_why(architecture):
    long = {}
    for module, path in architecture.module_files().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LONG_MODULE and LONG_REASON not in " ".join(lines[:8]).lower():
            long[module] = len(lines)
    assert long == {}, f"split these, or say why in their first lines ('{LONG_REASON}: ...'): {long}"
