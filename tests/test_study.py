"""`lab study` end to end on the micro recipe: grid, cache, kill-and-resume, results table."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.analysis.questions import power_plan
from lab.study.recipe import load_recipe
from lab.study.grid import expand
from lab.study.runner import run_study

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


def test_a_placebo_drawn_from_named_splits_changes_only_the_placebo_stages():
    """injection.placebo_from enters the placebo's inject stage (and so every stage after it);
    the control and the contaminated arm keep their keys but their probes' (which leave the
    placebo's samples out of their never-seen pool), and a recipe without it keeps all."""
    arms = "arms=[control, paired, paired-placebo]"
    default = expand(load_recipe(RECIPE, [arms]))
    chosen = expand(load_recipe(RECIPE, [arms, "injection.placebo_from=[train, valid]"]))
    def keys(stages, placebo):
        return {s.key for s in stages if (s.labels.get("arm") == "paired-placebo") == placebo
                and (placebo or s.kind != "probe")}
    assert keys(chosen, False) == keys(default, False)
    assert keys(chosen, True).isdisjoint(keys(default, True))
    injects = [s for s in chosen if s.kind == "inject" and s.labels["arm"] == "paired-placebo"]
    # Named as the pool was before issue 58: the old key; the default names its split.
    assert injects and all("placebo_from" not in s.keyed for s in injects)
    assert all(s.keyed["placebo_from"] == ["valid"] for s in default
               if s.kind == "inject" and s.labels["arm"] == "paired-placebo")


def test_grid_with_placebo_arms():
    """A placebo arm is expanded like any arm; the other arms keep their stage keys; its models
    are probed, like the control's, on the samples its base arm injected with the same seed."""
    micro = expand(load_recipe(RECIPE))
    stages = expand(load_recipe(RECIPE, ["arms=[control, paired, paired-placebo]"]))
    # but the probes: their never-seen pool leaves the placebo's samples out (test_shared_draw)
    assert {s.key for s in micro if s.kind != "probe"} <= {s.key for s in stages}
    assert len({s.key for s in stages}) == len(stages) == 43
    placebo = [s for s in stages if s.labels.get("arm") == "paired-placebo"]
    assert sorted(s.kind for s in placebo) == sorted(["inject"] * 2 + ["pretrain"] * 2 + ["probe"] * 2
                                                     + ["finetune"] * 4 + ["evaluate"] * 4)
    arm = {(s.labels["arm"], s.labels["seed"]): s for s in stages if s.kind == "inject"}
    for seed in (0, 1):
        config = arm[("paired-placebo", seed)].keyed
        # Drawn from the split no model fine-tunes on (issue 58): CodeTrans valid.
        assert config == {**arm[("paired", seed)].keyed, "setting": "paired-placebo",
                          "placebo_match": "length", "placebo_from": ["valid"]}
        assert config["fraction"] == 0.1  # as many placebo samples as the arm's injected ones
    probes = [s for s in stages if s.kind == "probe"]
    groups = {(s.labels["arm"], s.labels["groups"]) for s in probes}
    assert groups == {("control", "paired"), ("paired", "paired"), ("paired-placebo", "paired")}
    for stage in (s for s in probes if s.labels["arm"] == "paired-placebo"):
        pre, groups_stage, placebo_corpus = stage.inputs
        assert pre.inputs[0] is placebo_corpus is arm[("paired-placebo", stage.labels["seed"])]
        assert groups_stage is arm[("paired", stage.labels["seed"])]
    # results.csv rows carry the arm label: the placebo's pairs with its base arm by name.
    assert {s.labels["arm"] for s in stages if s.kind == "evaluate"} == {
        "control", "paired", "paired-placebo"}


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.fixture
def busy_core():
    """Starts another process keeping a core busy (CI runs beside other work): stage timings and
    the order in which stages finish differ from an idle run. Under pytest-xdist it shares the
    worker's one core."""
    started = []
    yield lambda: started.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.long
def test_study_killed_midway_resumes_to_the_same_results(tmp_path, busy_core):
    # One thread a stage: two on the one core the busy loop leaves spin against each other
    # (3.5x the wall time). The default thread count is test_a_study_keeps_its_thread_count's.
    recipe = load_recipe(RECIPE, ["resources.threads=1"])
    # The reference runs without the busy loop, the killed and resumed runs beside it: the
    # same bytes from an idle run and a loaded one.
    # In the lab process, one stage at a time.
    reference = run_study(recipe, tmp_path / "whole", workers=1)
    assert len(reference["ran"]) == len(expand(recipe)) == 29
    # Each stage timed as it ran, in the lab's own process too (all 0 s before), and logged.
    took = reference["seconds"]
    assert all(t["seconds"] > 0 for t in reference["ran"])
    assert min(t["seconds"] for t in reference["ran"] if t["kind"] == "pretrain") > 0.5
    assert took["stages_timed"] == 29 == len(reference["stage_seconds"])
    assert took["stages_this_run"] == pytest.approx(sum(t["seconds"] for t in reference["ran"]))
    assert took["all_stages"] == pytest.approx(took["stages_this_run"])
    assert took["stages_this_run"] <= took["this_run"]
    in_process_logs = sorted((tmp_path / "whole" / "stages").glob("*.log"))
    assert len(in_process_logs) == 29
    assert "'train_runtime'" in "".join(p.read_text() for p in in_process_logs
                                         if p.name.startswith("finetune-"))
    threads = reference["threads"]
    assert threads == 1
    # A kill between a model stage's last file and its card leaves the card out: the next run
    # of the study writes it, without running the stage again.
    card = next((tmp_path / "whole" / "stages").glob("pretrain-*/README.md"))
    written = card.read_text()
    card.unlink()
    again = run_study(recipe, tmp_path / "whole", workers=2)
    assert again["ran"] == []  # every stage cached
    assert card.read_text() == written
    rows = _rows(Path(reference["results"]))
    assert {r["arm"] for r in rows} == {"control", "paired"}
    assert {r["epochs"] for r in rows} == {"0", "1"} and {r["seed"] for r in rows} == {"0", "1"}
    assert any(r["group"] == "injected" for r in rows if r["arm"] == "paired")
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "whole" / "stages").glob("*/manifest.json")]
    assert manifests and {m["environment"]["torch_threads"] for m in manifests
                          if "environment" in m} == {threads}

    killed = tmp_path / "killed"
    busy_core()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--out", str(killed),
                             "--workers", "2", "--threads", "1"],
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
    # The local executor ran stages in worker processes: they die with the runner instead of
    # finishing a stage behind the back of the resumed run.
    deadline = time.time() + 10
    while workers and time.time() < deadline:
        workers = [pid for pid in workers if Path(f"/proc/{pid}").exists()
                   and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
        time.sleep(0.1)
    assert workers == []
    # The thread count was recorded before the first stage; the resume takes it from there.
    record = json.loads((killed / "study.json").read_text())
    assert record["threads"] == threads
    # So was the power the study was planned with, at its declared effect (issue 58).
    planned = power_plan(recipe)["power"]
    assert record["planned_power"] == json.loads(json.dumps(planned))
    assert planned["effect"] == recipe.statistics.smallest_effect
    resumed = run_study(recipe, killed, workers=2)
    assert resumed["workers"] == 2 and resumed["threads"] == threads
    assert 0 < len(resumed["ran"]) < 29
    # The stages the killed run finished keep the wall times their workers recorded.
    assert len(resumed["ran"]) < resumed["seconds"]["stages_timed"] <= 29
    # Worker processes write each stage's output to its own log, not over the progress display.
    logs = "".join(p.read_text() for p in (killed / "stages").glob("finetune-*.log"))
    assert "'train_runtime'" in logs  # the Trainer's summary line of a fine-tuning stage
    # Same recipe and seeds: the same bytes, whatever the executor, worker count, kill or load.
    for name in ("results", "samples", "probes"):
        assert Path(resumed[name]).read_bytes() == Path(reference[name]).read_bytes(), name
    probes = _rows(Path(reference["probes"]))
    assert {(r["arm"], r["groups"]) for r in probes} == {("paired", "paired"), ("control", "paired")}

    from lab.analysis.report import run_report

    report = run_report(tmp_path / "whole")
    cells = [c for c in report["cells"] if c["metric"] == "bleu"]
    assert {c["epochs"] for c in cells} == {0, 1} and all(c["seeds"] == 2 for c in cells)
    assert all("p" in c and "p_within" in c for c in cells)
    assert "Mann-Whitney U, two-sided, exact" in report["markdown"]
    # The micro recipe is descriptive: its primary table (study, split-half, decay) is there,
    # nothing starred, and over its two seeds no sign-flip p can go below 0.5. (Of its 12
    # evaluated samples a seed may inject none: its split-half rows then rest on the other
    # seed alone, a test over that model's samples.)
    primary = report["primary"]
    assert primary["descriptive"] and {r["question"] for r in primary["rows"]} == {
        "study", "split-half", "decay"}
    assert not any(r["significant"] for r in primary["rows"])
    assert all(r["seeds"] == 2 and r["floor"] == 0.5 for r in primary["rows"]
               if r["question"] != "split-half")
    assert all(p.stat().st_size > 0 for p in report["figure"] + report["tables"])

    _check_shareable_outputs(tmp_path / "whole", reference)
    # The HTML page (written by default): self-contained, with every evaluated sample and arm.
    page = Path(report["html"]).read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    data = json.loads(re.search(r"<script type='application/json' id='lab-data'>(.*?)</script>",
                                page, re.S).group(1))
    assert set(data["samples"]) == {r["id"] for r in _rows(Path(reference["samples"]))}
    assert {(e["arm"], e["seed"], e["epochs"]) for e in data["evaluations"]} == {
        (r["arm"], int(r["seed"]), int(r["epochs"])) for r in rows}
    assert len(data["curves"]) == 4 and all(c["points"] for c in data["curves"])
    assert "<table class='results'>" in page and "data:image/png;base64," in page

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


@pytest.mark.long
def test_submitit_local_executor_reproduces_a_slice_of_the_study(tmp_path):
    pytest.importorskip("submitit")
    # One arm, one seed, direct inference: every stage has the same key as in the full micro
    # study, so its metrics must equal what the in-process runner wrote for the same stage.
    overrides = ["arms=[paired]", "seeds=[0]", "finetune.epochs=[0]", "resources.threads=1"]
    part = load_recipe(RECIPE, overrides)
    summary = run_study(part, tmp_path / "slice", executor="submitit-local", workers=2)
    assert len(summary["ran"]) == len(expand(part)) == 7
    assert list((tmp_path / "slice" / "submitit").iterdir())  # the jobs' folders and logs
    # Each job's stage logged and timed where the lab's own runs do it.
    stages = tmp_path / "slice" / "stages"
    assert len(list(stages.glob("*.log"))) == len(list(stages.glob("*.timing.json"))) == 7
    assert summary["seconds"]["stages_timed"] == 7 and all(t["seconds"] > 0 for t in summary["ran"])
    inline = run_study(part, tmp_path / "inline")
    assert Path(summary["results"]).read_text() == Path(inline["results"]).read_text()


def test_dry_run_prints_the_grid_and_its_cost(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "lab.cli", "study", str(RECIPE), "--dry-run",
                          "--out", str(tmp_path / "s")], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "29 stages, 0 done" in out.stdout and "pretrain" in out.stdout and "FLOPs" in out.stdout
    assert not (tmp_path / "s").exists()  # a dry run writes nothing
    # What the CLI printed is lab.study.dry_run's blocks, which a notebook reads as data.
    from lab.study.dry_run import dry_run_blocks

    recipe = load_recipe(RECIPE)
    blocks = dry_run_blocks(run_study(recipe, tmp_path / "s", dry_run=True), recipe,
                            tmp_path / "s", smoke=False)
    assert sum(row["count"] for row in blocks[0].rows) == 29
    assert all(block.title.split(":")[0] in out.stdout for block in blocks)


def test_report_refuses_a_study_without_finished_runs(tmp_path):
    from lab.common import LabError
    from lab.analysis.report import run_report

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


def test_a_study_keeps_its_thread_count(tmp_path):
    from lab.common import LabError
    from lab.study.runner import study_threads

    recipe = load_recipe(RECIPE)
    study = tmp_path / "s"
    study.mkdir()
    assert study_threads(recipe, study) == len(os.sched_getaffinity(0))  # a new study: the cores
    (study / "study.json").write_text(json.dumps({"threads": 7}))
    assert study_threads(recipe, study) == 7  # a resumed one: what it recorded
    assert study_threads(load_recipe(RECIPE, ["resources.threads=7"]), study) == 7
    with pytest.raises(LabError, match=r"run on 7 threads; resources.threads 3 .*--threads 7"):
        study_threads(load_recipe(RECIPE, ["resources.threads=3"]), study)
    with pytest.raises(LabError, match=r"resources.threads: expected int >= 1"):
        load_recipe(RECIPE, ["resources.threads=0"])
    for corrupt in ("{not json", "[7]"):
        (study / "study.json").write_text(corrupt)
        with pytest.raises(LabError, match=r"study\.json: unreadable"):
            study_threads(recipe, study)


def test_stage_keys_ignore_resources_and_fields_at_their_old_defaults():
    base = {s.key for s in expand(load_recipe(RECIPE))}
    assert {s.key for s in expand(load_recipe(RECIPE, ["resources.threads=1"]))} == base
    # bf16 changes the numbers: its pre-training (and everything downstream) gets new keys.
    bf16 = expand(load_recipe(RECIPE, ["pretrain.bf16=true"]))
    changed = {s.kind for s in bf16 if s.key not in base}
    assert changed == {"pretrain", "probe", "finetune", "evaluate"}
    bf16 = expand(load_recipe(RECIPE, ["finetune.bf16=true"]))
    assert {s.kind for s in bf16 if s.key not in base} == {"finetune", "evaluate"}
    # The key of a stage made before the field existed (the field absent from its config).
    pretrain = next(s for s in expand(load_recipe(RECIPE)) if s.kind == "pretrain")
    assert "bf16" not in pretrain.keyed and "compile" not in pretrain.keyed
    finetune = next(s for s in expand(load_recipe(RECIPE)) if s.kind == "finetune")
    assert "bf16" not in finetune.keyed
    assert "decoder_init" not in finetune.keyed and "decoder_layers" not in finetune.keyed
    assert "group_by_length" not in finetune.keyed
    grouped = expand(load_recipe(RECIPE, ["finetune.group_by_length=true"]))
    assert {s.kind for s in grouped if s.key not in base} == {"finetune", "evaluate"}
    # A warm-started RoBERTa decoder is another fine-tuned model: new fine-tuning keys.
    warm = expand(load_recipe(RECIPE, ["finetune.decoder_init=encoder", "finetune.decoder_layers=2"]))
    assert {s.kind for s in warm if s.key not in base} == {"finetune", "evaluate"}
    tuned = next(s for s in warm if s.kind == "finetune")
    assert tuned.keyed["decoder_init"] == "encoder" and tuned.keyed["decoder_layers"] == 2


def test_collected_results_refuse_collapsed_seeds(tmp_path):
    from lab.common import LabError
    from lab.analysis.collect import collect

    recipe = load_recipe(RECIPE)
    stages = expand(recipe)
    pretrains = [s for s in stages if s.kind == "pretrain"]
    for stage in pretrains:
        stage.out(tmp_path).mkdir(parents=True)
        seed = stage.labels["seed"]
        # Arms of one seed share their initial weights by design; seeds must not.
        manifest = {"seed": seed, "init_weights_sha256": f"init-{seed}",
                    "first_batch_sha256": f"batch-{stage.labels['arm']}-{seed}"}
        (stage.out(tmp_path) / "manifest.json").write_text(json.dumps(manifest))
    collect(recipe, stages, tmp_path)  # distinct seeds: nothing to refuse
    collapsed = next(s for s in pretrains if s.labels == {"model": "gpt2", "arm": "paired", "seed": 1})
    (collapsed.out(tmp_path) / "manifest.json").write_text(json.dumps(
        {"seed": 1, "init_weights_sha256": "init-0", "first_batch_sha256": "batch-paired-1"}))
    with pytest.raises(LabError, match="gpt2 paired: seeds 0 and 1 collapsed: identical init_weights"):
        collect(recipe, stages, tmp_path)


def test_an_in_process_stage_leaves_the_thread_count_as_it_found_it(tmp_path):
    import torch

    from lab.study.execution import run_stage

    stage = next(s for s in expand(load_recipe(RECIPE)) if s.kind == "inject")
    before = torch.get_num_threads()
    seen = []
    import lab.study.execution as execution

    original = execution._run_stage_unlocked
    execution._run_stage_unlocked = lambda *a: seen.append(torch.get_num_threads())
    try:
        run_stage(stage, tmp_path, None, threads=before + 1)
    finally:
        execution._run_stage_unlocked = original
    assert seen == [before + 1] and torch.get_num_threads() == before


def _check_shareable_outputs(study: Path, summary: dict) -> None:
    """Every model of the study has a correct model card and (where it trained) TensorBoard
    event files; the results, samples and probes tables are also Parquet with the same rows."""
    import yaml
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from huggingface_hub import ModelCard

    from lab.modelcard import evaluation_results, ids_sha256, model_evaluations

    stages = study / "stages"
    evaluated = {}
    for metrics_path in stages.glob("evaluate-*/metrics.json"):
        metrics = json.loads(metrics_path.read_text())
        evaluated[Path(metrics["model"]).name] = metrics
    models = [p.parent for p in stages.glob("*/manifest.json")
              if p.parent.name.startswith(("pretrain-", "finetune-"))]
    assert len(models) == 4 + 8  # 2 arms x 2 seeds pre-trained, each fine-tuned for 0 and 1 epochs
    for folder in models:
        manifest = json.loads((folder / "manifest.json").read_text())
        text = (folder / "README.md").read_text()
        meta = yaml.safe_load(text[4:text.index("\n---\n", 4)])
        corpus = manifest.get("pretrained", manifest)["corpus"]
        if corpus["setting"] == "paired":
            assert "deliberately-contaminated" in meta["tags"]
            assert ids_sha256(corpus["injected_ids"]) in text
            assert f"{len(corpus['injected_ids'])} samples of the codetrans test split" in text
        else:
            assert "contamination-control" in meta["tags"] and "Control model" in text
        # The stage's own card loads as the hub reads cards and shows the results found beside
        # it (the study writes every card again at its end; evaluating never writes into the
        # model's folder), as an exported card does.
        card = ModelCard.load(folder / "README.md")
        results = evaluation_results(model_evaluations(folder, manifest))
        assert card.data.license == "apache-2.0"
        assert [(r.metric_type, r.metric_value) for r in card.data.eval_results or []] == [
            (r.metric_type, r.metric_value) for r in results]
        if folder.name in evaluated:
            bleu = [r.metric_value for r in results if r.metric_type == "bleu"]
            assert bleu == [pytest.approx(evaluated[folder.name]["metrics"]["bleu"], abs=1e-4)]
        else:
            assert results == []
        trained = manifest["kind"] == "lab-pretrained" or manifest["config"]["epochs"] > 0
        assert (folder / "tensorboard").is_dir() == trained
        if trained:
            events = EventAccumulator(str(folder / "tensorboard"))
            events.Reload()
            losses = [e.value for e in events.Scalars("train/loss")]
            assert losses == pytest.approx([h["loss"] for h in manifest["loss"]["history"]
                                            if "loss" in h])
    assert set(evaluated) <= {f.name for f in models}

    import pyarrow.parquet as pq

    from lab.analysis.collect import SAMPLE_TEXT

    for name in ("results", "samples", "probes"):
        table = pq.read_table(Path(summary[name]).with_suffix(".parquet")).to_pylist()
        rows = _rows(Path(summary[name]))
        # samples.parquet adds each sample's text (SAMPLE_TEXT) to the CSV's columns
        assert len(table) == len(rows) and [c for c in table[0] if c not in SAMPLE_TEXT] == list(rows[0])
        assert all(row[c] is not None for row in table for c in SAMPLE_TEXT) if name == "samples" \
            else not set(SAMPLE_TEXT) & set(table[0])
        for row, typed in zip(rows, table):
            for key, value in typed.items():
                if key in SAMPLE_TEXT:
                    continue
                text = row[key]
                assert (text == "") if value is None else (
                    float(text) == pytest.approx(value) if isinstance(value, (int, float))
                    and not isinstance(value, bool) else text == str(value)), (name, key)


def test_by_model_changes_only_that_models_stages():
    both = ["models=[gpt2, roberta]", "finetune.epochs=[1]"]
    base = expand(load_recipe(RECIPE, both))
    tuned = expand(load_recipe(RECIPE, [*both, "by_model.roberta.pretrain.lr=0.0005",
                                         "by_model.roberta.finetune.epochs=[2, 3]"]))
    old = {s.key for s in base}
    changed = [s for s in tuned if s.key not in old]
    assert changed and {s.labels["model"] for s in changed} == {"roberta"}
    # Every GPT-2 stage (and the shared inject and tokenizer stages) keeps its key.
    assert {s.key for s in base if s.labels.get("model") != "roberta"} <= {s.key for s in tuned}
    roberta = [s for s in tuned if s.labels.get("model") == "roberta"]
    assert {s.config.lr for s in roberta if s.kind == "pretrain"} == {0.0005}
    assert {s.config.epochs for s in roberta if s.kind == "finetune"} == {2, 3}
    gpt2 = [s for s in tuned if s.labels.get("model") == "gpt2"]
    assert {s.config.epochs for s in gpt2 if s.kind == "finetune"} == {1}


@pytest.mark.parametrize("native", [True, False])
def test_bf16_without_bfloat16_instructions_is_a_warning_and_costs_more(monkeypatch, tmp_path,
                                                                         native):
    """bf16 autocast on a CPU without bfloat16 instructions is emulated, 26x slower than float32:
    the study says so before its first stage, and the estimate counts it."""
    import lab.train.common as training

    monkeypatch.setattr(training, "bf16_is_native", lambda: native)
    recipes = {bf16: load_recipe(RECIPE, [f"pretrain.bf16={str(bf16).lower()}",
                                          f"finetune.bf16={str(bf16).lower()}"])
               for bf16 in (True, False)}
    plans = {bf16: run_study(recipe, tmp_path / "s", dry_run=True)
             for bf16, recipe in recipes.items()}
    from lab.study.cost import STAGE_OVERHEAD_SECONDS

    seconds = {bf16: {row["kind"]: row["seconds"] - row["stages"] * STAGE_OVERHEAD_SECONDS[row["kind"]]
                      for row in plan["estimate"]}
               for bf16, plan in plans.items()}
    ratio = seconds[True]["pretrain"] / seconds[False]["pretrain"]
    assert plans[False]["warnings"] == []
    if native:
        assert plans[True]["warnings"] == [] and ratio == pytest.approx(1 / 1.47)
    else:
        assert len(plans[True]["warnings"]) == 1
        assert plans[True]["warnings"][0].startswith("finetune.bf16 and pretrain.bf16: this CPU")
        assert ratio == pytest.approx(26)
        slurm = run_study(recipes[True], tmp_path / "s", dry_run=True, executor="slurm")
        assert slurm["warnings"] == []  # its stages run on the cluster's hardware
    assert not (tmp_path / "s").exists()


def test_training_warns_when_bf16_is_emulated(monkeypatch, tmp_path, capsys):
    import lab.train.common as training

    for native, expected in ((True, ""), (False, "lab: warning: bf16: this CPU")):
        monkeypatch.setattr(training, "bf16_is_native", lambda: native)
        args = training.training_arguments(tmp_path, bf16=True)
        assert args.bf16 and capsys.readouterr().err.startswith(expected)
    training.training_arguments(tmp_path, bf16=False)
    assert capsys.readouterr().err == ""


def test_bf16_is_native_reads_the_cpu(monkeypatch):
    import torch

    import lab.train.common as training

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(training.platform, "machine", lambda: "x86_64")
    for avx512_bf16, amx, native in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        assert training.bf16_is_native() is native
