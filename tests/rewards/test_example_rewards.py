"""The RL examples train on a reward that pays no hedge.

Six example configs trained on ``em_f1`` with ``metric: f1``: within the length cap F1 pays a
list of names written without separators ("Wudia Giarelora" earns 0.67 for the gold
"Giarelora", three names 0.5), so a policy unsure between names earns more by naming them all
than by choosing one. Exact match pays such an answer nothing. Fails on the F1 configs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coa_envs.rewards import build_reward
from coa_envs.types import Task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASK = Task("synthhop-1", "Who founded the Order of Wudia?", gold=("Giarelora",))
HEDGES = ("Wudia Giarelora", "Giarelora Repae Wudia", "the Giarelora of Wudia")


def _env_rewards(config: dict) -> list[tuple[str, dict]]:
    env = config.get("env") or {}
    entries = env.get("envs") or [{"id": env.get("id"), "env_kwargs": env.get("kwargs") or {}}]
    return [(entry["id"], (entry.get("env_kwargs") or {}).get("reward") or {"name": "em_f1"}) for entry in entries]


RL_CONFIGS = sorted(path for path in EXAMPLES.glob("rl_*.yaml"))


def test_the_rl_examples_are_found():
    assert len(RL_CONFIGS) >= 6


@pytest.mark.parametrize("path", RL_CONFIGS, ids=lambda p: p.name)
def test_an_rl_example_pays_nothing_for_a_hedge(path):
    config = yaml.safe_load(path.read_text())
    for env_id, reward_config in _env_rewards(config):
        reward = build_reward(reward_config)
        assert reward(f"<answer>{TASK.gold[0]}</answer>", TASK).score == 1.0, env_id
        for hedge in HEDGES:
            assert reward(f"<answer>{hedge}</answer>", TASK).score == 0.0, (env_id, hedge)
