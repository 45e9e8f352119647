"""What a :class:`~coa_envs.env.CoAEnv` holds open, closed on garbage collection and at exit.

An env holds its tools (a sandbox pool, HTTP clients, browsers), MCP connections, reward clients
(the LLM judge's) and its family's runtime (the mini-web's server). They live in an
:class:`EnvResources` apart from the env, so a ``weakref.finalize`` on the env closes them when
the env is garbage-collected or the interpreter exits without ``close()``: an RL worker or a
script that drops envs would otherwise keep each one's sandbox workers and servers until the
process ends. The env reaches them as ``env._tools`` etc. through :func:`held`.
"""

from __future__ import annotations

import logging
from typing import Any

from coa_envs.types import Reward, Tool

__all__ = ["EnvResources", "close_all", "held"]

log = logging.getLogger(__name__)


class EnvResources:
    """The open resources of one env; :meth:`close` is idempotent and never raises."""

    __slots__ = ("mcp", "reward", "runtime", "tools")

    def __init__(self) -> None:
        self.tools: dict[str, Tool] | None = None
        self.mcp: dict[str, Any] | None = None  # MCP tools by env name, connected on first use
        self.reward: Reward | None = None
        self.runtime: Any = None

    def close(self) -> None:
        tools, self.tools = self.tools or {}, None
        mcp, self.mcp = self.mcp or {}, None
        close_all([tool for name, tool in tools.items() if name not in mcp])
        reward, self.reward = self.reward, None
        close_all([reward] if reward is not None else [])
        close_all(list(mcp.values()))
        runtime, self.runtime = self.runtime, None
        close_all([runtime] if runtime is not None else [])


def close_all(resources: list[Any]) -> None:
    """``close()`` each resource that has one; a failure is logged, never raised."""
    for resource in resources:
        closer = getattr(resource, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                log.exception("%s failed to close", getattr(resource, "name", type(resource).__name__))


def held(name: str) -> property:
    """An env attribute (``env._tools``...) that lives in the env's ``_res`` (:class:`EnvResources`)."""
    return property(lambda env: getattr(env._res, name), lambda env, value: setattr(env._res, name, value))
