"""Tool agents: one module per CoA tool tag (``coa_envs.tools.<tag>``).

Each module defines ``BACKENDS`` and ``build(backend, **config) -> Tool``. ``build_tool`` is
the one place that turns a registry ``tools:`` entry into a Tool, validating the backend
and wrapping the tool in the record/replay cache when the entry asks for one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from coa_envs.protocol import TOOL_TAGS
from coa_envs.types import Tool

__all__ = ["build_tool", "tool_backends", "validate_tool_config"]


def tool_backends(name: str) -> tuple[str, ...]:
    """Backends a tool offers; raises with the allowed tool names for an unknown tool."""
    if name not in TOOL_TAGS:
        raise ValueError(f"tools.{name} is not a CoA tool; allowed: {list(TOOL_TAGS)}")
    try:
        module = importlib.import_module(f"coa_envs.tools.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"coa_envs.tools.{name}":
            raise ValueError(f"tools.{name} is not implemented in this version") from None
        raise
    return tuple(module.BACKENDS)


def validate_tool_config(name: str, config: Mapping[str, Any]) -> None:
    backends = tool_backends(name)
    backend = config.get("backend", backends[0])
    if backend not in backends:
        raise ValueError(f"tools.{name}.backend={backend!r} is not valid; allowed: {list(backends)}")
    cache = config.get("cache")
    if cache is not None:
        if not isinstance(cache, Mapping):
            raise ValueError(f"tools.{name}.cache must be a mapping with mode and path")
        modes = ("off", "record", "replay", "replay-or-record")
        if cache.get("mode", "off") not in modes:
            raise ValueError(f"tools.{name}.cache.mode={cache.get('mode')!r} is not valid; allowed: {list(modes)}")


def build_tool(name: str, config: Mapping[str, Any]) -> Tool:
    validate_tool_config(name, config)
    options = dict(config)
    cache = options.pop("cache", None)
    module = importlib.import_module(f"coa_envs.tools.{name}")
    backend = options.pop("backend", module.BACKENDS[0])
    tool = module.build(backend, **options)
    if cache and cache.get("mode", "off") != "off":
        from coa_envs.tools.cache import CachedTool

        tool = CachedTool(tool, backend=backend, options=options, **cache)
    return tool
