"""The validated configuration of one env id: registry entry plus ``gym.make`` overrides.

Every setting is declared once, as an :class:`EnvConfig` field with its type, default and
documentation; which keys a registry entry and ``gym.make`` accept, the checks, the error
messages and ``coa list --options`` are all derived from those declarations. Adding a
setting is adding a field. Validation runs in ``__post_init__``, at ``make`` time, so a
typo in a key or a backend name fails with a message that names the key and the allowed
values instead of surfacing mid-episode.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from coa_envs.configkit import describe_type
from coa_envs.configkit import merge_mappings as deep_merge
from coa_envs.errors import OptionError
from coa_envs.options import check_choice, check_option, unknown_keys_error

__all__ = ["OVERRIDE_KEYS", "REGISTRY_KEYS", "TASK_OVERRIDES", "EnvConfig", "build_config", "deep_merge",
           "describe_options"]


def _setting(default: Any = dataclasses.MISSING, *, doc: str, key: str | None = None,
             registry: bool = True, override: bool = True, minimum: int | None = None) -> Any:
    """A field with its documentation and where it may be set (``key``: its name there)."""
    meta = {"doc": doc, "key": key, "registry": registry, "override": override, "minimum": minimum}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class EnvConfig:
    """Everything that defines one env. See ``coa list --options`` for the table."""

    env_id: str = _setting(doc="the registered id, coa/<Task>-vN", key="id", override=False)
    family: str = _setting(doc="task family: the loader module coa_envs.tasks.<family>", override=False)
    description: str = _setting("", doc="one line for `coa list`", override=False)
    version_note: str = _setting("", doc="what changed in this version of the id", override=False)
    tasks: Mapping[str, Any] = _setting(
        {}, doc="loader options of the family (path, format, dataset, ...); set per call with "
                "data_path / task_options", override=False)
    tools: Mapping[str, Mapping[str, Any]] = _setting(
        {}, doc="tool tag -> {backend: ..., options}; an override is merged into the registry's")
    reward: Mapping[str, Any] = _setting(
        {}, doc="{name: <term>, options} or {terms: [{name, weight, options}, ...], primary: <label>} "
                "(coa_envs/rewards/compose.py); an override of the same term is merged, another replaces it")
    prompt: str = _setting("math", doc="name of a system prompt in coa_envs/prompts")
    system_prompt: str | None = _setting(None, doc="literal system prompt text (overrides prompt)")
    max_turns: int = _setting(8, doc="model turns before truncation", minimum=1)
    context_budget_chars: int | None = _setting(
        200_000, doc="prompt+trajectory characters before truncation (None: no limit)", minimum=1)
    context_budget_tokens: int | None = _setting(
        None, doc="prompt+trajectory tokens before truncation (needs tokenizer)", minimum=1)
    tokenizer: str | None = _setting(None, doc="HF tokenizer path/id that counts tokens for context_budget_tokens")
    allow_parallel_tools: bool = _setting(False, doc="accept several tool calls in one turn (run concurrently)")
    max_observation_chars: int = _setting(
        20_000, doc="observations longer than this are cut with a marker", minimum=1)
    render_mode: Literal["ansi"] | None = _setting(None, doc="'ansi': render() returns the transcript so far",
                                                   registry=False)
    protocol: Literal["tags", "tools"] = _setting(
        "tags", doc="how the model calls tools: 'tags' (the CoA tag grammar, one growing message) or 'tools' "
                    "(OpenAI function calling: assistant messages with tool_calls, tool messages back)")
    mcp_servers: Mapping[str, Mapping[str, Any]] = _setting(
        {}, doc="name -> {url | command, tools, prefix, timeout_s, ...}: external MCP servers whose tools "
                "this env also offers (coa_envs.mcp.client)")

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            check_option(_key(spec), getattr(self, spec.name), _hints()[spec.name], spec.metadata["minimum"])
        check_choice("family", self.family, _families())
        from coa_envs.tasks import task_option_schema
        from coa_envs.tools import validate_tool_config

        task_option_schema(self.family).check(self.tasks)
        for name, tool_config in self.tools.items():
            validate_tool_config(name, tool_config)
        from coa_envs.rewards import build_reward

        try:
            build_reward(self.reward).close()  # names, weights and every term's options, checked now
            if self.mcp_servers:
                from coa_envs.mcp.client import validate_server_config

                for name, server in self.mcp_servers.items():
                    validate_server_config(name, server)
        except OptionError:
            raise
        except ValueError as exc:  # a reward or MCP setting: the user's to fix
            raise OptionError(str(exc)) from exc
        if self.context_budget_tokens and not self.tokenizer:
            raise OptionError("context_budget_tokens needs tokenizer=<HF tokenizer path or id>")
        if self.system_prompt is None:
            from coa_envs.prompts import available_prompts

            check_choice("prompt", self.prompt, available_prompts())


def _key(spec: dataclasses.Field) -> str:
    return spec.metadata["key"] or spec.name


@cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(EnvConfig)


def _families() -> list[str]:
    from coa_envs.tasks import FAMILIES

    return sorted(FAMILIES)


# gym.make shortcuts that are not fields: they edit the ``tasks`` loader options.
TASK_OVERRIDES: dict[str, str] = {
    "data_path": "path of a task file or directory in a supported format (sets tasks.path)",
    "task_options": "mapping merged into the loader options (e.g. {'limit': 10})",
}
REGISTRY_KEYS: frozenset[str] = frozenset(_key(f) for f in dataclasses.fields(EnvConfig) if f.metadata["registry"])
OVERRIDE_KEYS: dict[str, str] = {
    **TASK_OVERRIDES,
    **{f.name: f.metadata["doc"] for f in dataclasses.fields(EnvConfig) if f.metadata["override"]},
}


def describe_options() -> list[dict[str, Any]]:
    """One row per setting (key, allowed values, default, doc, where it may be set):
    what ``coa list --options`` prints and the docs are generated from."""
    rows = []
    for spec in dataclasses.fields(EnvConfig):
        default = spec.default if spec.default is not dataclasses.MISSING else (
            spec.default_factory() if spec.default_factory is not dataclasses.MISSING else "(required)")
        where = [name for name in ("registry", "override") if spec.metadata[name]]
        rows.append({"key": _key(spec), "allowed": describe_type(_hints()[spec.name], spec.metadata["minimum"]),
                     "default": default, "doc": spec.metadata["doc"], "set_in": where})
    rows += [{"key": key, "allowed": "see doc", "default": None, "doc": doc, "set_in": ["override"]}
             for key, doc in TASK_OVERRIDES.items()]
    return rows


def _reward_override(registered: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """An override naming the same one term tunes it (``{metric: f1}``); a ``terms:`` list or
    another term's ``name`` is a new reward and replaces the registry's (merging a different
    term's options into it would hand one term the other's settings)."""
    if "terms" in extra or ("name" in extra and extra["name"] != registered.get("name")):
        return copy.deepcopy(dict(extra))
    return deep_merge(registered, extra)


def build_config(entry: Mapping[str, Any], overrides: Mapping[str, Any]) -> EnvConfig:
    """Merge a registry entry with ``gym.make`` overrides into a validated :class:`EnvConfig`."""
    unknown_entry = set(entry) - REGISTRY_KEYS
    if unknown_entry:
        raise unknown_keys_error(f"registry entry {entry.get('id')}", unknown_entry, REGISTRY_KEYS)
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:  # `coa list --options` documents each
        raise unknown_keys_error(f"gym.make({entry['id']!r})", unknown, OVERRIDE_KEYS)

    values = {f.name: entry[_key(f)] for f in dataclasses.fields(EnvConfig) if _key(f) in entry}
    tasks = dict(entry.get("tasks") or {})
    if "data_path" in overrides:
        tasks["path"] = str(overrides["data_path"])
    task_options = overrides.get("task_options") or {}
    if not isinstance(task_options, Mapping):
        raise OptionError(f"task_options={task_options!r} is not valid; allowed: a mapping of loader options")
    values["tasks"] = deep_merge(tasks, task_options)
    merged = ("tools", "reward", "mcp_servers")
    for name in merged:  # an override is merged into the registry's (a new reward replaces it)
        extra = overrides.get(name) or {}
        if not isinstance(extra, Mapping):
            raise OptionError(f"{name}={extra!r} is not valid; allowed: a mapping")
        registered = entry.get(name) or {}
        values[name] = _reward_override(registered, extra) if name == "reward" else deep_merge(registered, extra)
    values.update((k, v) for k, v in overrides.items() if k not in TASK_OVERRIDES and k not in merged)
    return EnvConfig(**values)
