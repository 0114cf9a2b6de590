"""What `lab stats` and `lab report` read from a study folder, before anything is computed or
rendered: its CSV tables (read_csv, whose errors name the file, line and column), the analysis
its recipe declares (convention, alpha, the primary questions, metric, score and planned seeds),
the primary table built from them, and what the HTML page's sample browser shows: every
evaluation's per-sample scores and predictions, the loss curves and the probes.

The primary table holds the study's primary contrasts (lab.analysis.primary): each declared
question as an effect over seeds with its interval, its exact sign-flip test and Holm over the
declared family. The secondary table's cells are computed from the same tables in
lab.analysis.cells; the renderers (lab.analysis.tables, lab.analysis.html, lab.analysis.figure)
read both.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Callable

from lab.common import LabError, read_jsonl
from lab.contamination import settings as settings_table
from lab.models import MANIFEST
from lab.stats import CONVENTIONS, SAMPLE_SCORE, SCORES
from lab.analysis.plan import chosen_after_text, planned_seeds
from lab.analysis.primary import primary_table
from lab.analysis.questions import StatisticsSection
from lab.analysis.collect import (PROBE_COLUMNS, PROBES, RESULTS, SAMPLE_TEXT, SAMPLES,
                                  recorded_recipe, whole_lines)

LABELS = ("model", "task", "arm", "seed", "epochs", "train_size", "group")  # results.csv must have
SAMPLE_LABELS = ("model", "task", "arm", "epochs", "train_size", "group")   # samples.csv must have
NOT_METRICS = {"study", "benchmark", "task", "model", "arm", "seed", "epochs", "train_size",
               "stage", "group", "samples", "id", "injected_token_fraction", "pretrain_loss"}
RUN_NUMBERS = {"injected_token_fraction", "pretrain_loss"}  # numeric, but not metrics


# ---- reading ------------------------------------------------------------------------------

def _number(value: str, path: Path, line: int, column: str) -> float | None:
    """A CSV cell as a float; empty (or nan/inf, which no mean survives) counts as missing."""
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise LabError(f"{path}: line {line}, column {column}: '{value}' is not a number") from None
    return number if math.isfinite(number) else None


def read_csv(path: Path, required: tuple[str, ...], numeric: Callable[[str], bool]
             ) -> list[dict[str, Any]]:
    """Rows of a study CSV, numeric columns parsed; every defect is a LabError naming the file
    (and the line and column where there is one)."""
    if path.is_dir():
        raise LabError(f"{path}: is a directory, not a CSV file")
    if not path.exists():
        raise LabError(f"{path}: no such file (run lab study first)")
    whole_lines(path)
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                rows.append((reader.line_num, row))
            columns = list(reader.fieldnames or [])
    except OSError as exc:
        raise LabError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise LabError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise LabError(f"{path}: line {len(rows) + 2}: {exc}") from None
    if not rows:
        return []  # header only: the caller says what that means
    missing = [c for c in required if c not in columns]
    if missing:
        raise LabError(f"{path}: missing column(s) {', '.join(missing)}")
    for line, row in rows:
        if None in row or None in row.values():
            raise LabError(f"{path}: line {line}: expected {len(columns)} fields like the header")
        if "epochs" in required and not row["epochs"].isdigit():
            raise LabError(f"{path}: line {line}, column epochs: '{row['epochs']}' is not a "
                           "whole number")
        for column in columns:
            if numeric(column):
                row[column] = _number(row[column], path, line, column)
    return [row for _line, row in rows]


def train_size_order(size: str) -> tuple[int, int, str]:
    """Training-set sizes as numbers, then named ones (`all`): the order of tables and panels."""
    return (0, int(size), "") if size.isdigit() else (1, 0, size)


def convention_and_alpha(study: Path, convention: str | None, alpha: float | None
                         ) -> tuple[str, float]:
    """The test convention and alpha: as given, else the study's recipe (STUDY/recipe.json),
    else the lab's defaults."""
    given_convention, given_alpha = convention, alpha
    recorded: dict[str, Any] = {}
    recipe = study / "recipe.json"
    if (convention is None or alpha is None) and recipe.is_file():
        try:
            recorded = json.loads(recipe.read_text(encoding="utf-8")).get("statistics") or {}
        except (OSError, ValueError, AttributeError):
            raise LabError(f"{recipe}: unreadable (not the JSON lab study writes)") from None
    defaults = StatisticsSection()
    convention = convention or recorded.get("convention") or defaults.convention
    alpha = alpha if alpha is not None else recorded.get("alpha", defaults.alpha)
    given = {"convention": given_convention, "alpha": given_alpha}
    where = {k: f"--{k}" if v is not None else f"{recipe}: statistics.{k}" for k, v in given.items()}
    if convention not in CONVENTIONS:
        raise LabError(f"{where['convention']} '{convention}': choose from {', '.join(CONVENTIONS)}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < 1:
        raise LabError(f"{where['alpha']} {alpha!r}: expected a number in (0, 1)")
    return convention, float(alpha)


def _declared(study: Path) -> dict[str, Any]:
    """What the study's recipe (STUDY/recipe.json) declares of its primary contrasts: the
    questions (None: every one its arms allow), the metric and whether it is descriptive; the
    recipe's defaults where the study has no recipe.json or predates the fields."""
    recipe = study / "recipe.json"
    recorded: dict[str, Any] = {}
    if recipe.is_file():
        try:
            recorded = json.loads(recipe.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise LabError(f"{recipe}: unreadable (not the JSON lab study writes)") from None
    statistics = (recorded.get("statistics") if isinstance(recorded, dict) else None) or {}
    evaluation = (recorded.get("evaluation") if isinstance(recorded, dict) else None) or {}
    primary = statistics.get("primary")
    if primary is not None and (not isinstance(primary, list)
                                or not all(isinstance(q, str) for q in primary)):
        raise LabError(f"{recipe}: statistics.primary: expected a list of questions or null")
    score = statistics.get("score", SAMPLE_SCORE)
    if score not in SCORES:
        raise LabError(f"{recipe}: statistics.score '{score}': choose from {', '.join(SCORES)}")
    planned = planned_seeds(statistics.get("planned_seeds"),
                            recorded.get("seeds") if isinstance(recorded, dict) else None)
    if planned is not None and (not isinstance(planned, int) or isinstance(planned, bool)
                                or planned < 1):
        raise LabError(f"{recipe}: statistics.planned_seeds: expected int >= 1 or null, got "
                       f"{planned!r}")
    return {"primary": primary, "metric": statistics.get("primary_metric")
            or next(iter(evaluation.get("metrics") or []), None),
            "descriptive": bool(statistics.get("descriptive", False)), "where": recipe,
            "score": score, "planned_seeds": planned, **_declared_design(recorded)}


def _declared_design(recorded: Any) -> dict[str, Any]:
    """What the recipe's design says the primary family holds, whatever the data then allowed:
    whether its arms split the test samples (split-half questions are asked even where no
    injected sample could be scored), and the pre-training block (what a truncated sample did
    not fit). None where the study has no recipe.json: the data decide, as before."""
    if not isinstance(recorded, dict) or not recorded:
        return {"split": None, "block_size": None}
    injection = recorded.get("injection") or {}
    pretrain = recorded.get("pretrain") or {}
    return {"split": injection.get("fraction") is not None or bool(injection.get("doses")),
            "block_size": pretrain.get("block_size")}


def study_primary(study: Path) -> dict[str, Any]:
    """The study's primary table (lab.analysis.primary) as its recipe declares it, and only so:
    the questions, the metric (default: the recipe's first evaluation metric, else the
    results' first), the score, the convention's alternative, alpha, whether the study is
    descriptive and how many seeds it planned. No option changes it: an analysis chosen after
    seeing the data goes to the secondary tables (study_cells), labelled as such."""
    study = Path(study)
    convention, alpha = convention_and_alpha(study, None, None)
    declared = _declared(study)
    rows = [r for r in read_csv(study / RESULTS, LABELS,
                                lambda c: c in RUN_NUMBERS or c not in NOT_METRICS)]
    if not rows or not (study / SAMPLES).exists():
        return {"rows": [], "missing": f"{study / SAMPLES}: no per-sample scores"}
    samples = read_csv(study / SAMPLES, SAMPLE_LABELS, lambda c: c.startswith("score_"))
    metric = declared["metric"] or next(c for c in rows[0] if c not in NOT_METRICS)
    if not any(s.get(f"score_{metric}") is not None for s in samples):
        raise LabError(f"{declared['where']}: statistics.primary_metric '{metric}': no per-sample "
                       f"score_{metric} in {study / SAMPLES}")
    return primary_table(samples, rows, metric, declared["primary"], alpha,
                         CONVENTIONS[convention][0], declared["descriptive"], declared["score"],
                         declared["planned_seeds"], split=declared["split"],
                         block_size=declared["block_size"])


def chosen_after(study: Path, convention: str | None, alpha: float | None) -> str | None:
    """One line when the command line asks for another convention or alpha than the study's
    frozen plan (lab.analysis.plan): the secondary tables use them, the primary table does
    not."""
    recorded = convention_and_alpha(study, None, None)
    asked = convention_and_alpha(study, convention, alpha)
    changed = [(name, old, new) for name, old, new in zip(("convention", "alpha"), recorded, asked)
               if old != new]
    if not changed:
        return None
    return (f"Secondary analysis, {chosen_after_text(changed)} on the command line: the tables "
            "below use it; the primary table keeps the analysis frozen when the study began.")


# ---- the HTML page's sample browser ----------------------------------------------------------

def _stage_labels(study: Path) -> dict[str, dict[str, Any]]:
    """Stage key -> its labels (arm, seed, model, ...) from the study's recipe; empty for a
    folder without recipe.json (tables copied without their stages)."""
    from lab.study.grid import expand, model_name

    recipe = recorded_recipe(study)
    if recipe is None:
        return {}
    return {stage.key: {**stage.labels, "model": model_name(stage.labels)}
            for stage in expand(recipe) if "model" in stage.labels}


def _evaluations(study: Path) -> tuple[dict, list]:
    """(samples: id -> [source, reference], evaluations): every evaluation of samples.csv, the
    rows it scored, with each sample's prediction, source and reference from the evaluation's
    predictions.jsonl where the stage folder is there."""
    path = study / SAMPLES
    if not path.is_file():
        return {}, []
    evaluations: dict[tuple, dict[str, Any]] = {}
    for row in read_csv(path, SAMPLE_LABELS, lambda column: column.startswith("score_")):
        key = (row["model"], row["arm"], row.get("seed"), row["epochs"], row["train_size"],
               row.get("stage"))
        entry = evaluations.setdefault(key, {
            "model": row["model"], "arm": row["arm"],
            "seed": int(row["seed"]) if str(row.get("seed", "")).isdigit() else row.get("seed"),
            "epochs": int(row["epochs"]),
            "train_size": int(row["train_size"]) if row["train_size"].isdigit() else None,
            "stage": row.get("stage", ""), "ids": [], "groups": [], "scores": {}})
        entry["ids"].append(row["id"])
        entry["groups"].append(row["group"])
        for column, value in row.items():
            if column.startswith("score_"):
                entry["scores"].setdefault(column[len("score_"):], []).append(
                    None if value is None else round(value, 4))
    samples: dict[str, list[str]] = {}
    texts = _sample_texts(study)
    for entry in evaluations.values():
        found: dict[str, str] = {}
        stage = entry.pop("stage")
        predictions = study / "stages" / stage / "predictions.jsonl"
        if predictions.is_file():
            for _number, row in read_jsonl(predictions):
                found[row.get("id")] = row.get("prediction", "")
                samples.setdefault(row.get("id"), [row.get("source", ""), row.get("reference", "")])
        for sample in entry["ids"]:  # a study without its stages (a merge): samples.parquet
            text = texts.get((stage, sample))
            if sample not in found and text:
                found[sample] = text["prediction"]
                samples.setdefault(sample, [text["source"], text["reference"]])
        entry["predictions"] = [found.get(i, "(prediction not in the study folder)")
                                for i in entry["ids"]]
    return samples, list(evaluations.values())


def _sample_texts(study: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(stage, sample id) -> the sample's text (SAMPLE_TEXT) where samples.parquet holds it."""
    import pyarrow.parquet as pq

    copy = (study / SAMPLES).with_suffix(".parquet")
    if not copy.is_file() or not set(SAMPLE_TEXT) <= set(pq.read_schema(copy).names):
        return {}
    return {(str(row["stage"]), str(row["id"])): row for row in pq.read_table(
        copy, columns=["stage", "id", *SAMPLE_TEXT]).to_pylist() if row["prediction"] is not None}


def _curves(study: Path, labels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pre-training's logged loss (step, loss), labelled by model, arm and seed."""
    curves = []
    from lab.train.artefacts import read_model

    for path in sorted((study / "stages").glob(f"pretrain-*/{MANIFEST}")):
        label = labels.get(path.parent.name)
        if label is None:
            continue
        history = read_model(path.parent, "study stage")["loss"]["history"]
        curves.append({"model": label["model"], "arm": label["arm"], "seed": label["seed"],
                       "points": [[h["step"], round(h["loss"], 4)] for h in history
                                  if "loss" in h and "step" in h]})
    return curves


def _probes(study: Path) -> list[dict[str, Any]]:
    """probes.csv summarised: per model, arm, groups probed and sample group, the mean of
    each probe (over seeds and samples)."""
    path = study / PROBES
    if not path.is_file() or path.stat().st_size == 0:
        return []
    sums: dict[tuple, dict[str, list[float]]] = {}
    for row in read_csv(path, ("model", "arm", "group"), lambda c: c in PROBE_COLUMNS):
        bucket = sums.setdefault((row["model"], row["arm"], row.get("groups", ""), row["group"]),
                                 {c: [] for c in PROBE_COLUMNS})
        for column in PROBE_COLUMNS:
            if row.get(column) is not None:
                bucket[column].append(row[column])
    return [{"model": m, "arm": a, "probed split of": g, "group": grp,
             "samples": max((len(v) for v in values.values()), default=0),
             **{c: round(sum(v) / len(v), 4) if v else None for c, v in values.items()}}
            for (m, a, g, grp), values in sorted(sums.items())]


def baseline_arms() -> dict[str, Any]:
    """What the browser's gap subtracts by default: a contaminated arm's placebo (same form,
    other pairs: the gap is the contamination alone) where the study has it, else the control
    (which also never saw the task's format)."""
    placebos = {name: settings_table.placebo_of(name) for name in settings_table.names()}
    return {"control": settings_table.CONTROL.name,
            "placebos": {name: placebo for name, placebo in placebos.items() if placebo}}


def study_page_data(study: Path) -> dict[str, Any]:
    """Everything the HTML page shows from the study folder beside the tables, read (and any
    defect refused) before lab report writes a file."""
    study = Path(study)
    labels = _stage_labels(study)
    samples, evaluations = _evaluations(study)
    recipe_path = study / "recipe.json"
    recipe = json.loads(recipe_path.read_text(encoding="utf-8")) if recipe_path.is_file() else {}
    return {"recipe": recipe, "data": {
        "samples": samples, "evaluations": evaluations, "curves": _curves(study, labels),
        "probes": _probes(study), **baseline_arms()}}
