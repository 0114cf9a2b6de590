"""`lab stats` and `lab report`: the study's answer as tables and the contamination-decay figure.

Each cell (model x task x metric x epochs x train size) compares a contaminated arm with the
control over seeds (Mann-Whitney U under a named convention, Holm-corrected across the table's
cells), and, where the arm was injected split-half, injected against held-out samples of the
same models (a within-model test on per-sample scores, with far more power).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from lab.common import LabError, write_json_atomic
from lab.study.runner import RESULTS, SAMPLES
from lab.study.stats import compare, holm, paired_within_model

SCORE_FLOOR = 5.0  # below this (BLEU-like 0-100) a lift says little: the cell is flagged


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise LabError(f"{path}: no such file (run lab study first)")
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _metrics(rows: list[dict[str, str]]) -> list[str]:
    fixed = {"study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size",
             "stage", "group", "samples"}
    return [c for c in rows[0] if c not in fixed and not c.startswith("codebleu_")]


def study_stats(study: Path, convention: str = "exact-two-sided") -> list[dict[str, Any]]:
    """One record per cell and contaminated arm."""
    study = Path(study)
    if not study.is_dir():
        raise LabError(f"{study}: no such study directory")
    rows = [r for r in _read(study / RESULTS) if r["group"] == "all"]
    if not rows:
        raise LabError(f"{study / RESULTS}: the study has no finished runs")
    samples = _read(study / SAMPLES) if (study / SAMPLES).is_file() else []
    cells: list[dict[str, Any]] = []
    keys = sorted({(r["model"], r["task"], r["epochs"], r["train_size"]) for r in rows},
                  key=lambda k: (k[0], k[1], int(k[2]), k[3]))
    arms = sorted({r["arm"] for r in rows} - {"control"})
    for metric in _metrics(rows):
        for model, task, epochs, size in keys:
            here = [r for r in rows if (r["model"], r["task"], r["epochs"], r["train_size"])
                    == (model, task, epochs, size)]
            control = [float(r[metric]) for r in here if r["arm"] == "control" and r[metric] != ""]
            for arm in arms:
                experimental = [float(r[metric]) for r in here if r["arm"] == arm and r[metric] != ""]
                cell: dict[str, Any] = {"model": model, "task": task, "metric": metric,
                                        "epochs": int(epochs), "train_size": size, "arm": arm,
                                        "seeds": len(experimental)}
                if experimental and control:
                    result = compare(experimental, control, convention)
                    cell.update(experimental=result.mean_experimental,
                                experimental_std=_std(experimental), control=result.mean_control,
                                control_std=_std(control), lift=result.lift, p=result.p,
                                test=result.convention(), cliffs_delta=result.cliffs_delta,
                                lift_ci_low=result.lift_ci[0], lift_ci_high=result.lift_ci[1])
                    cell["below_floor"] = max(result.mean_experimental, result.mean_control) < SCORE_FLOOR
                score_key = f"score_{metric}"
                injected = [float(s[score_key]) for s in samples if s["arm"] == arm
                            and (s["model"], s["task"], s["epochs"], s["train_size"])
                            == (model, task, epochs, size) and s["group"] == "injected"
                            and s.get(score_key, "") != ""]
                held = [float(s[score_key]) for s in samples if s["arm"] == arm
                        and (s["model"], s["task"], s["epochs"], s["train_size"])
                        == (model, task, epochs, size) and s["group"] == "held_out"
                        and s.get(score_key, "") != ""]
                if injected and held:
                    _u, p_within = paired_within_model(injected, held)
                    cell.update(injected=sum(injected) / len(injected),
                                held_out=sum(held) / len(held), p_within=p_within)
                cells.append(cell)
    tested = [i for i, c in enumerate(cells) if "p" in c]
    for i, adjusted in zip(tested, holm([cells[i]["p"] for i in tested])):
        cells[i]["p_holm"] = adjusted
    return cells


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _fmt(cell: dict[str, Any], key: str, std: str | None = None) -> str:
    if key not in cell:
        return "-"
    text = f"{cell[key]:.2f}"
    return f"{text} ± {cell[std]:.2f}" if std and std in cell else text


def tables(cells: list[dict[str, Any]]) -> dict[str, str]:
    """Paper-style tables: Markdown, LaTeX and CSV."""
    header = ["model", "task", "metric", "epochs", "arm", "experimental", "control", "p", "p (Holm)",
              "injected", "held-out", "p (within)"]
    lines = []
    for c in cells:
        flag = " †" if c.get("below_floor") else ""
        lines.append([c["model"], c["task"], c["metric"], str(c["epochs"]), c["arm"],
                      _fmt(c, "experimental", "experimental_std"), _fmt(c, "control", "control_std"),
                      (f"{c['p']:.4f}" if "p" in c else "-") + flag,
                      f"{c['p_holm']:.4f}" if "p_holm" in c else "-",
                      _fmt(c, "injected"), _fmt(c, "held_out"),
                      f"{c['p_within']:.2g}" if "p_within" in c else "-"])
    test = next((c["test"] for c in cells if "test" in c), "Mann-Whitney U")
    note = (f"Arm vs control over seeds: {test}; Holm across the table's cells. Within: injected vs "
            "held-out samples of the same models, Mann-Whitney U, greater, asymptotic. "
            f"† both means below {SCORE_FLOOR}: a lift there says little.")
    markdown = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    markdown += "".join("| " + " | ".join(row) + " |\n" for row in lines) + f"\n{note}\n"
    latex = ("\\begin{tabular}{" + "l" * 5 + "r" * 7 + "}\n\\toprule\n" + " & ".join(header)
             + " \\\\\n\\midrule\n"
             + "".join(" & ".join(x.replace("±", "$\\pm$").replace("†", "$^\\dagger$")
                                  .replace("_", "\\_") for x in row) + " \\\\\n" for row in lines)
             + "\\bottomrule\n\\end{tabular}\n% " + note + "\n")
    csv_text = ",".join(header) + "\n" + "".join(
        ",".join('"' + x + '"' for x in row) + "\n" for row in lines)
    return {"md": markdown, "tex": latex, "csv": csv_text}


def decay_figure(cells: list[dict[str, Any]], metric: str, out_base: Path) -> list[Path]:
    """Each arm's score against fine-tuning epochs (one panel per task), control and arm joined
    at every epoch, p-values on a second axis; PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [c for c in cells if c["metric"] == metric and "experimental" in c]
    if not chosen:
        raise LabError(f"no finished cells with metric {metric} to plot")
    panels = sorted({(c["model"], c["task"], c["arm"]) for c in chosen})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (model, task, arm) in zip(axes[0], panels):
        series = sorted((c for c in chosen if (c["model"], c["task"], c["arm"]) == (model, task, arm)),
                        key=lambda c: c["epochs"])
        epochs = [c["epochs"] for c in series]
        ax.errorbar(epochs, [c["control"] for c in series], yerr=[c["control_std"] for c in series],
                    marker="o", capsize=3, label="control")
        ax.errorbar(epochs, [c["experimental"] for c in series],
                    yerr=[c["experimental_std"] for c in series], marker="s", capsize=3, label=arm)
        for c in series:
            ax.plot([c["epochs"]] * 2, [c["control"], c["experimental"]], color="black", lw=0.8)
        ax.set_xlabel("fine-tuning epochs (0 = direct inference)")
        ax.set_ylabel(metric)
        ax.set_title(f"{model}, {task}")
        twin = ax.twinx()
        twin.plot(epochs, [c["p"] for c in series], "r--o", ms=4, label="p")
        twin.axhline(0.05, color="red", lw=0.5, ls=":")
        twin.set_ylim(0, 1)
        twin.set_ylabel("p-value", color="red")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    paths = [out_base.with_suffix(".png"), out_base.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


def run_report(study: Path, convention: str = "exact-two-sided", metric: str = "bleu"
               ) -> dict[str, Any]:
    """Entry point of `lab report`: tables (md, tex, csv), stats.json and the decay figure."""
    study = Path(study)
    cells = study_stats(study, convention)
    folder = study / "report"
    folder.mkdir(exist_ok=True)
    written = []
    for suffix, text in tables(cells).items():
        path = folder / f"table.{suffix}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    write_json_atomic(folder / "stats.json", cells)
    figure = decay_figure(cells, metric, folder / f"decay-{metric}")
    return {"cells": cells, "tables": written, "figure": figure, "markdown": tables(cells)["md"]}
