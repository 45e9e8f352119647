"""Every registered id keeps its reward: the composed one-term reward gives exactly the score
and the details the term itself gives (what ``build_reward`` returned before terms existed)."""

from __future__ import annotations

import importlib

import gymnasium as gym
import pytest

import coa_envs
from agents.oracle import oracle_answer_text
from coa_envs.protocol import parse_turn
from tests.env_fixtures import MAKE_KWARGS

WRONG = "zzqx-987654321"


def _stable(value):
    """Details without timings (a sandbox run's wall_s differs run to run)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k != "wall_s"}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _answers(env) -> list[str]:
    task = env.unwrapped.task
    script = task.metadata.get("oracle_actions") or [oracle_answer_text(task, env.unwrapped.config.family)]
    right = parse_turn(script[-1]).answer
    return [right, WRONG, f"{right.upper()}."]


@pytest.mark.parametrize("env_id", coa_envs.ids())
def test_every_registered_reward_scores_as_its_term_alone(env_id):
    env = gym.make(env_id, **MAKE_KWARGS.get(env_id, {}))
    config = dict(env.unwrapped.config.reward)
    assert "terms" not in config, "registered ids declare one reward; this test compares it with the term"
    name = config.pop("name")
    module = importlib.import_module(f"coa_envs.rewards.{name}")
    old_reward = module.build(**config)
    try:
        for task in env.unwrapped.tasks[:2]:
            env.reset(options={"task_id": task.task_id})
            for answer in _answers(env):
                env.reset(options={"task_id": task.task_id})
                _, reward, terminated, _, info = env.step(f"<think>x</think><answer>{answer}</answer>")
                expected = old_reward(answer, task)
                details = dict(info["reward_details"])
                assert terminated and reward == float(expected.score), (env_id, task.task_id, answer)
                assert details.pop("primary") == name
                terms = details.pop("terms")
                assert _stable(details) == _stable(dict(expected.details))
                assert terms == {name: {"name": name, "version": module.VERSION, "scope": "episode", "weight": 1.0,
                                        "score": float(expected.score), "weighted": float(expected.score)}}
                assert "reward_error" not in info
    finally:
        env.close()
        close = getattr(old_reward, "close", None)
        if callable(close):
            close()
