"""DAPO's soft overlong shaping as a reward term: a penalty that ramps up near the length cap.

One definition, used by the RL loop and by any reward that lists it: an episode of
``length`` tokens scores 0 up to ``max_length - buffer``, then falls linearly to -1 at
``max_length`` and stays -1 beyond it (:func:`overlong_penalty`). ``length`` is measured the
way the cap measures it: every token after the prompt, generated and observation alike
(:attr:`~coa_envs.rewards.base.EpisodeView.response_tokens`), and an episode the cap cut short
counts as reaching the cap, although fewer tokens were recorded. So the term needs token
counts, which only a token-exact rollout has: it is a group term (scored once the episode's
trajectory is recorded, one sample at a time), and it fails, scoring 0 and saying why, for
text-only records. The weight sets the penalty's size (DAPO: 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coa_envs.rewards.base import EpisodeView
from coa_envs.types import RewardResult

__all__ = ["VERSION", "OverlongTerm", "build", "overlong_penalty"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)


def overlong_penalty(length: int, max_length: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO soft overlong punishment: 0 up to ``max_length - buffer``, then a linear ramp
    down to ``-factor`` at ``max_length`` and ``-factor`` beyond it (0 when ``buffer <= 0``)."""
    if buffer <= 0:
        return 0.0
    expected = max_length - buffer
    if length <= expected:
        return 0.0
    if length <= max_length:
        return factor * (expected - length) / buffer
    return -factor


def scored_length(episode: EpisodeView, max_length: int) -> int:
    """The length the shaping scores (see the module docstring)."""
    if episode.response_tokens is None:
        raise ValueError("the overlong term needs token counts (a token-exact rollout); this episode has none")
    return max(episode.response_tokens, max_length) if episode.hit_token_budget else episode.response_tokens


@dataclass(frozen=True, slots=True)
class OverlongTerm:
    max_length: int
    buffer: int

    def score_group(self, episodes: Sequence[EpisodeView]) -> list[RewardResult]:
        results = []
        for episode in episodes:
            length = scored_length(episode, self.max_length)
            penalty = overlong_penalty(length, self.max_length, self.buffer)
            results.append(RewardResult(penalty, {"length": length, "max_length": self.max_length,
                                                  "buffer": self.buffer}))
        return results


def build(max_length: int, buffer: int) -> OverlongTerm:
    """``{name: overlong, max_length: 1024, buffer: 256}``: the cap (the rollout's response
    token budget) and the window before it where the penalty ramps."""
    for key, value in (("max_length", max_length), ("buffer", buffer)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "max_length" else 0):
            raise ValueError(f"overlong: {key}={value!r} is not valid; allowed: an integer >= "
                             f"{1 if key == 'max_length' else 0}")
    if buffer >= max_length:
        raise ValueError(f"overlong: buffer={buffer} must be below max_length={max_length}")
    return OverlongTerm(max_length, buffer)
