"""Tool agents: one module per CoA tool tag, and the registry that names them.

A tool module (``coa_envs.tools.web_search``...) defines

* ``SPEC``: a :class:`~coa_envs.types.ToolSpec`, how the tool presents itself to the model
  (the protocol renders it into the system prompt; the tool owns the words);
* ``BACKENDS``: the backends it offers, the default first;
* ``build(backend, **config) -> Tool``.

Adding a tool is that module plus one line in ``_BUILTIN_TOOLS`` (or, from outside the
package, one :func:`register_tool` call): the protocol then accepts its tag, env configs
accept it under ``tools:``, the system prompt describes it and ``coa list`` shows it.
:func:`build_tool` is the one place that turns a registry ``tools:`` entry into a Tool,
validating the backend and wrapping the tool in the record/replay cache when asked.

The registry maps tags to module *names*: nothing is imported until a tool is described or
built, so ``import coa_envs`` stays light.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from coa_envs.types import Tool, ToolSpec

__all__ = [
    "BUILTIN_TOOLS",
    "build_tool",
    "register_tool",
    "tool_backends",
    "tool_names",
    "tool_spec",
    "unregister_tool",
    "validate_tool_config",
]

_BUILTIN_TOOLS: dict[str, str] = {
    "web_search": "coa_envs.tools.web_search",
    "crawl_page": "coa_envs.tools.crawl_page",
    "wiki_search": "coa_envs.tools.wiki_search",
    "code": "coa_envs.tools.code",
    "visual_inspector": "coa_envs.tools.visual_inspector",
}
BUILTIN_TOOLS: tuple[str, ...] = tuple(_BUILTIN_TOOLS)

_registry: dict[str, str] = dict(_BUILTIN_TOOLS)
# Replaced (never mutated) on every change, so the protocol can cache its grammar on identity.
_names: tuple[str, ...] = BUILTIN_TOOLS
_TAG_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def tool_names() -> tuple[str, ...]:
    """Every registered tool tag, built-in ones first."""
    return _names


def register_tool(name: str, module: str) -> None:
    """Register tool tag ``name``, implemented by the module named ``module`` (imported lazily).

    The tag must be a lower-case identifier that is not already a protocol tag; registering
    the same module again is a no-op.
    """
    global _names
    from coa_envs.protocol import RESERVED_TAGS

    if not isinstance(name, str) or not _TAG_NAME.fullmatch(name):
        raise ValueError(f"tool name {name!r} is not valid; allowed: a lower-case identifier (a-z, 0-9, _)")
    if name in RESERVED_TAGS:
        raise ValueError(f"tool name {name!r} is a protocol tag; reserved: {sorted(RESERVED_TAGS)}")
    if _registry.get(name, module) != module:
        raise ValueError(f"tool {name!r} is already registered to {_registry[name]}")
    _registry[name] = module
    _names = tuple(_registry)


def unregister_tool(name: str) -> None:
    """Remove a tool added with :func:`register_tool` (built-in tools stay)."""
    global _names
    if name in _BUILTIN_TOOLS:
        raise ValueError(f"{name!r} is a built-in tool and cannot be unregistered")
    _registry.pop(name, None)
    _names = tuple(_registry)


def _module(name: str) -> ModuleType:
    if name not in _registry:
        raise ValueError(f"tools.{name} is not a CoA tool; allowed: {list(_names)}")
    try:
        return importlib.import_module(_registry[name])
    except ModuleNotFoundError as exc:
        if exc.name == _registry[name]:
            raise ValueError(f"tools.{name}: its module {exc.name} is not importable") from None
        raise


def tool_spec(name: str) -> ToolSpec:
    """What the model is told about tool ``name`` (its module's ``SPEC``)."""
    spec = _module(name).SPEC
    if spec.name != name:
        raise ValueError(f"{_registry[name]}.SPEC is named {spec.name!r}, but is registered as {name!r}")
    return spec


def tool_backends(name: str) -> tuple[str, ...]:
    """Backends a tool offers; raises with the allowed tool names for an unknown tool."""
    return tuple(_module(name).BACKENDS)


def validate_tool_config(name: str, config: Mapping[str, Any]) -> None:
    if not isinstance(config, Mapping):
        raise ValueError(f"tools.{name} must be a mapping (e.g. {{backend: ...}})")
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
    module = _module(name)
    backend = options.pop("backend", module.BACKENDS[0])
    tool = module.build(backend, **options)
    if cache and cache.get("mode", "off") != "off":
        from coa_envs.tools.cache import CachedTool

        tool = CachedTool(tool, backend=backend, options=options, **cache)
    return tool
