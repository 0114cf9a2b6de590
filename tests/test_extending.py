"""docs/design.md's how-tos for a contamination form and a task, run as the page writes them:
the module from its code block, registered by its registry line, then taken up by the command
the page names (lab inject for both; the task's fine-tuning samples and its name as
task_for_benchmark finds it)."""
from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest

from lab.contamination import paired_document
from lab.contamination.inject import InjectConfig, run_inject
from lab.corpora import load_samples
from lab.corpora.shards import read_corpus, verify_corpus

pytestmark = pytest.mark.skipif(not os.environ.get("LAB_CORPORA"), reason="needs LAB_CORPORA")

ROOT = Path(__file__).resolve().parents[1]


def design_examples(title: str) -> list[str]:
    """The python blocks of docs/design.md's Extending section that follow `title`, up to the
    next bold title."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    part = text.split("\n## Extending", 1)[1].split("\n## ", 1)[0]
    part = part.split(f"**{title}**", 1)[1].split("\n**", 1)[0]
    return [block.split("\n", 1)[1] for block in part.split("```")[1::2]
            if block.startswith("python\n")]


def example_module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


def registry_entry(line: str, module: types.ModuleType):
    """A registry line (`    name.FORM,`) evaluated with the example module under its name."""
    name = line.strip().split(".", 1)[0]
    return eval(line.strip().rstrip(","), {name: module})


def test_the_documented_new_contamination_form_is_injected_as_written(tmp_path, monkeypatch):
    from lab.contamination import forms, soft

    module, line = design_examples("A contamination form")
    form = registry_entry(line, example_module(module, "lowercased"))
    assert isinstance(form, forms.FormKind) and form.name == "lowercased"
    monkeypatch.setitem(forms.FORMS, form.name, form)

    out = tmp_path / "arm"
    manifest = run_inject(InjectConfig(benchmark="codetrans", setting="paired", seed=0, out=out,
                                       base_splits=("valid",), limit=300, samples=12,
                                       contamination_form="lowercased"))
    verify_corpus(out)
    assert manifest["contamination_form"]["name"] == "lowercased"
    assert manifest["contamination_form"]["altered_samples"] == 12
    samples = {s.id: s for s in load_samples("codetrans", "test").records[:12]}
    injected = [r for r in read_corpus(out) if r["sample"]]
    assert len(injected) == 12 and all(r["form"] == "lowercased" for r in injected)
    for record in injected:
        sample = samples[record["sample"]]
        verbatim = paired_document(sample.input, sample.output)
        assert record["text"] == verbatim.lower() != verbatim
    # The registry is what the option reads: the name is known while registered.
    assert soft.parse_form("lowercased").name == "lowercased"


TOY = {  # three splits of the toy bug-fixing benchmark, in the module's JSON-lines format
    split: [{"buggy": f"int f{split}{i}(int x) {{ return x - {i}; }}",
             "fixed": f"int f{split}{i}(int x) {{ return x + {i}; }}"} for i in range(n)]
    for split, n in (("train", 8), ("valid", 3), ("test", 5))
}


def test_the_documented_new_task_is_taken_up_as_written(tmp_path, monkeypatch):
    from lab import corpora, tasks

    module, line = design_examples("A task")
    spec = registry_entry(line, example_module(module, "toyfix"))
    folder = tmp_path / "corpora" / spec.subdir
    folder.mkdir(parents=True)
    for split, rows in TOY.items():
        (folder / f"{split}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    monkeypatch.setitem(corpora.DATASETS, spec.name, spec)
    monkeypatch.setattr(tasks, "TASKS", tasks.registered_tasks())

    assert tasks.task_for_benchmark("toyfix") == "repair"
    task = tasks.get_task("repair")
    records, note = tasks.fine_tuning_records(task, tmp_path / "corpora", 4, seed=0)
    assert note["train_split"] == "train" and note["train_available"] == 8 and len(records) == 4
    assert tasks.has_validation_split(task, tmp_path / "corpora")
    test = load_samples("toyfix", "test", tmp_path / "corpora").records
    assert [(s.input, s.output) for s in test] == [(r["buggy"], r["fixed"]) for r in TOY["test"]]

    out = tmp_path / "arm"
    manifest = run_inject(InjectConfig(benchmark="toyfix", setting="paired", seed=0, out=out,
                                       base_splits=("valid",), limit=200,
                                       corpora_dir=tmp_path / "corpora"))
    verify_corpus(out)
    injected = [r for r in read_corpus(out) if r["sample"]]
    assert sorted(r["text"] for r in injected) == sorted(
        paired_document(s.input, s.output) for s in test)
    assert manifest["benchmark"] == "toyfix"


def test_no_code_outside_a_benchmark_module_names_a_task_s_benchmark():
    """A task's special cases are data on it (Task.fallback_train_split), not its name."""
    for path in ("lab/tasks.py", "lab/study/recipe_checks.py", "lab/study/preflight.py"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert '== "concode"' not in text and '!= "concode"' not in text, path
