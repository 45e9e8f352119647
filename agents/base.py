"""The ``Agent`` protocol: anything that maps the latest observation to the next action.

An agent sees the reset prompt (with ``info["messages"]``) first, then each observation the
env returns, and answers with one CoA turn. Plain callables are adapted by
:class:`CallableAgent`, so a user can plug in ``lambda obs, info: ...`` without a class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["Agent", "CallableAgent", "as_agent"]


@runtime_checkable
class Agent(Protocol):
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Start an episode: ``observation`` is the prompt, ``info`` has messages and task id."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Return the next action text (one CoA turn)."""


class CallableAgent:
    """Adapts ``fn(observation, info) -> action`` to the Agent protocol."""

    def __init__(self, fn: Callable[[str, dict[str, Any]], str]):
        self.fn = fn

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        return None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.fn(observation, info)


def as_agent(obj: Agent | Callable[[str, dict[str, Any]], str]) -> Agent:
    if isinstance(obj, Agent):
        return obj
    if callable(obj):
        return CallableAgent(obj)
    raise TypeError(f"{obj!r} is neither an Agent nor a callable (observation, info) -> action")
