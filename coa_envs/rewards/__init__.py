"""Rewards: weighted, versioned terms, one module per term (``coa_envs.rewards.<name>``).

Each term module has ``VERSION`` and ``build(**options)`` (see :mod:`coa_envs.rewards.base`
for the three shapes a term takes). ``build_reward`` is the only place that turns a registry
``reward:`` block into a reward: a :class:`~coa_envs.rewards.compose.ComposedReward`, for the
one-term form ``{name: em_f1}`` as for ``{terms: [...]}`` (:mod:`coa_envs.rewards.compose`).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Mapping
from functools import cache
from typing import Any

from coa_envs.rewards.base import EpisodeTerm, EpisodeView, GroupTerm, RewardUnavailable, ToolCallRecord
from coa_envs.rewards.compose import NOT_TERMS, ComposedReward, build_composed

__all__ = [
    "ComposedReward",
    "EpisodeTerm",
    "EpisodeView",
    "GroupTerm",
    "RewardUnavailable",
    "ToolCallRecord",
    "available_rewards",
    "build_reward",
]


@cache
def _term_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_") and m.name not in NOT_TERMS))


def available_rewards() -> list[str]:
    """The names a ``reward:`` block (or a term entry) may use."""
    return list(_term_names())


def build_reward(config: Mapping[str, Any]) -> ComposedReward:
    """A registry ``reward:`` block (one-term or ``terms:`` form) as a validated reward."""
    return build_composed(config, _term_names())
