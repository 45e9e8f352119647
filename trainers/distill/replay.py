"""Replay a trajectory's actions through a fresh env: the same observations, the same reward.

Training data must be what the env really does. A converted teacher run is text assembled from
a log; a record may have been edited; a tool may have changed since. Replaying each kept
trajectory's actions through a new env built with the recorded ``gym.make`` options
(``info["make_kwargs"]``, written by ``coa teach``; ``default_kwargs`` for records without them)
catches all of these: every observation must equal the recorded one character for character,
and the episode must end the same way with the same reward.

Web envs: a live site changes, so teach with the tool cache in ``record`` mode and replay
against it (``tools: {crawl_page: {cache: {mode: replay, path: …}}}`` in the options); the
mini-web needs a fixed ``task_options.port`` so a later process serves the same URLs.
"""

from __future__ import annotations

import json
from typing import Any

from agents.episode import run_episode

__all__ = ["EnvPool", "replay_reason"]


class EnvPool:
    """One env per (id, options), built on first use and reused across trajectories."""

    def __init__(self, default_kwargs: dict[str, Any] | None = None):
        self.default_kwargs = dict(default_kwargs or {})
        self._envs: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def kwargs_for(self, trajectory: Any) -> dict[str, Any]:
        recorded = trajectory.info.get("make_kwargs")
        return dict(recorded) if isinstance(recorded, dict) else dict(self.default_kwargs)

    def get(self, trajectory: Any) -> Any | None:
        """The env for ``trajectory``, or None when it cannot be built (reason in ``errors``)."""
        import gymnasium as gym

        import coa_envs  # noqa: F401  (registers ids)

        kwargs = self.kwargs_for(trajectory)
        key = json.dumps([trajectory.env_id, kwargs], sort_keys=True, default=str)
        if key in self.errors:
            return None
        if key not in self._envs:
            try:
                self._envs[key] = gym.make(trajectory.env_id, **kwargs)
            except Exception as exc:  # a missing data file, an unknown id: said in the report
                self.errors[key] = f"{trajectory.env_id}: {type(exc).__name__}: {exc}"
                return None
        return self._envs[key]

    def task(self, trajectory: Any) -> Any | None:
        env = self.get(trajectory)
        if env is None:
            return None
        index = {task.task_id: task for task in env.unwrapped.tasks}
        return index.get(trajectory.task_id)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


class _Script:
    """Plays the recorded actions; running out of them ends the replay as an agent error."""

    def __init__(self, actions: list[str]):
        self.actions = list(actions)

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.actions:
            raise RuntimeError("the recorded actions ran out before the replayed episode ended")
        return self.actions.pop(0)


def replay_reason(trajectory: Any, pool: EnvPool) -> str | None:
    """None when the replay equals the record, else why not (``replay:…``)."""
    env = pool.get(trajectory)
    if env is None:
        return "replay:env_unavailable"
    if pool.task(trajectory) is None:
        return "replay:unknown_task"
    actions = [s.text for s in trajectory.segments if s.kind == "generated"]
    replayed = run_episode(env, _Script(actions), seed=trajectory.seed,
                           options={"task_id": trajectory.task_id})
    recorded = [(s.kind, s.text) for s in trajectory.segments]
    again = [(s.kind, s.text) for s in replayed.segments]
    if again != recorded:
        return "replay:observation_mismatch"
    if (replayed.status, replayed.terminated) != (trajectory.status, trajectory.terminated):
        return "replay:different_ending"
    if replayed.reward != trajectory.reward:
        return "replay:reward_mismatch"
    return None
