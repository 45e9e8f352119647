"""``coa eval``: run an agent over an env's tasks and write trajectories and a summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

__all__ = ["eval_command", "make_agent", "summarise"]


def make_agent(spec: str, env: Any):
    """``oracle`` | ``replay:FILE`` -> an Agent bound to ``env``."""
    if spec == "oracle":
        from agents.oracle import OracleAgent

        return OracleAgent(env)
    if spec.startswith("replay:"):
        from agents.replay import ReplayAgent

        return ReplayAgent(spec.split(":", 1)[1])
    if spec == "retrieval-baseline":  # one wiki_search with the question, answer = top title
        from agents.base import as_agent
        from agents.baselines import retrieval_baseline

        return as_agent(retrieval_baseline)
    raise typer.BadParameter(
        f"unknown agent {spec!r}; use oracle, replay:FILE or retrieval-baseline", param_hint="--agent"
    )


def summarise(env_id: str, trajectories: list[Any], wall_s: float) -> dict[str, Any]:
    episodes = len(trajectories)
    rewards = [t.reward for t in trajectories]
    tool_calls: dict[str, int] = {}
    for t in trajectories:
        for name, count in t.tool_calls.items():
            tool_calls[name] = tool_calls.get(name, 0) + count
    return {
        "env_id": env_id,
        "episodes": episodes,
        "mean_reward": sum(rewards) / episodes if episodes else 0.0,
        "solved": sum(1 for r in rewards if r >= 1.0),
        "failed_tasks": [t.task_id for t in trajectories if t.reward < 1.0][:50],
        "mean_turns": sum(t.num_turns for t in trajectories) / episodes if episodes else 0.0,
        "tool_calls": tool_calls,
        "errors": sum(1 for t in trajectories if t.status not in ("ok",)),
        "wall_s": wall_s,
    }


def eval_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/MATH500-v0"),
    agent: str = typer.Option("oracle", help="oracle | replay:FILE | retrieval-baseline"),
    n: int = typer.Option(20, help="Number of episodes (tasks taken in order)."),
    out: Path = typer.Option(Path("runs/eval"), help="Output directory."),
    data: str | None = typer.Option(None, help="Task file/dir (sets data_path)."),
    seed: int = typer.Option(0, help="Base seed."),
) -> None:
    """Run AGENT on ENV_ID and write trajectories.jsonl and summary.json."""
    import gymnasium as gym
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    import coa_envs  # noqa: F401  (registers ids)
    from agents.episode import run_episode
    from agents.trajectory import write_trajectory

    env = gym.make(env_id, **({"data_path": data} if data else {}))
    runner = make_agent(agent, env)
    tasks = env.unwrapped.tasks
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    trajectories = []
    with open(out / "trajectories.jsonl", "w", encoding="utf-8") as handle:
        for index in track(range(min(n, len(tasks))), description=f"{env_id}"):
            trajectory = run_episode(env, runner, seed=seed + index, options={"task_index": index})
            write_trajectory(handle, trajectory)
            trajectories.append(trajectory)
    env.close()
    summary = summarise(env_id, trajectories, time.perf_counter() - started)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    table = Table(title=f"{env_id} · agent={agent}")
    for key in ("episodes", "mean_reward", "solved", "mean_turns", "errors", "wall_s"):
        table.add_column(key)
    table.add_row(*(f"{summary[k]:.3f}" if isinstance(summary[k], float) else str(summary[k])
                    for k in ("episodes", "mean_reward", "solved", "mean_turns", "errors", "wall_s")))
    Console().print(table)
