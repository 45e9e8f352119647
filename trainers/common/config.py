"""One loader for every trainer config: YAML file + keyword values + ``key=value`` overrides.

A trainer config is a dataclass whose fields are *sections* (dataclasses too), e.g.
``RLConfig.algorithm.lr``. This module turns nested mappings into such a tree and checks
each field against its type hint, so SFT, RL and whatever comes next read numbers, choices
and unknown keys the same way:

* YAML 1.1 reads ``2e-5`` (no dot) as a *string*; every trainer's docs write learning rates
  that way, so the loader's YAML resolver reads it as a float, in files, in nested mappings
  (``warm_start``) and in command-line values alike.
* a field typed ``float`` also accepts a numeric string (a value built in Python); ``int``
  accepts an integral float (``1e3``); ``Literal`` choices are checked. Every failure is one
  :class:`ConfigError` naming the dotted key and, for choices, the allowed values.
* an unknown key fails with the section's known keys; a key that *moved* (a flat key of an
  older layout) fails with its new place, e.g. ``lr moved to algorithm.lr``.

Stdlib + PyYAML only, so ``--help`` and config errors never wait for torch.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from coa_envs.config import deep_merge as merge_mappings

__all__ = [
    "ConfigError",
    "build_section",
    "check_fields",
    "deep_merge",
    "load_config",
    "load_mapping",
    "parse_overrides",
    "parse_value",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """A setting (or a combination of settings) that cannot work; the message says the fix."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads exponent floats without a dot (``2e-5``, ``1E3``)."""


# PyYAML's float regex wants a dot in the mantissa (YAML 1.1); YAML 1.2 and every
# trainer's docs do not. Same tag, a wider pattern; plain ints and strings are untouched.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_value(raw: str) -> Any:
    """A command-line value read as YAML (numbers, bools, null, lists, mappings) or kept as text."""
    try:
        return yaml.load(raw, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError:
        return raw


def load_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping of config keys."""
    loaded = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_Loader) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config keys")
    return loaded


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["algorithm.lr=1e-4", "model.tiny.layers=4"]`` -> a nested mapping."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"override {pair!r}: write it as key=value")
        key, raw = pair.split("=", 1)
        out = deep_merge(out, _nest(key.strip(), parse_value(raw)))
    return out


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    node: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        node = {part: node}
    return node


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` on top of ``base``; mappings merge key by key, anything else replaces.

    Keys may be dotted (``{"rollout.max_turns": 2}``): they address nested mappings. The
    merge itself is the env config's (:func:`coa_envs.config.deep_merge`); trainer configs
    add only the dotted keys that command-line overrides use.
    """
    return merge_mappings(base, _undot(update))


def _undot(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` with every dotted key, at any depth, turned into nested mappings."""
    plain: dict[str, Any] = {}
    for key, value in mapping.items():
        value = _undot(value) if isinstance(value, Mapping) else value
        plain = merge_mappings(plain, _nest(key, value) if "." in key else {key: value})
    return plain


# -- building and checking dataclasses --------------------------------------------------
def _section_type(hint: Any) -> type | None:
    """The dataclass a field holds (also through ``X | None``), else None."""
    if get_origin(hint) is list:
        return None
    for candidate in (hint, *get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _item_type(hint: Any) -> type | None:
    """The dataclass of a ``list[Section]`` field (e.g. a mixture's entries), else None."""
    args = get_args(hint) if get_origin(hint) is list else ()
    if args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0]
    return None


def build_section(cls: type[T], data: Mapping[str, Any], *, prefix: str = "",
                  moved: Mapping[str, str] | None = None) -> T:
    """``cls(**data)`` with nested mappings built into their section dataclasses.

    ``moved`` maps old dotted keys to their new place; such a key fails with that message.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping of keys, "
                          f"got {data!r}")
    moved = moved or {}
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            if dotted in moved:
                raise ConfigError(f"{dotted} moved to {moved[dotted]}")
            where = f"section {prefix.rstrip('.')!r}" if prefix else "the config"
            raise ConfigError(f"unknown key {dotted!r} in {where}; known keys: {sorted(names)}")
        section = _section_type(hints[key])
        item = _item_type(hints[key])
        if item is not None and isinstance(value, list):
            value = [build_section(item, v, prefix=f"{dotted}[{i}].", moved=moved)
                     if isinstance(v, Mapping) else v for i, v in enumerate(value)]
        elif section is not None and isinstance(value, Mapping):
            value = build_section(section, value, prefix=f"{dotted}.", moved=moved)
        elif section is not None and value is not None and not dataclasses.is_dataclass(value):
            raise ConfigError(f"{dotted} is a section: give it a mapping of keys "
                              f"{sorted(f.name for f in dataclasses.fields(section))}, "
                              f"not {value!r}")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as error:  # a missing required key
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: {error}") from error


def _is_float(hint: Any) -> bool:
    return hint is float or (_is_union(hint) and float in get_args(hint))


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType)


def _check(path: str, hint: Any, value: Any) -> Any:
    """``value`` converted to ``hint`` where that is unambiguous, else ConfigError."""
    if value is None and (hint is type(None) or (_is_union(hint) and type(None) in get_args(hint))):
        return None
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        if value not in choices:
            raise ConfigError(f"{path}={value!r}: choose one of {', '.join(map(repr, choices))}")
        return value
    if _is_union(hint):  # e.g. float | None, str | None: check against the non-None member
        members = [h for h in get_args(hint) if h is not type(None)]
        return _check(path, members[0], value) if len(members) == 1 else value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}={value!r}: must be true or false")
        return value
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}={value!r}: must be an integer")
        return value
    if _is_float(hint):
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ConfigError(f"{path}={value!r}: must be a number") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}={value!r}: must be a number")
        return float(value)
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{path}={value!r}: must be a string")
    if get_origin(hint) is dict and not isinstance(value, dict):
        raise ConfigError(f"{path}={value!r}: must be a mapping")
    return value


def check_fields(section: Any, prefix: str = "") -> None:
    """Coerce and check every field of a dataclass against its type hint (in place).

    Call it first in ``__post_init__``: a section built in Python (not loaded) gets the
    same checks and conversions as one read from YAML.
    """
    hints = typing.get_type_hints(type(section))
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            continue  # a nested section checks itself
        checked = _check(f"{prefix}{f.name}", hints[f.name], value)
        if checked is not value:
            object.__setattr__(section, f.name, checked)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None,
                values: Mapping[str, Any] | None = None, *,
                resolve: typing.Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                moved: Mapping[str, str] | None = None) -> T:
    """YAML file, then ``values`` (nested or dotted keys), then ``key=value`` overrides (last
    wins); ``resolve`` fills presets into the merged mapping before the sections are built.

    Relative paths in a YAML file stay relative to the working directory, as a user typing
    them on the command line would expect.
    """
    data = load_mapping(path) if path is not None else {}
    data = deep_merge(data, values or {})
    data = deep_merge(data, parse_overrides(overrides or []))
    if resolve is not None:
        data = resolve(data)
    return build_section(cls, data, moved=moved)
