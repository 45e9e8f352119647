"""Agents for the run-health tests, importable as ``tests.agents.flaky_agents:NAME``."""

from __future__ import annotations

from typing import Any


class FailsOnFirstTask:
    """Answers every task but raises on the env's first one: some episodes fail, not all."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        if info["task_id"].endswith("-0004"):
            raise RuntimeError("agent bug on one task")

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return "<answer>nobody</answer>"


class AlwaysRaises:
    """Cannot play at all (a missing model, a broken framework)."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        raise RuntimeError("no model behind this agent")


class CallsAMissingTool:
    """Calls a tool this env does not have: every call fails, but by the agent's own fault."""

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return "<code>print(1)</code>"
