"""Tool agents: one module per CoA tool tag, and the registry that names them.

A tool module (``coa_envs.tools.web_search``...) defines

* ``SPEC``: a :class:`~coa_envs.types.ToolSpec`, how the tool presents itself to the model
  (the protocol renders it into the system prompt; the tool owns the words);
* ``BACKENDS``: the backends it offers, the default first;
* ``build(backend, **config) -> Tool``;
* optionally ``option_schema(backend) -> Schema``: the options ``build`` takes for a backend
  (:mod:`coa_envs.options`; derived from the constructor's signature). Without it the
  signature of ``build`` is the schema. Options are checked against it at ``make`` time.

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

from coa_envs.errors import OptionError, UserError
from coa_envs.options import Option, Schema, check_choice, did_you_mean
from coa_envs.types import ErrorKind, Tool, ToolContext, ToolResult, ToolSpec
from coa_envs.vocabulary import BUILTIN_TOOLS, register_tool, tool_module, tool_names, unregister_tool

__all__ = [
    "BUILTIN_TOOLS",
    "build_tool",
    "build_tools",
    "register_tool",
    "retrieval_tools",
    "run_tool",
    "tool_backends",
    "tool_names",
    "tool_option_schema",
    "tool_spec",
    "unregister_tool",
    "validate_tool_config",
]

log = logging.getLogger(__name__)



def _module(name: str) -> ModuleType:
    if name not in tool_names():
        raise OptionError(f"tools.{name} is not a CoA tool{did_you_mean(name, tool_names())}; "
                          f"allowed: {list(tool_names())}")
    module = tool_module(name)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise OptionError(f"tools.{name}: its module {exc.name} is not importable") from None
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


_CACHE_MODES = ("off", "record", "replay", "replay-or-record")


def tool_option_schema(name: str, backend: str | None = None) -> Schema:
    """The options tool ``name`` accepts with ``backend`` (default: its first): its module's
    ``option_schema(backend)``, else the keyword parameters of its ``build``; plus the keys
    every tool takes (``backend``, ``cache``)."""
    module = _module(name)
    backend = backend or module.BACKENDS[0]
    declared = getattr(module, "option_schema", None)
    where = f"tools.{name}"
    own = declared(backend) if callable(declared) else Schema.of_callable(where, module.build, skip=("backend",))
    common = Schema(where, {"backend": Option(str), "cache": Option(Mapping[str, Any] | None)})
    return Schema(where, own.options, own.open).merged(common)


def validate_tool_config(name: str, config: Mapping[str, Any]) -> None:
    """Check one ``tools:`` entry at make time: the backend, every option's name and type (with
    a "did you mean" for a near miss) and the record/replay cache block. (The env then builds
    its tools at once, so what only a constructor can check -- an index that must exist, a
    backend that needs ``base_url`` -- fails ``make`` too.)"""
    if not isinstance(config, Mapping):
        raise OptionError(f"tools.{name}={config!r} is not valid; allowed: a mapping (e.g. {{backend: ...}})")
    backends = tool_backends(name)
    backend = config.get("backend", backends[0])
    check_choice(f"tools.{name}.backend", backend, backends)
    tool_option_schema(name, backend).check(config)
    cache = config.get("cache")
    if cache is not None:
        from coa_envs.tools.cache import CachedTool

        Schema.of_callable(f"tools.{name}.cache", CachedTool.__init__, skip=("tool", "backend", "options")).check(cache)
        check_choice(f"tools.{name}.cache.mode", cache.get("mode", "off"), _CACHE_MODES)


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


def build_tools(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, Tool]:
    """Every tool of an env's ``tools:`` block, built now: what only a constructor can check (an
    index that must exist, a backend that needs ``base_url``) fails ``make`` as an
    :class:`OptionError` naming the tool, not every call of a run. A failure closes the tools
    already built."""
    built: dict[str, Tool] = {}
    try:
        for name, config in configs.items():
            try:
                built[name] = build_tool(name, config)
            except UserError:
                raise
            except (ValueError, TypeError) as exc:  # the constructor refused a setting
                raise OptionError(f"tools.{name}: {exc}") from exc
    except BaseException:
        for tool in built.values():
            closer = getattr(tool, "close", None)
            if callable(closer):
                closer()
        raise
    return built


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
