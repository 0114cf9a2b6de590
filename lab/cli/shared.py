"""What every room of the `lab` command line shares: a command's options derived from its stage's
config dataclass (and what the shell completes for them), the console and its tables, and the
small parsers and formats more than one room uses."""
from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from lab.common import LabError, option_name

# Piped output (CI logs, files) gets wide tables instead of truncated cells.
console = Console(width=None if sys.stdout.isatty() else 200)

CorporaOption = typer.Option(
    None, "--corpora", help="Folder holding the datasets (else $LAB_CORPORA, ./corpora, the hub)."
)


def _option_type(kind: Any) -> tuple[Any, bool]:
    """(the command line's type of a config field, whether it is a comma-separated list)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner, listed = _option_type(args[0])
        return Optional[inner], listed
    if typing.get_origin(kind) in (list, tuple):
        return str, True
    return kind, False


def options_of(config: Any) -> Callable[[Callable[[Any], None]], Callable[..., None]]:
    """Decorate `command(cfg)` into a typer command whose options are the fields of the config
    dataclass: names, types, defaults and help all come from the fields' declarations
    (lab.common.param), so each is written once. Tuple fields are comma-separated options."""
    hints = typing.get_type_hints(config)
    # A shared section (keyword-only, e.g. the executor's) comes after the command's own.
    shown = sorted((f for f in dataclasses.fields(config) if f.metadata.get("cli", True)),
                   key=lambda f: bool(f.kw_only))

    def decorate(command: Callable[[Any], None]) -> Callable[..., None]:
        parameters, annotations, listed = [], {}, set()
        for f in shown:
            kind, is_list = _option_type(hints[f.name])
            if is_list:
                listed.add(f.name)
            required = f.default is dataclasses.MISSING
            # A list's default as the option's text: "" for an empty tuple, which gives () back.
            default = ... if required else (",".join(map(str, f.default))
                                             if is_list and f.default is not None else f.default)
            name = option_name(f)
            if bool in (kind, _without_none(kind)) and not f.metadata.get("flag"):
                name = f"{name}/--no-{name[2:]}"
            meaning = f.metadata.get("help", "") + (" Comma-separated." if is_list else "")
            complete = _completion(f.name, _without_none(kind))
            option = (typer.Argument(default, help=meaning, autocompletion=complete)
                      if f.metadata.get("argument")
                      else typer.Option(default, name, help=meaning, autocompletion=complete))
            annotations[f.name] = kind
            parameters.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                                default=option, annotation=kind))

        def run(**values: Any) -> None:
            for name in listed:
                if values[name] is not None:
                    values[name] = tuple(_listed_item(v, hints[name], name)
                                         for v in values[name].split(",") if v)
            command(config(**values))

        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = annotations
        run.__name__, run.__doc__ = command.__name__, command.__doc__
        run.__module__ = command.__module__  # the room the command is written in
        return run

    return decorate


def _listed_item(text: str, kind: Any, name: str) -> Any:
    """One item of a comma-separated option, as the field's element type (str, int or
    float)."""
    element = next((a for a in typing.get_args(_without_none(kind)) if a is not Ellipsis), str)
    if element is int:
        try:
            return int(text)
        except ValueError:
            raise LabError(f"--{name.replace('_', '-')}: '{text}' is not a whole number") from None
    if element is float:
        try:
            return float(text)
        except ValueError:
            raise LabError(f"--{name.replace('_', '-')}: '{text}' is not a number") from None
    return text


def _choices() -> dict[str, tuple[str, ...]]:
    """The values of the options whose values the lab's own tables name (shell completion)."""
    from lab.contamination.forms import FORMS
    from lab.contamination.settings import SETTINGS
    from lab.corpora import DATASETS
    from lab.decontam import DECONTAMINATORS
    from lab.detect import DETECTORS
    from lab.models import MODELS, PRESETS

    return {"setting": tuple(SETTINGS), "model": MODELS, "preset": tuple(PRESETS),
            "benchmark": tuple(DATASETS), "detectors": tuple(DETECTORS),
            "methods": tuple(DECONTAMINATORS), "contamination_form": tuple(FORMS)}


def _completion(field: str, kind: Any) -> Callable[[str], list[str]] | None:
    """What the shell completes for an option: a table's names (the last item of a
    comma-separated list), a path's files and folders; None: nothing known."""
    import glob

    def names(incomplete: str) -> list[str]:
        head, comma, last = incomplete.rpartition(",")
        return [head + comma + name for name in _choices()[field] if name.startswith(last)]

    def paths(incomplete: str) -> list[str]:
        found = sorted(glob.glob(glob.escape(os.path.expanduser(incomplete)) + "*"))
        return [path + ("/" if os.path.isdir(path) else "") for path in found]

    if kind is str and field in _choices():
        return names
    return paths if kind is Path else None


def _without_none(kind: Any) -> Any:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind


def declared_default(function: Callable[..., Any], name: str) -> Any:
    """The default an entry function declares for a parameter (an option without a config)."""
    return inspect.signature(function).parameters[name].default


def rich_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    return table



def formatted(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def parse_seeds(text: Optional[str]) -> Optional[List[int]]:
    """--seeds 2,3 as [2, 3]; None when not given."""
    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise LabError(f"--seeds {text}: expected seeds separated by commas, e.g. 2,3") from None
    return sorted(set(seeds))
