"""Tool use: did the episode consult a tool, and did it avoid asking the same thing twice?

An episode term over the env's record of tool calls (:class:`~coa_envs.rewards.base.ToolCallRecord`).
Two checks, each worth an equal share of 1:

* ``called``: at least ``min_calls`` tool calls actually ran (a call to a tool the env does
  not have, or an exact repeat the env refused, does not count);
* ``no_repeats``: no call repeated an earlier one. "Repeated" is the env's own test (same
  tool, same query up to whitespace), read from the ``repeated_query`` error it gave.

``checks`` picks which of the two count (both by default); ``tools`` restricts both to some
tools (e.g. only ``wiki_search``). A model that answers at once scores 0 on ``called`` and 1
on ``no_repeats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coa_envs.rewards.base import EpisodeView
from coa_envs.types import ErrorKind, RewardResult

__all__ = ["CHECKS", "VERSION", "ToolUseTerm", "build"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)
CHECKS = ("called", "no_repeats")
_NOT_RUN = frozenset({ErrorKind.TOOL_NOT_AVAILABLE.value, ErrorKind.REPEATED_QUERY.value})


@dataclass(frozen=True, slots=True)
class ToolUseTerm:
    min_calls: int = 1
    checks: tuple[str, ...] = CHECKS
    tools: tuple[str, ...] | None = None

    def score(self, episode: EpisodeView) -> RewardResult:
        calls = [c for c in episode.tool_calls if self.tools is None or c.tool in self.tools]
        ran = sum(1 for c in calls if c.error_kind not in _NOT_RUN)
        repeats = sum(1 for c in calls if c.error_kind == ErrorKind.REPEATED_QUERY.value)
        results = {"called": ran >= self.min_calls, "no_repeats": repeats == 0}
        passed = [results[name] for name in self.checks]
        details: dict[str, Any] = {**{name: results[name] for name in self.checks},
                                   "tool_calls": len(calls), "calls_run": ran, "repeated_queries": repeats}
        return RewardResult(sum(passed) / len(passed), details)


def build(min_calls: int = 1, checks: Sequence[str] = CHECKS, tools: Sequence[str] | None = None) -> ToolUseTerm:
    """``{name: tool_use, min_calls: 1, checks: [called, no_repeats], tools: null}``."""
    if isinstance(min_calls, bool) or not isinstance(min_calls, int) or min_calls < 1:
        raise ValueError(f"tool_use: min_calls={min_calls!r} is not valid; allowed: an integer >= 1")
    if isinstance(checks, str) or not checks or any(c not in CHECKS for c in checks):
        raise ValueError(f"tool_use: checks={checks!r} is not valid; allowed: a non-empty list of {list(CHECKS)}")
    if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
        raise ValueError(f"tool_use: tools={tools!r} is not valid; allowed: a list of tool names or null")
    return ToolUseTerm(min_calls, tuple(dict.fromkeys(checks)), None if tools is None else tuple(tools))
