"""Every bad input of the CLI: one line `lab: error: ...` on stderr, exit code 2, no traceback,
and no output directory (nor temporary sibling) left behind. The CLI runs as a subprocess on
tiny synthetic corpora."""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The subprocess's working directory: empty, so ./corpora is never found."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def run_lab(args: list[str], cwd: Path, corpora: Path | None, **env_overrides: str
            ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LAB_CORPORA"}
    env["HF_HUB_OFFLINE"] = "1"
    env["COLUMNS"] = "200"
    if corpora is not None:
        env["LAB_CORPORA"] = str(corpora)
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, a single stderr line `lab: error: ...` containing every fragment, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("lab: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert result.stdout.strip() == "", result.stdout
    return line


def assert_nothing_written(out: Path) -> None:
    """Neither `out` nor a temporary sibling of it (out.tmp-*, out.old-*, out.json.*.tmp)."""
    assert not out.exists()
    if out.parent.exists():
        leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(out.name)]
        assert leftovers == []


def inject_args(out: Path, benchmark: str = "codetrans", setting: str = "paired", *extra: str
                ) -> list[str]:
    return ["inject", "--benchmark", benchmark, "--setting", setting, "--seed", "7",
            "--out", out, *extra]


# --- help ----------------------------------------------------------------------------------------

def test_help_lists_the_commands(workdir):
    result = run_lab(["--help"], workdir, None)
    assert result.returncode == 0, result.stderr
    for command in ("inject", "audit", "corpora"):
        assert command in result.stdout
    assert result.stderr == ""


# A hint `use --NAME` in a message; adjacent string literals split over lines read as one.
OPTION_HINT = re.compile(r"\buse\s+(--[a-z][a-z0-9-]*)")
STRING_BREAK = re.compile(r"""["']\s*\n\s*(?:rf|fr|f|r)?["']""")


def lab_commands() -> dict[str, Any]:
    """`lab` command name (`corpora list` for a group's) -> its click command."""
    import typer

    from lab.cli import app

    found, groups = {}, [("", typer.main.get_command(app))]
    while groups:
        prefix, group = groups.pop()
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                groups.append((f"{prefix}{name} ", command))
            else:
                found[prefix + name] = command
    return found


def command_owners(commands: dict[str, Any]) -> dict[str, set[str]]:
    """lab module -> the commands whose function in lab/cli/ (its room's module) imports from
    it or declares its options there (`options_of(Config)`): its hints are read by those
    commands' users."""
    import ast

    owners: dict[str, set[str]] = {}
    for name, command in commands.items():
        room = sys.modules[command.callback.__module__]
        tree = ast.parse(Path(room.__file__).read_text(encoding="utf-8"))
        node = next(node for node in tree.body if isinstance(node, ast.FunctionDef)
                    and node.name == command.callback.__name__)
        modules = {n.module for n in ast.walk(node) if isinstance(n, ast.ImportFrom) and n.module}
        modules |= {getattr(room, d.args[0].id).__module__ for d in node.decorator_list
                    if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "options_of"}
        for module in modules:
            owners.setdefault(module, set()).add(name)
    return owners


def hint_problems(hints: dict[str, list[str]], options: dict[str, set[str]],
                  owners: dict[str, set[str]]) -> list[str]:
    """Each hint of a module a command owns must name one of its options; one of a shared
    module (lab.common, lab.models), an option of some command."""
    problems = []
    for module, names in hints.items():
        readers = owners.get(module) or set(options)
        problems += [f"{module}: `use {name}`, but no `lab {'/'.join(sorted(readers))}` has "
                     f"{name}" for name in names if not any(name in options[c] for c in readers)]
    return problems


def test_every_use_option_hint_names_an_option_of_its_command(monkeypatch):
    import torch

    from lab.study.preflight import check_device

    commands = lab_commands()
    options = {name: {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
               for name, command in commands.items()}
    owners = command_owners(commands)
    root = Path(__file__).resolve().parents[1]
    hints = {}
    for path in sorted((root / "lab").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        found = OPTION_HINT.findall(STRING_BREAK.sub("", path.read_text(encoding="utf-8")))
        if found:
            hints[module] = found
    assert "--select" in hints["lab.train.finetune"] and owners["lab.train.finetune"] == {"finetune"}
    assert hint_problems(hints, options, owners) == []
    # A hint a shared module gives is phrased by its caller: `lab study` has no --device.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    [problem] = check_device("cuda")
    assert problem.endswith("; use --set resources.device=cpu"), problem
    assert "--device" not in options["study"] and "--set" in options["study"]
    # The checks fail where they should: another command's option, or none's.
    assert hint_problems({"lab.train.finetune": ["--device"], "lab.models": ["--nonesuch"]},
                         options, owners) == [
        "lab.train.finetune: `use --device`, but no `lab finetune` has --device",
        f"lab.models: `use --nonesuch`, but no `lab {'/'.join(sorted(options))}` has --nonesuch"]


# --- where the data is ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["inject", "corpora list", "corpora stats codetrans", "audit"])
def test_missing_corpora_directory(workdir, tiny_corpora, command):
    out = workdir / "arm"
    args = {"inject": inject_args(out),
            "audit": ["audit", "--benchmark", "codetrans", "--out", out]}.get(command, command.split())
    result = run_lab([*args, "--corpora", workdir / "nope"], workdir, tiny_corpora)
    assert_one_line_error(result, "--corpora", "nope: no such directory")
    assert_nothing_written(out)


@pytest.mark.parametrize("command", ["inject", "corpora list", "corpora stats csn-java"])
def test_lab_corpora_pointing_at_a_missing_directory(workdir, command):
    out = workdir / "arm"
    args = inject_args(out) if command == "inject" else command.split()
    result = run_lab(args, workdir, workdir / "gone")
    assert_one_line_error(result, f"LAB_CORPORA={workdir / 'gone'}: no such directory")
    assert_nothing_written(out)


def test_nothing_local_offline_says_where_to_put_the_files(workdir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = workdir / "arm"
    result = run_lab(inject_args(out), workdir, empty)
    assert_one_line_error(result, "codetrans split 'test' not found locally", "HF_HUB_OFFLINE=1",
                          "--corpora DIR", "LAB_CORPORA=DIR")
    assert_nothing_written(out)


# --- corrupt data --------------------------------------------------------------------------------

def _csn_shard(root: Path, split: str = "valid") -> Path:
    return root / "codesearchnet-java" / "java" / "final" / "jsonl" / split / f"java_{split}_0.jsonl.gz"


def test_corrupt_json_line_in_a_csn_shard_names_file_and_line(workdir, tiny_corpora):
    shard = _csn_shard(tiny_corpora)
    with gzip.open(shard, "rt", encoding="utf-8") as handle:
        lines = handle.readlines()
    lines[6] = lines[6][:40] + "\n"  # cut inside a string: line 7 is not JSON any more
    with gzip.open(shard, "wt", encoding="utf-8") as handle:
        handle.writelines(lines)
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out), workdir, tiny_corpora),
                          f"{shard}:7:", "corrupt JSON")
    assert_nothing_written(out)
    assert_one_line_error(run_lab(["corpora", "stats", "csn-java"], workdir, tiny_corpora),
                          f"{shard}:7:")


@pytest.mark.parametrize("damage", ["truncated", "not-gzip", "not-utf8"])
def test_unreadable_csn_shard_names_the_file(workdir, tiny_corpora, damage):
    shard = _csn_shard(tiny_corpora, "test")
    if damage == "truncated":
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "not-gzip":
        shard.write_bytes(b'{"code": "void plain() {}"}\n')
    else:
        with gzip.open(shard, "wb") as handle:
            handle.write(b'{"code": "void f() {}"}\n{"code": "\xff\xfe"}\n')
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out), workdir, tiny_corpora), str(shard))
    assert_nothing_written(out)


def test_corrupt_line_in_concode_test_names_file_and_line(workdir, tiny_corpora):
    path = tiny_corpora / "concode" / "test.json"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[4] = '{"nl": "returns the size", "code": \n'
    path.write_text("".join(lines), encoding="utf-8")
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out, "concode", "input-only"), workdir, tiny_corpora),
                          f"{path}:5:", "corrupt JSON")
    assert_nothing_written(out)
    report = workdir / "report"
    assert_one_line_error(
        run_lab(["audit", "--benchmark", "concode", "--split", "test", "--out", report],
                workdir, tiny_corpora), f"{path}:5:")
    assert_nothing_written(report)


def test_codetrans_files_of_unequal_length(workdir, tiny_corpora):
    java = tiny_corpora / "codetrans" / "test.java-cs.txt.java"
    with open(java, "a", encoding="utf-8") as handle:
        handle.write("public void orphan() {}\n")
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out), workdir, tiny_corpora),
                          "test.java-cs.txt.cs: 30 lines", "has 31")
    assert_nothing_written(out)


# --- bad options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, fragments", [
    (["--setting", "sideways"], ["--setting sideways: unknown setting", "paired"]),
    (["--benchmark", "humaneval"], ["unknown dataset 'humaneval'", "codetrans"]),
    (["--benchmark", "csn-java"], ["csn-java: not a benchmark"]),
    (["--split", "final"], ["codetrans: unknown split 'final'"]),
    (["--fraction", "0"], ["--fraction 0.0: must be in (0, 1]"]),
    (["--fraction", "1.5"], ["--fraction 1.5: must be in (0, 1]"]),
    (["--repeat", "0"], ["--repeat 0: must be >= 1"]),
    (["--limit", "0"], ["--limit 0: must be >= 1"]),
    (["--base", "concode"], ["concode is a benchmark, not a pre-training corpus"]),
    (["--seed", "seven"], ["Invalid value for '--seed'"]),
    (["--bogus-option"], ["--bogus-option"]),
    (["--repeat", "1000000000"], ["--repeat 1000000000: at most 10,000 copies of a sample"]),
    (["--doses", "0,1000000000"], ["--doses 0,1000000000: at most 10,000 copies"]),
    (["--doses", "0,99999999999999999999999"], ["at most 10,000 copies"]),
    (["--repeat", "1000000000", "--format", "2"], ["--repeat 1000000000: at most 10,000"]),
    (["--doses", "0,0"], ["--doses 0,0: a dose is listed twice"]),
    (["--doses", "0,-1"], ["--doses 0,-1: doses are whole numbers >= 0"]),
    (["--doses", "0"], ["--doses 0: no level is injected"]),
    (["--doses", "0,x"], ["--doses: 'x' is not a whole number"]),
    (["--doses", "0,2", "--repeat", "3"], ["--doses and --repeat"]),
    (["--doses", "0,2", "--fraction", "0.5"], ["--doses and --fraction"]),
    (["--doses", "0,1,2,3", "--samples", "3", "--setting", "input-only"],
     ["--doses 0,1,2,3: 3 samples", "leave dose"]),
])
def test_bad_inject_options(workdir, tiny_corpora, extra, fragments):
    out = workdir / "arm"
    base = inject_args(out)
    # a repeated option takes its last value, so `extra` overrides the base arguments
    assert_one_line_error(run_lab([*base, *extra], workdir, tiny_corpora), *fragments)
    assert_nothing_written(out)


def test_missing_required_option(workdir, tiny_corpora):
    assert_one_line_error(run_lab(["inject", "--benchmark", "codetrans"], workdir, tiny_corpora),
                          "Missing option")


@pytest.mark.parametrize("extra", [
    ["--setting", "unpaired", "--limit", "5"],   # 60 documents to remove, 5 in the base
    ["--repeat", "20"],                           # 600 documents to remove, 320 in the base
])
def test_more_documents_to_remove_than_the_base_holds(workdir, tiny_corpora, extra):
    out = workdir / "arm"
    assert_one_line_error(run_lab([*inject_args(out), *extra], workdir, tiny_corpora),
                          "documents to remove, but the base corpus holds only")
    assert_nothing_written(out)


def test_limit_larger_than_the_base(workdir, tiny_corpora):
    out = workdir / "arm"
    assert_one_line_error(run_lab([*inject_args(out), "--limit", "100000"], workdir, tiny_corpora),
                          "--limit 100000: the base corpus holds only 320 documents")
    assert_nothing_written(out)


def test_existing_output_needs_force(workdir, tiny_corpora):
    out = workdir / "arm"
    out.mkdir()
    (out / "keep.txt").write_text("previous result\n", encoding="utf-8")
    result = run_lab(inject_args(out), workdir, tiny_corpora)
    assert_one_line_error(result, f"{out}: output directory exists", "--force")
    assert (out / "keep.txt").read_text(encoding="utf-8") == "previous result\n"
    assert sorted(p.name for p in workdir.iterdir()) == ["arm"]

    # --force replaces only a previous lab corpus: this folder is not one, and stays as it was.
    result = run_lab([*inject_args(out), "--force"], workdir, tiny_corpora)
    assert_one_line_error(result, f"{out}: --force refused: not a previous lab-corpus output")
    assert (out / "keep.txt").read_text(encoding="utf-8") == "previous result\n"
    assert sorted(p.name for p in workdir.iterdir()) == ["arm"]

    (out / "keep.txt").unlink()
    out.rmdir()
    assert run_lab(inject_args(out), workdir, tiny_corpora).returncode == 0
    result = run_lab([*inject_args(out, "codetrans", "control"), "--force"], workdir, tiny_corpora)
    assert result.returncode == 0, result.stderr  # a previous lab corpus is replaced
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["setting"] == "control"
    assert sorted(p.name for p in workdir.iterdir()) == ["arm"]


# --- CONCODE test without references -------------------------------------------------------------

@pytest.fixture
def empty_reference_corpora(tiny_corpora: Path) -> Path:
    path = tiny_corpora / "concode" / "test.json"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    path.write_text("".join(json.dumps({"code": "", "nl": r["nl"]}) + "\n" for r in rows),
                    encoding="utf-8")
    return tiny_corpora


@pytest.mark.parametrize("setting", ["output-only", "unpaired", "paired"])
def test_output_side_settings_refuse_empty_concode_references(workdir, empty_reference_corpora,
                                                             setting):
    out = workdir / "arm"
    path = empty_reference_corpora / "concode" / "test.json"
    assert_one_line_error(run_lab(inject_args(out, "concode", setting), workdir,
                                  empty_reference_corpora),
                          f"{path}:", "25 of 25", "empty reference")
    assert_nothing_written(out)


def test_input_only_works_on_empty_concode_references(workdir, empty_reference_corpora):
    out = workdir / "arm"
    result = run_lab(inject_args(out, "concode", "input-only"), workdir, empty_reference_corpora)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["injected_documents"] == 25
    assert sorted(p.name for p in workdir.iterdir()) == ["arm"]


# --- --test-ids ----------------------------------------------------------------------------------

def test_unknown_test_id_names_file_and_line(workdir, tiny_corpora):
    ids = workdir / "ids.txt"
    ids.write_text("codetrans:test:0\n# a comment\n3\n\ncodetrans:test:999\n", encoding="utf-8")
    out = workdir / "arm"
    assert_one_line_error(run_lab([*inject_args(out), "--test-ids", ids], workdir, tiny_corpora),
                          f"--test-ids {ids}:5: unknown sample id 'codetrans:test:999' (ids are "
                          "codetrans:test:N or N")
    assert_nothing_written(out)


def test_missing_test_ids_file(workdir, tiny_corpora):
    out = workdir / "arm"
    assert_one_line_error(
        run_lab([*inject_args(out), "--test-ids", workdir / "none.txt"], workdir, tiny_corpora),
        "--test-ids", "none.txt: no such file")
    assert_nothing_written(out)


# --- audit --against -----------------------------------------------------------------------------

def _write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("kind, fragment", [
    ("empty-dir", "not a lab corpus directory (no manifest.json"),
    ("missing-dir", "no such corpus directory"),
    ("foreign-manifest", "field 'shards' missing"),
    ("bad-json-manifest", "corrupt JSON"),
    ("shards-not-a-list", "field 'shards' must be a list"),
    ("shard-without-file", "field 'shards' must be a list"),
    # A manifest listing shards but no corpus_sha256: refused by verify_corpus, the one corpus
    # reader, before any shard is read (its own tests damage the shards of complete arms).
    ("missing-shard", "field 'corpus_sha256' missing"),
    ("truncated-shard", "field 'corpus_sha256' missing"),
    ("corrupt-shard-line", "field 'corpus_sha256' missing"),
])
def test_audit_against_a_directory_that_is_not_a_lab_corpus(workdir, tiny_corpora, kind, fragment):
    corpus = workdir / "corpus-dir"
    manifest = corpus / "manifest.json"
    shard = corpus / "corpus" / "part-00000.jsonl.gz"
    good = {"shards": [{"file": "corpus/part-00000.jsonl.gz"}]}
    if kind != "missing-dir":
        corpus.mkdir()
    if kind == "foreign-manifest":
        manifest.write_text(json.dumps({"name": "some other tool", "version": 3}), encoding="utf-8")
    elif kind == "bad-json-manifest":
        manifest.write_text("{\n", encoding="utf-8")
    elif kind == "shards-not-a-list":
        manifest.write_text(json.dumps({"shards": 5}), encoding="utf-8")
    elif kind == "shard-without-file":
        manifest.write_text(json.dumps({"shards": [{"documents": 3}]}), encoding="utf-8")
    elif kind in ("missing-shard", "truncated-shard", "corrupt-shard-line"):
        manifest.write_text(json.dumps(good), encoding="utf-8")
    if kind == "truncated-shard":
        _write_gz(shard, b"".join(json.dumps({"id": f"d{i}", "text": f"void m{i}() {{}}"}).encode()
                                  + b"\n" for i in range(200)))
        shard.write_bytes(shard.read_bytes()[:-12])
    elif kind == "corrupt-shard-line":
        _write_gz(shard, b'{"id": "d0", "text": "void m() {}"}\n{"id": "d1", "text": \n')
    report = workdir / "report"
    result = run_lab(["audit", "--benchmark", "codetrans", "--split", "test", "--against", corpus,
                      "--out", report], workdir, tiny_corpora)
    assert_one_line_error(result, fragment)
    assert_nothing_written(report)


def test_audit_output_directory_exists(workdir, tiny_corpora):
    report = workdir / "report"
    report.mkdir()
    result = run_lab(["audit", "--benchmark", "codetrans", "--split", "test", "--out", report],
                     workdir, tiny_corpora)
    assert_one_line_error(result, "output directory exists", "--force")
    assert list(report.iterdir()) == []


@pytest.mark.parametrize("against, fragment", [
    ("humaneval", "unknown dataset 'humaneval'"),
    ("concode", "--against concode: a benchmark needs a split"),
    ("csn-java:final", "csn-java: unknown split 'final'"),
])
def test_audit_against_an_unknown_dataset(workdir, tiny_corpora, against, fragment):
    result = run_lab(["audit", "--benchmark", "codetrans", "--split", "test", "--against", against],
                     workdir, tiny_corpora)
    assert_one_line_error(result, fragment)


@pytest.mark.parametrize("args, fragment", [
    (["audit", "--benchmark", "csn-java"], "--benchmark csn-java: not a benchmark"),
    (["audit", "--benchmark", "codetrans", "--split", "final"], "unknown split 'final'"),
    (["audit", "--benchmark", "concode", "--split", "train"], "concode split 'train' not found locally"),
    (["corpora", "stats", "humaneval"], "unknown dataset 'humaneval'"),
    (["corpora", "verify", "humaneval"], "unknown dataset 'humaneval'"),
    (["corpora", "frobnicate"], "frobnicate"),
])
def test_other_bad_commands(workdir, tiny_corpora, args, fragment):
    assert_one_line_error(run_lab(args, workdir, tiny_corpora), fragment)


# ---- lab stats / lab report on bad study directories ----------------------------------------

STUDY_HEADER = "study,benchmark,task,model,arm,seed,epochs,train_size,stage,group,samples,bleu\n"
STUDY_ROW = "s,codetrans,translation,gpt2,{arm},{seed},0,,x,all,10,{bleu}\n"


def _bad_study(root: Path, damage: str) -> Path:
    """A study directory with one defect; returns the path the error must name."""
    study = root / "study"
    results = study / "results.csv"
    if damage == "missing directory":
        return study
    study.mkdir()
    if damage == "results.csv is a directory":
        results.mkdir()
    elif damage == "unreadable results.csv":
        results.write_text(STUDY_HEADER)
        results.chmod(0)
    elif damage == "missing columns":
        results.write_text("study,model,arm,group,bleu\ns,gpt2,control,all,1\n")
    elif damage == "non-numeric metric":
        results.write_text(STUDY_HEADER + STUDY_ROW.format(arm="control", seed=0, bleu=1.5)
                           + STUDY_ROW.format(arm="paired", seed=0, bleu="n/a"))
    elif damage == "no finished runs":
        results.write_text(STUDY_HEADER)
    return study if damage == "missing directory" else results


@pytest.mark.parametrize("command", ["stats", "report"])
@pytest.mark.parametrize("damage, fragment", [
    ("missing directory", "no such study directory"),
    ("results.csv is a directory", "is a directory"),
    ("unreadable results.csv", "cannot read"),
    ("missing columns", "missing column(s) task, seed, epochs, train_size"),
    ("non-numeric metric", "line 3, column bleu: 'n/a' is not a number"),
    ("no finished runs", "no finished runs"),
])
def test_stats_and_report_on_a_bad_study(workdir, tmp_path, command, damage, fragment):
    if damage == "unreadable results.csv" and os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = _bad_study(tmp_path, damage)
    assert_one_line_error(run_lab([command, tmp_path / "study"], workdir, None), str(path), fragment)
    assert not (tmp_path / "study" / "report").exists()


@pytest.mark.parametrize("args, fragment", [
    (["stats", "--convention", "bayesian"], "--convention 'bayesian'"),
    (["report", "--convention", "bayesian"], "--convention 'bayesian'"),
    (["stats", "--format", "xml"], "--format xml"),
    (["report", "--alpha", "2"], "--alpha 2.0: expected a number in (0, 1)"),
])
def test_stats_and_report_bad_options(workdir, tmp_path, args, fragment):
    study = tmp_path / "study"
    study.mkdir()
    (study / "results.csv").write_text(STUDY_HEADER + STUDY_ROW.format(arm="control", seed=0, bleu=1))
    assert_one_line_error(run_lab([args[0], study, *args[1:]], workdir, None), fragment)


# ---- lab study on bad recipes ----------------------------------------------------------------

GOOD_RECIPE = ("name: t\nbenchmark: codetrans\narms: [control, paired]\nmodels: [gpt2]\n"
               "preset: micro\nseeds: [0, 1]\nfinetune:\n  epochs: [0, 1]\n")


@pytest.mark.parametrize("text, args, fragment", [
    (GOOD_RECIPE + "colour: blue\n", [], "colour: unknown key"),
    (GOOD_RECIPE.replace("seeds: [0, 1]", "seeds: zero"), [], "seeds: expected a list, got 'zero'"),
    (GOOD_RECIPE.replace("seeds: [0, 1]", "seeds: []"), [], "seeds: needs at least one seed"),
    (GOOD_RECIPE.replace("paired]", "pairs]"), [], "arms[1]: unknown arm 'pairs'"),
    (GOOD_RECIPE.replace("epochs: [0, 1]", "epochs: [0, -1]"), [],
     "finetune.epochs[1]: must be >= 0, got -1"),
    (GOOD_RECIPE.replace("seeds: [0, 1]", "seeds: [0, -1]"), [], "seeds[1]: expected int in 0.."),
    (GOOD_RECIPE.replace("name: t", "name: ../../etc"), [], "name: '../../etc': must be a plain "
                                                            "folder name"),
    (GOOD_RECIPE + "seeds: [3]\n", [], "line 9: duplicate key 'seeds'"),
    (GOOD_RECIPE.replace("name: t", "name: &n t") + "benchmark2: *n\n", [],
     "YAML alias *n refused"),
    (GOOD_RECIPE + "pretrain: {epochs: .inf}\n", [], "pretrain.epochs: expected a finite number"),
    (GOOD_RECIPE.replace("[gpt2]", "[roberta]"), [], "0 (direct inference) is defined for GPT-2"),
    (GOOD_RECIPE + "injection:\n  samples: 1001\n", [], "codetrans's test split holds 1000"),
    (GOOD_RECIPE + "arms: [control\n", [], "malformed YAML"),
    (GOOD_RECIPE, ["--set", "finetune.epochs=[0, ten]"], "finetune.epochs[1]: expected int >= 0, "
                                                       "got 'ten'"),
    (GOOD_RECIPE, ["--executor", "cloud"], "--executor cloud: choose from local, slurm"),
    (GOOD_RECIPE, ["--workers", "0"], "--workers 0: must be >= 1"),
])
def test_study_refuses_a_bad_recipe(workdir, tmp_path, text, args, fragment):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    line = assert_one_line_error(run_lab(["study", recipe, "--out", tmp_path / "s", *args],
                                         workdir, None), fragment)
    if not args:
        assert str(recipe) in line  # recipe errors name the file
    assert not (tmp_path / "s").exists()  # nothing written


def test_study_refuses_a_non_utf8_recipe_and_an_alias_bomb_at_once(workdir, tmp_path):
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes(GOOD_RECIPE.replace("name: t", "name: caf\u00e9").encode("latin-1"))
    assert_one_line_error(run_lab(["study", recipe, "--dry-run"], workdir, None),
                          f"{recipe}: not UTF-8 text")
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [" + ",".join(f"*{prev}" for _ in range(9)) + "]")
    recipe.write_text("\n".join(lines) + "\nname: *i\n")
    assert_one_line_error(run_lab(["study", recipe, "--dry-run"], workdir, None),
                          "line 2: YAML alias *a refused")


def test_a_dry_run_refuses_a_placebo_pool_that_does_not_exist(workdir, tmp_path):
    """recipes/paper/base.yaml once suggested codetrans-paper, whose valid split holds 481
    samples disjoint from its 1,000 test samples: lab inject failed, --dry-run did not say so."""
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "paper" / "rq4-paired.yaml"
    study = ["study", recipe, "--out", tmp_path / "s", "--dry-run", "--set"]
    assert_one_line_error(run_lab([*study, "benchmark=codetrans-paper"], workdir, None),
                          f"{recipe}: arms[2]: 'paired-placebo' needs 1000 placebo samples, but "
                          "codetrans-paper valid holds 481 disjoint from its test split: lower "
                          "injection.samples")
    assert not (tmp_path / "s").exists()
    fits = run_lab([*study, "benchmark=codetrans-paper", "--set", "injection.samples=400"],
                   workdir, None)
    # a paper study cannot start on this machine for other reasons (no GPU, the paper subsets
    # not here, disk), which its dry run now refuses with: none of them is the placebo pool
    assert "placebo" not in fits.stderr, fits.stderr


def test_study_refuses_a_missing_recipe_and_a_file_as_study_folder(workdir, tmp_path):
    assert_one_line_error(run_lab(["study", tmp_path / "none.yaml"], workdir, None),
                          "none.yaml: no such recipe file")
    recipe = tmp_path / "ok.yaml"
    recipe.write_text(GOOD_RECIPE)
    (tmp_path / "s").write_text("not a folder")
    assert_one_line_error(run_lab(["study", recipe, "--out", tmp_path / "s"], workdir, None),
                          "exists and is not a study directory")


# --- placebo arms --------------------------------------------------------------------------------

def test_inject_a_placebo_arm(workdir, tiny_corpora):
    out = workdir / "arm"
    result = run_lab(inject_args(out, "codetrans", "paired-placebo", "--fraction", "0.5"), workdir,
                     tiny_corpora)
    assert result.returncode == 0, result.stderr
    assert "placebo_samples" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["setting"] == "paired-placebo" and manifest["injected_ids"] == []
    assert len(manifest["placebo_ids"]) == 15 == manifest["counts"]["injected_documents"]


def test_placebo_pool_too_small(workdir, tiny_corpora):
    out = workdir / "arm"
    # 25 CONCODE test samples, and only the 20 of dev (no train split here) to stand for them.
    assert_one_line_error(run_lab(inject_args(out, "concode", "input-only-placebo"), workdir,
                                  tiny_corpora),
                          "--setting input-only-placebo: 25 placebo samples needed, but concode dev "
                          "holds only 20 samples disjoint from the test split")
    assert_nothing_written(out)


def test_a_placebo_from_a_barred_split_is_a_one_line_error(workdir, tiny_corpora):
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out, "codetrans", "paired-placebo", "--placebo-from",
                                              "valid,test"), workdir, tiny_corpora),
                          "--placebo-from test: a placebo never draws from the test split")
    assert_nothing_written(out)


def test_unknown_setting_lists_the_placebos(workdir, tiny_corpora):
    out = workdir / "arm"
    assert_one_line_error(run_lab(inject_args(out, "codetrans", "paired-placbo"), workdir, tiny_corpora),
                          "--setting paired-placbo: unknown setting", "paired-placebo")
    assert_nothing_written(out)


# --- --force replaces only the command's own previous output (issue 14) ------------------------

def _fake_output(folder: Path, kind: str, name: str = "manifest.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"kind": kind}), encoding="utf-8")
    return folder


def test_evaluate_force_never_deletes_its_model_or_a_folder_holding_it(workdir, tiny_corpora):
    model = _fake_output(workdir / "t" / "runs" / "pt" / "m", "lab-pretrained")
    notes = workdir / "t" / "runs" / "notes.txt"
    notes.write_text("mine\n", encoding="utf-8")
    base = ["evaluate", "--model", "t/runs/pt/m", "--task", "translation", "--force"]
    assert_one_line_error(run_lab([*base, "--out", "t/runs"], workdir, tiny_corpora),
                          "t/runs: contains an input of this command (t/runs/pt/m)")
    assert_one_line_error(run_lab([*base, "--out", "t/runs/pt/m"], workdir, tiny_corpora),
                          "t/runs/pt/m: is an input of this command")
    other = _fake_output(workdir / "t" / "corpus", "lab-corpus")
    assert_one_line_error(run_lab([*base, "--out", "t/corpus"], workdir, tiny_corpora),
                          "t/corpus: --force refused: not a previous lab-evaluation output "
                          "(it holds a lab-corpus output)")
    assert notes.read_text(encoding="utf-8") == "mine\n"
    assert (model / "manifest.json").is_file() and (other / "manifest.json").is_file()


def test_inject_force_refuses_an_unrelated_folder(workdir, tiny_corpora):
    folder = workdir / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    assert_one_line_error(run_lab([*inject_args(folder), "--force"], workdir, tiny_corpora),
                          f"{folder}: --force refused: not a previous lab-corpus output "
                          "(no lab manifest says what it is)")
    assert (folder / "cat.jpg").read_bytes() == b"\xff\xd8"
    # Another command's output is refused too, as is the folder holding the datasets.
    tok = _fake_output(workdir / "tok", "lab-tokenizer")
    assert_one_line_error(run_lab([*inject_args(tok), "--force"], workdir, tiny_corpora),
                          "it holds a lab-tokenizer output")
    assert_one_line_error(run_lab([*inject_args(tiny_corpora.parent), "--force"], workdir,
                                  tiny_corpora), "contains an input of this command")
    assert (tiny_corpora / "concode").is_dir()


def test_tokenizer_force_never_replaces_its_corpus(workdir, tiny_corpora):
    corpus = workdir / "control"
    assert run_lab(inject_args(corpus, "codetrans", "control"), workdir, tiny_corpora).returncode == 0
    before = sorted(p.name for p in corpus.rglob("*"))
    for out in (corpus, workdir):
        assert_one_line_error(run_lab(["tokenizer", "train", "--corpus", corpus, "--out", out,
                                       "--vocab-size", "300", "--force"], workdir, tiny_corpora),
                              f"{out}: ", "an input of this command")
    assert sorted(p.name for p in corpus.rglob("*")) == before


def test_no_output_lies_inside_an_input(workdir, tiny_corpora):
    """The one rule for outputs: never inside an input folder (a corpus, a model, the
    datasets), whatever the command; lab evaluate's and lab probe's default outputs lie beside
    the model."""
    corpus = workdir / "arm"
    assert run_lab(inject_args(corpus, "codetrans", "control"), workdir, tiny_corpora).returncode == 0
    before = sorted(p.name for p in corpus.rglob("*"))
    model = _fake_output(workdir / "pt", "lab-pretrained")
    for args, out in (
            (["pretrain", "--model", "gpt2", "--corpus", corpus, "--tokenizer", model],
             corpus / "corpus" / "x"),
            (["tokenizer", "train", "--corpus", corpus, "--vocab-size", "300"], corpus / "tok"),
            (["evaluate", "--model", model, "--task", "translation"], model / "eval")):
        assert_one_line_error(run_lab([*args, "--out", out], workdir, tiny_corpora),
                              f"{out}: lies inside an input of this command")
    assert sorted(p.name for p in corpus.rglob("*")) == before
    assert sorted(p.name for p in model.iterdir()) == ["manifest.json"]
    from lab.common import beside
    assert beside(Path("runs/pt"), "probe") == Path("runs/pt-probe")
    assert beside(Path("runs/pt/"), "eval-translation-test-greedy") == Path(
        "runs/pt-eval-translation-test-greedy")


def test_baseline_out_replaces_only_its_own_file(workdir, tiny_corpora):
    """lab baseline --out never writes over a dataset file or a file it did not write, and
    needs --force to replace its own."""
    dataset = next(p for p in (tiny_corpora / "codetrans").rglob("*") if p.is_file())
    kept = dataset.read_bytes()
    base = ["baseline", "--task", "translation", "--metrics", "em"]
    assert_one_line_error(run_lab([*base, "--out", dataset, "--force"], workdir, tiny_corpora),
                          f"{dataset}: lies inside an input of this command")
    notes = workdir / "notes.json"
    notes.write_text("{}")
    assert_one_line_error(run_lab([*base, "--out", notes], workdir, tiny_corpora),
                          f"{notes}: output file exists (use --force to replace it)")
    assert_one_line_error(run_lab([*base, "--out", notes, "--force"], workdir, tiny_corpora),
                          f"{notes}: --force refused: not a previous lab-baselines output")
    out = workdir / "baselines.json"
    assert run_lab([*base, "--out", out], workdir, tiny_corpora).returncode == 0
    assert_one_line_error(run_lab([*base, "--out", out], workdir, tiny_corpora), "exists")
    assert run_lab([*base, "--out", out, "--force"], workdir, tiny_corpora).returncode == 0
    assert dataset.read_bytes() == kept and notes.read_text() == "{}"


def test_single_file_outputs_replace_only_their_own_kind(workdir, tiny_corpora):
    records = workdir / "in.jsonl"
    records.write_text(json.dumps({"code": "int a = 1;", "docstring": "one"}) + "\n")
    notes = workdir / "notes.txt"
    notes.write_text("mine\n", encoding="utf-8")
    assert_one_line_error(run_lab(["perturb", records, "--out", notes, "--force"], workdir, None),
                          f"{notes}: --force refused: not a previous lab-perturbation output")
    pred, ref = workdir / "pred.txt", workdir / "ref.txt"
    pred.write_text("a b c\n")
    ref.write_text("a b c\n")
    score = ["score", "--pred", pred, "--ref", ref, "--metrics", "em"]
    assert_one_line_error(run_lab([*score, "--out", notes], workdir, None),
                          f"{notes}: --force refused: not a previous lab-scores output")
    assert_one_line_error(run_lab([*score, "--out", ref], workdir, None),
                          f"{ref}: is an input of this command")
    assert notes.read_text(encoding="utf-8") == "mine\n" and ref.read_text() == "a b c\n"
    out = workdir / "scores.json"
    for _ in range(2):  # a previous score file is replaced
        result = run_lab([*score, "--out", out], workdir, None)
        assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["kind"] == "lab-scores"


def test_audit_force_refuses_an_unrelated_folder(workdir, tiny_corpora):
    folder = workdir / "keep"
    folder.mkdir()
    (folder / "a.txt").write_text("x")
    args = ["audit", "--benchmark", "codetrans", "--split", "test", "--no-near", "--out", folder]
    assert_one_line_error(run_lab([*args, "--force"], workdir, tiny_corpora),
                          "--force refused: not a previous lab-audit output")
    assert (folder / "a.txt").read_text() == "x"
    (folder / "a.txt").unlink()
    folder.rmdir()
    for _ in range(2):
        result = run_lab([*args, "--force"], workdir, tiny_corpora)
        assert result.returncode == 0, result.stderr
    assert json.loads((folder / "summary.json").read_text())["kind"] == "lab-audit"


@pytest.mark.parametrize("option, value, fragment", [
    ("--lr", "inf", "--lr inf: must be a finite number"),
    ("--lr", "nan", "--lr nan: must be a finite number"),
    ("--epochs", "inf", "--epochs inf: must be a finite number"),
    ("--seed", "-1", "--seed -1: must be in 0..4294967295"),
    ("--seed", "4294967296", "--seed 4294967296: must be in 0..4294967295"),
    ("--warmup-steps", "-3", "--warmup-steps -3: must be >= 0"),
    ("--lr-scheduler", "bogus", "--lr-scheduler bogus: choose from linear, cosine"),
    ("--tokenize-tasks", "0", "--tokenize-tasks 0: must be >= 1"),
    ("--max-steps", "-5", "--max-steps -5: must be >= 1 (or -1: no limit)"),
    ("--max-steps", "0", "--max-steps 0: must be >= 1"),
])
def test_pretrain_refuses_impossible_numbers_before_any_work(workdir, option, value, fragment):
    out = workdir / "pt"
    args = ["pretrain", "--model", "gpt2", "--corpus", workdir / "no-corpus", "--tokenizer",
            workdir / "no-tokenizer", "--out", out, option, value]
    assert_one_line_error(run_lab(args, workdir, None), fragment)
    assert_nothing_written(out)


def test_pretrain_force_refuses_a_folder_that_is_not_a_pretrained_model(workdir):
    corpus = _fake_output(workdir / "corpus", "lab-corpus")
    args = ["pretrain", "--model", "gpt2", "--corpus", corpus, "--tokenizer", workdir / "tok",
            "--force"]
    assert_one_line_error(run_lab([*args, "--out", corpus], workdir, None),
                          "is an input of this command")
    assert_one_line_error(run_lab([*args, "--out", workdir], workdir, None),
                          "contains an input of this command")
    assert (corpus / "manifest.json").is_file()


@pytest.mark.parametrize("option, value, fragment", [
    ("--lr", "inf", "--lr inf: must be a finite number"),
    ("--seed", "-1", "--seed -1: must be in 0..4294967295"),
])
def test_finetune_refuses_impossible_numbers_before_any_work(workdir, option, value, fragment):
    args = ["finetune", "--pretrained", workdir / "none", "--task", "translation", "--epochs",
            "1", "--out", workdir / "ft", option, value]
    assert_one_line_error(run_lab(args, workdir, None), fragment)


@pytest.mark.parametrize("extra, fragment", [
    (["--max-new-tokens", "0"], "--max-new-tokens 0: must be >= 1"),
    (["--decoding", "sample", "--top-p", "2"], "--top-p 2.0: must be in (0, 1]"),
    (["--decoding", "sample", "--temperature", "inf"], "--temperature inf: must be a finite"),
    (["--metrics", "bleu,vibes"], "--metrics vibes: unknown metric"),
    (["--ids", "empty-ids.txt"], "--ids empty-ids.txt: no sample ids"),
    (["--ids", "bad-ids.txt"], "--ids bad-ids.txt:2: unknown sample id 'x' (ids are "
                               "codetrans:test:N or N, N from 0 to "),
    (["--ids", "3,17"], "--ids 3,17: no such file (a file of sample ids; ids are "
                        "codetrans:test:N or N"),
    (["--max-samples", "0"], "--max-samples 0: must be >= 1"),
    (["--split", "holdout"], "unknown split 'holdout'"),
])
def test_evaluate_checks_its_options_before_loading_the_weights(workdir, tiny_corpora, extra,
                                                               fragment):
    # The model folder has a manifest but no weights: an option checked after loading them
    # would surface as a weights error instead of naming the option.
    _fake_output(workdir / "ft", "lab-finetuned")
    manifest = json.loads((workdir / "ft" / "manifest.json").read_text())
    (workdir / "ft" / "manifest.json").write_text(json.dumps(
        {**manifest, "architecture": "causal-lm", "task": {"name": "translation"}}))
    (workdir / "empty-ids.txt").write_text("\n# nothing\n")
    (workdir / "bad-ids.txt").write_text("3, codetrans:test:1\nx\n")
    args = ["evaluate", "--model", "ft", "--task", "translation", "--out", "ev", *extra]
    assert_one_line_error(run_lab(args, workdir, tiny_corpora), fragment)
    assert not (workdir / "ev").exists()


def test_llm_eval_refuses_an_infinite_temperature(workdir):
    (workdir / "set.jsonl").write_text('{"code": "int a;"}\n')
    args = ["llm-eval", "--model", "m", "--contaminated", "set.jsonl", "--perturbed", "set.jsonl",
            "--temperature", "inf"]
    assert_one_line_error(run_lab(args, workdir, None), "--temperature inf: must be a finite")


@pytest.mark.parametrize("args, fragment", [
    (["inject", "--benchmark", "codetrans", "--setting", "paired", "--seed", "-1", "--out", "a"],
     "--seed -1: must be in 0..4294967295"),
    (["evaluate", "--model", "m", "--task", "translation", "--seed", "4294967296"],
     "--seed 4294967296: must be in 0..4294967295"),
    (["perturb", "in.jsonl", "--seed", "-5", "--out", "out.jsonl"], "--seed -5: must be in"),
    (["llm-eval", "--model", "m", "--contaminated", "in.jsonl", "--perturbed", "in.jsonl",
      "--seed", "4294967295", "--repetitions", "2"], "the last repetition's seed would exceed"),
])
def test_every_command_checks_its_seed_range(workdir, tiny_corpora, args, fragment):
    # numpy (seeded by transformers.set_seed) takes seeds in 0..2^32-1 only; the check comes
    # before any input is read.
    (workdir / "in.jsonl").write_text('{"code": "int a;"}\n')
    assert_one_line_error(run_lab(args, workdir, tiny_corpora), fragment)


@pytest.mark.parametrize("args, fragment", [
    (["export", "no-such-model", "--out", "x"], "MODEL no-such-model: no such directory"),
    (["export", ".", "--out", "x"], "no manifest.json"),
    (["pretrain", "--model", "gpt2", "--corpus", ".", "--tokenizer", ".", "--out", "pt",
      "--report-to", "tensorbored"], "--report-to tensorbored: unknown target 'tensorbored'"),
])
def test_export_and_report_to_errors_are_one_line(tmp_path, args, fragment):
    result = run_lab(args, tmp_path, None)
    assert_one_line_error(result, fragment)
    assert_nothing_written(tmp_path / "x")
    assert_nothing_written(tmp_path / "pt")


def test_verify_fails_on_a_known_file_whose_bytes_differ(workdir, corpora_root):
    """A file the lab knows by name (corpora/NAME.json) that fails its hash is an error, not
    an "unknown version": a truncated download must not pass."""
    copy = workdir / "corpora" / "codetrans"
    shutil.copytree(corpora_root / "codetrans", copy)
    for path in copy.iterdir():
        path.chmod(0o644)
    result = run_lab(["corpora", "verify", "codetrans", "--corpora", workdir / "corpora"],
                     workdir, None)
    assert result.returncode == 0 and "unknown version" not in result.stdout, result.stdout
    truncated = copy / "test.java-cs.txt.java"
    truncated.write_bytes(truncated.read_bytes()[:1000])
    assert_one_line_error(run_lab(["corpora", "verify", "codetrans", "--corpora",
                                   workdir / "corpora"], workdir, None),
                          f"{truncated}: differs from the published test.java-cs.txt.java")


# --- writes that fail (issue 59 rows 9, 10, 12, 16) ---------------------------------------------

def mount_tmpfs(folder: Path, size: str) -> Path:
    """A small tmpfs at `folder` (unmounted by the caller), or a skip where mounting needs
    privileges this run lacks."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    return folder


def fill(folder: Path, room: int) -> None:
    stat = os.statvfs(folder)
    (folder / "filler").write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - room))


def test_a_failed_write_names_the_file_and_keeps_the_previous_one(tmp_path):
    """A write to a full disk raises OSError(ENOSPC) naming no file: atomic_file names the
    file it was writing, removes its temporary sibling and leaves the previous version."""
    import errno

    from lab.common import atomic_file

    path = tmp_path / "results.json"
    path.write_text("previous\n")
    with pytest.raises(OSError) as failed:
        with atomic_file(path) as handle:
            handle.write(b"x" * 20480)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert path.read_text() == "previous\n"


def _fills_the_disk(target, format=None, **options):
    """savefig (to a path, in place, or to a handle) writes 20,480 bytes of an SVG, then the
    disk is full (issue 59 row 9)."""
    import errno

    svg = (format or Path(str(target)).suffix[1:]) == "svg"
    with contextlib.ExitStack() as stack:
        handle = target if hasattr(target, "write") else stack.enter_context(open(target, "wb"))
        handle.write(b"<svg" + b" " * 20476 if svg else b"\x89PNG")
        if svg:
            handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_figure_cut_short_by_a_full_disk_leaves_no_partial_file(tmp_path):
    from matplotlib.figure import Figure

    from lab.analysis.figure import save_figure

    (tmp_path / "decay-bleu.svg").write_text("<svg>previous</svg>")
    figure = Figure()
    figure.savefig = _fills_the_disk
    with pytest.raises(OSError) as failed:
        save_figure(figure, tmp_path / "decay-bleu")
    assert failed.value.filename == str(tmp_path / "decay-bleu.svg")
    assert "No space left on device" in str(failed.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decay-bleu.png", "decay-bleu.svg"]
    assert (tmp_path / "decay-bleu.svg").read_text() == "<svg>previous</svg>"


def test_report_on_a_nearly_full_disk_names_the_file_and_cuts_none(tmp_path):
    """Issue 59 row 9: `lab report` with room for its first files only."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_report import CONTROL, PAIRED, write_study

    disk = mount_tmpfs(tmp_path / "disk", "400k")
    try:
        study = write_study(disk / "study", {"control": CONTROL, "paired": PAIRED})
        fill(disk, 80 << 10)
        result = run_lab(["report", study], tmp_path, None, MPLBACKEND="Agg")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith(f"lab: error: {study / 'report'}/") and \
            line.endswith(": No space left on device"), line
        for path in (study / "report").iterdir():  # each file whole, no temporary left
            assert ".tmp-" not in path.name, path
            if path.suffix == ".svg":
                assert path.read_text().rstrip().endswith("</svg>"), path
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_write_error_names_the_output_only_for_its_own_writes(tmp_path):
    """write_error: what each writer raises on a full or read-only disk, as one line naming
    the output; an input's (or a cache's) OSError is not the output's."""
    import errno

    from lab.common import LabError, write_error

    out = tmp_path / "pt.partial"
    full = os.strerror(errno.ENOSPC)
    enforce = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    enforce.__context__ = RuntimeError("basic_ios::clear: iostream error")
    cases = [
        (OSError(errno.ENOSPC, full), f"{out}: cannot write ({full})"),
        (OSError(errno.ENOSPC, full, "model/a.bin", None, str(out) + ".tmp-1@h-abcd1234/a.bin"),
         f"{out}: cannot write ({full})"),  # shutil's copies name the source first
        (shutil.Error([("model/a", str(out / "a"), f"[Errno 28] {full}: 'model/a' -> 'x'")]),
         f"{out}: cannot write ({full})"),
        (Exception("Error while serializing: I/O error: No space left on device (os error 28)"),
         f"{out}: cannot write ({full})"),
        (RuntimeError("[enforce fail at inline_container.cc:747] . open file failed with "
                      "strerror: Read-only file system"),
         f"{out}: cannot write (Read-only file system)"),
        (enforce, f"{out}: cannot write (torch.save failed: [enforce fail at"),  # room left here
        (RuntimeError("[enforce fail at inline_container.cc:222] . PytorchStreamReader failed "
                      "reading zip archive: failed finding central directory"), None),  # a read
        (FileNotFoundError(errno.ENOENT, "No such file", "corpus/manifest.json"), None),
        (OSError(errno.EROFS, "Read-only file system", "/cache/tokens/x.tmp-1"), None),
        (LabError("an input's problem"), None),
        (KeyError("x"), None),
    ]
    for exc, expected in cases:
        found = write_error(exc, out)
        if expected is None:
            assert found is None, (exc, found)
        else:
            assert found is not None and str(found).startswith(expected), (exc, found)


def test_torch_save_on_a_full_disk_is_named_no_space_left(tmp_path):
    """Issue 59 row 12's traceback: torch.save's C++ stream error on a real full disk."""
    import torch

    from lab.common import write_error

    disk = mount_tmpfs(tmp_path / "disk", "64k")
    try:
        with pytest.raises(RuntimeError) as failed:
            torch.save(torch.zeros(100_000), disk / "optimizer.pt")
        assert str(write_error(failed.value, disk)) == f"{disk}: cannot write (No space left on device)"
    finally:  # lazily: the failed writer's file stays open until its traceback is collected
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_killed_runs_temporary_siblings_go_and_no_one_elses(tmp_path):
    """Issue 59 row 10: OUT.tmp-PID@HOST-XXXXXXXX of a process that is gone is removed by the
    next run of OUT; a live process's, another machine's and a user's own files stay."""
    import platform

    from lab.common import atomic_output_dir, write_text_atomic

    ended = subprocess.Popen(["true"])
    ended.wait()
    host = platform.node() or "localhost"
    stale = [f"arm.tmp-{ended.pid}@{host}-abcd1234", f"arm.old-{ended.pid}@{host}-x1y2z3w4",
             f"table.md.tmp-{ended.pid}@{host}-abcd1234"]
    kept = [f"arm.tmp-1@{host}-abcd1234", f"arm.tmp-{ended.pid}@elsewhere-abcd1234",
            "arm.tmp-mine", "table.md.tmp-notes"]
    for name in stale + kept:
        (tmp_path / name).mkdir() if name.startswith("arm") else (tmp_path / name).write_text("")
    with atomic_output_dir(tmp_path / "arm") as tmp:
        (tmp / "manifest.json").write_text('{"kind": "lab-corpus"}')
    write_text_atomic(tmp_path / "table.md", "| a |\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["arm", "table.md", *kept])
