"""How a model calls tools: the CoA tag grammar (:mod:`coa_envs.protocol`, kept at that path
for its many importers) and OpenAI-style function calling (:mod:`coa_envs.protocols.tools`),
chosen per env (``protocol: tags|tools``). Tools, rewards, limits and ``info`` are shared."""

from __future__ import annotations

__all__ = ["corrective_message"]


def corrective_message(kind: str, message: str, tools: list[str], protocol: str = "tags") -> str:
    """The observation a model sees after a malformed turn: what was wrong and what to do,
    in the call syntax of the env's protocol."""
    if protocol == "tools":
        names = ", ".join(tools) or "none"
        return (f"Invalid action ({kind}): {message}. Each message must call exactly one function "
                f"({names}) or give the final answer in <answer>...</answer> without a call.")
    usage = " or ".join(f"<{t}>...</{t}>" for t in tools) if tools else "no tools"
    return (
        f"Invalid action ({kind}): {message}. "
        f"Each turn must contain exactly one tool call ({usage}) or a final <answer>...</answer>."
    )
