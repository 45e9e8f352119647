"""The Chain-of-Agents vocabulary, spelled once: role tags, the answer and observation tags, and
the registry of tool tags.

Everything that speaks the protocol derives its words from here: the tag grammar and its stop
strings (:mod:`coa_envs.protocol`), the tool registry's builders (:mod:`coa_envs.tools`), the
tiny tokenizer's training text (:mod:`agents.tiny`), the MCP server's default tools
(:mod:`coa_envs.mcp.server`) and the distillation filters (:mod:`trainers.distill.filters`).
So registering a tool with :func:`register_tool` reaches all of them, and none keeps a list
of its own that a new tool could miss.

A leaf: it imports nothing of the project (the protocol and the tools both read it, so neither
imports the other), and tool modules are named, not imported, so ``import coa_envs`` stays light.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSWER_TAG",
    "BUILTIN_TOOLS",
    "OBSERVATION_TAG",
    "RESERVED_TAGS",
    "ROLE_TAGS",
    "coa_tags",
    "register_tool",
    "tool_module",
    "tool_names",
    "unregister_tool",
]

#: The role spans a model writes to play several agents in one trajectory.
ROLE_TAGS: tuple[str, ...] = ("think", "plan", "reflection", "suggested_answer", "double_check")
ANSWER_TAG = "answer"
OBSERVATION_TAG = "observation"  # written by the environment alone, never by the model
#: Tags no tool may take.
RESERVED_TAGS: frozenset[str] = frozenset((*ROLE_TAGS, ANSWER_TAG, OBSERVATION_TAG))

# Tool tag -> the module implementing it (SPEC, BACKENDS, build; see coa_envs.tools).
_BUILTIN_MODULES: dict[str, str] = {
    "web_search": "coa_envs.tools.web_search",
    "crawl_page": "coa_envs.tools.crawl_page",
    "wiki_search": "coa_envs.tools.wiki_search",
    "code": "coa_envs.tools.code",
    "visual_inspector": "coa_envs.tools.visual_inspector",
}
BUILTIN_TOOLS: tuple[str, ...] = tuple(_BUILTIN_MODULES)

_registry: dict[str, str] = dict(_BUILTIN_MODULES)
# Replaced (never mutated) on every change, so readers can cache what they derive on identity.
_names: tuple[str, ...] = BUILTIN_TOOLS
_TAG_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def tool_names() -> tuple[str, ...]:
    """Every registered tool tag, built-in ones first (the same object until the registry changes)."""
    return _names


def coa_tags(tools: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Every tag of the protocol: roles, ``tools`` (default: those registered now), observation, answer."""
    return (*ROLE_TAGS, *(_names if tools is None else tools), OBSERVATION_TAG, ANSWER_TAG)


def tool_module(name: str) -> str:
    """The module that implements tool ``name``; an unknown name raises with the allowed ones."""
    if name not in _registry:
        raise ValueError(f"tools.{name} is not a CoA tool; allowed: {list(_names)}")
    return _registry[name]


def register_tool(name: str, module: str) -> None:
    """Register tool tag ``name``, implemented by the module named ``module`` (imported lazily).

    The tag must be a lower-case identifier that is not already a protocol tag; registering
    the same module again is a no-op.
    """
    global _names
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
    if name in _BUILTIN_MODULES:
        raise ValueError(f"{name!r} is a built-in tool and cannot be unregistered")
    _registry.pop(name, None)
    _names = tuple(_registry)
