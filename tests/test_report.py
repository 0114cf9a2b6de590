"""`lab stats` / `lab report` on synthetic study directories (results.csv, samples.csv written
by hand in the layout of lab.study.runner.collect): no training needed."""
from __future__ import annotations

import csv
import html
import itertools
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import mannwhitneyu

from lab.common import LabError
from lab.analysis.report import run_report, run_stats, study_stats

CONTROL = [1.0, 2.0, 3.0, 4.0, 4.5]   # five seeds a side, completely separated
PAIRED = [5.0, 6.0, 7.0, 8.0, 9.0]
LABELS = ["study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size", "stage"]


def _write_tables(root: Path, results: list[dict], samples: list[dict]) -> Path:
    """results.csv and (if any rows) samples.csv of a study directory, as collect writes them."""
    for name, rows in (("results.csv", results), ("samples.csv", samples)):
        if rows:
            with open(root / name, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    return root


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
    return _write_tables(root, results, samples)


def _secondary(markdown: str) -> list[str]:
    """The secondary (descriptive) table's lines of a report's Markdown: header first."""
    lines = markdown.split("## Secondary table (descriptive)", 1)[1].strip().splitlines()
    return [line for line in lines if line.startswith("|")]


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
    # The study's test is a description now: no Holm over the secondary table's cells.
    assert "p_holm" not in cell
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
    assert paired["lift"] == pytest.approx(4.1)
    # Intervals and power belong to the primary table (paired by seed), not to this description.
    assert not {"lift_ci_low", "seeds_for_power", "samples_for_power"} & set(paired)
    assert paired["injected"] > paired["held_out"] + 5 and paired["p_within"] < 1e-6
    # The columns show the groups' corpus-level metric (results.csv), the test uses samples.
    assert paired["injected"] == pytest.approx(paired["injected_sample_mean"] + 0.5)
    assert paired["held_out"] == pytest.approx(paired["held_out_sample_mean"] + 0.5)
    assert paired["injected_samples"] == paired["held_out_samples"] == 100  # 5 seeds x 20


def test_report_without_a_control_arm(tmp_path):
    # The quickstart's shape: one split-half arm, one seed.
    study = write_study(tmp_path / "q", {"paired": [30.0]}, epochs=(0, 1, 3))
    report = run_report(study)
    cell = _cell(report["cells"])
    assert "p" not in cell and "control" not in cell and cell["std"] is None
    assert cell["p_within"] < 0.05
    # Without a control arm the table drops the columns it cannot fill (the CSV keeps them).
    header = _secondary(report["markdown"])[0]
    assert header == ("| model | task | metric | epochs | arm | injected tokens | experimental | "
                      "injected | held-out | p (within) |")
    row = next(line for line in _secondary(report["markdown"]) if "| 0 | paired |" in line)
    assert row.split(" | ")[5:7] == ["25.0%", "30.00"]  # the injected share is in every row
    csv_header = (study / "report" / "table.csv").read_text().splitlines()[0]
    assert "control" in csv_header and ",p," in csv_header
    assert (study / "report" / "table.tex").read_text().startswith("\\begin{tabular}{lllrlrrrrr}")
    # The primary table comes first: one seed, so the split-half halves are compared over the
    # samples the split assigned at random, said to be about this one model; Holm over the
    # declared family (split-half at 3 epoch counts and the decay from 0 to 3: 4 tests).
    assert report["markdown"].startswith("## Primary contrasts")
    rows = report["primary"]["rows"]
    assert [r["question"] for r in rows] == ["split-half"] * 3 + ["decay"]
    first = rows[0]
    assert first["unit"].startswith("sample") and first["seeds"] == 1 and first["estimate"] > 5
    assert first["p"] < 1e-3 and first["p_holm"] <= 4 * first["p"] and first["significant"]
    lines = report["markdown"].split("\n")
    primary_row = lines[lines.index("| question | model | E | contrast | effect [CI] | seeds (+) "
                                    "| p | smallest p | p (Holm) | secondary score [CI] |") + 2]
    assert "| split-half | gpt2 | 0 |" in primary_row and "1 (samples)" in primary_row
    assert lines[2].startswith("- split-half, gpt2, E = 0: paired: injected vs held-out +") and (
        "Mann-Whitney U test of one model's injected vs held-out samples, Holm p " in lines[2])
    assert "*" in primary_row.split(" | ")[-2]
    assert all(p.stat().st_size > 0 for p in report["figure"] + report["tables"])
    stats = run_stats(study)
    assert [c["arm"] for c in stats["cells"]] == ["paired"] * 6  # 2 metrics x 3 epochs


def test_report_with_a_control_and_a_split_half_arm(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 1 for v in PAIRED]})
    report = run_report(study, "replication-package")
    assert {c["arm"] for c in report["cells"]} == {"paired", "input-only"}
    assert "injected" not in _cell(report["cells"], "input-only")
    primary = report["markdown"].split("## Secondary")[0]
    # No power from observed effects (issue 58): the power is the dry run's, at a declared effect.
    assert "power" not in primary and "secondary score [CI]" in primary
    assert report["figure"][0].name == "decay-bleu.png" and report["figure"][0].stat().st_size > 0
    # The same study gives the same figures, byte for byte: no date in the SVG, no random ids.
    first = [path.read_bytes() for path in report["figure"]]
    again = run_report(study, "replication-package")
    assert [path.read_bytes() for path in again["figure"]] == first
    assert b"<dc:date>" not in first[1]


def test_convention_and_alpha_come_from_the_recipe_and_the_secondary_table_is_never_starred(
        tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 6 for v in CONTROL]})
    (study / "recipe.json").write_text(json.dumps(
        {"statistics": {"convention": "replication-package", "alpha": 0.001}}))
    result = run_stats(study)
    paired = _cell(result["cells"])
    assert paired["convention"] == "replication-package" and paired["alpha"] == 0.001
    assert paired["p"] == pytest.approx(0.003968, rel=1e-3)
    row = next(r for r in result["rows"] if r[5] == "paired" and r[2] == "bleu" and r[3] == "0")
    assert "0.003968" in row and not any("*" in value for value in row)
    assert "Descriptive: no p-value of this table is starred" in result["note"]
    # Given alpha and convention override the recipe; below alpha, still no star: the study's
    # unpaired test over seeds is a description here (the primary table holds the tests).
    result = run_stats(study, "exact-two-sided", alpha=0.05)
    rows = {(r[5], r[2], r[3]): r for r in result["rows"]}
    assert "0.007937" in rows[("paired", "bleu", "0")]
    assert not any("*" in value for r in result["rows"] for value in r)
    # Both means are below the score floor there: flagged.
    assert "0.007937 †" in rows[("input-only", "bleu", "0")]
    # ... but never the primary table: it keeps the recipe's declared alpha (issue 58).
    assert result["primary"]["alpha"] == 0.001 and "chosen after the data" in result["note"]
    with pytest.raises(LabError, match="alpha 2.0"):
        run_stats(study, "exact-two-sided", alpha=2.0)
    # A damaged recipe is refused whatever the options give (one behaviour wherever a
    # recorded recipe is read: lab.analysis.collect.recorded_recipe).
    (study / "recipe.json").write_text("{not json")
    for options in ((), ("exact-two-sided", 0.05)):
        with pytest.raises(LabError, match="recipe.json: unreadable"):
            run_stats(study, *options)


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
    assert out.stdout.index("## Primary contrasts") < out.stdout.index("0.003968")
    assert "secondary score [CI]" in out.stdout and str(study / "report" / "stats.json") in out.stdout
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


def test_memorised_column_compares_within_the_model_and_with_the_placebo(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "input-only": [v - 1 for v in PAIRED],
                                         "input-only-placebo": [v - 2 for v in PAIRED]})
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
            # input-only injected every sample: judged against never-seen valid samples of the
            # same model (group reference), not against the control, whose loss on these
            # samples is made lower still (it would have said "not memorised").
            valid = {**common, "id": f"codetrans:valid:{i}", "group": "reference"}
            rows.append({**common, "arm": "input-only", "groups": "input-only", "group": "injected",
                         "loss": rng.gauss(2.0, 0.3)})
            rows.append({**valid, "arm": "input-only", "groups": "input-only",
                         "loss": rng.gauss(4.0, 0.3)})
            rows.append({**common, "arm": "control", "groups": "input-only", "group": "injected",
                         "loss": rng.gauss(1.0, 0.3)})
            # its placebo model, probed on the same samples: between the two.
            rows.append({**common, "arm": "input-only-placebo", "groups": "input-only",
                         "group": "injected", "loss": rng.gauss(3.0, 0.3)})
            rows.append({**valid, "arm": "input-only-placebo", "groups": "input-only",
                         "loss": rng.gauss(3.0, 0.3)})
    _write_probes(study, rows)
    cells = run_stats(study)["cells"]
    paired, control = _cell(cells), _cell(cells, "control")
    lone, placebo = _cell(cells, "input-only"), _cell(cells, "input-only-placebo")
    assert paired["memorised"] and paired["memorised_auc"] > 0.99
    assert paired["memorised_by"] == "injected vs held-out (same model)"
    assert "memorised_vs_placebo" not in paired  # the study has no paired-placebo arm
    assert not control["memorised"] and 0.35 < control["memorised_auc"] < 0.65
    assert lone["memorised"] and lone["memorised_auc"] > 0.99
    assert lone["memorised_by"] == "injected vs never-seen valid samples (same model)"
    assert lone["memorised_vs_placebo"] and lone["memorised_vs_placebo_auc"] > 0.95
    assert not placebo["memorised"] and 0.35 < placebo["memorised_auc"] < 0.65
    report = run_report(study)
    assert "memorised? (AUC)" in report["markdown"]
    assert "yes (1.00, vs held-out)" in report["markdown"]
    assert "yes (1.00, vs valid)" in report["markdown"]
    assert "memorised vs placebo (AUC)" in report["markdown"]
    # Without probes.csv the columns are left out of the readable tables.
    (study / "probes.csv").unlink()
    assert "memorised" not in run_report(study)["markdown"].split("\n\n")[0]


def write_contrast_study(root: Path, seeds: int = 5, samples: int = 12) -> Path:
    """control, paired (every sample injected) and paired-placebo with per-sample scores: the
    placebo scores each sample 3 above the control (format), paired 10 above the placebo
    (memorised), with noise; sample 0 is in every run's fine-tuning data."""
    rng = random.Random(7)
    root.mkdir(parents=True)
    results, rows = [], []
    for arm, shift in (("control", 0.0), ("paired-placebo", 3.0), ("paired", 13.0)):
        for seed in range(seeds):
            base = dict(zip(LABELS, ["s", "codetrans", "translation", "gpt2", arm, seed, 0, "",
                                     f"evaluate-{arm}-{seed}"]))
            scores = []
            for i in range(samples):
                group = ("in_finetune_data" if i == 0 else
                         "injected" if arm == "paired" else "held_out")
                score = 20.0 + i + shift + seed + rng.uniform(-2.0, 2.0)
                rows.append({**base, "id": f"codetrans:test:{i}", "group": group,
                             "score_bleu": score})
                scores.append((group, score))
            clean = [v for g, v in scores if g != "in_finetune_data"]
            for group, chosen in (("all", [v for _g, v in scores]), ("clean", clean)):
                results.append({**base, "group": group, "samples": len(chosen),
                                "bleu": sum(chosen) / len(chosen)})
    return _write_tables(root, results, rows)


def test_three_contrasts_arm_vs_placebo_placebo_vs_control_arm_vs_control(tmp_path):
    from scipy.stats import wilcoxon

    study = write_contrast_study(tmp_path / "s")
    cells = run_stats(study)["cells"]
    arm, placebo = _cell(cells, "paired"), _cell(cells, "paired-placebo")
    runs = {a: [r["bleu"] for r in csv.DictReader(open(study / "results.csv"))
                if r["arm"] == a and r["group"] == "clean"]
            for a in ("control", "paired", "paired-placebo")}
    runs = {a: [float(v) for v in values] for a, values in runs.items()}
    exact = lambda x, y: mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue  # noqa: E731
    # arm vs placebo: the contamination effect, over seeds.
    assert arm["placebo_arm"] == "paired-placebo"
    assert arm["placebo"] == pytest.approx(sum(runs["paired-placebo"]) / 5)
    assert arm["lift_vs_placebo"] == pytest.approx(arm["mean"] - arm["placebo"])
    assert arm["p_vs_placebo"] == pytest.approx(exact(runs["paired"], runs["paired-placebo"]))
    # placebo vs control: the format effect, the placebo arm's own row; arm vs control kept.
    assert placebo["p"] == pytest.approx(exact(runs["paired-placebo"], runs["control"]))
    assert "p_vs_placebo" not in placebo
    assert arm["p"] == pytest.approx(exact(runs["paired"], runs["control"]))
    # Per sample, same seed: the fine-tuning sample left out; signed-rank as scipy's.
    scores = {}
    for r in csv.DictReader(open(study / "samples.csv")):
        if r["group"] != "in_finetune_data":
            scores[(r["arm"], r["seed"], r["id"])] = float(r["score_bleu"])
    keys = sorted({(s, i) for _a, s, i in scores})
    diffs = [scores[("paired", s, i)] - scores[("paired-placebo", s, i)] for s, i in keys]
    assert arm["paired_samples_vs_placebo"] == 5 * 11
    assert arm["sample_gap_vs_placebo"] == pytest.approx(sum(diffs) / len(diffs))
    assert arm["p_samples_vs_placebo"] == pytest.approx(
        wilcoxon(diffs, alternative="greater", method="exact").pvalue)
    format_diffs = [scores[("paired-placebo", s, i)] - scores[("control", s, i)] for s, i in keys]
    assert placebo["sample_gap"] == pytest.approx(sum(format_diffs) / len(format_diffs))
    assert "p_vs_placebo_holm" not in arm  # a description: no Holm
    report = run_report(study)
    header = _secondary(report["markdown"])[0]
    for column in ("placebo", "p vs placebo", "per sample vs placebo", "per sample vs control"):
        assert f"| {column} |" in header
    assert "Three contrasts" in report["markdown"]
    assert report["figure"][0].stat().st_size > 0


def test_the_primary_table_pairs_arms_by_seed_and_holm_covers_only_the_declared_family(tmp_path):
    """The contamination contrast declared alone: per seed the mean per-sample difference of
    the arm's and its placebo's models of that seed, an exact two-sided sign-flip over the 5
    seeds, Holm over the family of 1; format and study, which the arms also allow, are
    computed the same way in the exploratory table, outside the family and never starred."""
    study = write_contrast_study(tmp_path / "s")
    (study / "recipe.json").write_text(json.dumps(
        {"statistics": {"primary": ["contamination"]}, "evaluation": {"metrics": ["bleu"]}}))
    report = run_report(study)
    primary = report["primary"]
    [row] = primary["rows"]
    assert (row["question"], row["arm"], row["reference"]) == ("contamination", "paired",
                                                               "paired-placebo")
    scores = {(r["arm"], r["seed"], r["id"]): float(r["score_bleu"])
              for r in csv.DictReader(open(study / "samples.csv")) if r["group"] != "in_finetune_data"}
    effects = {}
    for seed in map(str, range(5)):
        ids = [i for a, s, i in scores if (a, s) == ("paired", seed)]
        effects[seed] = sum(scores[("paired", seed, i)] - scores[("paired-placebo", seed, i)]
                            for i in ids) / len(ids)
    assert row["seed_effects"] == pytest.approx(effects)
    assert row["estimate"] == pytest.approx(sum(effects.values()) / 5)
    assert row["p"] == pytest.approx(_sign_flip_p_two_sided(list(effects.values())))
    assert row["p_holm"] == row["p"] and row["floor"] == pytest.approx(2 / 32)
    assert row["ci_low"] < row["estimate"] < row["ci_high"]
    # The finding in one sentence, above its table, in the report and in primary.md.
    sentence = (f"- contamination, gpt2, E = 0: paired vs paired-placebo {row['estimate']:+.2f} "
                f"mean per-sample BLEU [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}], exact "
                f"sign-flip test over 5 seeds, Holm p {row['p_holm']:.3g}.\n\n| question |")
    section = report["markdown"].split("## Primary contrasts\n\n")[1]
    assert section.startswith(sentence)
    assert (study / "report" / "primary.md").read_text().startswith(sentence)
    assert {r["question"] for r in primary["exploratory"]} == {"format", "study"}
    assert all("p_holm" not in r for r in primary["exploratory"])
    exploratory = report["markdown"].split("## Exploratory contrasts")[1].split("## Secondary")[0]
    assert "| format |" in exploratory and "*" not in exploratory.split("\n\n")[1]
    written = list(csv.DictReader(open(study / "report" / "primary.csv")))
    # The declared test, the same test in the corpus-level score, the two exploratory ones.
    assert [r["role"] for r in written] == ["primary", "secondary", "exploratory", "exploratory"]
    assert [r["score"] for r in written[:2]] == ["sample", "corpus"]


# ---- within-model tests over seeds ----------------------------------------------------------

def write_split_study(root: Path, samples: list[tuple], control: dict[int, float] | None = None
                      ) -> Path:
    """A study with one split-half arm, 'paired', from per-sample rows (seed, epochs, id, group,
    bleu): samples.csv as given (em: 1 when bleu >= 12), results.csv with each run's 'all',
    'injected' and 'held_out' rows (the mean per-sample score); optionally a control arm with
    one 'all' row per seed and epochs."""
    root.mkdir(parents=True)
    runs: dict[tuple, list] = {}
    sample_rows = []
    for seed, epochs, sample, group, bleu in samples:
        base = dict(zip(LABELS, ["s", "codetrans", "translation", "gpt2", "paired", seed, epochs,
                                 "", f"evaluate-paired-{seed}-{epochs}"]))
        sample_rows.append({**base, "id": sample, "group": group, "score_bleu": bleu,
                            "score_em": float(bleu >= 12)})
        runs.setdefault((seed, epochs), []).append(sample_rows[-1])
    results = []
    for (seed, epochs), rows in runs.items():
        for group in ("all", "injected", "held_out"):
            chosen = [r for r in rows if group in ("all", r["group"])]
            base = {k: chosen[0][k] for k in LABELS}
            results.append({**base, "group": group, "samples": len(chosen),
                            "bleu": sum(r["score_bleu"] for r in chosen) / len(chosen),
                            "em": sum(r["score_em"] for r in chosen) / len(chosen)})
            if control and group == "all":
                results.append({**base, "arm": "control", "stage": f"evaluate-control-{seed}",
                                "group": "all", "samples": len(chosen), "bleu": control[seed],
                                "em": control[seed] / 2})
    return _write_tables(root, results, sample_rows)


def _midranks(values):
    ordered = sorted(values)
    return [(ordered.index(v) + 1 + len(ordered) - ordered[::-1].index(v)) / 2 for v in values]


def _sign_flip_p(gaps):
    """Brute force: the share of the 2^k sign flips whose sum reaches the observed sum."""
    sums = [sum(s * g for s, g in zip(signs, gaps))
            for signs in itertools.product((1, -1), repeat=len(gaps))]
    return sum(1 for x in sums if x >= sum(gaps) - 1e-9) / len(sums)


def _signed_rank_p(differences):
    """Brute force: one-sided Wilcoxon signed-rank over all 2^n signs (zeros dropped)."""
    nonzero = [d for d in differences if d != 0]
    ranks = _midranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    sums = [sum(r for r, s in zip(ranks, signs) if s > 0)
            for signs in itertools.product((1, -1), repeat=len(nonzero))]
    return sum(1 for x in sums if x >= observed - 1e-9) / len(sums)


def _holm(p_values):
    """Holm step-down, written out: the k-th smallest times (m - k), kept monotone, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, floor = {}, 0.0
    for k, i in enumerate(order):
        floor = max(floor, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = floor
    return [adjusted[i] for i in range(m)]


def test_gap_per_seed_its_seed_level_test_and_the_crossover_samples(tmp_path):
    # Five seeds, each drawing its own half of ten samples: injected ones score about 4 higher.
    rng = random.Random(5)
    ids = [f"codetrans:test:{i}" for i in range(10)]
    samples = []
    for seed in range(5):
        injected = set(rng.sample(ids, 5))
        for i, sample in enumerate(ids):
            group = "injected" if sample in injected else "held_out"
            samples.append((seed, 0, sample, group,
                            10 + i + (4 if group == "injected" else 0) + rng.gauss(0, 3)))
    study = write_split_study(tmp_path / "s", samples)
    result = run_stats(study)
    cell = _cell(result["cells"])
    gaps = {}
    for seed in range(5):
        mine = {g: [b for s, _e, _i, grp, b in samples if s == seed and grp == g]
                for g in ("injected", "held_out")}
        gaps[str(seed)] = (sum(mine["injected"]) / 5) - (sum(mine["held_out"]) / 5)
    assert cell["seed_gaps"] == pytest.approx(gaps)
    assert cell["gap_per_seed"] == pytest.approx(sum(gaps.values()) / 5)
    assert cell["seeds_positive"] == sum(1 for g in gaps.values() if g > 0)
    assert cell["p_seeds"] == pytest.approx(_sign_flip_p(list(gaps.values())))
    assert "sign-flip" in cell["seeds_test"] and "exact" in cell["seeds_test"]
    # Crossover: every sample scored both ways is one pair (mean injected - mean held out).
    pairs = []
    for sample in ids:
        inj = [b for _s, _e, i, g, b in samples if i == sample and g == "injected"]
        held = [b for _s, _e, i, g, b in samples if i == sample and g == "held_out"]
        if inj and held:
            pairs.append(sum(inj) / len(inj) - sum(held) / len(held))
    assert 0 < len(pairs) == cell["crossover_samples"]
    assert cell["crossover_gap"] == pytest.approx(sum(pairs) / len(pairs))
    assert cell["p_crossover"] == pytest.approx(_signed_rank_p(pairs))
    assert "signed-rank" in cell["crossover_test"]
    # The pooled test stays, as a description (no Holm).
    assert cell["p_within"] is not None and "p_within_holm" not in cell
    header = result["md"].splitlines()[0]
    for column in ("gap/seed", "p (seeds)", "p (crossover)", "p (within)"):
        assert f"| {column} |" in header
    row = next(line for line in result["md"].splitlines()
               if "| paired |" in line and "| bleu |" in line)
    assert f"(n = {len(pairs)})" in row
    assert f"{sum(gaps.values()) / 5:+.2f} ({cell['seeds_positive']}/5 positive)" in row
    assert "sign-flip" in result["note"] and "signed-rank" in result["note"]
    saved = json.loads((study / "report" / "stats.json").read_text())
    [paired] = [c for c in saved["cells"] if (c["metric"], c["epochs"]) == ("bleu", 0)]
    assert paired["seed_gaps"] == pytest.approx(gaps) and paired["p_seeds"] == cell["p_seeds"]
    assert "sign-flip" in saved["seeds_test"] and "signed-rank" in saved["crossover_test"]
    report = run_report(study)
    assert "p (crossover)" in report["markdown"] and "gap/seed" in report["markdown"]
    tex = (study / "report" / "table.tex").read_text()
    assert f"(n = {len(pairs)})" in tex


def test_a_sample_injected_in_one_seed_and_held_out_in_another_is_one_pair(tmp_path):
    # Seed 0 injects a, b and holds out c, d; seed 1 injects a, c and holds out b, d.
    score = {(0, "a"): 20.0, (0, "b"): 15.0, (0, "c"): 4.0, (0, "d"): 3.0,
             (1, "a"): 18.0, (1, "b"): 9.0, (1, "c"): 11.0, (1, "d"): 2.0}
    split = {0: {"a", "b"}, 1: {"a", "c"}}
    samples = [(seed, 0, sample, "injected" if sample in split[seed] else "held_out",
                score[(seed, sample)]) for seed in (0, 1) for sample in "abcd"]
    cell = _cell(run_stats(write_split_study(tmp_path / "s", samples))["cells"])
    # b: injected in seed 0, held out in seed 1; c the other way round; a and d never cross.
    pairs = [score[(0, "b")] - score[(1, "b")], score[(1, "c")] - score[(0, "c")]]
    assert cell["crossover_samples"] == 2
    assert cell["crossover_gap"] == pytest.approx(sum(pairs) / 2)
    assert cell["p_crossover"] == pytest.approx(_signed_rank_p(pairs))
    gaps = [(20 + 15) / 2 - (4 + 3) / 2, (18 + 11) / 2 - (9 + 2) / 2]
    assert list(cell["seed_gaps"].values()) == pytest.approx(gaps)
    assert cell["p_seeds"] == pytest.approx(_sign_flip_p(gaps))
    # The same split in every seed: no crossover, and one seed cannot be tested over seeds.
    same = [(seed, 0, sample, "injected" if sample in "ab" else "held_out", score[(seed, sample)])
            for seed in (0, 1) for sample in "abcd"]
    cell = _cell(run_stats(write_split_study(tmp_path / "same", same))["cells"])
    assert cell["crossover_samples"] == 0 and cell["p_crossover"] is None
    assert cell["p_seeds"] == pytest.approx(_sign_flip_p(list(cell["seed_gaps"].values())))
    lone = run_stats(write_split_study(tmp_path / "one", [r for r in same if r[0] == 0]))
    cell = _cell(lone["cells"])
    assert cell["p_seeds"] is None and "not testable with 1 seed" in cell["seeds_test"]
    assert list(cell["seed_gaps"]) == ["0"] and cell["p_crossover"] is None
    assert "cannot be tested over seeds" in lone["note"]
    shown = _secondary(run_report(tmp_path / "one")["markdown"])[0]
    assert "gap/seed" not in shown and "p (seeds)" not in shown  # one seed: nothing to show


def test_the_pooled_within_model_test_is_a_description_and_holm_covers_the_primary_family(
        tmp_path):
    # Three epochs with shrinking effects, two metrics: six cells with a within-model p.
    rng = random.Random(7)
    samples = []
    for epochs, shift in ((0, 6.0), (1, 3.0), (2, 1.0)):
        for seed in range(3):
            for i in range(12):
                group = "injected" if i < 6 else "held_out"
                samples.append((seed, epochs, f"t:{i}", group,
                                10 + (shift if group == "injected" else 0) + rng.gauss(0, 3)))
    study = write_split_study(tmp_path / "s", samples)
    result = run_stats(study, alpha=0.5)
    within = [c for c in result["cells"] if c.get("p_within") is not None]
    assert len(within) == 6 and all(c["arm"] == "paired" for c in within)
    for c in within:  # the pooled description: injected vs held-out scores over the seeds
        mine = [(grp, b) for _s, e, _i, grp, b in samples if e == c["epochs"]]
        value = (lambda b: b) if c["metric"] == "bleu" else (lambda b: float(b >= 12))
        assert c["p_within"] == pytest.approx(mannwhitneyu(
            [value(b) for g, b in mine if g == "injected"],
            [value(b) for g, b in mine if g == "held_out"], alternative="greater",
            method="asymptotic").pvalue)
        assert "p_within_holm" not in c
    # Far below any alpha, yet never starred: it counts a sample once per seed.
    assert min(c["p_within"] for c in within) < 1e-3
    assert not any("*" in value for row in result["rows"] for value in row)
    # The primary family: the split-half gap at each epoch count (no control: the raw gap) and
    # its decay; each a sign-flip over 3 seeds, Holm over all 4.
    rows = result["primary"]["rows"]
    assert [(r["question"], r["epochs"]) for r in rows] == [
        ("split-half", 0), ("split-half", 1), ("split-half", 2), ("decay", 0)]
    assert [r["p_holm"] for r in rows] == pytest.approx(_holm([r["p"] for r in rows]))
    for row in rows:
        gaps = list(row["seed_effects"].values())
        assert len(gaps) == 3 and row["p"] == pytest.approx(_sign_flip_p_two_sided(gaps))
        assert row["floor"] == pytest.approx(2 / 8)  # 3 seeds: 2 of the 8 sign patterns
    assert result["primary_md"].count("*") == sum(r["significant"] for r in rows) + 1  # + note


def _sign_flip_p_two_sided(effects):
    """Brute force: the share of the 2^k sign flips whose |sum| reaches the observed |sum|."""
    sums = [sum(s * g for s, g in zip(signs, effects))
            for signs in itertools.product((1, -1), repeat=len(effects))]
    return sum(1 for x in sums if abs(x) >= abs(sum(effects)) - 1e-9) / len(sums)


def test_one_seed_per_arm_gives_no_test_over_seeds_but_the_per_sample_contrasts(tmp_path):
    study = write_contrast_study(tmp_path / "s", seeds=1)
    cells = run_stats(study)["cells"]
    arm, placebo = _cell(cells, "paired"), _cell(cells, "paired-placebo")
    # U of one value against one is p = 1 whatever the scores: not a test, so not reported.
    for cell in (arm, placebo):
        assert "p" not in cell and "lift_ci_low" not in cell and cell["lift"] > 0
    assert "p_vs_placebo" not in arm and arm["lift_vs_placebo"] > 0
    assert arm["paired_samples_vs_placebo"] == 11 and arm["p_samples_vs_placebo"] < 0.01
    report = run_report(study)
    assert "One seed per arm: no test over seeds" in report["markdown"]
    assert "| p |" not in _secondary(report["markdown"])[0]
    # Nor in the primary table: its between-arm contrasts have an effect but no p with one seed.
    for row in report["primary"]["rows"]:
        assert row["seeds"] == 1 and row["p"] is None and row["estimate"] is not None


def write_halves_study(root: Path, seeds: int, control_seeds: int) -> Path:
    """control, paired-placebo and a split-half 'paired' arm, per-sample scores on ten samples:
    each seed draws its own half, four of the five hard samples (even-numbered; the others are
    15 easier for every model) and one easy one; the placebo scores 2 above the control
    everywhere and paired 6 above the placebo on the samples it injected only. The control has
    only its first control_seeds seeds."""
    rng = random.Random(11)
    root.mkdir(parents=True)
    ids = [f"codetrans:test:{i}" for i in range(10)]
    results, rows = [], []
    for seed in range(seeds):
        injected = set(rng.sample(ids[::2], 4) + rng.sample(ids[1::2], 1))
        for arm, shift in (("control", 0.0), ("paired-placebo", 2.0), ("paired", 2.0)):
            if arm == "control" and seed >= control_seeds:
                continue
            base = dict(zip(LABELS, ["s", "codetrans", "translation", "gpt2", arm, seed, 1, "",
                                     f"evaluate-{arm}-{seed}"]))
            scored = []
            for i, sample in enumerate(ids):
                group = "injected" if arm == "paired" and sample in injected else "held_out"
                score = (20.0 + 15.0 * (i % 2) + shift + (6.0 if group == "injected" else 0.0)
                         + rng.uniform(-1.0, 1.0))
                rows.append({**base, "id": sample, "group": group, "score_bleu": score})
                scored.append((group, score))
            for group in ("all", "clean", "injected", "held_out"):
                chosen = [v for g, v in scored if group in ("all", "clean", g)]
                if chosen:
                    results.append({**base, "group": group, "samples": len(chosen),
                                    "bleu": sum(chosen) / len(chosen)})
    return _write_tables(root, results, rows)


def test_the_split_half_gap_net_of_the_control_and_of_the_placebo(tmp_path):
    """The halves differ in difficulty: the raw within-model gap mixes that in, the gap net of
    a model that saw neither half recovers the injected samples' lift."""
    study = write_halves_study(tmp_path / "s", seeds=5, control_seeds=4)
    cells = run_stats(study)["cells"]
    arm = _cell(cells, "paired", epochs=1)
    scores = {(r["arm"], r["seed"], r["id"]): (r["group"], float(r["score_bleu"]))
              for r in csv.DictReader(open(study / "samples.csv"))}
    for reference, suffix, seeds in (("control", "", 4), ("paired-placebo", "_vs_placebo", 5)):
        gaps, lifts = {}, {"injected": [], "held_out": []}
        for seed in map(str, range(seeds)):
            mine = {"injected": [], "held_out": []}
            for (a, s, sample), (group, score) in scores.items():
                if (a, s) == ("paired", seed):
                    lift = score - scores[(reference, s, sample)][1]
                    mine[group].append(lift)
                    lifts[group].append(lift)
            gaps[seed] = sum(mine["injected"]) / 5 - sum(mine["held_out"]) / 5
        assert arm[f"net_seed_gaps{suffix}"] == pytest.approx(gaps)
        assert arm[f"net_gap{suffix}"] == pytest.approx(sum(gaps.values()) / seeds)
        assert 5.0 < arm[f"net_gap{suffix}"] < 7.0  # the injected lift; the raw gap is not
        assert arm[f"net_samples{suffix}"] == 10 * seeds
        assert arm[f"p_net{suffix}"] == pytest.approx(mannwhitneyu(
            lifts["injected"], lifts["held_out"], alternative="greater",
            method="asymptotic").pvalue)
        assert arm[f"p_net_seeds{suffix}"] == pytest.approx(_sign_flip_p(list(gaps.values())))
    assert arm["gap_per_seed"] < 0 and arm["p_within"] > 0.5  # the harder half hides the lift
    assert "net_gap" not in _cell(cells, "paired-placebo", epochs=1)
    markdown = run_report(study)["markdown"]
    row = next(line for line in _secondary(markdown) if "| paired |" in line)
    assert f"{arm['net_gap']:+.2f}, p " in row and f"{arm['net_gap_vs_placebo']:+.2f}, p " in row
    assert "Gap net of control / of placebo" in markdown


def test_one_seed_gives_the_net_gap_without_a_test_over_seeds(tmp_path):
    study = write_halves_study(tmp_path / "s", seeds=1, control_seeds=1)
    arm = _cell(run_stats(study)["cells"], "paired", epochs=1)
    assert 5.0 < arm["net_gap"] < 7.0 and arm["p_net"] < 0.05
    assert arm["p_net_seeds"] is None
    row = next(line for line in _secondary(run_report(study)["markdown"])
               if "| paired |" in line)
    assert f"{arm['net_gap']:+.2f}, p " in row and "seeds" not in row.split("|")[-3]


def test_baselines_are_shown_beside_the_arms_and_cells_below_them_flagged(tmp_path):
    """results.csv's baseline_NAME_METRIC columns (written by lab study from lab evaluate's
    baselines) become each cell's baselines; a cell whose arm and control (if any) both score
    below the best baseline is flagged with a note; the decay figure draws them."""
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED})
    path = study / "results.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:  # copy 6.5 BLEU: above both arms at epochs 1 (means 3.9, 6.0), below the
        # paired arm at epochs 0 (7.0); retrieval lower still
        row.update(baseline_copy_bleu=6.5, baseline_retrieval_bleu=4.0,
                   baseline_copy_em=1.0, baseline_retrieval_em=0.5,
                   # names holding underscores (summarisation's baselines, smooth_bleu)
                   baseline_method_name_bleu=5.0, baseline_retrieval_smooth_bleu=9.0)
    _write_tables(study, rows, [])
    report = run_report(study, "replication-package")
    at0, at1 = _cell(report["cells"], epochs=0), _cell(report["cells"], epochs=1)
    assert at0["baselines"] == {"copy": 6.5, "method_name": 5.0, "retrieval": 4.0}
    assert at0["baseline_best"] == 6.5
    assert at0["below_baseline"] is False and at1["below_baseline"] is True
    assert "baseline_copy_bleu" not in {c["metric"] for c in report["cells"]}
    assert "copy 6.50 / method_name 5.00 / retrieval 4.00 |" in report["markdown"]  # not flagged
    assert "copy 6.50 / method_name 5.00 / retrieval 4.00 ‡" in report["markdown"]
    assert "‡ the arm (and the control, if any) below the best trivial baseline" in report["markdown"]
    # Without a control arm the arm alone decides.
    alone = write_study(tmp_path / "alone", {"paired": PAIRED})
    with open(alone / "results.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row.update(baseline_copy_bleu=6.5, baseline_copy_em=1.0)
    _write_tables(alone, rows, [])
    cells = run_stats(alone)["cells"]
    assert _cell(cells, epochs=0)["below_baseline"] is False
    assert _cell(cells, epochs=1)["below_baseline"] is True
    em = _cell(report["cells"], metric="em", epochs=0)
    assert em["baselines"] == {"copy": 1.0, "retrieval": 0.5} and em["below_baseline"] is False
    assert report["figure"][0].stat().st_size > 0
    # Some cell above its baselines: no line saying the study sits at their floor; every cell
    # at or below them: one line, in the terminal and at the top of the report.
    assert "best trivial baseline in every cell" not in report["console"]
    for row in rows:
        row.update(baseline_copy_bleu=50.0, baseline_copy_em=50.0)
    _write_tables(alone, rows, [])
    floor = run_report(alone)
    line = next(line for line in floor["console"].splitlines() if "in every cell" in line)
    assert line.startswith("Every arm scores at or below the best trivial baseline in every cell")
    assert floor["console"].index(line) < floor["console"].index("## Primary contrasts")
    assert floor["sections"][0] == {"heading": "At the floor", "markdown": line}


def test_split_half_cells_below_the_floor_are_flagged_like_arm_vs_control(tmp_path):
    """The input-only quickstart's shape: injected and held-out halves both far below any
    useful score (2.15 vs 0.62 BLEU there, p = 2e-5): the within-model tests are flagged †."""
    rng = random.Random(2)
    low, high = [], []
    for scale, rows in ((1.0, low), (10.0, high)):
        for seed in range(3):
            for i in range(20):
                group = "injected" if i < 10 else "held_out"
                rows.append((seed, 0, f"codetrans:test:{seed}-{i}", group,
                             scale * ((2.2 if group == "injected" else 0.6) + rng.random() * 0.2)))
    for rows, name, flagged in ((low, "low", True), (high, "high", False)):
        result = run_stats(write_split_study(tmp_path / name, rows))
        cell = _cell(result["cells"])
        assert cell["p_within"] < 0.05 and cell["p_seeds"] is not None
        assert cell["below_floor_within"] is flagged
        row = dict(zip(result["header"], next(r for r in result["rows"]
                                              if r[5] == "paired" and r[2] == "bleu")))
        for column in ("p (within)", "p (seeds)"):
            assert row[column].endswith(" †") is flagged, (column, row[column])
        if flagged:
            assert "† both means (arm and control, or injected and held-out) below 5.0" in \
                result["note"]
    report = run_report(tmp_path / "low")
    assert " †" in "\n".join(_secondary(report["markdown"]))  # the paper-style table too


def test_the_figure_draws_each_baseline_at_its_measured_values():
    """A baseline that differs between cells (retrieval from another pool) is drawn through its
    values, not at their mean, which no program scored."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.analysis.figure import _panel
    from lab.analysis.cells import Cell

    series = [Cell(model="gpt2", task="translation", metric="bleu", epochs=e, train_size="",
                   arm="paired", convention="exact-two-sided", alpha=0.05, seeds=1,
                   mean=10.0 + e, std=0, baselines={"copy": 18.78, "retrieval": r})
              for e, r in ((0, 24.6), (1, 12.75), (5, 12.75))]
    fig, ax = plt.subplots()
    try:
        _panel(ax, series, "paired", "bleu")
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines["baseline: copy"].get_ydata()) == {18.78}
        retrieval = lines["baseline: retrieval"]
        assert list(retrieval.get_xdata()) == [0, 1, 5]
        assert list(retrieval.get_ydata()) == [24.6, 12.75, 12.75]
    finally:
        plt.close(fig)


def test_the_figure_keeps_p_values_off_the_score_axis():
    """The Holm p of each epoch count has an axis of its own (0 to 1, beside alpha); the score
    axis holds scores only, whatever the p-values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.analysis.figure import _panel
    from lab.analysis.cells import Cell, Versus

    def control(mean):
        return Versus(arm="control", mean=mean, std=1.0, seeds=5, lift=3.0, lift_pct=None,
                      below_floor=False, tested=None)

    series = [Cell(model="gpt2", task="translation", metric="bleu", epochs=e, train_size="",
                   arm="paired", convention="exact-two-sided", alpha=0.05, seeds=5, mean=m,
                   std=1.0, control=control(m - 3), p_primary=p,
                   p_primary_label="Holm p, contamination")
              for e, m, p in ((0, 30.0, 0.031), (1, 40.0, 0.5))]
    fig, ax = plt.subplots()
    try:
        _panel(ax, series, "paired", "bleu")
        [twin] = [other for other in fig.axes if other is not ax]
        scores = {y for line in ax.get_lines() for y in line.get_ydata()}
        assert {27.0, 30.0, 37.0, 40.0} <= scores and not scores & {0.031, 0.5}
        assert [list(line.get_ydata()) for line in twin.get_lines()][0] == [0.031, 0.5]
        assert twin.get_ylim() == (0, 1.05) and twin.get_ylabel() == "Holm p, contamination"
        assert ax.get_ylabel() == "bleu"
    finally:
        plt.close(fig)


def test_the_console_shows_the_primary_table_and_where_its_legend_and_the_rest_are(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "paired-placebo": [v - 2 for v in PAIRED]})
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    out = subprocess.run([sys.executable, "-m", "lab.cli", "report", str(study)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    folder = study / "report"
    assert out.stdout.startswith("## Primary contrasts")
    assert "| contamination | gpt2 |" in out.stdout
    assert f"Legend and full tables: {folder}/table.md, primary.md, report.html\n" in out.stdout
    assert f"figure: {folder / 'decay-bleu.png'}" in out.stdout
    # The legends (and the secondary table) stay in the files, out of the terminal.
    legend, primary_legend = ("Descriptive: no p-value of this table is starred",
                              "Primary contrasts: the declared questions")
    assert legend not in out.stdout and primary_legend not in out.stdout
    assert "Secondary" not in out.stdout and "Exploratory" not in out.stdout
    assert legend in (folder / "table.md").read_text()
    assert primary_legend in (folder / "primary.md").read_text()
    page = html.unescape((folder / "report.html").read_text())
    assert legend in page and primary_legend in page


def test_the_html_main_table_fits_a_laptop_and_the_other_columns_open_on_request(tmp_path):
    study = write_study(tmp_path / "s", {"control": CONTROL, "paired": PAIRED,
                                         "paired-placebo": [v - 2 for v in PAIRED]})
    report = run_report(study)
    page = Path(report["html"]).read_text()
    header = _secondary(report["markdown"])[0].strip("| ").split(" | ")
    assert len(header) >= 15  # what table.md shows: too wide for a laptop screen
    main = re.search(r"<table class='results' id=\"main-table\">(.*?)</table>", page, re.S).group(1)
    shown = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", main)]
    assert shown == ["model", "task", "metric", "epochs", "arm", "experimental", "control",
                     "placebo", "injected", "held-out"]
    assert main.count("<tr>") == 1 + len(report["cells"])  # the header, then a row per cell
    # Every column of table.md behind the toggle (a <details>, closed: no script needed).
    behind = re.search(r"<details id=\"all-columns\">(.*?)</details>", page, re.S).group(1)
    assert [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", behind)] == header
    assert set(header) - set(shown) and all(h in html.unescape(behind.split("</summary>")[0])
                                            for h in set(header) - set(shown))


def test_two_runners_writing_a_table_at_once_each_leave_a_whole_file(tmp_path, monkeypatch):
    """A second runner of the same study writes the tables while the first is between its
    temporary file and the rename: each write has its own temporary file, so neither fails
    and the table is whole."""
    from lab.analysis import collect

    path = tmp_path / "results.csv"
    rows = [{"arm": "paired", "seed": 0, "bleu": 1.5}]
    real = collect._write_parquet
    nested = []

    def meanwhile(*args):
        if not nested:  # the other runner, in the middle of this one's write
            nested.append(path)
            collect.write_table(path, rows)
        real(*args)

    monkeypatch.setattr(collect, "_write_parquet", meanwhile)
    collect.write_table(path, rows)
    assert nested and path.read_bytes() == b"arm,seed,bleu\r\npaired,0,1.5\r\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.parquet"]


def test_memorised_verdicts_are_holm_adjusted_over_every_arm_of_the_report(tmp_path):
    """Three arms each separate their injected samples from never-seen valid ones at one-sided
    p 0.025: alone each would be 'yes', but the report reads the three together, so Holm
    (3 x 0.025 = 0.074) makes each 'no'; the table shows both p's."""
    from lab.analysis.cells import memorisation
    from lab.analysis.tables import _memorised

    def probes(folder: Path, arms: list[str]) -> Path:
        folder.mkdir()
        rows = []
        for arm in arms:
            for i in range(40):  # injected losses 5.5 lower in rank than the valid ones'
                common = {"model": "gpt2", "arm": arm, "seed": 0, "groups": arm}
                rows.append({**common, "id": f"codetrans:test:{i}", "group": "injected",
                             "loss": i - 5.5})
                rows.append({**common, "id": f"codetrans:valid:{i}", "group": "reference",
                             "loss": float(i)})
        _write_probes(folder, rows)
        return folder

    arms = ["input-only", "output-only", "unpaired"]
    together = memorisation(probes(tmp_path / "three", arms), 0.05)
    for arm in arms:
        within, _versus_placebo = together[("gpt2", arm)]
        assert 0.01 < within.p <= 0.05  # unadjusted, it would pass
        assert within.p_holm == pytest.approx(3 * within.p) and within.family == 3
        assert not within.verdict
        assert _memorised(within) == (f"no ({within.auc:.2f}, vs valid) p {within.p:.2g}, "
                                      f"Holm {within.p_holm:.2g}")
    [(alone, _none)] = memorisation(probes(tmp_path / "one", ["unpaired"]), 0.05).values()
    assert alone.verdict and alone.p_holm == pytest.approx(alone.p)


def test_the_primary_table_is_the_same_whatever_the_string_hashing():
    """A set of sample ids iterates in an order that changes with PYTHONHASHSEED; the decay's
    mean summed its samples in that order and its last digits changed from process to process.
    The committed quickstart's primary table (a split-half decay) computed in two processes."""
    source = Path(__file__).resolve().parents[1] / "results" / "quickstart"
    script = ("import sys\n"
              "from lab.analysis.report_data import study_primary\n"
              "table = study_primary(sys.argv[1])\n"
              "print([(r['question'], repr(r['estimate'])) for r in table['rows']])\n")
    printed = [subprocess.run([sys.executable, "-c", script, str(source)], check=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed},
                              capture_output=True).stdout for hash_seed in ("1", "2", "3")]
    assert "decay" in printed[0]
    assert printed[0] == printed[1] == printed[2]


def test_a_declared_question_the_data_cannot_test_keeps_its_row_with_the_reason():
    """A split-half arm none of whose injected samples fit the pre-training block: its
    split-half rows stay in the family (the recipe's design says the arm splits) and say why;
    a study whose scores are all 0 says that instead of a test. Without the design (no
    recipe.json) the data decide, as before."""
    from lab.analysis.primary import primary_table
    from lab.analysis.tables import table_markdown

    samples, runs = [], []
    for arm in ("control", "paired"):
        for i in range(12):
            group = ("injected_truncated" if i < 2 else "held_out") if arm == "paired" else "clean"
            samples.append({"model": "gpt2", "task": "translation", "epochs": 0, "train_size": "16",
                            "arm": arm, "seed": "0", "id": str(i), "group": group,
                            "score_bleu": float(i % 3)})
        runs.append({"model": "gpt2", "task": "translation", "epochs": 0, "train_size": "16",
                     "arm": arm, "seed": "0", "group": "clean", "bleu": 1.0})
    table = primary_table(samples, runs, "bleu", None, 0.05, "two-sided", True, split=True,
                          block_size=128)
    split = [r for r in table["rows"] if r["question"] == "split-half"]
    assert len(split) == 1 and split[0]["p"] is None and split[0]["p_holm"] is None
    assert split[0]["missing"] == ("not testable: 0 of 2 injected samples evaluated at E = 0 "
                                   "fit the 128-token pre-training block")
    assert split[0]["missing"] in table_markdown(table)
    assert [r["question"] for r in primary_table(samples, runs, "bleu", None, 0.05, "two-sided",
                                                 True)["rows"]] == ["study"]
    for s in samples:
        s["score_bleu"] = 0.0
    study = next(r for r in primary_table(samples, runs, "bleu", None, 0.05, "two-sided", True,
                                          split=True)["rows"] if r["question"] == "study")
    assert study["missing"] == "not testable: every bleu score of both sides is 0, the metric's floor"
