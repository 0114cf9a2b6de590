"""`lab stats` / `lab report` on synthetic study directories (results.csv, samples.csv written
by hand in the layout of lab.study.runner.collect): no training needed."""
from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lab.common import LabError
from lab.study.report import run_report, run_stats, study_stats
from lab.study.stats import seeds_needed

CONTROL = [1.0, 2.0, 3.0, 4.0, 4.5]   # five seeds a side, completely separated
PAIRED = [5.0, 6.0, 7.0, 8.0, 9.0]
LABELS = ["study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size", "stage"]


def write_study(root: Path, arms: dict[str, list[float]], epochs: tuple[int, ...] = (0, 1),
                split_half: tuple[str, ...] = ("paired",), samples_per_group: int = 20) -> Path:
    """A study directory: per arm, seed and epochs one 'all' row (bleu = the given value minus
    the epochs, em = half of it), and for split-half arms injected/held-out rows and per-sample
    scores (injected samples score about 10 higher)."""
    rng = random.Random(0)
    root.mkdir(parents=True)
    results, samples = [], []
    for arm, values in arms.items():
        for seed, value in enumerate(values):
            for epoch in epochs:
                base = dict(zip(LABELS, ["s", "codetrans", "translation", "gpt2", arm, seed, epoch,
                                         "", f"evaluate-{arm}-{seed}-{epoch}"]))
                bleu = value - epoch
                base.update(injected_token_fraction=0.0 if arm == "control" else 0.25 + seed / 100,
                            pretrain_loss=2.0)
                results.append({**base, "group": "all", "samples": 2 * samples_per_group,
                                "bleu": bleu, "em": bleu / 2})
                if arm not in split_half:
                    continue
                for group, shift in (("injected", 10.0), ("held_out", 0.0)):
                    scores = [max(0.0, rng.gauss(bleu + shift, 4.0)) for _ in range(samples_per_group)]
                    # A corpus-level metric is not the mean of per-sample scores: offset it.
                    results.append({**base, "group": group, "samples": samples_per_group,
                                    "bleu": sum(scores) / len(scores) + 0.5, "em": 0.0})
                    samples += [{**base, "id": f"{group}-{i}", "group": group, "score_bleu": s,
                                 "score_em": float(s > bleu + 5)} for i, s in enumerate(scores)]
    for name, rows in (("results.csv", results), ("samples.csv", samples)):
        if rows:
            with open(root / name, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    return root


def _cell(cells, arm="paired", metric="bleu", epochs=0):
    [cell] = [c for c in cells if (c["arm"], c["metric"], c["epochs"]) == (arm, metric, epochs)]
    return cell


@pytest.mark.parametrize("convention, expected", [
    ("replication-package", 0.003968),  # greater, exact: 1 / C(10, 5)
    ("exact-two-sided", 0.007937),      # the lab's default: 2 / C(10, 5)
    ("study-tables", 0.01219),          # the published tables: two-sided, normal approximation
])
def test_run_stats_reproduces_each_convention(tmp_path, convention, expected):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    result = run_stats(study, convention)
    cell = _cell(result["cells"])
    assert cell["p"] == pytest.approx(expected, rel=1e-3)
    assert convention in result["title"] and convention in result["note"]
    # Four compared cells (2 metrics x 2 epochs), all with the same p: Holm multiplies by 4.
    assert cell["p_holm"] == pytest.approx(min(1.0, 4 * cell["p"]))
    assert f"{expected:.4g}" in result["md"] and convention in result["md"]
    saved = json.loads((study / "report" / "stats.json").read_text())
    assert saved["convention"] == convention and saved["cells"] == json.loads(
        json.dumps(result["cells"]))


def test_every_arm_effect_sizes_power_and_the_within_model_test(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    cells = run_stats(study, "replication-package")["cells"]
    control, paired = _cell(cells, "control"), _cell(cells)
    # Mean over the seeds' runs (0.25 + seed / 100 for seeds 0-4), as read from results.csv.
    assert paired["injected_token_fraction"] == pytest.approx(0.27)
    assert control["injected_token_fraction"] == 0.0 and paired["pretrain_loss"] == 2.0
    assert control["seeds"] == 5 and control["mean"] == pytest.approx(2.9)
    assert "p" not in control and "injected" not in control
    assert paired["mean"] == pytest.approx(7.0) and paired["control"] == pytest.approx(2.9)
    assert paired["cliffs_delta"] == 1.0 and paired["a12"] == 1.0 and paired["u"] == 25
    assert paired["lift_ci_low"] > 0 and paired["lift"] == pytest.approx(4.1)
    pooled = ((paired["std"] ** 2 + control["std"] ** 2) / 2) ** 0.5
    assert paired["seeds_for_power"] == seeds_needed(4.1, pooled, alternative="greater")
    assert paired["injected"] > paired["held_out"] + 5 and paired["p_within"] < 1e-6
    # The columns show the groups' corpus-level metric (results.csv), the test uses samples.
    assert paired["injected"] == pytest.approx(paired["injected_sample_mean"] + 0.5)
    assert paired["held_out"] == pytest.approx(paired["held_out_sample_mean"] + 0.5)
    assert paired["injected_samples"] == paired["held_out_samples"] == 100  # 5 seeds x 20
    assert paired["samples_for_power"] >= 2


def test_report_without_a_control_arm(tmp_path):
    # The quickstart's shape: one split-half arm, one seed.
    study = write_study(tmp_path / "q", {"paired": [30.0]}, epochs=(0, 1, 3))
    report = run_report(study)
    cell = _cell(report["cells"])
    assert "p" not in cell and "control" not in cell and cell["std"] is None
    assert cell["p_within"] < 0.05
    # Without a control arm the table drops the columns it cannot fill (the CSV keeps them).
    header = report["markdown"].splitlines()[0]
    assert header == ("| model | task | metric | epochs | arm | injected tokens | experimental | "
                      "injected | held-out | p (within) |")
    row = next(line for line in report["markdown"].splitlines() if "| 0 | paired |" in line)
    assert row.split(" | ")[5:7] == ["25.0%", "30.00"]  # the injected share is in every row
    csv_header = (study / "report" / "table.csv").read_text().splitlines()[0]
    assert "control" in csv_header and "p (Holm)" in csv_header
    assert (study / "report" / "table.tex").read_text().startswith("\\begin{tabular}{lllrlrrrrr}")
    assert all(p.stat().st_size > 0 for p in report["figure"] + report["tables"])
    stats = run_stats(study)
    assert [c["arm"] for c in stats["cells"]] == ["paired"] * 6  # 2 metrics x 3 epochs


def test_report_with_a_control_and_a_split_half_arm(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 1 for v in PAIRED]})
    report = run_report(study, "replication-package")
    assert {c["arm"] for c in report["cells"]} == {"paired", "input-only"}
    assert "injected" not in _cell(report["cells"], "input-only")
    assert "seeds for 80% power" in report["markdown"]
    assert report["figure"][0].name == "decay-bleu.png" and report["figure"][0].stat().st_size > 0


def test_convention_and_alpha_come_from_the_recipe_and_mark_significance(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 6 for v in CONTROL]})
    (study / "recipe.json").write_text(json.dumps(
        {"statistics": {"convention": "replication-package", "alpha": 0.001}}))
    result = run_stats(study)
    paired, lower = _cell(result["cells"]), _cell(result["cells"], "input-only")
    assert paired["convention"] == "replication-package" and paired["alpha"] == 0.001
    assert paired["p"] == pytest.approx(0.003968, rel=1e-3)
    row = next(r for r in result["rows"] if r[5] == "paired" and r[2] == "bleu" and r[3] == "0")
    assert "0.003968" in row and "0.003968*" not in row  # above alpha = 0.001: no star
    assert "alpha = 0.001" in result["note"]
    # Given alpha and convention override the recipe; a significant drop is named as such.
    result = run_stats(study, "exact-two-sided", alpha=0.05)
    rows = {(r[5], r[2], r[3]): r for r in result["rows"]}
    assert "0.007937*" in rows[("paired", "bleu", "0")]
    # Both means are below the score floor there: flagged too.
    assert "0.007937* (lower) †" in rows[("input-only", "bleu", "0")]
    (study / "recipe.json").write_text("{not json")
    with pytest.raises(LabError, match="recipe.json: unreadable"):
        run_stats(study)
    with pytest.raises(LabError, match="alpha 2.0"):
        run_stats(study, "exact-two-sided", alpha=2.0)


def test_unknown_metric_and_convention(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    with pytest.raises(LabError, match="metric 'codebleu'.*bleu, em"):
        run_report(study, metric="codebleu")
    assert not (study / "report").exists()
    with pytest.raises(LabError, match="convention 'bayesian'"):
        study_stats(study, "bayesian")


@pytest.mark.parametrize("text, fragment", [
    ("model,arm,group,bleu\ngpt2,control,all,1\n", "missing column(s) task, seed, epochs, train_size"),
    ("model,task,arm,seed,epochs,train_size,group,bleu\ngpt2,t,control,0,0,,all,1\n"
     "gpt2,t,control,1,0,,all,high\n", "line 3, column bleu: 'high' is not a number"),
    ("model,task,arm,seed,epochs,train_size,group,bleu\ngpt2,t,control,0,one,,all,1\n",
     "line 2, column epochs"),
    ("model,task,arm,seed,epochs,train_size,group,bleu\ngpt2,t,control,0\n", "line 2: expected 8"),
    ("model,task,arm,seed,epochs,train_size,group,bleu\n", "no finished runs"),
    ("model,task,arm,seed,epochs,train_size,group\ngpt2,t,control,0,0,,all\n", "no metric columns"),
])
def test_corrupt_results_name_the_file_and_place(tmp_path, text, fragment):
    (tmp_path / "results.csv").write_text(text)
    with pytest.raises(LabError) as error:
        run_stats(tmp_path)
    assert str(tmp_path / "results.csv") in str(error.value) and fragment in str(error.value)
    assert not (tmp_path / "report").exists()  # nothing written on bad input


def test_corrupt_samples_name_the_file(tmp_path):
    study = write_study(tmp_path / "s", {"paired": [30.0]})
    lines = (study / "samples.csv").read_text().splitlines()
    lines[4] = lines[4].rsplit(",", 1)[0] + ",oops"
    (study / "samples.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(LabError, match=r"samples\.csv: line 5, column score_em: 'oops'"):
        run_stats(study)


def test_lab_stats_command(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    out = subprocess.run([sys.executable, "-m", "lab.cli", "stats", str(study), "--convention",
                          "replication-package", "--format", "md"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "0.003968" in out.stdout and "Mann-Whitney U, greater, exact" in out.stdout
    assert "seeds for 80% power" in out.stdout and str(study / "report" / "stats.json") in out.stdout
    table = subprocess.run([sys.executable, "-m", "lab.cli", "stats", str(study)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "exact-two-sided" in table.stdout, table.stderr


def _write_probes(study: Path, rows: list[dict]) -> None:
    columns = ["study", "benchmark", "model", "arm", "seed", "groups", "form", "stage", "id",
               "group", "tokens", "loss", "min_k", "infill", "extraction_em", "extraction_bleu"]
    with open(study / "probes.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)


def test_memorised_column_from_the_probes(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 1 for v in PAIRED]})
    rng = random.Random(1)
    rows = []
    for seed in range(5):
        for i in range(20):
            sample = f"codetrans:test:{i}"
            half = "injected" if i < 10 else "held_out"
            common = {"model": "gpt2", "seed": seed, "id": sample}
            # paired (split-half): injected samples have a far lower loss than held-out ones.
            rows.append({**common, "arm": "paired", "groups": "paired", "group": half,
                         "loss": rng.gauss(1.0 if half == "injected" else 4.0, 0.3)})
            # the control on the paired arm's split: both halves alike (never seen).
            rows.append({**common, "arm": "control", "groups": "paired", "group": half,
                         "loss": rng.gauss(4.0, 0.3)})
            # input-only injected every sample: compared with the control on the same ones,
            # no lower than the control's loss (not memorised).
            rows.append({**common, "arm": "input-only", "groups": "input-only", "group": "injected",
                         "loss": rng.gauss(4.0, 0.3)})
            rows.append({**common, "arm": "control", "groups": "input-only", "group": "injected",
                         "loss": rng.gauss(4.0, 0.3)})
    _write_probes(study, rows)
    cells = run_stats(study)["cells"]
    paired, control = _cell(cells), _cell(cells, "control")
    lone = _cell(cells, "input-only")
    assert paired["memorised"] and paired["memorised_auc"] > 0.99
    assert paired["memorised_by"] == "injected vs held-out"
    assert not control["memorised"] and 0.35 < control["memorised_auc"] < 0.65
    assert not lone["memorised"] and lone["memorised_by"] == "vs the control's loss"
    report = run_report(study)
    assert "memorised? (AUC)" in report["markdown"] and "yes (1.00)" in report["markdown"]
    # Without probes.csv the column is left out of the readable tables.
    (study / "probes.csv").unlink()
    assert "memorised?" not in run_report(study)["markdown"]
