"""A multi-agent teacher system as one ordinary :class:`~agents.base.Agent`.

So that a team is played by the same episode loop as every other agent
(:func:`agents.rollout.run_rollouts`: concurrency, per-episode deadlines, resume, streaming
JSONL, statuses), :class:`TeacherAgent` runs the team in its own thread and serves its tool
calls as actions through a :class:`~agents.teachers.bridge.TeacherBridge`. The recorded
trajectory holds the env's exact observations; its actions are the bare tool calls and the
final answer. What the agents wrote around them (plans, thoughts, reflections, suggested
answers, double checks) is kept in ``trajectory.info["teacher"]["events"]``, each stamped with
the action it precedes; ``trainers.distill`` converts the two into one CoA trajectory.

``info["make_kwargs"]`` records the ``gym.make`` options the env was built with, so the
episode can be replayed through a fresh env later (``coa distill`` does, for every kept one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agents.teachers.bridge import TeacherBridge
from agents.teachers.config import TeacherSystemConfig

__all__ = ["TeacherAgent", "teacher_factory"]

_JOIN_S = 30.0  # after the episode ends the team is interrupted; its last model call may still run


class TeacherAgent:
    """One episode of a teacher team. ``env`` is the episode's env (its tools and limits)."""

    def __init__(self, system: TeacherSystemConfig, env: Any, *, seed: int | None = None,
                 make_kwargs: dict[str, Any] | None = None):
        self.system, self.env, self.seed = system, env, seed
        self.make_kwargs = dict(make_kwargs or {})
        self.bridge: TeacherBridge | None = None
        self.team: Any = None
        self._thread: threading.Thread | None = None
        self._started = False
        self._fallback = False
        self._answer: str | None = None

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        from agents.teachers.team import build_team

        messages = info.get("messages") or []
        question = messages[-1]["content"] if messages else observation
        max_turns = int(info.get("max_turns") or self.env.unwrapped.config.max_turns)
        self.bridge = TeacherBridge(max_turns, self.system.step_timeout_s)
        self.team = build_team(self.system, self.env, self.bridge, question, seed=self.seed)
        self._thread = threading.Thread(target=self._solve, name="coa-teacher-team", daemon=True)
        self._started = False

    def _solve(self) -> None:
        assert self.bridge is not None
        try:
            self._answer, self._fallback = self.team.run()
            self.bridge.answer("manager", self._answer)
            self.bridge.finish()
        except BaseException as exc:  # handed to the episode loop by next_action
            self.bridge.finish(exc)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.bridge is None or self._thread is None:
            raise RuntimeError("reset() must be called before act()")
        if not self._started:
            self._started = True
            self._thread.start()
        else:
            self.bridge.deliver(observation)
        return self.bridge.next_action()

    def fill_trajectory(self, trajectory: Any) -> None:
        """The episode is over: stop the team and keep its record in the trajectory."""
        if self.bridge is None:
            return
        self.bridge.close()
        if self.team is not None:
            self.team.interrupt()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(_JOIN_S)
        trajectory.info["teacher"] = {
            "system": self.system.name,
            "source": self.system.source,
            "members": [member.name for member in getattr(self.team, "members", [])],
            "events": self.bridge.event_dicts(),
            "agents": self.team.usage.to_dict() if self.team is not None else {},
            "rejections": getattr(self.team, "rejections", 0),
            "verdicts": list(getattr(self.team, "verdicts", [])),
            "dropped_thoughts": self.bridge.dropped_thoughts,
            "fallback_answer": self._fallback,
        }
        trajectory.info["make_kwargs"] = self.make_kwargs


def teacher_factory(system: TeacherSystemConfig,
                    make_kwargs: dict[str, Any] | None = None) -> Callable[[Any, int], TeacherAgent]:
    """``(env, episode_seed) -> TeacherAgent`` for :func:`agents.rollout.run_rollouts`."""
    return lambda env, seed: TeacherAgent(system, env, seed=seed, make_kwargs=make_kwargs)
