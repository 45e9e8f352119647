"""The meeting point of a teacher team (its own thread) and the episode loop (the env's thread).

A framework team drives itself: its tool agents call tools when *they* decide to. The
episode loop (:func:`agents.rollout.play_episode`) instead asks an agent for one action at a
time. The bridge turns one into the other: a tool call made inside the team becomes the next
action the loop receives, and the observation the env returns is handed back to the waiting
tool as its result. So every tool result a team member reads is exactly the env's
observation, and turn limits, caching, error kinds and statistics stay the env's.

It also keeps the run's *event log*: every contribution of every agent (a plan, a thought, a
reflection, a suggested answer and its double check, a tool call, the final answer), each
stamped with the index of the env action it precedes. ``trainers.distill`` turns that log
into one single-model CoA trajectory; nothing here renders CoA text.

No framework imports (the stdlib and the protocol's tag names); thread-safe (one team thread, one
episode thread).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from coa_envs.protocol import ROLE_TAGS

__all__ = ["EVENT_KINDS", "TeacherBridge", "TeacherEvent", "strip_observation"]

EVENT_KINDS: tuple[str, ...] = (*ROLE_TAGS, "tool", "answer")

_OPEN, _CLOSE = "\n<observation>\n", "\n</observation>\n\n"
_OVER = "The episode is over; no more tool calls can be made. Report what you have."
_LAST_TURN = ("The tool budget is used up (the last turn is kept for the final answer). "
              "Report what you have found so far.")


def strip_observation(observation: str) -> str:
    """The text inside the env's ``<observation>`` wrapper (what a tool agent reads)."""
    if observation.startswith(_OPEN) and observation.endswith(_CLOSE):
        return observation[len(_OPEN):-len(_CLOSE)]
    return observation


@dataclass(slots=True)
class TeacherEvent:
    """One agent's contribution. ``turn`` is the index of the env action it comes before."""

    turn: int
    agent: str
    kind: str
    text: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Finished:
    """Sentinel the team thread leaves when it ends (with the exception that ended it)."""

    def __init__(self, error: BaseException | None):
        self.error = error


class TeacherBridge:
    """Actions flow team -> episode, observations episode -> team; events are logged in order."""

    def __init__(self, max_turns: int, step_timeout_s: float):
        self.max_turns = max_turns
        self.step_timeout_s = step_timeout_s
        self.events: list[TeacherEvent] = []
        self.turn = 0  # env actions taken so far
        self.dropped_thoughts = 0
        self.observations: list[str] = []  # stripped tool results, in order (the verifier's evidence)
        self._actions: queue.Queue[str | _Finished] = queue.Queue()
        self._results: queue.Queue[str | None] = queue.Queue()
        self._closed = threading.Event()
        self._lock = threading.RLock()
        self._open_thought: dict[str, TeacherEvent] = {}

    # -- the team's side -----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def note(self, agent: str, kind: str, text: str, **detail: Any) -> None:
        """Log a role contribution (``kind`` is a CoA role tag); empty text is not logged."""
        if kind not in ROLE_TAGS:
            raise ValueError(f"unknown role {kind!r}; roles are {list(ROLE_TAGS)}")
        if not text or not text.strip():
            return
        with self._lock:
            self.events.append(TeacherEvent(self.turn, agent, kind, text.strip(), detail))

    def thought(self, agent: str, text: str) -> None:
        """The text of a reply that was offered tools. A thought whose reply never led anywhere
        (its tool call did not parse, so the framework asked again) is dropped when the same
        agent's next reply arrives: it belongs to no action."""
        with self._lock:
            stale = self._open_thought.pop(agent, None)
            if stale is not None and stale in self.events:
                self.events.remove(stale)
                self.dropped_thoughts += 1
            if text and text.strip():
                event = TeacherEvent(self.turn, agent, "think", text.strip(), {"source": "reply"})
                self.events.append(event)
                self._open_thought[agent] = event

    def acted(self, agent: str) -> None:
        """``agent``'s last thought led to an action (a tool call, a delegation, an answer)."""
        with self._lock:
            self._open_thought.pop(agent, None)

    def turns_left(self) -> int:
        return self.max_turns - self.turn

    def call(self, agent: str, tool: str, query: str) -> str:
        """Run ``<tool>query</tool>`` as the next env action and return its observation text."""
        with self._lock:
            self.acted(agent)
            if self.closed:
                return _OVER
            if self.turns_left() <= 1:
                return _LAST_TURN
            self.events.append(TeacherEvent(self.turn, agent, "tool", query, {"tool": tool}))
            self.turn += 1
            self._actions.put(f"<{tool}>{query}</{tool}>")
        try:
            observation = self._results.get(timeout=self.step_timeout_s)
        except queue.Empty:
            self._closed.set()
            return _OVER
        if observation is None:  # the episode ended while the call was out
            return _OVER
        text = strip_observation(observation)
        with self._lock:
            self.observations.append(text)
        return text

    def answer(self, agent: str, text: str) -> None:
        """Submit the final answer as the episode's next (last) action."""
        text = text.strip() or "(no answer)"
        with self._lock:
            self.acted(agent)
            if self.closed:
                return
            self.events.append(TeacherEvent(self.turn, agent, "answer", text))
            self.turn += 1
            self._actions.put(f"<answer>{text}</answer>")

    def finish(self, error: BaseException | None = None) -> None:
        """The team's thread is done (``error``: why it failed)."""
        self._actions.put(_Finished(error))

    # -- the episode's side --------------------------------------------------------------
    def next_action(self) -> str:
        """Block until the team produces its next action; raise if it failed or went silent."""
        try:
            item = self._actions.get(timeout=self.step_timeout_s)
        except queue.Empty:
            self.close()
            raise TimeoutError(f"the teacher team produced no action in {self.step_timeout_s:.0f} s") from None
        if isinstance(item, _Finished):
            self._actions.put(item)  # later calls see the same end
            if item.error is not None:
                raise RuntimeError(f"the teacher team failed: {type(item.error).__name__}: {item.error}") \
                    from item.error
            return ""  # the team ended without an answer the env accepted
        return item

    def deliver(self, observation: str) -> None:
        """Hand the env's observation to the tool call waiting for it."""
        self._results.put(observation)

    def close(self) -> None:
        """The episode is over: any waiting or later tool call returns at once."""
        self._closed.set()
        self._results.put(None)

    def event_dicts(self) -> list[dict[str, Any]]:
        with self._lock:
            return [event.to_dict() for event in self.events]
