"""What the gateway records: one :class:`GatewayCall` per answered chat completion, grouped
into :class:`GatewaySession` objects held by a thread-safe :class:`SessionStore`.

A session is one agent run (one episode). Each call keeps exactly what the model was fed
and what it sampled: the prompt token ids, the sampled ids and their logprobs, the decoded
text, the reply (content and parsed tool calls) sent back, and the request's messages. The
session also remembers each call's context (prompt + completion, as text and ids) so the
next call can reuse those ids instead of re-tokenising the history
(:mod:`agents.gateway.prompts`), and each reply the gateway sent, so an assistant message
echoed back by the client is recognised as the model's own output.

This module never talks HTTP and never builds trajectories (:mod:`agents.gateway.assembly`).
"""

from __future__ import annotations

import bisect
import itertools
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.openai_errors import APIError

__all__ = ["CallSource", "ForcedSampling", "GatewayCall", "GatewaySession", "SessionStore", "reply_key"]

CallSource = Literal["engine", "upstream"]


@dataclass(frozen=True, slots=True)
class ForcedSampling:
    """Sampling the session imposes whatever the client asks (RL: the learner scores logprobs
    at the rollout temperature, so an agent's own ``temperature`` must not change them).

    ``None`` fields leave the client's value. ``max_tokens`` caps each call;
    ``max_generated_tokens`` caps the session's sampled tokens in all (a spent budget answers
    400 ``session_budget_exhausted``); ``seed`` makes call ``k`` of the session use a seed
    derived from it and ``k``.
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_generated_tokens: int | None = None
    seed: int | None = None


@dataclass(slots=True)
class GatewayCall:
    """One answered completion (one choice of it: a request with ``n=2`` records two)."""

    index: int
    source: CallSource
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_text: str
    prompt_ids: list[int]
    completion_text: str
    completion_ids: list[int]
    logprobs: list[float]
    reply: dict[str, Any]
    finish_reason: str
    reused_prompt_tokens: int = 0
    """Leading prompt ids taken from an earlier call's context instead of re-tokenised."""
    sampling: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    seconds: float = 0.0

    @property
    def has_ids(self) -> bool:
        return bool(self.prompt_ids) and (bool(self.completion_ids) or not self.completion_text)

    @property
    def context_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]


def _canonical_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments.strip()
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def reply_key(message: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What identifies an assistant message whichever way a client echoes it back: its text
    (parts joined, whitespace-trimmed) and its calls (name, canonical JSON arguments)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    calls = []
    for call in message.get("tool_calls") or ():
        function = (call.get("function") if isinstance(call, Mapping) else None) or {}
        calls.append((str(function.get("name") or ""), _canonical_arguments(function.get("arguments", {}))))
    return (str(content or "").strip(), tuple(calls))


class GatewaySession:
    """One agent run: its calls, their contexts, and how it ended.

    ``task`` is the coa env task the session plays (:class:`agents.gateway.envtask.EnvTask`)
    or None for a session scored by a reward function; ``info`` goes into every trajectory.
    """

    def __init__(self, session_id: str, *, task: Any = None, forced: ForcedSampling | None = None,
                 info: Mapping[str, Any] | None = None, env_id: str = "gateway", task_id: str = "",
                 seed: int | None = None, sample_index: int = 0) -> None:
        self.session_id = session_id
        self.task = task
        self.forced = forced or ForcedSampling()
        self.info = dict(info or {})
        self.env_id = getattr(task, "env_id", None) or env_id
        self.task_id = getattr(task, "task_id", None) or task_id or session_id
        self.seed = seed
        self.sample_index = sample_index
        self.created_at = time.time()
        self.last_activity = time.monotonic()
        self.calls: list[GatewayCall] = []
        self.finished = False
        self.outcome: dict[str, Any] = {}
        self._counter = itertools.count()
        self._replies: dict[tuple, str] = {}
        self._contexts: list[tuple[str, GatewayCall]] = []  # (context text, call), longest first
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._reserved: dict[int, int] = {}  # call index -> tokens of the budget it may sample
        self.finish_lock = threading.Lock()
        self.trajectories: list[Any] = []
        """Set when the session finishes (what :mod:`agents.gateway.assembly` made of it)."""

    # -- calls -----------------------------------------------------------------------------
    def next_index(self) -> int:
        """A call's place in the session, taken when its request arrives; the call is in flight
        until :meth:`record` or :meth:`abandon` (finishing waits for it)."""
        with self._idle:
            self.last_activity = time.monotonic()
            self._in_flight += 1
            return next(self._counter)

    def abandon(self, index: int | None = None) -> None:
        """A call that produced nothing to record (it failed) is no longer in flight; its
        token reservation (``index``) is returned."""
        with self._idle:
            self._in_flight -= 1
            if index is not None:
                self._reserved.pop(index, None)
            self._idle.notify_all()

    def reserve_tokens(self, index: int, budget: int, wanted: int, share: int = 1) -> int:
        """Up to ``wanted`` tokens of the session's ``budget`` for call ``index``: of what
        neither recorded calls sampled nor calls in flight hold, a ``1/share`` part (the
        choices of a request still to reserve split what is left). A budget read without
        reservations let a request's ``n`` choices, or calls sent at once, each take all of it."""
        with self._lock:
            left = budget - sum(len(c.completion_ids) for c in self.calls) - sum(self._reserved.values())
            granted = min(wanted, max(left // max(share, 1), min(left, 1)))
            if granted > 0:
                self._reserved[index] = granted
            return granted

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no call is in flight (True) or ``timeout_s`` passes (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight <= 0, timeout=timeout_s)

    def check_open(self) -> None:
        if self.finished:
            raise APIError(409, f"session {self.session_id!r} is finished; open a new session",
                              code="session_finished")

    def generated_tokens(self) -> int:
        with self._lock:
            return sum(len(c.completion_ids) for c in self.calls)

    def record(self, call: GatewayCall, raw_reply_text: str | None = None) -> None:
        """Keep ``call``; ``raw_reply_text`` is the sampled text the model wrote for its reply
        (fed back in place of the reply when the client echoes it)."""
        with self._idle:
            self.calls.append(call)
            self._reserved.pop(call.index, None)  # its sampled ids count now
            if call.has_ids:  # longest first; among equals, the newest first
                bisect.insort_left(self._contexts, (call.prompt_text + call.completion_text, call),
                              key=lambda entry: -len(entry[0]))
            self.last_activity = time.monotonic()
            if raw_reply_text is not None:
                self._replies[reply_key(call.reply)] = raw_reply_text
            self._in_flight -= 1
            self._idle.notify_all()

    def raw_reply(self, message: Mapping[str, Any]) -> str | None:
        """The sampled text behind an assistant message this session's model sent, if it is one."""
        with self._lock:
            return self._replies.get(reply_key(message))

    def longest_context(self, text: str) -> tuple[str, list[int]]:
        """The longest recorded context (a call's prompt + completion) that ``text`` starts
        with, as (text, ids); the newest of equally long ones; ``("", [])`` when none does.

        Contexts are kept longest first with their text built once, so a call of a long
        session checks candidates until the first that fits (in an append-only session, the
        first: the previous call's), instead of building and comparing every earlier context,
        which made each call cost the whole session's history again."""
        with self._lock:
            contexts = list(self._contexts)
        for context_text, call in contexts:
            if len(context_text) <= len(text) and text.startswith(context_text):
                return context_text, call.context_ids
        return "", []

    def snapshot(self) -> list[GatewayCall]:
        with self._lock:
            return sorted(self.calls, key=lambda c: c.index)

    def describe(self) -> dict[str, Any]:
        calls = self.snapshot()
        return {"session_id": self.session_id, "env_id": self.env_id, "task_id": self.task_id,
                "calls": len(calls), "generated_tokens": sum(len(c.completion_ids) for c in calls),
                "finished": self.finished, **({"outcome": self.outcome} if self.finished else {})}


class SessionStore:
    """Live and recently finished sessions, safe to use from any thread.

    ``max_live`` refuses new sessions (429) beyond it; sessions idle for ``idle_timeout_s`` are
    finished by the next sweep (``on_expire`` gets them, e.g. to score and write them);
    ``keep_finished`` finished sessions stay readable, the oldest dropped first.
    """

    def __init__(self, *, max_live: int = 4096, idle_timeout_s: float = 3600.0, keep_finished: int = 256,
                 on_expire: Callable[[GatewaySession], None] | None = None) -> None:
        self.max_live = max_live
        self.idle_timeout_s = idle_timeout_s
        self.keep_finished = keep_finished
        self.on_expire = on_expire
        self._live: dict[str, GatewaySession] = {}
        self._finished: OrderedDict[str, GatewaySession] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, session_id: str | None = None, **kwargs: Any) -> GatewaySession:
        """A new session (``session_id`` or a fresh one); 409 when the id is taken."""
        self.sweep()
        sid = session_id or f"sess-{uuid.uuid4().hex}"
        _check_id(sid)
        with self._lock:
            if sid in self._live or sid in self._finished:
                raise APIError(409, f"session {sid!r} exists already", code="session_exists")
            if len(self._live) >= self.max_live:
                raise APIError(429, f"{self.max_live} sessions are open; finish some first",
                                  code="too_many_sessions")
            session = GatewaySession(sid, **kwargs)
            self._live[sid] = session
            return session

    def get(self, session_id: str) -> GatewaySession:
        with self._lock:
            session = self._live.get(session_id) or self._finished.get(session_id)
        if session is None:
            raise APIError(404, f"no session {session_id!r}", code="session_not_found")
        return session

    def get_or_open(self, session_id: str) -> GatewaySession:
        """The session a client names in its URL or header, opened on first use."""
        _check_id(session_id)
        with self._lock:
            session = self._live.get(session_id) or self._finished.get(session_id)
        return session if session is not None else self._open_racing(session_id)

    def _open_racing(self, session_id: str) -> GatewaySession:
        try:
            return self.open(session_id)
        except APIError as error:  # another request opened it first
            if error.code == "session_exists":
                return self.get(session_id)
            raise

    def mark_finished(self, session: GatewaySession) -> None:
        with self._lock:
            self._live.pop(session.session_id, None)
            self._finished[session.session_id] = session
            while len(self._finished) > self.keep_finished:
                self._finished.popitem(last=False)

    def live(self) -> list[GatewaySession]:
        with self._lock:
            return list(self._live.values())

    def sweep(self) -> None:
        """Finish sessions idle past ``idle_timeout_s`` (through ``on_expire``)."""
        now = time.monotonic()
        with self._lock:
            stale = [s for s in self._live.values() if now - s.last_activity > self.idle_timeout_s]
        for session in stale:
            if self.on_expire is not None:
                self.on_expire(session)
            else:
                session.finished = True
                self.mark_finished(session)


def _check_id(session_id: str) -> None:
    if not session_id or len(session_id) > 200 or not all(ch.isalnum() or ch in "-_.:" for ch in session_id):
        raise APIError(400, f"session id {session_id[:80]!r}: use 1-200 letters, digits, '-', '_', '.', ':'",
                          code="invalid_session_id", param="session_id")
