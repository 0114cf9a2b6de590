"""A study's results as tables: results.csv (one row per evaluation and group of samples),
samples.csv (one row per evaluated sample) and probes.csv (one row per probed sample), each
also as Parquet, collected from the finished stages.

The stages are the source: tables.json, written after the tables, records each file's sha256
and the recipe they were collected by, and `lab stats`, `lab report` and `lab merge` refuse
tables that are not those (check_tables): a table edited, truncated or out of step with its
Parquet copy or with the stages is named, file, line and column, never read. They do not
rebuild it themselves: `lab merge STUDY --out NEW` does, from the stages."""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

from lab.common import (EVALUATION, LabError, atomic_file, read_json_if_there, sha256_file,
                        table_cell, write_json_atomic, write_text_atomic)
from lab.analysis.plan import change_text, changes, check_recorded, planned_statistics
from lab.study.grid import Stage, expand, model_name
from lab.study.recipe import Recipe, recipe_dict, recipe_from_dict, study_differences

RESULTS = "results.csv"
SAMPLES = "samples.csv"
DOSE_GROUP = "dose="  # results.csv group of a dose ladder's level: dose=0, dose=4, ...
TIMING_GROUP = "timing="  # results.csv group of a timing level: timing=early:0.2, ...
PROBES = "probes.csv"  # per pre-trained model and probed sample: the memorisation probes
PROBE_COLUMNS = ("tokens", "loss", "min_k", "infill", "extraction_em", "extraction_bleu")
# per scored model, detector and dose (all: every member), its membership metrics
DETECTIONS = "detect.csv"
LEADERBOARD = "detect_leaderboard.csv"  # per detector and condition, over seeds
RECIPE = "recipe.json"  # the study's recipe, as recorded when it began (lab.study.runner)
TABLES_RECORD = "tables.json"  # written after the tables: their sha256 and the recipe they came from
TABLES_KIND = "lab-tables"
# samples.parquet only (the CSV keeps the scores lab stats reads): each sample's text from its
# evaluation's predictions.jsonl, joinable by stage and id as lm-eval's --log_samples.
SAMPLE_TEXT = ("source", "reference", "prediction")
# samples.csv's column in a study that sweeps decontamination (injection.decontaminate_with): the
# sample's every copy was removed by its arm's decontaminator (lab.analysis.decontam_lift counts it)
REMOVED = "removed_by_decontamination"


def collect(recipe: Recipe, stages: list[Stage], study: Path) -> tuple[Path, Path]:
    """results.csv (one row per evaluation and group), samples.csv (one row per sample) and
    probes.csv, from the finished stages, then tables.json."""
    write_tables(study, study_tables(recipe, stages, study), recipe)
    return study / RESULTS, study / SAMPLES


def study_tables(recipe: Recipe, stages: list[Stage], study: Path
                 ) -> dict[str, list[dict[str, Any]]]:
    """Each table's rows from the finished stages, in the order collect writes them (the
    detectors' tables only where a detect stage finished)."""
    run_rows, sample_rows, probe_rows = collected_rows(recipe, stages, study)
    tables = {PROBES: probe_rows}
    detections = detection_rows(recipe, stages, study)
    if detections:
        from lab.detect.leaderboard import leaderboard

        tables.update({DETECTIONS: detections, LEADERBOARD: leaderboard(detections)})
    return {**tables, RESULTS: run_rows, SAMPLES: sample_rows}


def write_tables(folder: Path, tables: dict[str, list[dict[str, Any]]], recipe: Recipe) -> None:
    """The tables (write_table), then tables.json: what check_tables holds them to."""
    files = {}
    for name, rows in tables.items():
        path = write_table(folder / name, rows)
        for written in (path.with_suffix(".parquet"), path):
            files[written.name] = sha256_file(written)
    write_json_atomic(folder / TABLES_RECORD, {"kind": TABLES_KIND, "files": files,
                                               "recipe": recipe_dict(recipe)})


def stage_model(stage: Stage, study: Path) -> dict[str, Any]:
    """The manifest of a finished pre-training or fine-tuning stage, read and verified as every
    command reads a model (its weights, membership, corpus and parent: read_model)."""
    from lab.train.artefacts import read_model

    return read_model(stage.out(study), "study stage")


def collected_rows(recipe: Recipe, stages: list[Stage], study: Path
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of results.csv, samples.csv and probes.csv from the finished stages (a killed
    or running study's included), written nowhere."""
    _check_seeds(stages, study)
    run_rows, sample_rows = [], []
    for stage in stages:
        if stage.kind != "evaluate" or not stage.done(study):
            continue
        metrics = json.loads((stage.out(study) / EVALUATION).read_text())
        pretrain = stage_model(stage.inputs[0].inputs[0], study)
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
                                    **({REMOVED: bool(row.get(REMOVED))}
                                       if "decontam" in stage.labels else {}),
                                    **({"timing": row.get("timing"),
                                        "steps_since_last_exposure":
                                            pretrain["exposures"]["steps"] - last[-1] if last
                                            else None} if timed else {}),
                                    **{f"score_{k}": v for k, v in row["scores"].items()},
                                    **{k: row.get(k) for k in SAMPLE_TEXT}})
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


def baseline_column(name: str, metric: str) -> str:
    """results.csv's column of a trivial baseline's score in one metric."""
    return f"{BASELINE_PREFIX}{name}_{metric}"


def baseline_columns(baselines: dict[str, Any], group: str) -> dict[str, float]:
    """A results row's baseline scores: each trivial baseline's, on the same group of samples."""
    columns = {}
    for name, scores in baselines.items():
        if not isinstance(scores, dict) or "metrics" not in scores:
            continue  # the retrieval pool's note
        values = scores["metrics"] if group == "all" else scores["by_group"].get(group, {})
        columns.update({baseline_column(name, metric): value
                        for metric, value in values.items() if metric != "samples"})
    return columns


def _check_seeds(stages: list[Stage], study: Path) -> None:
    """Refuse results whose repetitions collapsed: the pre-trained models of one arm and model
    must differ by seed in their initial weights and their data order."""
    from lab.train.pretrain import check_seed_diversity

    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for stage in stages:
        if stage.kind == "pretrain" and stage.done(study):
            manifest = stage_model(stage, study)
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
    (NAME.parquet, typed columns for pandas and polars; samples.parquet adds SAMPLE_TEXT)."""
    columns, rounded = _rounded(rows)
    # Each through its own temporary file (atomic_file): two runners of one study may write
    # the tables at once, and each leaves a whole file.
    _write_parquet(path.with_suffix(".parquet"), rounded, columns)
    write_text_atomic(path, _csv_text(rounded, [c for c in columns if c not in SAMPLE_TEXT]))
    return path


def _rounded(rows: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Every row's columns (in order of first appearance) and its cells as the tables hold them."""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    return columns, [{c: table_cell(row.get(c)) for c in columns} for row in rows]


def _csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def _write_parquet(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in columns})
    with atomic_file(path) as handle:
        pq.write_table(table, handle)


# ---- one source: the tables are what the stages give -----------------------------------------

TABLE_NAMES = (RESULTS, SAMPLES, PROBES, DETECTIONS, LEADERBOARD)


def recorded_recipe(study: Path) -> Recipe | None:
    """STUDY/recipe.json as the Recipe it records (None: a folder of tables without one):
    checked the same way, and refused with the same line, by every command that reads it."""
    path = Path(study) / RECIPE
    if not path.is_file():
        return None
    try:
        return recipe_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None
    except LabError as exc:
        raise LabError(f"{path}: a recipe this lab cannot read ({exc})") from None


def tables_record(folder: Path) -> dict[str, Any]:
    """FOLDER/tables.json ({} where the tables predate it or were written by hand)."""
    path = Path(folder) / TABLES_RECORD
    record = read_json_if_there(path)
    if record is None:
        return {}
    if not (isinstance(record, dict) and record.get("kind") == TABLES_KIND
            and isinstance(record.get("files"), dict)):
        raise LabError(f"{path}: not the record lab writes of a study's tables")
    return record


def check_recipe_ran(folder: Path, recipe: Recipe) -> None:
    """Refuse a recipe.json that is not the recipe the folder's stages ran by: the one
    tables.json recorded with the tables, and one whose stages include every finished stage
    under stages/ (a replaced recipe would read, merge or report other stages' numbers)."""
    folder = Path(folder)
    recorded = tables_record(folder).get("recipe")
    changed: list[str] = []
    if recorded is not None:
        try:
            changed = study_differences(recipe_from_dict(recorded), recipe)
        except LabError as exc:
            raise LabError(f"{folder / TABLES_RECORD}: recipe: a recipe this lab cannot read "
                           f"({exc})") from None
    if changed:
        sections = list(dict.fromkeys(re.split(r"[.\[]", field)[0] for field in changed))
        raise LabError(f"{folder / RECIPE}: not the recipe {folder}'s stages ran by (differs "
                       f"from the one {TABLES_RECORD} recorded in {len(sections)} section(s): "
                       f"{', '.join(sections)})")
    check_recorded(folder)  # the plan frozen when the study began (lab.analysis.plan)
    if recorded is not None:  # and the one the tables were collected under
        statistics = changes(planned_statistics(recipe_from_dict(recorded)),
                             planned_statistics(recipe), unset_is_planned=False)
        if statistics:
            raise LabError(f"{folder / RECIPE}: {change_text(*statistics[0])} is not the "
                           f"analysis {TABLES_RECORD} recorded with the tables")
    if (folder / "stages").is_dir() and (folder / RESULTS).is_file():
        # Without the record, the stages results.csv was collected from must be the recipe's.
        # (Not every folder under stages/: a resumed study may leave stages of an earlier
        # launch or detect section there, which its recipe no longer names.)
        keys = {stage.key for stage in expand(recipe)}
        try:
            with open(folder / RESULTS, newline="", encoding="utf-8") as handle:
                named = {row.get("stage") for row in csv.DictReader(handle)}
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise LabError(f"{folder / RESULTS}: unreadable ({exc})") from None
        foreign = sorted(key for key in named - keys if key and (folder / "stages" / key).is_dir())
        if foreign:
            raise LabError(f"{folder / RECIPE}: not the recipe {folder}'s stages ran by "
                           f"({len(foreign)} evaluation(s) of {RESULTS} are not stages of it, "
                           f"e.g. {foreign[0]})")


def check_tables(study: Path) -> Recipe | None:
    """Refuse, in one line naming the file and its line and column, a study whose tables are
    not those lab wrote: the files tables.json records, unchanged; else (it differs, or the
    tables predate it) the rows the stages give, or without stages, the table's own CSV and
    Parquet copies agreeing. Returns the study's recipe (recorded_recipe)."""
    study = Path(study)
    recipe = recorded_recipe(study)
    if recipe is not None:
        check_recipe_ran(study, recipe)
    files = tables_record(study).get("files", {})
    present = {path.name: path for name in TABLE_NAMES
               for path in (study / name, (study / name).with_suffix(".parquet"))
               if path.is_file()}
    changed = sorted(name for name in set(files) | set(present)
                     if name not in present or files.get(name) != sha256_file(present[name]))
    for path in present.values():
        if path.suffix == ".csv":
            whole_lines(path)
            if path.name in SCORED_TABLES:
                finite_scores(path)
    if recipe is not None and (study / "stages").is_dir():
        # The stages are the source, whatever tables.json says (its sha256 can be recomputed
        # by whoever edits a table): tables equal to what they give are right (two runners of
        # one study may have written the tables and the record in turn).
        expected = study_tables(recipe, expand(recipe), study)
        for name in TABLE_NAMES:
            for path in (study / name, (study / name).with_suffix(".parquet")):
                if name in expected or path.is_file():
                    _refuse_difference(path, expected.get(name, []), "the stages give")
        return recipe
    if files and not changed:
        return recipe  # no stages: what lab wrote, as it wrote it
    for name in TABLE_NAMES:
        path, copy = study / name, (study / name).with_suffix(".parquet")
        if path.is_file() and copy.is_file():
            # The one lab wrote (by the record) is the reference; else the Parquet copy.
            if copy.name in changed and path.name not in changed and files:
                _refuse_difference(copy, _csv_rows(path), f"{path.name} holds", parquet=True)
            else:
                _refuse_difference(path, _parquet_rows(copy), f"{copy.name} holds")
    if files and changed:
        raise LabError(f"{study / changed[0]}: not the file lab wrote (its sha256 differs from "
                       f"{study / TABLES_RECORD}'s) and no stages/ to hold it to")
    return recipe


# The tables of scores lab stats, lab report and lab merge read: a cell of them that is not a
# finite number (nan, inf) no mean or test can use, and readers would drop it silently.
SCORED_TABLES = (RESULTS, SAMPLES)


def finite_scores(path: Path) -> None:
    """Refuse a scores table (SCORED_TABLES) holding nan or inf, by line and column."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            for line, cells in enumerate(reader, 2):
                for column, text in zip(header, cells):
                    try:
                        finite = math.isfinite(float(text))
                    except ValueError:
                        continue  # text, not a number
                    if not finite:
                        raise LabError(f"{path}: line {line}, column {column}: {text!r} is not a "
                                       "finite number (no mean or test can use it)"
                                       + _rebuild(path.parent))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None


def whole_lines(path: Path) -> None:
    """Refuse a table cut short: lab writes every line whole, ending with a line break."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 1))
            if size and handle.read(1) != b"\n":
                handle.seek(0)
                lines = handle.read().count(b"\n") + 1
                raise LabError(f"{path}: truncated (line {lines} ends without a line break; lab "
                               f"writes whole lines){_rebuild(path.parent)}")
    except OSError as exc:
        raise LabError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _rebuild(study: Path) -> str:
    """How a study's tables are made again from its stages (where it has them)."""
    if (study / "stages").is_dir():
        return f": `lab merge {study} --out NEW` rebuilds them from its stages"
    return ""


def _cell_text(value: Any) -> str:
    return "" if value is None else str(value)


def _csv_rows(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001 (pyarrow's errors have no common base)
        raise LabError(f"{path}: unreadable Parquet ({exc})") from None


def _refuse_difference(path: Path, expected: list[dict[str, Any]], source: str,
                       parquet: bool = False) -> None:
    """Refuse `path` where its rows are not `expected` (the rows another source gives): the
    first line (row of a Parquet file) and column that differ, or the rows one has beyond the
    other. A CSV is compared without SAMPLE_TEXT (the Parquet copy's alone)."""
    parquet = parquet or path.suffix == ".parquet"
    if not path.is_file():
        raise LabError(f"{path}: missing, where {source} {len(expected)} rows"
                       + _rebuild(path.parent))
    try:
        actual = _parquet_rows(path) if parquet else _csv_rows(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None
    columns, rounded = _rounded(expected)
    if not parquet:
        columns = [c for c in columns if c not in SAMPLE_TEXT]
    have = list(actual[0]) if actual else columns
    # A CSV holds no SAMPLE_TEXT, nor does a Parquet copy written before it was added.
    columns = [c for c in columns if c in have or c not in SAMPLE_TEXT]
    have = [c for c in have if c in columns or c not in SAMPLE_TEXT]
    if expected and have != columns:
        extra = [c for c in have if c not in columns]
        lacking = [c for c in columns if c not in have]
        raise LabError(f"{path}: columns differ from those {source} ("
                       + "; ".join(part for part in (
                           extra and f"extra: {', '.join(extra[:3])}",
                           lacking and f"missing: {', '.join(lacking[:3])}") if part)
                       + (f"; in another order" if not extra and not lacking else "")
                       + ")" + _rebuild(path.parent))
    where = "row" if parquet else "line"
    offset = 1 if parquet else 2  # a CSV's first row is its line 2
    for number, (row, want) in enumerate(zip(actual, rounded), offset):
        for column in columns:
            if not _same(row.get(column), want.get(column)):
                named = ", ".join(f"{c} {want[c]}" for c in ("stage", "id", "group")
                                  if want.get(c) is not None)
                raise LabError(f"{path}: {where} {number} ({named}), column {column}: "
                               f"{_cell_text(row.get(column))!r} where {source} "
                               f"{_cell_text(want.get(column))!r}{_rebuild(path.parent)}")
    if len(actual) != len(rounded):
        raise LabError(f"{path}: {len(actual)} rows where {source} {len(rounded)}"
                       + (" (truncated?)" if len(actual) < len(rounded) else "")
                       + _rebuild(path.parent))


def _same(value: Any, wanted: Any) -> bool:
    """Two cells equal as the tables hold them: text and numbers alike (a CSV's 1.0 is a
    Parquet copy's 1.0), NaN equal to NaN."""
    text, wanted_text = _cell_text(value), _cell_text(wanted)
    if text == wanted_text:
        return True  # the same text is the same cell (most are: every report compares them all)
    a, b = typed_cell(text), typed_cell(wanted_text)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b


def typed_cell(text: str) -> Any:
    """A CSV cell as a number where it is one (only where it writes back as the same text:
    an id like 007 stays text), empty as None."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            if str(kind(text)) == text:
                return kind(text)
        except ValueError:
            continue
    return text
