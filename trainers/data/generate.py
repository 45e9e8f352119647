"""Make SFT data by running an agent through a registered env (e.g. the oracle on SynthHop).

This is the same path ``coa eval --agent oracle --out DIR`` takes (``agents.episode.run_episode``
writing ``Trajectory`` JSONL); the trainer calls it when its ``train_path`` does not exist yet
and its config says how to make it, so a demo config is one command.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["generate_trajectories"]


class _Rewritten:
    """An agent whose every action passes through ``rewrite`` before the env sees it."""

    def __init__(self, agent: Any, rewrite: Callable[[str], str]) -> None:
        self.agent, self.rewrite = agent, rewrite

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self.agent.reset(observation, info)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.rewrite(self.agent.act(observation, info))


def generate_trajectories(
    env_id: str,
    out_path: str | Path,
    n: int,
    *,
    agent: str = "oracle",
    seed: int = 0,
    min_reward: float | None = None,
    make_env: Callable[[], Any] | None = None,
    rewrite: Callable[[str], str] | None = None,
    scripted_only: bool = False,
    **make_kwargs: Any,
) -> Path:
    """Run ``n`` episodes (one per task, cycling) and write the trajectories as JSONL.

    ``make_kwargs`` go to ``gymnasium.make`` (e.g. ``task_options={"num_tasks": 300}``); the
    tasks are the env's training tasks (``split: train``) unless ``task_options`` names a split.
    ``make_env`` builds the env instead (the RL warm start plays the RL run's own env);
    ``rewrite`` changes each action before it is played (the warm start strips role spans);
    ``scripted_only`` plays only the tasks with a scripted solution (``oracle_actions``, which
    call the real tools), never a bare gold answer (none at all when no task has one).
    Trajectories below ``min_reward`` are left out. The file is written to a temporary name
    and renamed, so an interrupted run never leaves a half file that looks complete.
    """
    import gymnasium

    import coa_envs  # noqa: F401  (registers the env ids)
    from agents.episode import run_episode
    from agents.trajectory import write_trajectory

    if agent != "oracle":
        raise ValueError(f"only the oracle agent can generate SFT data here, not {agent!r}")
    from agents.oracle import OracleAgent

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_suffix(out_path.suffix + f".part{os.getpid()}")
    if make_env is None:
        task_options = {"split": "train", **dict(make_kwargs.pop("task_options", None) or {})}
        env = gymnasium.make(env_id, task_options=task_options, **make_kwargs)
    else:
        env = make_env()
    try:
        tasks = env.unwrapped.tasks
        if scripted_only:
            tasks = [task for task in tasks if task.metadata.get("oracle_actions")]
            n = n if tasks else 0
        policy: Any = OracleAgent(env)
        if rewrite is not None:
            policy = _Rewritten(policy, rewrite)
        with open(partial, "w", encoding="utf-8") as handle:
            for index in range(n):
                task = tasks[index % len(tasks)]
                trajectory = run_episode(env, policy, seed=seed + index,
                                         options={"task_id": task.task_id},
                                         sample_index=index // len(tasks))
                if min_reward is not None and trajectory.reward < min_reward:
                    continue
                write_trajectory(handle, trajectory)
    finally:
        env.close()
    partial.replace(out_path)
    return out_path
