"""Shards of one study run apart (`lab study --seeds`, in other sessions, on other machines or
clusters) joined into one study folder that `lab stats` and `lab report` read.

A source is a study folder: with its `stages/` (finished or not: the finished evaluations and
probes count) or without them (its results.csv, samples.csv and probes.csv, as a shard's
results travel). All sources must hold the same recipe (resources aside: where a stage runs
does not change what it is). A stage found in two sources must carry the same numbers in both:
the same recipe and seed give the same metrics, so a difference is a reproducibility failure
and is refused, naming the stage and both sources.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

from lab.common import MERGED, LabError, check_output, table_cell, write_json_atomic
from lab.models import MANIFEST
from lab.analysis.plan import (ANALYSIS, frozen_analysis, merged_analysis, recorded_analysis,
                               with_frozen_statistics)
from lab.analysis.collect import (PROBES, RESULTS, SAMPLE_TEXT, SAMPLES, check_recipe_ran,
                                  check_tables, collected_rows, recorded_recipe, typed_cell,
                                  whole_lines, write_tables)
from lab.study.grid import expand
from lab.study.recipe import recipe_dict, study_differences
from lab.analysis.study_record import is_smoke

MERGED_KIND = "lab-merged"
# merged.json per source: what its stages ran with (manifest environment fields). The same
# recipe and seed give the same numbers on the same kind of CPU, not always across kinds.
ENVIRONMENT = (("git_commits", "git_commit"), ("cpus", "cpu"),
               ("cpu_capabilities", "cpu_capability"))
# Each table and the columns that identify one of its rows.
TABLES = ((RESULTS, ("stage", "group")), (SAMPLES, ("stage", "id", "group")),
          (PROBES, ("stage", "id", "group")))


def merge_studies(sources: list[Path], out: Path, seeds: list[int] | None = None,
                  force: bool = False, plan_from: Path | None = None) -> dict[str, Any]:
    """Entry point of `lab merge`: OUT gets the sources' recipe, the union of their results,
    samples and probes (of `seeds` only, if given: a shard's finished seeds, without the one
    under way), and merged.json; returns that record. An existing OUT is replaced only with
    `force` and only if it is an earlier merge (check_output); never a source, nor a folder
    inside or holding one. `plan_from`: the source whose analysis the merged study keeps where
    the sources' differ (lab.analysis.plan.merged_analysis), recorded in merged.json."""
    if not sources:
        raise LabError("lab merge: no study folders given")
    sources = [Path(source) for source in sources]
    out = Path(out)
    check_output(out, force, MERGED_KIND, sources)
    for source in sources:
        if is_smoke(source):
            raise LabError(f"{source / 'study.json'}: a smoke study (lab study --smoke): its "
                           "sizes were shrunk and its numbers measure nothing; merge the real "
                           "study's shards")
    recipes = [_source_recipe(source) for source in sources]
    # One plan for the merged study: the sources' own frozen plans (lab.analysis.plan), which
    # must agree unless plan_from names the one to keep. Its planned seeds stay those the plan
    # began with: merged beyond them, the report calls the analysis exploratory.
    plans = [(recorded_analysis(source) or (None, frozen_analysis(recipe)))[1]
             for source, recipe in zip(sources, recipes)]
    plan = merged_analysis(sources, plans, plan_from)
    recipes = [with_frozen_statistics(r, plan) for r in recipes]
    for source, recipe in zip(sources[1:], recipes[1:]):
        # More seeds of one study (to reach alpha) are the same study: the stages of a seed do
        # not depend on the others', but all read the tokenizer of the first seed's control.
        changed = [d for d in study_differences(recipes[0], recipe) if d != "seeds"]
        if recipe.seeds[0] != recipes[0].seeds[0]:
            changed.insert(0, "seeds[0] (the seed whose control corpus trains the tokenizer)")
        if changed:
            raise LabError(f"{source / 'recipe.json'}: another recipe than "
                           f"{sources[0] / 'recipe.json'} (differs in {', '.join(changed[:3])})")
    recipes[0] = dataclasses.replace(recipes[0], seeds=[recipes[0].seeds[0]] + sorted(
        {seed for recipe in recipes for seed in recipe.seeds} - {recipes[0].seeds[0]}))
    tables: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {name: {} for name, _ in TABLES}
    found_in: dict[tuple[str, tuple[str, ...]], Path] = {}
    given = []
    for source, recipe in zip(sources, recipes):
        rows = _source_rows(source, recipe)
        if seeds is not None:
            rows = {name: [row for row in table if row.get("seed") in seeds]
                    for name, table in rows.items()}
        for name, identity in TABLES:
            for row in rows[name]:
                key = tuple(str(row.get(column, "")) for column in identity)
                held = tables[name].get(key)
                if held is None:
                    tables[name][key] = row
                    found_in[(name, key)] = source
                elif _filled(held) == _filled(row):
                    if any(c in row for c in SAMPLE_TEXT) and not any(
                            c in held for c in SAMPLE_TEXT):
                        tables[name][key] = row  # the one with the sample's text
                else:
                    raise LabError(f"{source}: {name} row {'/'.join(key)} differs from the one "
                                   f"in {found_in[(name, key)]}: the same stage gave other "
                                   "numbers (not reproducible across these runs)")
        given.append({"source": str(source),
                      "from": "stages" if (source / "stages").is_dir() else "tables",
                      "seeds": _seeds(rows[RESULTS]),
                      "evaluations": len({row["stage"] for row in rows[RESULTS]}),
                      **_environments(source)})
    # In the whole study's stage order: shards merged give the whole study's tables.
    order = {stage.key: index for index, stage in enumerate(expand(recipes[0]))}
    for name, _identity in TABLES:
        tables[name] = dict(sorted(tables[name].items(),
                                   key=lambda item: order.get(item[1]["stage"], len(order))))
    results = list(tables[RESULTS].values())
    if not results:
        raise LabError(f"lab merge: no finished evaluation in {', '.join(map(str, sources))}"
                       + (f" of seeds {seeds}" if seeds is not None else ""))
    record = {"kind": MERGED_KIND, "recipe": recipes[0].name, "seeds": _seeds(results),
              "evaluations": len({row["stage"] for row in results}), "sources": given,
              ANALYSIS: plan}
    work = out.with_name(f".{out.name}.merging-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    try:  # the work folder is --out's sibling: a failed write is --out's, so it names --out
        work.mkdir(parents=True)
        write_json_atomic(work / "recipe.json", recipe_dict(recipes[0]))
        write_tables(work, {name: list(tables[name].values()) for name, _identity in TABLES},
                     recipes[0])
        write_json_atomic(work / MERGED, record)
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
    except OSError as exc:
        raise LabError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**record, "out": str(out)}


def _source_recipe(source: Path) -> Any:
    """The source's recipe, refused where it is not the one its stages ran by (or, for a
    source of tables, where they are not those lab wrote: lab.analysis.collect.check_tables)."""
    recipe = recorded_recipe(source)
    if recipe is None:
        raise LabError(f"{source}: not a study folder (no recipe.json)")
    check_recipe_ran(source, recipe)
    if not (source / "stages").is_dir():
        check_tables(source)
    return recipe


def _source_rows(source: Path, recipe: Any) -> dict[str, list[dict[str, Any]]]:
    """A source's rows as the CSV files hold them (text, then typed the same way for every
    source, so rows collected from stages compare equal to rows read back from a table)."""
    if (source / "stages").is_dir():
        collected = collected_rows(recipe, expand(recipe), source)
        return {name: [_as_written(row) for row in rows]
                for (name, _identity), rows in zip(TABLES, collected)}
    if not (source / RESULTS).is_file():
        raise LabError(f"{source}: neither stages/ nor {RESULTS}: nothing to merge")
    tables = {name: _read_table(source / name, identity, required=name == RESULTS)
              for name, identity in TABLES}
    tables[SAMPLES] = _with_text(source / SAMPLES, tables[SAMPLES])
    return tables


def _with_text(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A source of tables' samples with each sample's text from its Parquet copy (checked
    against the CSV by check_tables), where the copy holds it."""
    import pyarrow.parquet as pq

    copy = path.with_suffix(".parquet")
    if not rows or not copy.is_file():
        return rows
    columns = [c for c in SAMPLE_TEXT if c in pq.read_schema(copy).names]
    if not columns:
        return rows  # written before samples.parquet held the text
    identity = ("stage", "id", "group")
    texts = {tuple(str(row[c]) for c in identity): row
             for row in pq.read_table(copy, columns=[*identity, *columns]).to_pylist()}
    return [{**row, **{c: texts.get(tuple(str(row.get(k)) for k in identity), {}).get(c)
                       for c in columns}} for row in rows]


def _read_table(path: Path, identity: tuple[str, ...], required: bool) -> list[dict[str, Any]]:
    if not path.is_file():
        if required:
            raise LabError(f"{path}: no such file")
        return []
    whole_lines(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in identity if c not in (reader.fieldnames or [])]
            if missing and reader.fieldnames:
                raise LabError(f"{path}: no column {missing[0]}")
            rows, kinds = [], {}
            for row in reader:
                if None in row:  # DictReader's place for cells beyond the header
                    raise LabError(f"{path}: line {reader.line_num} has more cells than the header")
                if None in row.values():  # and its value for cells the line lacks
                    raise LabError(f"{path}: line {reader.line_num} has fewer cells than the "
                                   "header")
                rows.append(_typed(row))
                _check_kinds(rows[-1], kinds, path, reader.line_num)
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LabError(f"{path}: unreadable ({exc})") from None


def _check_kinds(row: dict[str, Any], kinds: dict[str, tuple[bool, int]], path: Path,
                 line: int) -> None:
    """A column holds numbers or text, never both (a number where text belongs, or text where
    numbers do, is a damaged table): the first line of each column sets it."""
    for column, value in row.items():
        if value is None:
            continue
        numeric = isinstance(value, (int, float))
        first = kinds.setdefault(column, (numeric, line))
        if first[0] != numeric:
            raise LabError(f"{path}: line {line}, column {column}: '{value}' is "
                           f"{'a number' if numeric else 'text'}, where line {first[1]} holds "
                           f"{'a number' if first[0] else 'text'}")


def _as_written(row: dict[str, Any]) -> dict[str, Any]:
    """A row as results.csv writes it (floats rounded to 6 places, None empty), then typed;
    a sample's text (SAMPLE_TEXT) stays text."""
    return {**_typed({key: "" if value is None else str(table_cell(value))
                      for key, value in row.items() if key not in SAMPLE_TEXT}),
            **{key: row[key] for key in SAMPLE_TEXT if key in row}}


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row's cells as numbers where they are numbers (an id like 007 stays text), empty
    cells as None."""
    return {key: typed_cell(text) for key, text in row.items()}


def _filled(row: dict[str, Any]) -> dict[str, Any]:
    """What a row holds: a table with more columns than another gives its rows empty cells;
    a sample's text is what its scores came from, not a number to reproduce (a source of
    tables carries it only in its Parquet copy)."""
    return {key: value for key, value in row.items()
            if value is not None and key not in SAMPLE_TEXT}


def _seeds(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({int(row["seed"]) for row in rows if "seed" in row})


def _environments(source: Path) -> dict[str, list[str]]:
    """The git commits, CPUs and instruction sets the source's stages ran with (their
    manifests' environment), or, for an earlier merge, what its sources ran with."""
    found: dict[str, set[str]] = {field: set() for field, _recorded in ENVIRONMENT}
    from lab.train.artefacts import read_model

    for stage in sorted(path.parent for path in (source / "stages").glob(f"*/{MANIFEST}")):
        environment = read_model(stage, "study stage").get("environment") or {}
        for field, recorded in ENVIRONMENT:
            if environment.get(recorded):
                found[field].add(environment[recorded])
    if not (source / "stages").is_dir() and (source / MERGED).is_file():
        try:
            record = json.loads((source / MERGED).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LabError(f"{source / MERGED}: unreadable ({exc})") from None
        for field in found:
            found[field] |= {value for given in record.get("sources", [])
                             for value in given.get(field, [])}
    return {field: sorted(values) for field, values in found.items()}
