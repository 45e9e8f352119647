"""Typed records and small protocols shared by envs, tools and rewards.

Everything that crosses a module boundary inside ``coa_envs`` is one of these frozen
records, so that tests and metrics can count error *kinds* instead of parsing strings.
This module must stay dependency-free (stdlib only): it is imported on ``import coa_envs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ErrorKind",
    "Reward",
    "RewardResult",
    "Task",
    "Tool",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
]


class ErrorKind(StrEnum):
    """Why a step did not go as the model intended. Values are stable metric keys."""

    BAD_ACTION = "bad_action"
    TOOL_NOT_AVAILABLE = "tool_not_available"
    TOOL_ERROR = "tool_error"
    TOOL_TIMEOUT = "tool_timeout"
    REPEATED_QUERY = "repeated_query"
    SANDBOX_VIOLATION = "sandbox_violation"
    BLOCKED_URL = "blocked_url"
    NOT_CONFIGURED = "not_configured"
    CACHE_MISS = "cache_miss"
    REWARD_ERROR = "reward_error"


@dataclass(frozen=True, slots=True)
class Task:
    """One problem of a benchmark.

    ``gold`` holds every accepted answer (aliases included) for answer-matching rewards;
    ``tests`` holds executable tests for the code family; ``files`` lists attachment
    paths (GAIA). ``metadata`` keeps whatever else the source row had.
    """

    task_id: str
    question: str
    gold: tuple[str, ...] = ()
    tests: Any = None
    files: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "question": self.question,
            "gold": list(self.gold),
            "tests": self.tests,
            "files": list(self.files),
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call produced; ``text`` is what the model sees in ``<observation>``."""

    text: str
    ok: bool = True
    error_kind: ErrorKind | None = None
    latency_s: float = 0.0
    cost: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def failure(cls, text: str, kind: ErrorKind, **details: Any) -> ToolResult:
        return cls(text=text, ok=False, error_kind=kind, details=details)


@dataclass(slots=True)
class ToolContext:
    """Per-episode state a tool may read: the task (for attachments) and a scratch dict.

    Stateful tools (a notebook-like code session) keep their handle in ``state`` so the
    env can release it in ``close``/``reset``.
    """

    task: Task | None = None
    episode_id: str = ""
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """How a tool presents itself to the model; each tool module owns one (``SPEC``).

    Kept apart from any one call syntax: the CoA tag grammar renders it as
    ``<name>usage</name>: summary`` (:func:`coa_envs.protocol.describe_tool`); a
    function-calling protocol renders a function ``name`` described by ``summary`` whose one
    string parameter is described by ``argument``.
    """

    name: str  # the tag / function name
    summary: str  # what the tool does and returns, one sentence
    usage: str  # the shape of the query inside the tag: "query", "URL | what to look for"
    argument: str  # the query described in words, for schema-based protocols
    parameter: str = "query"  # the name of that one string parameter (function calling, MCP)
    # The tool looks evidence up outside the model (search, crawl, a retriever): an answer the
    # model writes before such a tool showed it was known from elsewhere (a distillation leak).
    retrieves: bool = False


@runtime_checkable
class Tool(Protocol):
    """A tool agent. ``name`` is the CoA tag it answers to (``code``, ``web_search``...)."""

    name: str

    def run(self, query: str, ctx: ToolContext) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class RewardResult:
    """A score in [0, 1] plus the breakdown that explains it (metrics, per-test status)."""

    score: float
    details: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Reward(Protocol):
    """Scores a final answer against a task. Must be a pure function of its inputs."""

    def __call__(self, prediction: str, task: Task) -> RewardResult: ...
