"""Warm start: a brief masked SFT on oracle trajectories before RL, so RL has signal to climb.

A randomly initialised policy never closes a tool tag, so every episode scores 0 and every
GRPO/DAPO group is all-equal: there is nothing to learn from. The recipe the paper follows
(and the issue's CPU test asks for) is SFT first, then RL. This module runs that first
stage from the RL config: it plays each task's ``oracle_actions`` through the *same* env
the RL run uses (same system prompt, tools and observations), keeps the solved episodes,
and hands them to the SFT trainer (``trainers.sft``). The RL run then starts from the SFT
output directory. ``strip_roles`` keeps only the tool call and the answer of each oracle
turn (a tiny model's token budget goes to what the reward depends on, not to prose).

The stage is idempotent: its output carries a ``WARM_START_COMPLETE`` marker, and a run
that was killed (during SFT or later) reuses a finished warm start on ``--resume``. Its
settings are ``model.warm_start`` (``trainers/rl/sections.py``: episodes, max_steps,
learning_rate, ...); everything else of the SFT run follows from the RL config.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["oracle_trajectories", "strip_roles", "warm_start"]

_DONE = "WARM_START_COMPLETE"


def strip_roles(action: str) -> str:
    """The tool call and/or answer of one CoA turn, without its role spans (think, plan, ...)."""
    from coa_envs.protocol import parse_turn

    parsed = parse_turn(action)
    if not parsed.ok:
        return action
    parts = [f"<{call.tool}>{call.query}</{call.tool}>" for call in parsed.tool_calls]
    if parsed.answer is not None:
        parts.append(f"<answer>{parsed.answer}</answer>")
    return "".join(parts) or action


def _play_oracle(env: Any, env_id: str, seed: int, index: int, sample: int,
                 roles: bool) -> Any:
    """One episode of the current task's ``oracle_actions``; the trajectory it made."""
    from agents.trajectory import Trajectory

    _, info = env.reset(seed=seed, options={"task_index": index})
    actions = env.unwrapped.task.metadata.get("oracle_actions") or []
    trajectory = Trajectory(env_id=env_id, task_id=info["task_id"],
                            prompt_messages=info.get("messages", []), seed=seed,
                            sample_index=sample)
    for action in actions:
        text = action if roles else strip_roles(action)
        observation, reward, terminated, truncated, step_info = env.step(text)
        trajectory.add_generated(text)
        if terminated or truncated:
            trajectory.reward = float(reward)
            trajectory.terminated = bool(terminated)
            trajectory.answer = step_info.get("answer")
            break
        trajectory.add_observation(observation)
    return trajectory


def oracle_trajectories(config: RLConfig, path: str | Path, episodes: int,
                        roles: bool = False) -> tuple[Path, int]:
    """Play the oracle actions of the RL env's tasks; write solved episodes as JSONL.

    Returns ``(path, kept)``. Tasks are visited in order, cycling, ``episodes`` times; with a
    mixture each env plays its share of ``episodes`` by weight (an env whose tasks have no
    ``oracle_actions`` contributes none).
    """
    from agents.trajectory import write_trajectory
    from trainers.common.mixture import normalised_weights
    from trainers.rl.rollout import make_env

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seed, entries = config.bookkeeping.seed, config.env.mixture
    shares = [round(episodes * w) if w else 0 for w in normalised_weights(entries)]
    kept = 0
    partial = path.with_suffix(".part")
    with open(partial, "w", encoding="utf-8") as handle:
        for env_index, (entry, share) in enumerate(zip(entries, shares, strict=True)):
            env = make_env(config, env_index=env_index) if share else None
            try:
                tasks = env.unwrapped.tasks if env is not None else []
                for index in range(share):
                    trajectory = _play_oracle(env, entry.id, seed + index, index % len(tasks),
                                              index // len(tasks), roles)
                    if trajectory.terminated and trajectory.reward >= 1.0:
                        write_trajectory(handle, trajectory)
                        kept += 1
            finally:
                if env is not None:
                    env.close()
    if kept == 0:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{config.env.label}: no task's oracle_actions solved it; the warm "
                         "start needs tasks with metadata['oracle_actions'] (SynthHop has them)")
    partial.replace(path)
    return path, kept


def _sft_config(config: RLConfig, train_path: Path, out: Path) -> Any:
    from trainers.sft.config import SFTBookkeeping, SFTConfig, SFTData, SFTModel, SFTOptim

    spec = config.model
    warm = spec.warm_start
    return SFTConfig(  # a tiny policy's sizes become the SFT model's (its own defaults fill in)
        model=SFTModel(path=spec.path, tiny=dict(spec.config_overrides) if spec.path == "tiny"
                       else {}),
        data=SFTData(train_path=str(train_path), max_seq_len=warm.max_seq_len, packing=True),
        optim=SFTOptim(precision=warm.precision, learning_rate=warm.learning_rate,
                       max_steps=warm.max_steps, warmup_ratio=warm.warmup_ratio),
        bookkeeping=SFTBookkeeping(output_dir=str(out), seed=config.bookkeeping.seed,
                                   tensorboard=False, progress=False))


def warm_start(config: RLConfig) -> Path | None:
    """Run (or reuse) the SFT warm start; returns the model directory RL starts from."""
    warm = config.model.warm_start
    if not warm.episodes:
        return None
    out = Path(config.bookkeeping.output_dir) / "warm_start"
    final = out / "final"
    if (out / _DONE).exists() and final.is_dir():
        print(f"[rl] warm start: reusing {final}", flush=True)
        return final
    from trainers.sft import train as sft_train

    data, kept = oracle_trajectories(config, out / "oracle.jsonl", warm.episodes,
                                     roles=not warm.strip_roles)
    print(f"[rl] warm start: SFT on {kept} oracle trajectories -> {final}", flush=True)
    result = sft_train(_sft_config(config, data, out))
    if result.final_dir is None:
        raise RuntimeError("warm-start SFT halted before writing its final model")
    (out / _DONE).write_text(f"steps={result.steps} final_loss={result.losses[-1]:.4f}\n")
    return final
