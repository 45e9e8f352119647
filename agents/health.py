"""Is a finished run a measurement? The systematic failures a summary must not hide.

A run can complete, write its table and still measure nothing: every call of a tool failed
(an index that was never configured, a typo'd option, a dead search endpoint), every episode
ended in an error (the agent could not play: no model, no gold answers for the oracle over a
served env), or nothing was played at all. Such a run used to exit 0 with an accuracy of 0,
the reason buried in ``trajectories.jsonl``. :func:`run_health` reads the trajectories and
says so: ``problems`` make the command exit non-zero, ``warnings`` are printed loudly where
0 is still right (a few episodes failed; the model's own calls were malformed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.trajectory import EpisodeStatus, Trajectory

__all__ = ["CONFIG_TOOL_ERRORS", "ENV_SIDE_TOOL_ERRORS", "RunHealth", "run_health"]

# A tool whose every call ended in one of these never worked in this run: it has no settings
# it needs (not_configured), or replays a cache that lacks the calls (cache_miss).
CONFIG_TOOL_ERRORS = frozenset({"not_configured", "cache_miss"})
# These may be the tool's fault (a dead server, a blocked host) or the agent's (a hallucinated
# URL, code that crashes): the tool never worked when every call, whatever it asked, got the
# same failure; different failures are the agent's calls, a measurement. The agent's own
# mistakes (bad_action, repeated_query, tool_not_available, sandbox_violation) always are.
ENV_SIDE_TOOL_ERRORS = frozenset({"tool_error", "tool_timeout", "blocked_url", *CONFIG_TOOL_ERRORS})


@dataclass
class RunHealth:
    """``problems``: the run measured nothing (exit non-zero); ``warnings``: print, exit 0."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"problems": list(self.problems), "warnings": list(self.warnings)}


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key}={n}" for key, n in counter.most_common())


def _first(trajectories: Sequence[Trajectory], key: str) -> str:
    for trajectory in trajectories:
        text = trajectory.info.get(key)
        if isinstance(text, str):
            return f"; first: {text[:400]}"
    return ""


def _episode_health(trajectories: Sequence[Trajectory], health: RunHealth) -> None:
    statuses = Counter(str(t.status) for t in trajectories)
    errored = [t for t in trajectories if EpisodeStatus.parse(t.status).is_error]
    if errored:
        counts = _counts(Counter(str(t.status) for t in errored))
        first = _first(errored, "error")
        if len(errored) == len(trajectories):
            health.problems.append(f"the agent could not play: all {len(errored)} episodes ended in an error "
                                   f"({counts}){first}")
        else:
            health.warnings.append(f"{len(errored)} of {len(trajectories)} episodes ended in an error ({counts})"
                                   f"{first}")
    truncated = sum(n for s, n in statuses.items() if s.startswith("truncated"))
    if truncated == len(trajectories):
        health.warnings.append(f"all {truncated} episodes were truncated before an answer "
                               f"({_counts(Counter(statuses))}): no answer was scored")


def _tool_health(trajectories: Sequence[Trajectory], health: RunHealth) -> None:
    calls: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = {}
    samples: dict[str, list[str]] = {}
    for trajectory in trajectories:
        calls.update(trajectory.tool_calls)
        for tool, by_kind in (trajectory.info.get("tool_error_kinds") or {}).items():
            kinds.setdefault(tool, Counter()).update(by_kind)
            failures[tool] += sum(by_kind.values())
        for tool, texts in (trajectory.info.get("tool_error_samples") or {}).items():
            seen = samples.setdefault(tool, [])
            seen.extend(t for t in texts if t not in seen)
    for tool, made in calls.items():
        if not made or failures[tool] < made:
            continue
        seen_kinds, texts = kinds.get(tool, Counter()), samples.get(tool, [])
        message = (f"every {tool} call failed ({failures[tool]} of {made}: {_counts(seen_kinds)})"
                   + (f"; first: {texts[0]}" if texts else ""))
        config = set(seen_kinds) <= CONFIG_TOOL_ERRORS
        one_failure = set(seen_kinds) <= ENV_SIDE_TOOL_ERRORS and len(texts) == 1 and failures[tool] >= 2
        if config or one_failure:
            health.problems.append(f"{message}: the tool never worked in this run; check its settings "
                                   "(`coa list --tools`, -e tools.<name>.<option>=...)")
        else:
            health.warnings.append(f"{message}: the calls themselves failed (the agent's, or a tool that "
                                   "failed differently each time)")


def run_health(trajectories: Sequence[Trajectory], *, expected_episodes: int | None = None) -> RunHealth:
    """The systematic failures of a run's trajectories (see the module docstring)."""
    health = RunHealth()
    if not trajectories:
        health.problems.append("no episode was played" + (f" (expected {expected_episodes})"
                                                          if expected_episodes else ""))
        return health
    _episode_health(trajectories, health)
    _tool_health(trajectories, health)
    if expected_episodes is not None and len(trajectories) < expected_episodes:
        health.warnings.append(f"{len(trajectories)} of the {expected_episodes} episodes asked for were recorded")
    return health
