"""Study recipes: typed, sectioned configuration validated on load.

A recipe YAML maps onto the dataclasses of lab.study.recipe_schema (each section declared by
the stage that uses it, there assembled); every field has a type and a default. Unknown keys,
wrong types and impossible values are refused with the key's path, for example
`finetune.epochs[2]: expected int >= 0, got 'ten'`. `--set section.key=value` overrides a field
(the value is parsed as YAML, then checked like the file). This module reads a recipe (its
includes, its overrides), builds it, has lab.study.recipe_checks refuse what cannot run,
records it (recipe_dict), compares two (study_differences) and writes the reference recipe.

Hardening: a key given twice in one mapping (at any level) is refused with its line; YAML
aliases (`*name`) are refused altogether (recipes have no need of them, and a few hundred bytes
of nested aliases expand to gigabytes); strings are at most MAX_STRING characters and errors
show at most an EXCERPT-character excerpt of a value; numbers are finite; seeds lie in
0..2^32-1; `name` is a plain folder name (it becomes runs/NAME).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from lab.common import LabError
from lab.study.recipe_checks import (EXCERPT, check_recipe, excerpt, injected_documents,
                                     placebo_plan)
from lab.study.recipe_schema import (KEY_NEUTRAL_DEFAULTS, STUDY_DEFAULTS, SWEEPS, Recipe,
                                     ResourcesSection, for_model)

# What callers import from here: the recipe's types and plan live in recipe_schema and
# recipe_checks; lab.study.recipe is where a recipe is read, and names them for its readers.
__all__ = ["KEY_NEUTRAL_DEFAULTS", "STUDY_DEFAULTS", "SWEEPS", "Recipe", "ResourcesSection",
           "apply_override", "for_model", "injected_documents", "load_recipe", "placebo_plan",
           "recipe_dict", "recipe_from_dict", "reference_yaml", "study_differences"]

MAX_STRING = 200  # longest string value of a recipe


class _RecipeLoader(yaml.SafeLoader):
    """safe_load without aliases and without duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise LabError(f"line {event.start_mark.line + 1}: YAML alias *{str(event.anchor)[:EXCERPT]} "
                           "refused (recipes may not use aliases)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: refused by the constructor below
                continue
            if duplicate:
                raise LabError(f"line {key_node.start_mark.line + 1}: duplicate key "
                               f"{excerpt(key)}")
        return super().construct_mapping(node, deep=deep)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader subclass


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", str(kind).replace("typing.", ""))


def _convert(value: Any, kind: Any, path: str, expect: str | None = None) -> Any:
    """Check `value` against the annotation `kind`, recursing into lists and sections; `expect`
    names what a scalar must be where the type alone says too little ("int >= 0")."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        return _convert(value, inner[0], path, expect)
    if origin is list:
        if not isinstance(value, list):
            raise LabError(f"{path}: expected a list, got {excerpt(value)}")
        (item,) = typing.get_args(kind)
        return [_convert(v, item, f"{path}[{i}]", expect) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise LabError(f"{path}: expected a mapping, got {excerpt(value)}")
        return _build(kind, value, path)
    if kind is bool:
        if not isinstance(value, bool):
            raise LabError(f"{path}: expected true or false, got {excerpt(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LabError(f"{path}: expected {expect or 'int'}, got {excerpt(value)}")
        if abs(value) > 2**63 - 1:
            raise LabError(f"{path}: {excerpt(value)} is out of range")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LabError(f"{path}: expected float, got {excerpt(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise LabError(f"{path}: expected a finite number, got {excerpt(value)}")
        return number
    if kind is str:
        if not isinstance(value, str):
            raise LabError(f"{path}: expected str, got {excerpt(value)}")
        if len(value) > MAX_STRING:
            raise LabError(f"{path}: longer than {MAX_STRING} characters ({excerpt(value)})")
        return value
    raise LabError(f"{path}: unsupported type {_type_name(kind)}")


def _build(cls: Any, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = set(fields)
    for key in data:
        if key not in names:
            where = f"{prefix}.{str(key)[:EXCERPT]}" if prefix else str(key)[:EXCERPT]
            raise LabError(f"{where}: unknown key (known: {', '.join(sorted(names))})")
    values = {key: _convert([value] if fields[key].metadata.get("scalar")
                            and (value is not None or fields[key].metadata.get("scalar_none"))
                            and not isinstance(value, list) else value,
                            hints[key],
                            f"{prefix}.{key}" if prefix else key, fields[key].metadata.get("expect"))
              for key, value in data.items()}
    return cls(**values)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """`a.b=value` into the raw mapping (value parsed as YAML)."""
    if "=" not in assignment:
        raise LabError(f"--set {excerpt(assignment)[1:-1]}: expected key=value")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise LabError(f"--set {key[:EXCERPT]}: {part[:EXCERPT]} is not a section")
    try:
        node[parts[-1]] = _yaml_load(raw)
    except yaml.YAMLError as exc:
        raise LabError(f"--set {key[:EXCERPT]}: value is not valid YAML "
                       f"({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    except LabError as exc:
        raise LabError(f"--set {key[:EXCERPT]}: {exc}") from None


def _read_file(path: Path) -> dict[str, Any]:
    """One recipe file's mapping; errors name the file (and the line)."""
    if not path.is_file():
        raise LabError(f"{path}: no such recipe file")
    try:
        text = path.read_text(encoding="utf-8")
        if "\0" in text:  # YAML's own message for it spans lines and names no file
            raise LabError(f"not a text file (a NUL byte at character {text.index(chr(0))})")
        data = _yaml_load(text)
    except UnicodeDecodeError as exc:
        raise LabError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except LabError as exc:
        raise LabError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        raise LabError(f"{path}{where}: malformed YAML ({problem})") from None
    if data is None or data == {}:
        # Every field has a default: a file that sets nothing would run a whole default study.
        raise LabError(f"{path}: an empty recipe (it must set at least its name:)")
    if not isinstance(data, dict):
        raise LabError(f"{path}: a recipe is a mapping of sections")
    return data


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: sections merge key by key, any other value replaces."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


def _resolve(path: Path, including: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A recipe file with its `include:` (a file or a list of files, relative to the including
    file) merged beneath it, in order; an include cycle is refused."""
    if path.resolve() in including:
        chain = " -> ".join(p.name for p in (*including, path.resolve()))
        raise LabError(f"{path}: include: cycle ({chain})")
    data = _read_file(path)
    include = data.pop("include", None)
    names = [include] if isinstance(include, str) else include
    if include is not None and (not isinstance(names, list) or not names
                                or not all(isinstance(n, str) and n for n in names)):
        raise LabError(f"{path}: include: expected a file name or a list of them, got "
                       f"{excerpt(include)}")
    merged: dict[str, Any] = {}
    for name in names or []:
        merged = _merged(merged, _resolve(path.parent / name, (*including, path.resolve())))
    return _merged(merged, data)


def load_recipe(path: Path, overrides: list[str] | None = None) -> Recipe:
    """Read a recipe (its includes beneath it, then the overrides on top) and validate it;
    errors name the file and the key's path."""
    path = Path(path)
    data = _resolve(path)
    for assignment in overrides or []:
        apply_override(data, assignment)
    try:
        recipe = _build(Recipe, data)
        check_recipe(recipe)
    except LabError as exc:
        raise LabError(f"{path}: {exc}") from None
    return recipe


def recipe_from_dict(data: Any) -> Recipe:
    """A recipe from its recorded dict (STUDY/recipe.json), checked like a file; fields the
    record lacks take their defaults."""
    if not isinstance(data, dict):
        raise LabError("a recipe is a mapping of sections")
    recipe = _build(Recipe, data)
    check_recipe(recipe)
    return recipe


def recipe_dict(recipe: Recipe) -> dict[str, Any]:
    """The recipe as recipe.json records it: a list field that also takes one value (preset)
    is written as that value when it holds one, as studies recorded it before it was a list."""
    data = dataclasses.asdict(recipe)
    for f in dataclasses.fields(recipe):
        if f.metadata.get("scalar") and len(data[f.name]) == 1:
            data[f.name] = data[f.name][0]
        if dataclasses.is_dataclass(getattr(recipe, f.name)):  # a section's (weight_decay)
            for inner in dataclasses.fields(getattr(recipe, f.name)):
                value = data[f.name].get(inner.name)
                if inner.metadata.get("scalar") and isinstance(value, list) and len(value) == 1:
                    data[f.name][inner.name] = value[0]
    return data


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Paths of the fields whose values differ between two recipe dicts."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new))
                for d in _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)]
    return [] if old == new else [path]


def study_differences(old: Recipe, new: Recipe) -> list[str]:
    """Fields in which two recipes make other studies: all but `resources` (where a stage runs;
    a launch that changes results changes the stage keys), `statistics` (how the finished
    results are read: a study may be re-read under other declarations) and `detect` (detect
    stages read the study's models and change nothing else: `--set detect.enabled=true` on a
    finished study scores every model it trained). recipe.json records the latest."""
    return [d for d in _differences(_device_settings_resolved(old), _device_settings_resolved(new))
            if not d.startswith(("resources.", "statistics.", "detect."))]


def _device_settings_resolved(recipe: Recipe) -> dict[str, Any]:
    """recipe_dict, with the pre-training settings a CPU study leaves unset (bf16, compile,
    attention: lab.train.speed) as the values they take there, which are those studies made
    before they could be unset recorded: such a study and today's recipe are the same study."""
    record = recipe_dict(recipe)
    if recipe.resources.device.startswith("cuda"):
        return record
    sections = [record["pretrain"]] + [model.get("pretrain", {})
                                       for model in record.get("by_model", {}).values()
                                       if isinstance(model, dict)]
    for section in sections:
        for name, neutral in KEY_NEUTRAL_DEFAULTS["pretrain"].items():
            if name in section and section[name] is None:
                section[name] = neutral
    return record


# --- the reference recipe: every field, generated from the declarations above -----------------

REFERENCE_HEADER = """\
# Reference recipe: every field, its type, default and meaning, generated from the recipe schema
# (lab/study/recipe.py; regenerate: python -m lab.study.recipe > recipes/reference.yaml).
# `lab study RECIPE.yaml` reads a file like this one; omitted fields take the defaults shown;
# unknown keys are refused. `include: base.yaml` (or a list of files, relative to the recipe)
# merges those files beneath the recipe, section by section; `--set` applies on top:
#   lab study R.yaml --set pretrain.lr=0.002 --set seeds=[0,1]
"""
COMMENT_COLUMN = 29
WIDTH = 100


def _flow(value: Any) -> str:
    """A value as YAML flow text (`[a, b]`, `null`, `0.001`)."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]


def _type_text(kind: Any) -> str:
    """A field's type as the reference shows it: `list[str]`, `int | null`."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in args)
    if typing.get_origin(kind) is list:
        return f"list[{_type_text(args[0])}]"
    return _type_name(kind)


def reference_yaml() -> str:
    """recipes/reference.yaml: each field's default, then `# type: meaning` (tests keep the
    file equal to this)."""
    import textwrap

    lines = REFERENCE_HEADER.splitlines()

    def emit(cls: Any, indent: int) -> None:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            kind, meaning = hints[item.name], item.metadata.get("help", "")
            pad = " " * indent
            if dataclasses.is_dataclass(kind):
                lines.append(f"{pad}{item.name}:")
                emit(kind, indent + 2)
                continue
            default = (item.default_factory() if item.default is dataclasses.MISSING
                       else item.default)
            if isinstance(default, tuple):
                default = list(default)
            text = f"{pad}{item.name}: {_flow(default)}"
            expect = item.metadata.get("expect")
            comment = f"{expect or _type_text(kind)}: {meaning}".rstrip(": ")
            start = max(COMMENT_COLUMN, len(text) + 2)
            if WIDTH - start < 40:  # a long default: its comment goes on the lines below it
                lines.append(text)
                start = COMMENT_COLUMN
                wrapped = textwrap.wrap(comment, WIDTH - start - 2, break_on_hyphens=False)
                lines.extend(f"{'':<{start}}# {line}" for line in wrapped)
                continue
            wrapped = textwrap.wrap(comment, WIDTH - start - 2, break_on_hyphens=False) or [""]
            lines.append(f"{text:<{start}}# {wrapped[0]}")
            lines.extend(f"{'':<{start}}#   {more}" for more in wrapped[1:])

    emit(Recipe, 0)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference_yaml())
