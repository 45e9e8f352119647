"""The config toolkit every layer uses: YAML load, dotted ``key=value`` overrides, sections, typed checks.

A config is a dataclass whose fields are *sections* (dataclasses too), e.g.
``RLConfig.algorithm.lr``. This module turns nested mappings into such a tree and checks
each field against its type hint, so the trainers, the teacher systems, the env configs and
the command line read numbers, choices and unknown keys the same way:

* YAML 1.1 reads ``2e-5`` (no dot) as a *string*; every trainer's docs write learning rates
  that way, so the loader's YAML resolver reads it as a float, in files, in nested mappings
  (``warm_start``) and in command-line values alike.
* a field typed ``float`` also accepts a numeric string (a value built in Python); ``int``
  accepts an integral float (``1e3``); ``Literal`` choices are checked. Every failure is one
  :class:`ConfigError` naming the dotted key and, for choices, the allowed values.
* an unknown key fails with the section's known keys; a key that *moved* (a flat key of an
  older layout) fails with its new place, e.g. ``lr moved to algorithm.lr``.

A leaf: stdlib + PyYAML only and no project import, so every layer (``coa_envs`` up to the
CLI) may import it, and ``--help`` and config errors never wait for torch.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

__all__ = [
    "ConfigError",
    "build_section",
    "check_fields",
    "check_value",
    "deep_merge",
    "describe_type",
    "fits_type",
    "load_config",
    "load_mapping",
    "merge_mappings",
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
    """A YAML file whose top level is a mapping of config keys; a missing file or a YAML
    syntax error is a :class:`ConfigError` naming the file (and the line and column)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    try:
        loaded = yaml.load(text, Loader=_Loader) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: not valid YAML ({problem}); fix the file (e.g. a missing space "
                          "after ':', a tab, an unclosed bracket or quote)") from None
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

    Keys may be dotted (``{"rollout.max_turns": 2}``): they address nested mappings, as
    command-line overrides write them. :func:`merge_mappings` is the same merge for keys
    taken literally.
    """
    return merge_mappings(base, _undot(update))


def merge_mappings(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, merging nested mappings, every key taken literally (how env
    overrides meet registry values); the inputs are deep-copied, never shared."""
    merged = copy.deepcopy(dict(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_mappings(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


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
    if get_origin(hint) in (list, tuple):
        return None
    for candidate in (hint, *get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _item_type(hint: Any) -> type | None:
    """The dataclass of a ``list[Section]`` or ``tuple[Section, ...]`` field (a mixture's
    entries, a team's members), else None."""
    args = get_args(hint) if get_origin(hint) in (list, tuple) else ()
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
        if item is not None and isinstance(value, list | tuple):
            value = get_origin(hints[key])(build_section(item, v, prefix=f"{dotted}[{i}].", moved=moved)
                                           if isinstance(v, Mapping) else v for i, v in enumerate(value))
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


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType)


def _is_mapping(hint: Any) -> bool:
    return get_origin(hint) in (Mapping, dict)


def _is_sequence(hint: Any) -> bool:
    return get_origin(hint) in (list, tuple, Sequence) or hint in (list, tuple)


def _item_hint(hint: Any) -> Any:
    """The element type of ``list[str]`` / ``tuple[str, ...]`` (``Any`` when not given)."""
    items = [a for a in get_args(hint) if a is not Ellipsis]
    return items[0] if items else Any


def describe_type(hint: Any, minimum: float | None = None) -> str:
    """The values a type hint allows, in words: the second half of every typed-check message
    (``a positive integer or None``, ``'hf' or 'vllm'``, ``true or false``, ``a list of a string``)."""
    if get_origin(hint) is typing.Annotated:
        return describe_type(get_args(hint)[0], minimum)
    if _is_union(hint):
        return " or ".join(dict.fromkeys(describe_type(member, minimum) for member in get_args(hint)))
    if get_origin(hint) is Literal:
        return " or ".join(map(repr, get_args(hint)))
    if hint is type(None):
        return "None"
    if hint is Any:
        return "any value"
    if hint is bool:
        return "true or false"
    if hint is int:
        return "a positive integer" if minimum == 1 else "an integer" if minimum is None else f"an integer >= {minimum}"
    if hint is float:
        return "a number" if minimum is None else f"a number >= {minimum}"
    if _is_mapping(hint) or hint in (dict, Mapping):
        return "a mapping"
    if _is_sequence(hint):
        item = _item_hint(hint)
        return "a list" if item is Any else f"a list of {describe_type(item)}"
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return "a path"
    return "a string" if hint is str else f"a {getattr(hint, '__name__', hint)}"


def fits_type(value: Any, hint: Any, minimum: float | None = None) -> bool:
    """Does ``value`` fit ``hint`` as it stands (no conversion)? ``bool`` is no number here,
    as in YAML; a list or tuple fits a sequence hint when every item fits its item type; a path
    hint takes a string; a hint this toolkit does not model (a name that did not resolve, a
    generic it does not know) accepts anything."""
    if get_origin(hint) is typing.Annotated:
        return fits_type(value, get_args(hint)[0], minimum)
    if _is_union(hint):
        return any(fits_type(value, member, minimum) for member in get_args(hint))
    if get_origin(hint) is Literal:
        return value in get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint in (int, float):
        kinds = int if hint is int else int | float
        return isinstance(value, kinds) and not isinstance(value, bool) and (minimum is None or value >= minimum)
    if _is_mapping(hint) or hint in (dict, Mapping):
        return isinstance(value, Mapping)
    if _is_sequence(hint):
        item = _item_hint(hint)
        return isinstance(value, (list, tuple)) and all(fits_type(v, item) for v in value)
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return isinstance(value, (str, PurePath))
    return isinstance(value, hint) if isinstance(hint, type) else True


def check_value(path: str, hint: Any, value: Any) -> Any:
    """``value`` converted to ``hint`` where that is unambiguous (``1e3`` -> 1000 for an int,
    ``"2e-5"`` -> 2e-05 for a float), else a :class:`ConfigError` naming ``path``."""
    if value is None and fits_type(None, hint):
        return None
    if get_origin(hint) is Literal:
        if not fits_type(value, hint):
            raise ConfigError(f"{path}={value!r}: choose one of {', '.join(map(repr, get_args(hint)))}")
        return value
    if _is_union(hint):  # e.g. float | None, str | None: check against the non-None member
        members = [h for h in get_args(hint) if h is not type(None)]
        return check_value(path, members[0], value) if len(members) == 1 else value
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if hint is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{path}={value!r}: must be a number") from None
    checked = hint in (bool, int, float, str) or get_origin(hint) is dict
    if checked and not fits_type(value, hint):
        raise ConfigError(f"{path}={value!r}: must be {describe_type(hint)}")
    return float(value) if hint is float else value


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
        checked = check_value(f"{prefix}{f.name}", hints[f.name], value)
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
