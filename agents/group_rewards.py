"""Group reward terms over recorded trajectories: ``coa eval -k`` and the RL loop call this.

The env scores each episode's own terms when it ends; terms over the K samples of one task
(a length penalty relative to the group), and terms that need the recorded token counts
(the overlong shaping), can only be scored once the group is complete. :func:`score_groups`
does that for both callers, so a reward gives the same numbers in evaluation and training:
it turns each :class:`Trajectory` into the :class:`~coa_envs.rewards.base.EpisodeView` the
terms read, lets :meth:`ComposedReward.score_group` add the group terms, and writes the new
reward and ``reward_details`` back into the trajectory. Episodes that ended in an error are
left out of their group (RL never trains on them; eval counts them as failures).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agents.trajectory import EpisodeStatus, Trajectory
from coa_envs.rewards import ComposedReward, EpisodeView
from coa_envs.rewards.compose import primary_score, term_errors
from coa_envs.types import Task

__all__ = ["episode_view", "score_groups"]


def episode_view(trajectory: Trajectory, task: Task | None = None) -> EpisodeView:
    """What a reward term sees of a recorded episode. Token counts only when the record is
    token-exact; the tool-call log is not in a trajectory (episode terms read it in the env)."""
    details = trajectory.info.get("reward_details")
    primary = primary_score(details)
    if primary is None and details is not None:  # a record scored before rewards had terms
        primary = float(trajectory.reward)
    return EpisodeView(
        task=task,
        answer=trajectory.answer,
        segments=tuple((s.kind, s.text) for s in trajectory.segments),
        response_tokens=len(trajectory.response_ids()) if trajectory.has_token_ids else None,
        hit_token_budget=trajectory.status is EpisodeStatus.TRUNCATED_RESPONSE_TOKENS,
        primary_score=primary,
        reward=float(trajectory.reward),
    )


def score_groups(groups: Iterable[Sequence[Trajectory]], reward: ComposedReward,
                 task_of: Callable[[str], Task | None] | None = None) -> int:
    """Add ``reward``'s group terms to each group of samples of one task, in place.

    ``task_of(task_id)`` gives the task records group terms may read (None: terms see no
    task). Returns how many episodes were scored; with no group terms nothing changes.
    Scoring a group again gives the same result (the group terms are replaced).
    """
    if not reward.group_terms:
        return 0
    scored = 0
    for group in groups:
        members = [t for t in group if not t.status.is_error]
        if not members:
            continue
        views = [episode_view(t, task_of(t.task_id) if task_of else None) for t in members]
        results = reward.score_group(views, [t.info.get("reward_details") for t in members])
        for trajectory, result in zip(members, results, strict=True):
            _record(trajectory, float(result.score), dict(result.details))
        scored += len(members)
    return scored


def _record(trajectory: Trajectory, reward: float, details: dict[str, Any]) -> None:
    trajectory.reward = reward
    trajectory.info["reward_details"] = details
    failed = term_errors(details)
    if failed:
        trajectory.info["reward_error"] = failed
