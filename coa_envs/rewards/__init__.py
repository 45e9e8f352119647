"""Rewards: one module per reward (``coa_envs.rewards.<name>.build(**config) -> Reward``).

A reward is a pure function ``(prediction, task) -> RewardResult``. ``build_reward`` is the
only place that turns a registry ``reward:`` block into a callable.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from coa_envs.types import Reward

__all__ = ["available_rewards", "build_reward"]


def available_rewards() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_reward(config: Mapping[str, Any]) -> Reward:
    options = dict(config)
    name = options.pop("name", None)
    if name not in available_rewards():
        raise ValueError(f"reward.name={name!r} is not a reward; allowed: {available_rewards()}")
    module = importlib.import_module(f"coa_envs.rewards.{name}")
    return module.build(**options)
