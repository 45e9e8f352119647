"""Run one episode of any agent in any env and record it as a :class:`Trajectory`.

This is the sequential reference loop; concurrent rollouts build on the same contract.
An agent that raises ends its episode with ``status="agent_error"``; the caller's run goes on.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from agents.base import Agent
from agents.trajectory import Trajectory

__all__ = ["run_episode"]


def run_episode(
    env: Any,
    agent: Agent,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample_index: int = 0,
) -> Trajectory:
    started = time.perf_counter()
    observation, info = env.reset(seed=seed, options=options)
    env_id = env.unwrapped.config.env_id
    trajectory = Trajectory(
        env_id=env_id,
        task_id=info["task_id"],
        prompt_messages=info.get("messages", []),
        prompt_text=observation,
        seed=seed,
        sample_index=sample_index,
    )
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    try:
        agent.reset(observation, info)
        while True:
            action = agent.act(observation, info)
            observation, reward, terminated, truncated, info = env.step(action)
            trajectory.add_generated(action)
            tool = info.get("tool")
            for name in (tool if isinstance(tool, list) else [tool] if tool else []):
                calls[name] += 1
            if info.get("error_kind"):
                errors[str(info.get("tool") or "action")] += 1
            if observation:
                trajectory.add_observation(observation)
            if terminated or truncated:
                trajectory.reward = float(reward)
                trajectory.terminated, trajectory.truncated = terminated, truncated
                trajectory.answer = info.get("answer")
                trajectory.status = "ok" if terminated else f"truncated:{info.get('truncation', 'unknown')}"
                for key in ("reward_details", "reward_error"):
                    if info.get(key) is not None:
                        trajectory.info[key] = info[key]
                break
    except Exception as exc:
        trajectory.status = "agent_error"
        trajectory.info["error"] = f"{type(exc).__name__}: {exc}"
    trajectory.tool_calls = dict(calls)
    trajectory.tool_errors = dict(errors)
    trajectory.info["wall_s"] = time.perf_counter() - started
    return trajectory
