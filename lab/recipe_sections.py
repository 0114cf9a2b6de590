"""How a stage declares its section of a study recipe, beside its own config dataclass.

A recipe section is made by `section` from fields of a command's config (their types, defaults
and help are the config's, declared once), plus what only a study has: its own fields (a grid
over a config field), the defaults a study sets otherwise on purpose, the fields left out of a
stage's key while they hold their old values, and the fields that sweep a config field. Each is
stated once, in the stage's module, and stored on the made class; lab.study.recipe_schema only
assembles the sections into the Recipe and reads these facts back (STUDY_DEFAULTS,
KEY_NEUTRAL_DEFAULTS, SWEEPS). The helpers sit in the foundation layer so every stage, from the
injector up, can declare its section without importing the study.
"""
from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import field
from typing import Any


def _declaring_module(depth: int = 2) -> str:
    """The module that called the helper calling this: the made class is that module's (its
    `__module__`, as for a class written there), so pickling and the docs find it there."""
    return sys._getframe(depth).f_globals.get("__name__", __name__)


def section(name: str, config: Any, fields: list[str], *,
            own: typing.Sequence[tuple[str, Any, Any]] = (),
            study_defaults: dict[str, Any] | None = None,
            key_neutral: dict[str, Any] | None = None,
            sweeps: dict[str, str] | None = None) -> Any:
    """A recipe section made of `fields` of a stage's config dataclass: their types, defaults
    and meanings are the config's (declared once, in the stage's module), except the defaults
    a study deliberately sets otherwise (`study_defaults`). `own`: fields only a study has (a
    grid over a config field), as (name, type, dataclasses.field), put before the config's.
    Tuples become lists, as YAML and recipe.json write them.

    Stored on the made class, each stated once here: `stage_config` (`config`),
    `study_defaults`, `key_neutral` (fields added after studies were made with the section,
    left out of a stage's key while they hold these values, so an existing study folder keeps
    its stage keys and resumes) and `sweeps` (the section's fields whose values each make their
    own stages: the section's field -> the config's)."""
    study_defaults = dict(study_defaults or {})
    hints = typing.get_type_hints(config)
    specs = list(own)
    for field_name in fields:
        declared = config.__dataclass_fields__[field_name]
        kind = hints[field_name]
        default = study_defaults.get(field_name, declared.default)
        if typing.get_origin(kind) is tuple:
            kind = list[typing.get_args(kind)[0]]
            made = field(default_factory=lambda value=default: list(value),
                         metadata=declared.metadata)
        elif default is None and any(typing.get_origin(a) is tuple for a in typing.get_args(kind)):
            kind = list[typing.get_args(typing.get_args(kind)[0])[0]] | None
            made = field(default=None, metadata=declared.metadata)
        else:
            made = field(default=default, metadata=declared.metadata)
        specs.append((field_name, kind, made))
    made_section = dataclasses.make_dataclass(name, specs)
    made_section.__module__ = _declaring_module()
    made_section.stage_config = config
    made_section.study_defaults = study_defaults
    made_section.key_neutral = dict(key_neutral or {})
    made_section.sweeps = dict(sweeps or {})
    return made_section


def partial_section(name: str, full: Any) -> Any:
    """`full` with every field optional and unset (null): the fields a model's override changes."""
    hints = typing.get_type_hints(full)

    def unset_means_the_section(meta: Any) -> dict[str, Any]:
        meta = dict(meta)
        if meta.get("expect"):
            meta["expect"] = f"{meta['expect']} (list), or null"
        meta["help"] = f"{meta.get('help', '')} (null: the section's)".strip()
        return meta

    specs = [(f.name, hints[f.name] | None,
              field(default=None, metadata=unset_means_the_section(f.metadata)))
             for f in dataclasses.fields(full)]
    made = dataclasses.make_dataclass(name, specs)
    made.__module__ = _declaring_module()
    return made
