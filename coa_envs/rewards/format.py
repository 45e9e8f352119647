"""The CoA format verifier: is the whole trajectory well-formed Chain-of-Agents text?

The seed shapes RL rewards with a format score made of four equal checks; this term keeps
that structure (0.25 per check passed) over *our* grammar (:mod:`coa_envs.protocol`: role
tags, the registered tool tags, ``<observation>``, ``<answer>``), reading the episode turn
by turn, so an observation's text (a web page, a program's output) is never parsed as the
model's markup:

1. **presence**: every tag in ``required`` appears (default ``think`` and ``answer``; the
   pseudo-tag ``tool`` means "any tool call", ``observation`` is met by the env's replies);
2. **order**: the trajectory opens with a tag from ``first`` (default: a role tag, i.e.
   it reasons before it acts), every tool call is followed directly by an observation and
   every observation follows a tool call (the model stopped and waited), exactly one
   ``<answer>`` comes last, and, when ``after_observation`` is set (e.g. ``[reflection]``,
   the seed's code-agent habit), each observation is followed by one of those tags;
3. **pairing**: every tag the model opens is closed in the same turn, in nesting order,
   and no closing tag is stray;
4. **content**: every span the model closed has non-blank content and holds no other CoA
   tag (``<code>`` is opaque: a program may print anything).

Tags outside the grammar (``<br>``, ``<b>``) are text. ``details`` says which checks passed
and lists the first problems found. Given text instead of an episode (``reward(text, task)``,
e.g. to filter SFT data), the text is split at its ``<observation>`` spans.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coa_envs.protocol import ANSWER_TAG, OBSERVATION_TAG, ROLE_TAGS, tool_tags
from coa_envs.rewards.base import EpisodeView
from coa_envs.types import RewardResult, Task

__all__ = ["CHECKS", "VERSION", "FormatReport", "FormatVerifier", "build", "check_format", "segments_from_text"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)
CHECKS = ("presence", "order", "pairing", "content")
_TAG_RE = re.compile(r"<(/?)([A-Za-z_][A-Za-z0-9_]*)>")
_OBSERVATION_RE = re.compile(rf"<{OBSERVATION_TAG}>.*?</{OBSERVATION_TAG}>", re.DOTALL)
_MAX_PROBLEMS = 10


def segments_from_text(text: str) -> list[tuple[str, str]]:
    """A whole transcript as ``(kind, text)`` segments, cut at its observation spans."""
    segments: list[tuple[str, str]] = []
    position = 0
    for match in _OBSERVATION_RE.finditer(text):
        if match.start() > position:
            segments.append(("generated", text[position:match.start()]))
        segments.append(("observation", match.group(0)))
        position = match.end()
    if position < len(text):
        segments.append(("generated", text[position:]))
    return segments


@dataclass
class FormatReport:
    """What the walk over a trajectory found; ``passed`` holds the four checks."""

    sequence: list[str] = field(default_factory=list)  # top-level spans in order
    opened: set[str] = field(default_factory=set)  # every tag the trajectory opened
    pairing: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    presence: list[str] = field(default_factory=list)

    @property
    def passed(self) -> dict[str, bool]:
        return {name: not getattr(self, name) for name in CHECKS}

    @property
    def score(self) -> float:
        return sum(self.passed.values()) / len(CHECKS)

    def problems(self) -> list[str]:
        return [p for name in CHECKS for p in getattr(self, name)][:_MAX_PROBLEMS]


def _walk_turn(text: str, known: frozenset[str], report: FormatReport) -> None:
    """Record one model turn's spans: top-level ones into the sequence, problems per check."""
    stack: list[tuple[str, int]] = []  # (tag, where its content starts)
    for match in _TAG_RE.finditer(text):
        closing, tag = match.group(1) == "/", match.group(2)
        if tag not in known:
            continue
        if stack and stack[-1][0] == "code" and not (closing and tag == "code"):
            continue  # <code> is opaque until </code>
        if not closing:
            if stack:
                report.content.append(f"<{tag}> is nested inside <{stack[-1][0]}>")
            else:
                report.sequence.append(tag)
            report.opened.add(tag)
            stack.append((tag, match.end()))
            continue
        open_tags = [name for name, _ in stack]
        if tag not in open_tags:
            report.pairing.append(f"</{tag}> closes a tag that is not open")
            continue
        while stack[-1][0] != tag:  # close what was left open inside, reporting it
            report.pairing.append(f"<{stack.pop()[0]}> is not closed before </{tag}>")
        _, start = stack.pop()
        if not text[start:match.start()].strip():
            report.content.append(f"<{tag}> is empty")
    report.pairing.extend(f"<{tag}> is never closed in its turn" for tag, _ in stack)


def _check_order(report: FormatReport, first: frozenset[str], tools: frozenset[str],
                 after_observation: frozenset[str] | None) -> None:
    sequence = report.sequence
    if not sequence:
        report.order.append("the trajectory has no tagged span")
        return
    if sequence[0] not in first:
        report.order.append(f"it opens with <{sequence[0]}>, not one of {sorted(first)}")
    answers = sequence.count(ANSWER_TAG)
    if answers != 1 or sequence[-1] != ANSWER_TAG:
        report.order.append(f"{answers} <answer> spans; exactly one must come last")
    for index, tag in enumerate(sequence):
        following = sequence[index + 1] if index + 1 < len(sequence) else None
        if tag in tools and following != OBSERVATION_TAG:
            report.order.append(f"<{tag}> #{index + 1} is not followed by an observation")
        if tag == OBSERVATION_TAG:
            if index == 0 or sequence[index - 1] not in tools:
                report.order.append(f"observation #{index + 1} does not answer a tool call")
            if after_observation is not None and following is not None and following not in after_observation:
                report.order.append(f"<{following}> follows an observation, not one of {sorted(after_observation)}")


def check_format(segments: Sequence[tuple[str, str]], *, required: Sequence[str] = ("think", "answer"),
                 first: Sequence[str] = ROLE_TAGS, after_observation: Sequence[str] | None = None) -> FormatReport:
    """Run the four checks over ``(kind, text)`` segments (``generated`` | ``observation``)."""
    tools = frozenset(tool_tags())
    known = frozenset((*ROLE_TAGS, ANSWER_TAG, OBSERVATION_TAG)) | tools
    report = FormatReport()
    for kind, text in segments:
        if kind == "observation":
            report.sequence.append(OBSERVATION_TAG)
            report.opened.add(OBSERVATION_TAG)
        else:
            _walk_turn(text, known, report)
    for tag in required:
        present = bool(report.opened & tools) if tag == "tool" else tag in report.opened
        if not present:
            report.presence.append("no tool call" if tag == "tool" else f"no <{tag}>")
    _check_order(report, frozenset(first), tools, None if after_observation is None else frozenset(after_observation))
    return report


@dataclass(frozen=True, slots=True)
class FormatVerifier:
    required: tuple[str, ...] = ("think", "answer")
    first: tuple[str, ...] = ROLE_TAGS
    after_observation: tuple[str, ...] | None = None

    def score(self, episode: EpisodeView) -> RewardResult:
        segments = episode.segments or segments_from_text(episode.answer or "")
        report = check_format(segments, required=self.required, first=self.first,
                              after_observation=self.after_observation)
        details: dict[str, Any] = {**report.passed, "problems": report.problems(), "spans": len(report.sequence)}
        return RewardResult(report.score, details)

    def __call__(self, text: str, task: Task) -> RewardResult:
        """Score a whole transcript given as text (observations inline)."""
        return self.score(EpisodeView(task=task, answer=text))


def _tags(value: Any, key: str, allowed: frozenset[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"format: {key}={value!r} is not valid; allowed: a non-empty list of tags")
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValueError(f"format: {key} has unknown tag(s) {unknown}; allowed: {sorted(allowed)}")
    return tuple(value)


def build(required: Sequence[str] = ("think", "answer"), first: Sequence[str] = ROLE_TAGS,
          after_observation: Sequence[str] | None = None) -> FormatVerifier:
    """``{name: format, required: [think, answer], first: [think, plan, ...], after_observation: null}``."""
    tags = frozenset((*ROLE_TAGS, ANSWER_TAG, OBSERVATION_TAG, *tool_tags()))
    return FormatVerifier(
        required=_tags(required, "required", tags | {"tool"}),
        first=_tags(first, "first", tags),
        after_observation=None if after_observation is None else _tags(after_observation, "after_observation", tags),
    )
