"""Tool agents: one module per CoA tool tag, and the registry that names them.

A tool module (``coa_envs.tools.web_search``...) defines

* ``SPEC``: a :class:`~coa_envs.types.ToolSpec`, how the tool presents itself to the model
  (the protocol renders it into the system prompt; the tool owns the words);
* ``BACKENDS``: the backends it offers, the default first;
* ``build(backend, **config) -> Tool``.

Adding a tool is that module plus one line in the vocabulary's built-in tools
(:mod:`coa_envs.vocabulary`) or, from outside the package, one :func:`register_tool` call:
the protocol then accepts its tag, env configs accept it under ``tools:``, the system prompt
describes it, ``coa list`` shows it, ``coa mcp serve`` serves it, the tiny tokenizer learns
its tag and the distillation filters judge it by its ``SPEC``.
:func:`build_tool` is the one place that turns a registry ``tools:`` entry into a Tool,
validating the backend and wrapping the tool in the record/replay cache when asked.

The registry maps tags to module *names*: nothing is imported until a tool is described or
built, so ``import coa_envs`` stays light.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from coa_envs.types import ErrorKind, Tool, ToolContext, ToolResult, ToolSpec
from coa_envs.vocabulary import BUILTIN_TOOLS, register_tool, tool_module, tool_names, unregister_tool

__all__ = [
    "BUILTIN_TOOLS",
    "build_tool",
    "register_tool",
    "retrieval_tools",
    "run_tool",
    "tool_backends",
    "tool_names",
    "tool_spec",
    "unregister_tool",
    "validate_tool_config",
]

log = logging.getLogger(__name__)



def _module(name: str) -> ModuleType:
    module = tool_module(name)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise ValueError(f"tools.{name}: its module {exc.name} is not importable") from None
        raise


def tool_spec(name: str) -> ToolSpec:
    """What the model is told about tool ``name`` (its module's ``SPEC``)."""
    spec = _module(name).SPEC
    if spec.name != name:
        raise ValueError(f"{tool_module(name)}.SPEC is named {spec.name!r}, but is registered as {name!r}")
    return spec


def retrieval_tools() -> frozenset[str]:
    """The registered tools that look evidence up (``SPEC.retrieves``: search, crawl, retrievers)."""
    return _retrieval_tools(tool_names())


@functools.cache
def _retrieval_tools(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name for name in names if tool_spec(name).retrieves)


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


def run_tool(tools: Mapping[str, Tool], name: str, query: str, ctx: ToolContext) -> ToolResult:
    """Run one call of ``tools[name]``, never raising: a tool that raises or returns no
    :class:`ToolResult` is a ``tool_error`` result that says so (the env and the MCP server
    both hand it on to the model)."""
    try:
        result = tools[name].run(query, ctx)
    except Exception as exc:  # tools should not raise; if one does, the caller is told
        log.exception("tool %s raised", name)
        return ToolResult.failure(f"The {name} tool failed: {type(exc).__name__}: {exc}", ErrorKind.TOOL_ERROR)
    if not isinstance(result, ToolResult):
        return ToolResult.failure(f"The {name} tool returned no result.", ErrorKind.TOOL_ERROR)
    return result


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
