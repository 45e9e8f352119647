"""Warm start: a brief masked SFT on oracle trajectories before RL, so RL has signal to climb.

A randomly initialised policy never closes a tool tag, so every episode scores 0 and every
GRPO/DAPO group is all-equal: there is nothing to learn from. The recipe the paper follows
(and the issue's CPU test asks for) is SFT first, then RL. This module runs that first
stage from the RL config: the oracle agent plays the tasks through the *same* env the RL
run uses (same system prompt, tools and observations) on the one episode path every
recorder shares (``trainers.data.generate_trajectories`` -> ``agents.episode.run_episode``),
the solved episodes are kept, and the SFT trainer trains on them through its public API
(``trainers.sft.load_config`` + ``train``). :func:`warm_started` returns the RL config that
starts from the SFT output, so the RL loop never sees a warm start (``trainers.rl.train``
runs the two stages in turn). ``strip_roles`` keeps only the tool call and the answer of
each oracle turn (a tiny model's token budget goes to what the reward depends on, not to
prose).

The stage is idempotent: its output carries a ``WARM_START_COMPLETE`` marker, and a run
that was killed (during SFT or later) reuses a finished warm start on ``--resume``. Its
settings are ``model.warm_start`` (``trainers/rl/sections.py``: episodes, max_steps,
learning_rate, ...); everything else of the SFT run follows from the RL config.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["oracle_trajectories", "strip_roles", "warm_start", "warm_started"]

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


def oracle_trajectories(config: RLConfig, path: str | Path, episodes: int,
                        roles: bool = False) -> tuple[Path, int]:
    """Play the oracle through the RL env's tasks; write the solved episodes as JSONL.

    Returns ``(path, kept)``. The tasks with scripted ``oracle_actions`` (SynthHop's: they
    call the real tools) are visited in order, cycling, ``episodes`` times; with a mixture
    each env plays its share of ``episodes`` by weight (an env without scripted tasks
    contributes none).
    """
    from trainers.common.mixture import normalised_weights
    from trainers.data.generate import generate_trajectories
    from trainers.rl.rollout import make_env

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    seed, entries = config.bookkeeping.seed, config.env.mixture
    shares = [round(episodes * w) if w else 0 for w in normalised_weights(entries)]
    kept = 0
    partial = path.with_suffix(".part")
    with open(partial, "w", encoding="utf-8") as handle:
        for env_index, (entry, share) in enumerate(zip(entries, shares, strict=True)):
            if not share:
                continue
            played = generate_trajectories(
                entry.id, path.with_suffix(f".{env_index}.jsonl"), share, seed=seed, min_reward=1.0,
                make_env=lambda env_index=env_index: make_env(config, env_index=env_index),
                rewrite=None if roles else strip_roles, scripted_only=True)
            lines = played.read_text(encoding="utf-8").splitlines(keepends=True)
            handle.writelines(lines)
            kept += len(lines)
            played.unlink()
    if kept == 0:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{config.env.label}: no task's oracle_actions solved it; the warm "
                         "start needs tasks with metadata['oracle_actions'] (SynthHop has them)")
    partial.replace(path)
    return path, kept


def _sft_values(config: RLConfig, train_path: Path, out: Path) -> dict[str, Any]:
    """The SFT run of the warm start, as SFT config values: the RL model section's shared
    keys (a tiny policy's sizes included), the warm start's optimiser settings."""
    spec, warm = config.model, config.model.warm_start
    return {
        "model": {"path": spec.path, "tokenizer": spec.tokenizer, "tiny": dict(spec.tiny),
                  "random_init": spec.random_init, "config_overrides": dict(spec.config_overrides)},
        "data": {"train_path": str(train_path), "max_seq_len": warm.max_seq_len, "packing": True},
        "optim": {"precision": warm.precision, "learning_rate": warm.learning_rate,
                  "max_steps": warm.max_steps, "warmup_ratio": warm.warmup_ratio},
        "bookkeeping": {"output_dir": str(out), "seed": config.bookkeeping.seed, "tensorboard": False,
                        "progress": False},
    }


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
    from trainers import sft

    data, kept = oracle_trajectories(config, out / "oracle.jsonl", warm.episodes,
                                     roles=not warm.strip_roles)
    print(f"[rl] warm start: SFT on {kept} oracle trajectories -> {final}", flush=True)
    result = sft.train(sft.load_config(values=_sft_values(config, data, out)))
    if result.final_dir is None:
        raise RuntimeError("warm-start SFT halted before writing its final model")
    (out / _DONE).write_text(f"steps={result.steps} final_loss={result.losses[-1]:.4f}\n")
    return final


def warm_started(config: RLConfig) -> RLConfig:
    """``config`` starting from its warm start's model (trained now, or reused), with the warm
    start switched off; ``config`` itself when it has none."""
    final = warm_start(config)
    if final is None:
        return config
    model = dataclasses.replace(config.model, path=str(final), random_init=False, config_overrides={},
                                warm_start=dataclasses.replace(config.model.warm_start, episodes=0))
    return dataclasses.replace(config, model=model)
