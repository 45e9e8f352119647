"""A recording OpenAI-compatible gateway: train the model inside any agent framework.

An agent (the ``openai`` client, smolagents, LangGraph, your own loop) points its base URL at
the gateway; the gateway answers from a local engine (or passes through to an upstream
OpenAI-compatible server) and records, per session, what the model was fed and what it
sampled. A finished session becomes :class:`~agents.trajectory.Trajectory` records with a
loss mask over the model's own tokens only, scored by a coa env's reward or a user reward
function, ready for ``coa train sft`` (as data) and ``coa train rl`` (as episodes).

Parts: :mod:`~agents.gateway.sessions` (records), :mod:`~agents.gateway.prompts` (token ids
without re-tokenising), :mod:`~agents.gateway.assembly` (sessions -> trajectories),
:mod:`~agents.gateway.local` and :mod:`~agents.gateway.upstream` (backends),
:mod:`~agents.gateway.core` (sessions, rewards, output), :mod:`~agents.gateway.app` (HTTP),
:mod:`~agents.gateway.client` (what an agent callable is given).

Heavy imports (fastapi, httpx, the engines) happen in the submodules that need them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AgentTask", "ForcedSampling", "Gateway", "LocalBackend", "SessionResult", "UpstreamBackend",
           "create_gateway_app", "session_trajectories"]

_WHERE = {
    "AgentTask": "agents.gateway.client",
    "ForcedSampling": "agents.gateway.sessions",
    "Gateway": "agents.gateway.core",
    "SessionResult": "agents.gateway.core",
    "LocalBackend": "agents.gateway.local",
    "UpstreamBackend": "agents.gateway.upstream",
    "create_gateway_app": "agents.gateway.app",
    "session_trajectories": "agents.gateway.assembly",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'agents.gateway' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
