"""A length penalty relative to the group: among the K samples of one task, shorter is better.

Kimi k1.5's length reward (arXiv 2501.12599, section 2.3.3), a group term: with ``L`` a
sample's length and ``min``/``max`` the shortest and longest of the group,
``lambda = 0.5 - (L - min) / (max - min)`` (from +0.5 for the shortest to -0.5 for the
longest). A correct sample scores ``lambda``; an incorrect one ``min(0, lambda)``, so a
wrong answer is never rewarded for being short. A group whose samples all have the same
length scores 0. "Correct" is the primary term's score reaching ``threshold``.

Length is ``unit: tokens`` (every token after the prompt), ``chars`` (the response text),
or ``auto`` (tokens when every sample has token counts, else chars); ``details`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coa_envs.rewards.base import EpisodeView
from coa_envs.types import RewardResult

__all__ = ["VERSION", "GroupLengthTerm", "build"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)
_UNITS = ("auto", "tokens", "chars")


@dataclass(frozen=True, slots=True)
class GroupLengthTerm:
    unit: str = "auto"
    threshold: float = 1.0

    def _lengths(self, episodes: Sequence[EpisodeView]) -> tuple[list[int], str]:
        counted = all(e.response_tokens is not None for e in episodes)
        unit = ("tokens" if counted else "chars") if self.unit == "auto" else self.unit
        if unit == "tokens" and not counted:
            raise ValueError("unit=tokens but some samples have no token counts (use unit: chars or auto)")
        if unit == "tokens":
            return [int(e.response_tokens or 0) for e in episodes], unit
        return [e.response_chars for e in episodes], unit

    def score_group(self, episodes: Sequence[EpisodeView]) -> list[RewardResult]:
        lengths, unit = self._lengths(episodes)
        shortest, longest = min(lengths, default=0), max(lengths, default=0)
        results = []
        for episode, length in zip(episodes, lengths, strict=True):
            spread = longest - shortest
            lam = 0.5 - (length - shortest) / spread if spread else 0.0
            correct = episode.primary_score is not None and episode.primary_score >= self.threshold
            score = lam if correct else min(0.0, lam)
            results.append(RewardResult(score, {"length": length, "unit": unit, "group_min": shortest,
                                                "group_max": longest, "correct": correct}))
        return results


def build(unit: str = "auto", threshold: float = 1.0) -> GroupLengthTerm:
    """``{name: group_length, unit: auto, threshold: 1.0}``."""
    if unit not in _UNITS:
        raise ValueError(f"group_length: unit={unit!r} is not valid; allowed: {list(_UNITS)}")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ValueError(f"group_length: threshold={threshold!r} is not valid; allowed: a number")
    return GroupLengthTerm(unit, float(threshold))
