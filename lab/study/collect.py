"""A study's results as tables: results.csv (one row per evaluation and group of samples),
samples.csv (one row per evaluated sample) and probes.csv (one row per probed sample), each
also as Parquet, collected from the finished stages."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from lab.common import LabError, atomic_file, table_cell, write_text_atomic
from lab.study.grid import Stage, model_name
from lab.study.recipe import Recipe

RESULTS = "results.csv"
SAMPLES = "samples.csv"
DOSE_GROUP = "dose="  # results.csv group of a dose ladder's level: dose=0, dose=4, ...
TIMING_GROUP = "timing="  # results.csv group of a timing level: timing=early:0.2, ...
PROBES = "probes.csv"  # per pre-trained model and probed sample: the memorisation probes
PROBE_COLUMNS = ("tokens", "loss", "min_k", "infill", "extraction_em", "extraction_bleu")
# per scored model, detector and dose (all: every member), its membership metrics
DETECTIONS = "detect.csv"
LEADERBOARD = "detect_leaderboard.csv"  # per detector and condition, over seeds


def collect(recipe: Recipe, stages: list[Stage], study: Path) -> tuple[Path, Path]:
    """results.csv (one row per evaluation and group), samples.csv (one row per sample) and
    probes.csv, from the finished stages."""
    run_rows, sample_rows, probe_rows = collected_rows(recipe, stages, study)
    write_table(study / PROBES, probe_rows)
    detections = detection_rows(recipe, stages, study)
    if detections:
        from lab.detect.leaderboard import leaderboard

        write_table(study / DETECTIONS, detections)
        write_table(study / LEADERBOARD, leaderboard(detections))
    return write_table(study / RESULTS, run_rows), write_table(study / SAMPLES, sample_rows)


def collected_rows(recipe: Recipe, stages: list[Stage], study: Path
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of results.csv, samples.csv and probes.csv from the finished stages (a killed
    or running study's included), written nowhere."""
    _check_seeds(stages, study)
    run_rows, sample_rows = [], []
    for stage in stages:
        if stage.kind != "evaluate" or not stage.done(study):
            continue
        metrics = json.loads((stage.out(study) / "metrics.json").read_text())
        pretrain = json.loads((stage.inputs[0].inputs[0].out(study) / "manifest.json").read_text())
        base = {"study": recipe.name, "benchmark": recipe.benchmark, "task": metrics["task"],
                "model": model_name(stage.labels),
                **{k: stage.labels.get(k) for k in ("arm", "seed", "epochs", "train_size")},
                **({"weight_decay": stage.labels["weight_decay"]}
                   if "weight_decay" in stage.labels else {}),
                "stage": stage.key,
                # How much of pre-training was test data, and how far its loss came down: a
                # lift (or its absence) means little without either.
                "injected_token_fraction": pretrain["packing"]["injected_token_fraction"],
                "pretrain_loss": pretrain["loss"]["final"]}
        groups = {"all": {"samples": metrics["samples"], **metrics["metrics"]}, **metrics["by_group"]}
        for group, values in groups.items():
            run_rows.append({**base, "group": group, **values,
                             **baseline_columns(metrics.get("baselines") or {}, group)})
        # A dose ladder's levels: rows of their own (group dose=K), with the level's share of
        # the trained tokens.
        shares = pretrain["corpus"].get("injected_token_fraction_by_dose") or {}
        for dose, values in (metrics.get("by_dose") or {}).items():
            run_rows.append({**base, "injected_token_fraction": shares.get(dose, 0.0),
                             "group": f"{DOSE_GROUP}{dose}", **values})
        for timing, values in (metrics.get("by_timing") or {}).items():
            run_rows.append({**base, "group": f"{TIMING_GROUP}{timing}", **values})
        # A timed arm's samples: when each was last trained on (lab.train.schedule)
        timed = pretrain["corpus"].get("timing_levels")
        exposed = pretrain.get("exposures", {}).get("by_sample", {}) if timed else {}
        with open(stage.out(study) / "predictions.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                last = exposed.get(row["id"])
                sample_rows.append({**base, "id": row["id"], "group": row["group"],
                                    **({"dose": row["dose"]} if "dose" in row else {}),
                                    **({"timing": row.get("timing"),
                                        "steps_since_last_exposure":
                                            pretrain["exposures"]["steps"] - last[-1] if last
                                            else None} if timed else {}),
                                    **{f"score_{k}": v for k, v in row["scores"].items()}})
    probe_rows = []
    for stage in stages:
        if stage.kind != "probe" or not stage.done(study):
            continue
        summary = json.loads((stage.out(study) / "summary.json").read_text())
        base = _stage_columns(recipe, stage, ("arm", "seed", "groups"), form=summary["form"])
        with open(stage.out(study) / "probes.jsonl", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                probe_rows.append({**base, "id": row["id"], "group": row["group"],
                                   **({"dose": row["dose"]} if "dose" in row else {}),
                                   **{k: row.get(k) for k in PROBE_COLUMNS}})
    return run_rows, sample_rows, probe_rows


def _stage_columns(recipe: Recipe, stage: Stage, labels: tuple[str, ...], **more: Any
                   ) -> dict[str, Any]:
    """The columns a probe or detect stage's rows begin with: the study, the model, the stage's
    labels, what its summary says (`more`) and its key."""
    return {"study": recipe.name, "benchmark": recipe.benchmark,
            "model": model_name(stage.labels), **{k: stage.labels.get(k) for k in labels},
            **more, "stage": stage.key}


def detection_rows(recipe: Recipe, stages: list[Stage], study: Path) -> list[dict[str, Any]]:
    """One row per finished detect stage, comparison, detector and dose ('all': every member),
    with the stage's labels (model, arm, seed, groups, epochs: None for the pre-trained model).
    Comparison 'membership': injected against never-seen samples; 'shift': the never-seen test
    samples against never-seen valid ones (the distribution-shift check)."""
    rows = []
    for stage in stages:
        if stage.kind != "detect" or not stage.done(study):
            continue
        summary = json.loads((stage.out(study) / "summary.json").read_text())
        base = _stage_columns(recipe, stage, ("arm", "seed", "groups", "epochs"),
                              form=summary["form"], baseline=summary["baseline"])
        levels = [("membership", "all", summary["detectors"])] + [
            ("membership", dose, detectors)
            for dose, detectors in (summary.get("by_dose") or {}).items()] + [
            # held-out test against never-seen valid samples: no member on either side
            ("shift", "all", (summary.get("shift") or {}).get("detectors") or {})]
        for comparison, dose, detectors in levels:
            for name, metrics in detectors.items():
                rows.append({**base, "comparison": comparison, "detector": name, "dose": dose,
                             **metrics})
    return rows


BASELINE_PREFIX = "baseline_"  # results.csv: baseline_<name>_<metric>, on the row's samples


def baseline_columns(baselines: dict[str, Any], group: str) -> dict[str, float]:
    """A results row's baseline scores: each trivial baseline's, on the same group of samples."""
    columns = {}
    for name, scores in baselines.items():
        if not isinstance(scores, dict) or "metrics" not in scores:
            continue  # the retrieval pool's note
        values = scores["metrics"] if group == "all" else scores["by_group"].get(group, {})
        columns.update({f"{BASELINE_PREFIX}{name}_{metric}": value
                        for metric, value in values.items() if metric != "samples"})
    return columns


def _check_seeds(stages: list[Stage], study: Path) -> None:
    """Refuse results whose repetitions collapsed: the pre-trained models of one arm and model
    must differ by seed in their initial weights and their data order."""
    from lab.train.pretrain import check_seed_diversity

    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for stage in stages:
        if stage.kind == "pretrain" and stage.done(study):
            manifest = json.loads((stage.out(study) / "manifest.json").read_text())
            groups.setdefault((stage.labels["model"], stage.config.preset, stage.labels["arm"]),
                              []).append(manifest)
    several = len({preset for _model, preset, _arm in groups}) > 1
    for (model, preset, arm), manifests in sorted(groups.items()):
        try:
            check_seed_diversity(manifests)
        except LabError as exc:
            named = f"{model} {preset}" if several else model
            raise LabError(f"{study}: {named} {arm}: {exc}") from None


def write_table(path: Path, rows: list[dict[str, Any]]) -> Path:
    """The CSV table (what lab stats and lab report read) and the same rows as Parquet beside it
    (NAME.parquet, typed columns for pandas and polars)."""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    rounded = [{c: table_cell(row.get(c)) for c in columns} for row in rows]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rounded)
    # Each through its own temporary file (atomic_file): two runners of one study may write
    # the tables at once, and each leaves a whole file.
    _write_parquet(path.with_suffix(".parquet"), rounded, columns)
    write_text_atomic(path, text.getvalue())
    return path


def _write_parquet(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in columns})
    with atomic_file(path) as handle:
        pq.write_table(table, handle)
