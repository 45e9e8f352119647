"""The reward RL trains on: the env's reward terms plus the algorithm's shaping, as one reward.

The env scores each episode's own terms; everything that needs the whole group or the
recorded tokens is a *group term* of the same :class:`~coa_envs.rewards.ComposedReward`,
scored once a group of ``group_size`` samples is complete (:func:`agents.group_rewards.score_groups`,
the same code ``coa eval -k`` runs). DAPO's overlong shaping is one of them: with
``overlong_buffer > 0`` the ``overlong`` term (:mod:`coa_envs.rewards.overlong`, the one
definition of the ramp and of the length it reads) is appended at the rollout's cap
``max_response_tokens`` with weight ``overlong_penalty``. After :func:`shape_groups` every
trajectory's ``reward`` is the shaped reward the advantages are computed from, and its
``reward_details`` say what each term contributed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from coa_envs.rewards import ComposedReward

__all__ = ["OVERLONG_LABEL", "rl_reward", "shape_groups", "training_reward_config"]

OVERLONG_LABEL = "overlong"


def training_reward_config(env_reward: Mapping[str, Any], max_response_tokens: int, overlong_buffer: int,
                           overlong_penalty: float) -> dict[str, Any]:
    """The env's ``reward:`` block with the overlong term appended (when the buffer is on)."""
    if overlong_buffer <= 0:
        return dict(env_reward)
    if "terms" in env_reward:
        terms, primary = list(env_reward["terms"]), env_reward.get("primary")
    else:
        terms, primary = [dict(env_reward)], None
    if any(t.get("label", t.get("name")) == OVERLONG_LABEL for t in terms):
        raise ValueError("the env's reward already has an overlong term; set overlong_buffer: 0 to use the "
                         "env's, or remove it from the env's reward to use the algorithm's")
    terms.append({"name": "overlong", "label": OVERLONG_LABEL, "weight": float(overlong_penalty),
                  "max_length": int(max_response_tokens), "buffer": int(overlong_buffer)})
    return {"terms": terms, **({"primary": primary} if primary else {})}


def rl_reward(env_id: str, env_kwargs: Mapping[str, Any], max_response_tokens: int, overlong_buffer: int,
              overlong_penalty: float) -> ComposedReward:
    """The training reward of ``env_id`` made with ``env_kwargs`` (its ``reward`` override
    included), plus the overlong term."""
    import coa_envs  # noqa: F401 - registers the ids
    from coa_envs.config import build_config
    from coa_envs.registry import entry
    from coa_envs.rewards import build_reward

    env_reward = build_config(entry(env_id), env_kwargs).reward
    return build_reward(training_reward_config(env_reward, max_response_tokens, overlong_buffer, overlong_penalty))


def shape_groups(groups: Sequence[Sequence[Trajectory]], reward: ComposedReward) -> list[list[float]]:
    """Score the group terms of each complete group in place; returns the shaped rewards."""
    from agents.group_rewards import score_groups

    score_groups(groups, reward)
    return [[float(t.reward) for t in group] for group in groups]
