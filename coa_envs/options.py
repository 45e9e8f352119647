"""The one schema every option that reaches an env is checked against, at ``make`` time.

An env gets options from four places: its own settings (:class:`coa_envs.config.EnvConfig`),
each tool's settings (``tools: {wiki_search: {top_k: 3}}``), its family loader's options
(``task_options``) and each reward term's options. All four are declared where they are used
(a dataclass field, a constructor's or ``load_tasks``' signature) and checked here the same
way: an unknown key is refused with the allowed ones and a "did you mean" for a near miss
(``max_turn`` -> ``max_turns``), a value of the wrong type or below its minimum names the key,
the value and what is allowed (``tools.wiki_search.top_k='abc' is not valid; allowed: an
integer >= 1``). A mistake therefore fails ``gym.make``, not every tool call of a run.

A leaf every layer may use: it imports only the other leaves, :mod:`coa_envs.configkit` (whose
typed checks it uses, so env options and trainer configs read types the same way) and
:mod:`coa_envs.errors`.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from coa_envs.configkit import describe_type, fits_type
from coa_envs.errors import OptionError

__all__ = [
    "Option",
    "Schema",
    "check_choice",
    "check_option",
    "closest",
    "did_you_mean",
    "unknown_keys_error",
]


def closest(word: Any, choices: Iterable[Any]) -> str | None:
    """The choice ``word`` most likely meant (same letters in another case, else the closest by
    difflib's ratio >= 0.6), or None."""
    if not isinstance(word, str):
        return None
    folded = {str(c).lower(): str(c) for c in choices}
    if word.lower() in folded:
        return folded[word.lower()]
    close = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def did_you_mean(word: Any, choices: Iterable[Any]) -> str:
    """`` (did you mean 'max_turns'?)`` for the closest choice (:func:`closest`); ``""`` when
    nothing is close. Appended to every "not valid" message about a key, a name or an id."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match is not None and match != word else ""


def unknown_keys_error(where: str, unknown: Iterable[str], allowed: Iterable[str]) -> OptionError:
    """The error for keys nobody declared: names them, suggests the closest, lists the allowed."""
    unknown, allowed = sorted(unknown), sorted(allowed)
    hints = "".join(did_you_mean(key, allowed) for key in unknown[:3])
    label = "option" if len(unknown) == 1 else "options"
    return OptionError(f"{where}: unknown {label} {', '.join(map(repr, unknown))}{hints}; "
                      f"allowed: {', '.join(allowed) or 'none'}")


def check_choice(where: str, value: Any, choices: Sequence[Any]) -> None:
    """``value`` must be one of ``choices`` (a backend, a family, a split, a prompt...)."""
    if value not in choices:
        raise OptionError(f"{where}={value!r} is not valid{did_you_mean(value, choices)}; allowed: {list(choices)}")


def check_option(key: str, value: Any, hint: Any, minimum: float | None = None) -> None:
    """Raise :class:`OptionError` naming ``key`` when ``value`` does not fit ``hint`` (the type
    checks are the config toolkit's, :func:`coa_envs.configkit.fits_type`)."""
    if not fits_type(value, hint, minimum):
        raise OptionError(f"{key}={value!r} is not valid; allowed: {describe_type(hint, minimum)}")


@dataclass(frozen=True)
class Option:
    """One declared option: its type (a typing hint), default, minimum (numbers) and doc."""

    hint: Any = Any
    default: Any = None
    minimum: float | None = None
    doc: str = ""


@dataclass(frozen=True)
class Schema:
    """The options one place accepts. ``where`` prefixes every message (``tools.wiki_search``);
    ``open`` accepts keys it does not declare (a plug-in that takes ``**options``)."""

    where: str
    options: Mapping[str, Option]
    open: bool = False

    def check(self, values: Mapping[str, Any]) -> None:
        """Refuse unknown keys (with a suggestion) and values of the wrong type or range."""
        if not isinstance(values, Mapping):
            raise OptionError(f"{self.where}={values!r} is not valid; allowed: a mapping of "
                             f"{', '.join(sorted(self.options)) or 'options'}")
        unknown = [key for key in values if key not in self.options]
        if unknown and not self.open:
            raise unknown_keys_error(self.where, unknown, self.options)
        for key, value in values.items():
            option = self.options.get(key)
            if option is not None:
                check_option(f"{self.where}.{key}", value, option.hint, option.minimum)

    def merged(self, other: Schema) -> Schema:
        """This schema's options plus ``other``'s (a tool's own and its backend's)."""
        return Schema(self.where, {**self.options, **other.options}, self.open or other.open)

    def without(self, *names: str) -> Schema:
        return Schema(self.where, {k: v for k, v in self.options.items() if k not in names}, self.open)

    @classmethod
    def of_callable(cls, where: str, function: Callable[..., Any], *, skip: Iterable[str] = (),
                    minimums: Mapping[str, float] | None = None) -> Schema:
        """The keyword options of ``function`` (its signature's types and defaults): the
        declaration a tool constructor or a loader already is. ``**kwargs`` makes it open."""
        skipped, minimums = {"self", *skip}, dict(minimums or {})
        hints = _hints(function)
        options, open_ = {}, False
        for name, parameter in inspect.signature(function).parameters.items():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                open_ = True
            elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL and name not in skipped:
                default = None if parameter.default is inspect.Parameter.empty else parameter.default
                options[name] = Option(hints.get(name, Any), default, minimums.get(name))
        return cls(where, options, open_)

    @classmethod
    def of_dataclass(cls, where: str, datacls: type, *, minimums: Mapping[str, float] | None = None) -> Schema:
        """The fields of a settings dataclass (e.g. a tool's ``CrawlConfig``)."""
        assert is_dataclass(datacls)
        hints, minimums = _hints(datacls), dict(minimums or {})
        return cls(where, {f.name: Option(hints.get(f.name, Any), None if f.default is MISSING else f.default,
                                          minimums.get(f.name))
                           for f in fields(datacls)})


def _hints(target: Any) -> dict[str, Any]:
    """Resolved type hints; names that cannot be resolved count as ``Any`` (unchecked)."""
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:
        annotations = getattr(target, "__annotations__", {}) or {}
        return {name: Any for name in annotations}
