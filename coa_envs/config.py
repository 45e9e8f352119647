"""The validated configuration of one env id: registry entry plus ``gym.make`` overrides.

Validation happens here, at ``make`` time, so a typo in a key or a backend name fails with
a message that names the key and the allowed values instead of surfacing mid-episode.
"""

from __future__ import annotations

import copy
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coa_envs.protocol import TOOL_TAGS

__all__ = ["OVERRIDE_KEYS", "EnvConfig", "build_config"]

_REGISTRY_KEYS = {
    "id", "family", "description", "tasks", "tools", "reward", "prompt", "max_turns",
    "context_budget_chars", "context_budget_tokens", "tokenizer", "allow_parallel_tools",
    "version_note", "max_observation_chars",
}

OVERRIDE_KEYS: dict[str, str] = {
    "data_path": "path of a task file or directory in a supported format",
    "task_options": "mapping merged into the loader options (e.g. {'limit': 10})",
    "tools": "mapping tool -> config, merged into the registry's tool configs",
    "reward": "mapping merged into the reward config (e.g. {'name': 'em_f1'})",
    "prompt": "name of a system prompt in coa_envs/prompts",
    "system_prompt": "literal system prompt text (overrides prompt)",
    "max_turns": "positive int: model turns before truncation",
    "context_budget_chars": "positive int: prompt+trajectory characters before truncation",
    "context_budget_tokens": "positive int: token budget (needs tokenizer)",
    "tokenizer": "HF tokenizer path/id used to count tokens for context_budget_tokens",
    "allow_parallel_tools": "bool: accept several tool calls in one turn",
    "max_observation_chars": "positive int: observations longer than this are cut with a marker",
    "render_mode": "None or 'ansi'",
}


@dataclass(frozen=True)
class EnvConfig:
    env_id: str
    family: str
    description: str = ""
    tasks: Mapping[str, Any] = field(default_factory=dict)
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reward: Mapping[str, Any] = field(default_factory=dict)
    prompt: str = "math"
    system_prompt: str | None = None
    max_turns: int = 8
    context_budget_chars: int | None = 200_000
    context_budget_tokens: int | None = None
    tokenizer: str | None = None
    allow_parallel_tools: bool = False
    max_observation_chars: int = 20_000
    render_mode: str | None = None


def _positive_int(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}={value!r} is not valid; allowed: a positive integer")


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _available_prompts() -> list[str]:
    from importlib import resources

    return sorted(
        p.name[:-4] for p in resources.files("coa_envs.prompts").iterdir() if p.name.endswith(".txt")
    )


def build_config(entry: Mapping[str, Any], overrides: Mapping[str, Any]) -> EnvConfig:
    """Merge a registry entry with ``gym.make`` overrides and validate everything."""
    unknown_entry = set(entry) - _REGISTRY_KEYS
    if unknown_entry:
        raise ValueError(f"registry entry {entry.get('id')}: unknown keys {sorted(unknown_entry)}")
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:
        allowed = ", ".join(f"{k} ({v})" for k, v in OVERRIDE_KEYS.items())
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {entry['id']}; allowed: {allowed}")

    tasks = dict(entry.get("tasks") or {})
    if "data_path" in overrides:
        tasks["path"] = str(overrides["data_path"])
    task_options = overrides.get("task_options") or {}
    if not isinstance(task_options, Mapping):
        raise ValueError("task_options must be a mapping of loader options")
    tasks = _merge(tasks, task_options)

    tools = _merge(entry.get("tools") or {}, overrides.get("tools") or {})
    from coa_envs.tools import validate_tool_config

    for name, tool_config in tools.items():
        if name not in TOOL_TAGS:
            raise ValueError(f"tools.{name} is not a CoA tool; allowed: {list(TOOL_TAGS)}")
        if not isinstance(tool_config, Mapping):
            raise ValueError(f"tools.{name} must be a mapping (e.g. {{backend: ...}})")
        validate_tool_config(name, tool_config)

    reward = _merge(entry.get("reward") or {}, overrides.get("reward") or {})
    from coa_envs.rewards import available_rewards

    if reward.get("name") not in available_rewards():
        raise ValueError(f"reward.name={reward.get('name')!r} is not valid; allowed: {available_rewards()}")

    family = entry["family"]
    families = sorted(m.name for m in pkgutil.iter_modules(__import__("coa_envs.tasks").tasks.__path__))
    if family not in families:
        raise ValueError(f"family={family!r} is not valid; allowed: {families}")

    merged = {k: v for k, v in entry.items() if k in {"max_turns", "context_budget_chars",
              "context_budget_tokens", "tokenizer", "allow_parallel_tools", "prompt",
              "max_observation_chars"}}
    merged.update({k: v for k, v in overrides.items() if k in {"max_turns", "context_budget_chars",
                   "context_budget_tokens", "tokenizer", "allow_parallel_tools", "prompt",
                   "system_prompt", "max_observation_chars", "render_mode"}})
    _positive_int("max_turns", merged.get("max_turns", 8))
    _positive_int("context_budget_chars", merged.get("context_budget_chars"), allow_none=True)
    _positive_int("context_budget_tokens", merged.get("context_budget_tokens"), allow_none=True)
    _positive_int("max_observation_chars", merged.get("max_observation_chars", 20_000))
    if merged.get("context_budget_tokens") and not merged.get("tokenizer"):
        raise ValueError("context_budget_tokens needs tokenizer=<HF tokenizer path or id>")
    if not isinstance(merged.get("allow_parallel_tools", False), bool):
        raise ValueError("allow_parallel_tools must be true or false")
    if merged.get("render_mode") not in (None, "ansi"):
        raise ValueError(f"render_mode={merged['render_mode']!r} is not valid; allowed: [None, 'ansi']")
    if merged.get("system_prompt") is None:
        prompt = merged.get("prompt", "math")
        if prompt not in _available_prompts():
            raise ValueError(f"prompt={prompt!r} is not valid; allowed: {_available_prompts()}")

    return EnvConfig(
        env_id=entry["id"],
        family=family,
        description=entry.get("description", ""),
        tasks=tasks,
        tools=tools,
        reward=reward,
        **merged,
    )
