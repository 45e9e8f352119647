"""System prompts: one ``<name>.txt`` template per task family, with a ``{tools}`` slot.

:func:`render_system_prompt` is the one place a prompt gets its tool list, for the env's
own system message and for a policy that swaps in another prompt: each tool describes
itself (:func:`coa_envs.tools.tool_spec`) and the protocol renders the description in its
call syntax (:func:`coa_envs.protocol.describe_tool`).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

from coa_envs.types import ToolSpec

__all__ = ["available_prompts", "render_system_prompt"]


def available_prompts() -> list[str]:
    """Names of the shipped templates (``math``, ``qa``, ``web``, ``code``...)."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".txt"))


def render_system_prompt(name_or_text: str, tools: Iterable[str | ToolSpec]) -> str:
    """A shipped template by name, or literal text; ``{tools}`` becomes the tool list (tool
    names, or specs of tools outside the registry such as an env's MCP tools)."""
    from coa_envs.protocol import describe_tool
    from coa_envs.tools import tool_spec

    candidate = resources.files(__name__).joinpath(f"{name_or_text}.txt")
    text = candidate.read_text(encoding="utf-8") if candidate.is_file() else name_or_text
    specs = [tool if isinstance(tool, ToolSpec) else tool_spec(tool) for tool in tools]
    listing = "\n".join(f"- {describe_tool(spec)}" for spec in specs) or "- (none)"
    return text.replace("{tools}", listing)
