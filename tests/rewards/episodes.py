"""One answered SynthHop episode under a given reward block, for the reward tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import coa_envs  # noqa: F401  (registers ids)


def answer_once(reward: dict[str, Any], answer: str = "{gold}", seed: int = 0) -> tuple[float, bool, dict]:
    """Reset with ``seed`` and answer at once (``{gold}`` is the task's first gold answer):
    ``(reward, terminated and not truncated, info)``."""
    env = gym.make("coa/SynthHop-v0", reward=reward)
    try:
        env.reset(seed=seed)
        gold = env.unwrapped.task.gold[0]
        _, value, terminated, truncated, info = env.step(f"<think>t</think><answer>{answer.format(gold=gold)}</answer>")
    finally:
        env.close()
    return value, terminated and not truncated, info
