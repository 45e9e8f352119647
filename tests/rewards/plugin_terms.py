"""A reward term module of a user's own (dotted ``name`` in a reward block), for the tests.

``tests.rewards.plugin_terms`` is a term that raises when ``fail`` is set and otherwise
scores the number of model turns, so tests can see a failing term next to working ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from coa_envs.rewards.base import EpisodeView
from coa_envs.types import RewardResult

VERSION = 3


@dataclass(frozen=True)
class TurnCounter:
    fail: bool = False

    def score(self, episode: EpisodeView) -> RewardResult:
        if self.fail:
            raise RuntimeError("the scorer's backend is down")
        return RewardResult(float(len(episode.turns)), {"turns": len(episode.turns)})


def build(fail: bool = False) -> TurnCounter:
    return TurnCounter(fail)
