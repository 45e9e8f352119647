"""What a reward term sees and the two shapes a term can take.

A reward is a weighted list of *terms* (:mod:`coa_envs.rewards.compose`). Each term module
``coa_envs.rewards.<name>`` has a ``VERSION`` (bumped when the scores it gives change) and a
``build(**options)`` returning one of:

* an **answer reward**: ``(prediction, task) -> RewardResult``, the original :class:`Reward`
  protocol (EM/F1, math-verify, code tests, GAIA, LLM judge). As a term it scores
  ``episode.answer``;
* an **episode term** (:class:`EpisodeTerm`): ``score(episode) -> RewardResult`` over the whole
  finished episode (its turns, observations and tool calls), scored by the env when the
  episode ends, e.g. the format verifier and the tool-use term;
* a **group term** (:class:`GroupTerm`): ``score_group(episodes) -> [RewardResult]`` over
  the K samples of one task, scored after they all finished (``coa eval -k``, the RL loop),
  e.g. a length penalty relative to the group. Terms that need what only the recorded
  trajectory knows (token counts: the overlong shaping) are group terms too; they score a
  group of any size, one sample at a time.

Stdlib only: the env imports this on every ``make``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from coa_envs.types import RewardResult, Task

__all__ = ["EpisodeTerm", "EpisodeView", "GroupTerm", "RewardUnavailable", "Scope", "ToolCallRecord", "episode_text"]

Scope = Literal["episode", "group"]
SegmentKind = Literal["generated", "observation"]


class RewardUnavailable(Exception):
    """A term could not reach a verdict (its judge is down or answered garbage): the episode has
    no score from it, which is not the same as "wrong".

    A term raises it instead of returning 0. The composition records the term as failed with
    these ``details`` (:mod:`coa_envs.rewards.compose`), the env sets ``info["reward_error"]``,
    and when the failed term is the primary one the episode ends as ``error:reward``: eval
    leaves it out of accuracy and RL out of the loss, and both count it.
    """

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = dict(details or {})


class ToolCallRecord(NamedTuple):
    """One tool call of the episode, in order. ``error_kind`` is None when the call went fine
    (an :class:`~coa_envs.types.ErrorKind` value otherwise, e.g. ``repeated_query``).
    A NamedTuple: the env builds one per call, on the step's hot path."""

    tool: str
    query: str
    error_kind: str | None = None


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """One finished episode as a reward term sees it.

    ``segments`` are the texts after the prompt in order, each ``("generated", turn)`` or
    ``("observation", text)`` exactly as the model saw them. ``answer`` is the content of
    ``<answer>`` (None when the episode ended without one: truncated samples reach group
    terms too). ``task`` may be None where recorded trajectories are re-scored without their
    task records. The fields below ``tool_calls`` are filled where they are known: token
    counts only exist for token-exact rollouts, ``primary_score`` and ``reward`` only after
    the env scored the episode (group terms read them).
    """

    task: Task | None
    answer: str | None
    segments: tuple[tuple[SegmentKind, str], ...] = ()
    tool_calls: tuple[ToolCallRecord, ...] = ()
    response_tokens: int | None = None
    """Tokens after the prompt, generated and observation alike (the RL budget's measure)."""
    hit_token_budget: bool = False
    """The episode was cut because the response token budget ran out (its real length is
    at least the budget, although fewer tokens were recorded)."""
    primary_score: float | None = None
    """The primary (correctness) term's score, once the episode was scored."""
    reward: float | None = None
    """The episode-level reward (the sum of the weighted episode terms), once scored."""

    @property
    def turns(self) -> tuple[str, ...]:
        """The model's turns in order."""
        return tuple(text for kind, text in self.segments if kind == "generated")

    @property
    def response_chars(self) -> int:
        return sum(len(text) for _, text in self.segments)


def episode_text(episode: EpisodeView) -> str:
    """Everything after the prompt as one string (what the seed's rewards scored)."""
    return "".join(text for _, text in episode.segments)


@runtime_checkable
class EpisodeTerm(Protocol):
    """Scores one finished episode from everything it did."""

    def score(self, episode: EpisodeView) -> RewardResult: ...


@runtime_checkable
class GroupTerm(Protocol):
    """Scores the samples of one task together; returns one result per episode, in order."""

    def score_group(self, episodes: Sequence[EpisodeView]) -> list[RewardResult]: ...
