"""The analysis a study declared before its data: frozen when the study begins, and held to it by
every command that reads the study afterwards.

A study's analysis is its recipe's `statistics` section (tests, alpha, the primary family, the
score, the planned seeds). `lab study` records it in study.json (ANALYSIS) before the first
stage, its planned seeds filled in from the seeds the recipe lists then, with the section's
sha256 and the whole recipe's. From then on:
- `lab study` refuses a recipe (an edited file, `--set`, a grown recipe) whose statistics
  section differs from the frozen one, naming the first field; more seeds keep the planned
  seeds, so the grown study is read as exploratory;
- `lab report` and `lab stats` refuse a recipe.json whose statistics section is not the frozen
  one (an edited record): the primary table always comes from the frozen plan;
- an analysis chosen after the data is a secondary one (`lab report --convention/--alpha`),
  labelled with `chosen_after_text` in every table it reaches;
- `lab merge` refuses sources with different plans unless `--plan-from` names the one to keep,
  and records it (merged.json ANALYSIS).
A study begun before the plan was frozen has no record to check against and is read as before.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from lab.common import MERGED, LabError, dumps_json, read_json_if_there, sha256_text
from lab.analysis.study_record import SUMMARY
from lab.analysis.questions import StatisticsSection
from lab.study.recipe import Recipe, recipe_dict, recipe_from_dict

ANALYSIS = "analysis"  # the key of the frozen plan in study.json and merged.json
RECORDS = (SUMMARY, MERGED)  # where a study folder keeps it: run, or merged


def section_sha256(statistics: dict[str, Any]) -> str:
    """The sha256 of a statistics section as recorded (deterministic JSON)."""
    return sha256_text(dumps_json(statistics))


def planned_seeds(declared: Any, seeds: Any) -> Any:
    """What an unset statistics.planned_seeds means: the number of seeds the recipe listed
    when the study began; a declared value as it is (its checks are the caller's)."""
    if declared is None and isinstance(seeds, list) and seeds:
        return len(seeds)
    return declared


def planned_statistics(recipe: Recipe) -> dict[str, Any]:
    """The recipe's statistics section with its planned seeds filled in (planned_seeds)."""
    statistics = recipe_dict(recipe)["statistics"]
    statistics["planned_seeds"] = planned_seeds(statistics.get("planned_seeds"), recipe.seeds)
    return statistics


def frozen_analysis(recipe: Recipe) -> dict[str, Any]:
    """What study.json records of a study's analysis when it begins: the statistics section,
    its planned seeds filled in (planned_statistics), the section's sha256 and the whole
    recipe's (with that section)."""
    data = recipe_dict(recipe)
    statistics = data["statistics"] = planned_statistics(recipe)
    return {"statistics": statistics, "sha256": section_sha256(statistics),
            "recipe_sha256": sha256_text(dumps_json(data))}


def with_frozen_statistics(recipe: Recipe, frozen: dict[str, Any]) -> Recipe:
    """The recipe with the frozen plan's statistics section: what recipe.json and the tables
    record, planned seeds included, however the seeds grow."""
    data = recipe_dict(recipe)
    data["statistics"] = dict(frozen["statistics"])
    return recipe_from_dict(data)


def _defaults() -> dict[str, Any]:
    return dataclasses.asdict(StatisticsSection())


def changes(frozen: dict[str, Any], asked: dict[str, Any], unset_is_planned: bool = True
            ) -> list[tuple[str, Any, Any]]:
    """(field, frozen value, asked value) for each field of a statistics section that differs
    from the frozen one. A field one side lacks takes the schema's default (a field added to the
    lab since the study began); `unset_is_planned`: a recipe that leaves planned_seeds unset
    runs the plan's (a recorded section always holds it)."""
    defaults = _defaults()
    asked = dict(asked)
    if unset_is_planned and asked.get("planned_seeds") is None:
        asked["planned_seeds"] = frozen.get("planned_seeds")
    return [(name, frozen.get(name, defaults.get(name)), asked.get(name, defaults.get(name)))
            for name in sorted(set(frozen) | set(asked))
            if frozen.get(name, defaults.get(name)) != asked.get(name, defaults.get(name))]


def change_text(field: str, old: Any, new: Any) -> str:
    """`statistics.alpha: 0.05 -> 0.5`, the form every refusal and label uses."""
    return f"statistics.{field}: {json.dumps(old)} -> {json.dumps(new)}"


def chosen_after_text(changed: list[tuple[str, Any, Any]]) -> str:
    """The label of a secondary analysis: what it changed of the frozen plan."""
    return "chosen after the data (" + "; ".join(change_text(*c) for c in changed) + ")"


def recorded_analysis(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The frozen plan a study folder records (study.json, or merged.json for a merged study)
    and the file it is in; None for a study begun before plans were frozen."""
    for name in RECORDS:
        path = Path(folder) / name
        record = read_json_if_there(path)
        if isinstance(record, dict) and record.get(ANALYSIS) is not None:
            frozen = record[ANALYSIS]
            if not (isinstance(frozen, dict) and isinstance(frozen.get("statistics"), dict)
                    and isinstance(frozen.get("sha256"), str)):
                raise LabError(f"{path}: {ANALYSIS}: not the record lab writes of a study's "
                               "frozen analysis")
            if section_sha256(frozen["statistics"]) != frozen["sha256"]:
                raise LabError(f"{path}: {ANALYSIS}.statistics does not match its own sha256 "
                               "(the record was edited)")
            return path, frozen
    return None


def check_new_run(recipe: Recipe, summary_path: Path, summary: dict[str, Any]) -> None:
    """Refuse a `lab study` run whose statistics section is not the plan frozen when the study
    began: a test, alpha, family or score chosen after the data is a secondary analysis."""
    frozen = summary.get(ANALYSIS)
    if not frozen:
        return
    changed = changes(frozen["statistics"], recipe_dict(recipe)["statistics"])
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise LabError(f"{summary_path}: {change_text(*changed[0])}{more}: the analysis was "
                       "frozen when this study began, so that no test is chosen after the data; "
                       "read it otherwise with lab report --convention/--alpha (labelled as "
                       "chosen after the data), or run the new plan in a new --out")


def check_recorded(folder: Path) -> None:
    """Refuse a study whose recipe.json's statistics section is not its frozen plan (an edited
    record would re-declare the analysis after the data), naming the first field."""
    found = recorded_analysis(folder)
    recipe_path = Path(folder) / "recipe.json"
    if found is None or not recipe_path.is_file():
        return
    where, frozen = found
    try:
        statistics = json.loads(recipe_path.read_text(encoding="utf-8")).get("statistics") or {}
    except (OSError, ValueError, AttributeError):
        raise LabError(f"{recipe_path}: unreadable (not the JSON lab study writes)") from None
    if section_sha256(statistics) == frozen["sha256"]:
        return
    changed = changes(frozen["statistics"], statistics, unset_is_planned=False)
    if changed:
        raise LabError(f"{recipe_path}: {change_text(*changed[0])} is not the analysis frozen "
                       f"when the study began ({where} {ANALYSIS}, sha256 "
                       f"{frozen['sha256'][:12]}): the primary table reads the frozen plan; "
                       "give another analysis as lab report --convention/--alpha")


def merged_analysis(sources: list[Path], frozen: list[dict[str, Any]],
                    plan_from: Path | None) -> dict[str, Any]:
    """The plan of a merged study: the sources' one plan, or the one `plan_from` names where
    they differ (refused without it, naming the first difference). `frozen`: each source's
    plan (frozen_analysis of its recipe where it recorded none)."""
    if plan_from is not None:
        names = [Path(s).resolve() for s in sources]
        if Path(plan_from).resolve() not in names:
            raise LabError(f"--plan-from {plan_from}: not one of the sources given")
        chosen = frozen[names.index(Path(plan_from).resolve())]
        return {**chosen, "plan_from": str(plan_from)}
    for source, plan in zip(sources[1:], frozen[1:]):
        changed = changes(frozen[0]["statistics"], plan["statistics"])
        if changed:
            raise LabError(f"{source}: another analysis than {sources[0]}'s "
                           f"({change_text(*changed[0])}): name the plan to keep with "
                           "--plan-from SOURCE (recorded in merged.json)")
    return frozen[0]
