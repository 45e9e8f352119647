"""``RemoteEnv``: a Gymnasium env whose episodes run in a ``coa serve-env`` server.

``gym.make("coa/Remote-v0", base_url="http://host:8100", env_id="coa/MATH500-v1")`` behaves
like ``gym.make("coa/MATH500-v1")``: same observations, rewards, ``info`` and spaces, so
``coa eval --env-url`` and the RL rollout workers (``env_url:``) use it unchanged. It holds
one WebSocket (the OpenEnv session protocol of :mod:`coa_envs.service.wire`), i.e. one
server-side env instance, for its lifetime.

Failures never hang: every reply is awaited at most ``timeout_s``; a lost connection, a
timeout or a refusal raises :class:`RemoteEnvError` naming the cause (the server's error
code and reason). After a timeout or a lost connection the episode cannot continue; the
next ``reset`` opens a new session. Pickling keeps the address and options, not the
session: an unpickled copy opens its own session and must be reset.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from coa_envs.errors import UserError
from coa_envs.service.wire import HANGUP_ERRORS, ErrorCode, dumps
from coa_envs.spaces import TextSpace
from coa_envs.types import Task

__all__ = ["RemoteEnv", "RemoteEnvConfig", "RemoteEnvError"]

TOKEN_ENV_VAR = "COA_ENV_TOKEN"


class RemoteEnvError(UserError, RuntimeError):
    """The server refused a request, or could not be reached; ``code`` is an :class:`ErrorCode`."""

    def __init__(self, code: ErrorCode | str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = str(code)
        self.message = message


@dataclass(frozen=True)
class RemoteEnvConfig:
    """What the server said about the session's env (the fields rollouts and agents read)."""

    env_id: str
    family: str = ""
    description: str = ""
    tools: tuple[str, ...] = ()
    max_turns: int = 0
    protocol: str = "tags"
    base_url: str = ""
    session_id: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)


def _ws_url(base_url: str, env_id: str | None) -> str:
    url = base_url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return f"{url}/envs/{env_id}/ws" if env_id else f"{url}/ws"


class _Socket:
    """The session's WebSocket, held apart from the env so that a finalizer can close it without
    keeping the env alive: on garbage collection, and at interpreter exit while the socket's
    reader thread still runs (closing it later, from ``__del__`` during shutdown, joined a frozen
    daemon thread forever: a program that forgot ``env.close()`` never exited)."""

    __slots__ = ("connection",)

    def __init__(self) -> None:
        self.connection: Any = None

    def close(self, goodbye: bool = False) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        if goodbye:  # tell the server the session is over, so it frees the env at once
            with contextlib.suppress(Exception):
                connection.send(dumps({"type": "close"}))
        with contextlib.suppress(Exception):  # already broken: nothing left to release
            connection.close()  # bounded: close_timeout


class RemoteEnv(gym.Env[str, str]):
    """A served env. ``env_id`` may be omitted when the server serves exactly one id;
    ``overrides`` are ``gym.make`` keywords the server allows clients to set (``max_turns``,
    ``task_options: {split: ...}``...); ``token`` defaults to ``$COA_ENV_TOKEN``."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        base_url: str,
        env_id: str | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        token: str | None = None,
        connect_timeout_s: float = 10.0,
        timeout_s: float = 600.0,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r} is not valid; allowed: [None, 'ansi']")
        self.base_url, self.env_id = base_url, env_id
        self.overrides = dict(overrides or {})
        self.token = token if token is not None else os.environ.get(TOKEN_ENV_VAR)
        self.connect_timeout_s, self.timeout_s = connect_timeout_s, timeout_s
        self.render_mode = render_mode
        self._socket = _Socket()
        self._finalizer = weakref.finalize(self, self._socket.close, True)  # on GC and at exit
        self._lock = threading.Lock()
        self._tasks: list[Task] | None = None
        self._task_index: dict[str, int] = {}
        self._task_id: str | None = None
        self.transcript: list[str] = []
        self._open()

    # -- connection -----------------------------------------------------------------------
    def _open(self) -> None:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        url = _ws_url(self.base_url, self.env_id)
        options: dict[str, Any] = {"additional_headers": headers, "open_timeout": self.connect_timeout_s,
                                   "close_timeout": 1.0, "max_size": None, "compression": None}
        if "legacy" in inspect.signature(connect).parameters:  # websockets >= 17: a plain connection
            options["legacy"] = True
        try:
            self._connection = connect(url, **options)
        except (OSError, TimeoutError, WebSocketException) as exc:  # incl. a handshake cut off mid-send
            raise RemoteEnvError(ErrorCode.CONNECTION_LOST, f"cannot reach the env server at {url}: "
                                                            f"{type(exc).__name__}: {exc}") from None
        try:
            described = self._call("open", {"env_id": self.env_id, "overrides": self.overrides}, expect="opened")
        except RemoteEnvError:
            self._drop()  # refused (capacity, token, bad override): the server hangs up or would
            raise
        self.config = RemoteEnvConfig(
            env_id=described["env_id"], family=described.get("family", ""),
            description=described.get("description", ""), tools=tuple(described.get("tools") or ()),
            max_turns=int(described.get("max_turns") or 0), protocol=described.get("protocol", "tags"),
            base_url=self.base_url, session_id=described["session_id"], overrides=dict(self.overrides))
        self.env_id = described["env_id"]
        self.observation_space = TextSpace(max_length=int(described["observation_max_length"]))
        self.action_space = TextSpace(max_length=int(described["action_max_length"]))
        self.num_tasks = int(described.get("num_tasks") or 0)

    @property
    def _connection(self) -> Any:
        return self._socket.connection

    @_connection.setter
    def _connection(self, connection: Any) -> None:
        self._socket.connection = connection

    def _drop(self) -> None:
        self._socket.close()

    def _call(self, kind: str, data: Mapping[str, Any] | None = None, expect: str = "observation") -> dict[str, Any]:
        """One request/reply on the session's socket; raises RemoteEnvError, never hangs."""
        from websockets.exceptions import ConnectionClosed

        if self._connection is None:  # lost earlier, or unpickled: a new session
            self._open()
        with self._lock:
            frame = {"type": kind} if data is None else {"type": kind, "data": data}
            try:
                self._connection.send(dumps(frame))
                raw = self._connection.recv(timeout=self.timeout_s)
            except TimeoutError:
                self._drop()  # a late reply would answer the next request: never reuse the socket
                raise RemoteEnvError(ErrorCode.TIMEOUT, f"no reply to {kind!r} from {self.base_url} within "
                                                        f"{self.timeout_s:g} s; the episode is lost, reset to start "
                                                        "another") from None
            except (ConnectionClosed, OSError) as exc:
                self._drop()
                raise RemoteEnvError(ErrorCode.CONNECTION_LOST, f"the connection to the env server at "
                                                                f"{self.base_url} was lost during {kind!r} "
                                                                f"({type(exc).__name__}: {exc}); the episode is "
                                                                "lost, reset to start another") from None
        reply = json.loads(raw)
        if reply.get("type") == "error":
            error = reply.get("data") or {}
            if error.get("code") in HANGUP_ERRORS:  # the server closes the socket after these
                self._drop()
            raise RemoteEnvError(error.get("code", ErrorCode.EXECUTION_ERROR), error.get("message", "unknown error"))
        if reply.get("type") != expect:
            raise RemoteEnvError(ErrorCode.VALIDATION_ERROR, f"expected a {expect!r} reply to {kind!r}, got "
                                                             f"{reply.get('type')!r}")
        return reply.get("data") or {}

    @property
    def max_turns(self) -> int:
        """The served env's turn limit (``env.get_wrapper_attr("max_turns")`` as for a local env)."""
        return self.config.max_turns

    # -- what the server knows about the tasks -------------------------------------------
    @property
    def tasks(self) -> list[Task]:
        """The session's tasks (id and question; gold answers only if the server exposes them)."""
        if self._tasks is None:
            rows = self._call("tasks", {}, expect="tasks")["tasks"]
            self._tasks = [Task(task_id=r["task_id"], question=r.get("question", ""), gold=tuple(r.get("gold") or ()),
                                tests=r.get("tests"), files=tuple(r.get("files") or ()),
                                metadata=r.get("metadata") or {}) for r in rows]
            self._task_index = {t.task_id: i for i, t in enumerate(self._tasks)}
        return self._tasks

    @property
    def task(self) -> Task | None:
        """The current episode's task (fetches the task list once)."""
        if self._task_id is None:
            return None
        tasks = self.tasks
        index = self._task_index.get(self._task_id)
        return None if index is None else tasks[index]

    # -- Gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        data = self._call("reset", {"seed": seed, "options": dict(options or {})})
        observation = data["observation"]
        info = observation.get("info") or {}
        self._task_id = info.get("task_id")
        self.transcript = [observation["text"]]
        return observation["text"], info

    def step(self, action: Any):
        data = self._call("step", {"action": action})
        observation = data["observation"]
        text = observation["text"]
        if isinstance(action, str):
            self.transcript.append(action)
        if text:
            self.transcript.append(text)
        return (text, float(data.get("reward") or 0.0), bool(observation.get("terminated")),
                bool(observation.get("truncated")), observation.get("info") or {})

    def state(self) -> dict[str, Any]:
        """The server's record of this session (episode id, step count, task, done...)."""
        return self._call("state", None, expect="state")

    def render(self) -> str | None:
        return "".join(self.transcript) if self.render_mode == "ansi" else None

    def close(self) -> None:
        with self._lock:
            self._socket.close(goodbye=True)
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_socket"], state["_finalizer"], state["_lock"] = None, None, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._socket = _Socket()  # a copy opens its own session on first use
        self._finalizer = weakref.finalize(self, self._socket.close, True)
        self._lock = threading.Lock()
