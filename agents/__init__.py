"""Policies and agents that play coa envs, and the records they leave.

The names users reach for first are exported here (``agents.OracleAgent``,
``agents.LLMPolicy``, ``agents.Trajectory``, ...) but imported on first use, so that
``import agents.trajectory`` or a subprocess that needs one module does not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "OracleAgent": "agents.oracle",
    "LLMPolicy": "agents.policy",
    "EngineError": "agents.policy",
    "Trajectory": "agents.trajectory",
    "Segment": "agents.trajectory",
    "EpisodeStatus": "agents.trajectory",
    "read_trajectories": "agents.trajectory",
    "write_trajectory": "agents.trajectory",
    "EpisodeRecorder": "agents.episode",
    "run_episode": "agents.episode",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
