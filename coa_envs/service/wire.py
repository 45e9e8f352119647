"""The wire format of ``coa serve-env``: messages, error codes and JSON encoding.

Shared by the server (:mod:`coa_envs.service.app`) and the client
(:class:`coa_envs.service.RemoteEnv`); stdlib only, so a client in another language can be
written from this page alone.

WebSocket (``/ws``, or ``/envs/<env id>/ws`` to name the env in the URL) follows OpenEnv's
``EnvClient`` session protocol: one connection is one session with its own env instance,
closed when the connection closes. Client -> server frames are JSON objects
``{"type": ..., "data": {...}}``:

* ``reset``: ``data = {"seed": int?, "options": {...}?, "task_id": str?, "task_index": int?,
  "episode_id": str?}`` (``task_id``/``task_index`` are shorthands for the options of the same
  name). On ``/ws`` with several ids served, the first frame also names ``"env_id"``, and
  may carry ``"overrides"`` (``gym.make`` keyword arguments the server allows).
* ``step``: ``data = {"action": <str, or an assistant message object for protocol=tools>}``.
* ``state``: no data. ``close``: no data; the server closes the session.
* ``open`` (ours): ``data = {"env_id": str?, "overrides": {...}?}`` opens the session before
  the first reset and answers ``{"type": "opened", "data": <session description>}``.
* ``tasks`` (ours): answers ``{"type": "tasks", "data": {"tasks": [{"task_id", "question"}...]}}``.

Server -> client frames:

* ``{"type": "observation", "data": {"observation": {"text": str, "info": {...},
  "terminated": bool, "truncated": bool}, "reward": float | null, "done": bool}}`` after
  ``reset`` (reward null) and ``step`` (OpenEnv's ``StepResult``: observation, reward, done);
* ``{"type": "state", "data": {"episode_id", "step_count", "session_id", "env_id",
  "task_id", "done", ...}}`` (OpenEnv's ``State`` fields first);
* ``{"type": "error", "data": {"code": <ERROR CODE>, "message": str}}``. After an error the
  session goes on (the next frame is served), except after ``CAPACITY_REACHED``,
  ``UNAUTHORIZED`` and an expired session, where the server closes the connection.

HTTP, for clients without WebSockets: ``POST /sessions`` (``{"env_id", "overrides"}``) ->
``201 {"session_id", ...}``; ``POST /sessions/{id}/reset`` and ``/step`` take the ``data``
objects above and return the ``observation`` data; ``GET /sessions/{id}`` is the state,
``GET /sessions/{id}/tasks`` the task list, ``DELETE /sessions/{id}`` closes it. Errors are
``{"error": {"code", "message"}}`` with the HTTP status of :data:`ERROR_STATUS`. Also
``GET /health``, ``GET /envs``, and OpenEnv's ``GET /metadata`` and ``GET /schema``.
Authentication, when the server has a token: ``Authorization: Bearer <token>`` on every
request and on the WebSocket handshake.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import PurePath
from typing import Any

__all__ = [
    "ERROR_STATUS",
    "HANGUP_ERRORS",
    "ErrorCode",
    "ServiceError",
    "dumps",
    "error_frame",
    "jsonable",
    "loads_or_refuse",
]


class ErrorCode(enum.StrEnum):
    """Why the server refused a request. OpenEnv's codes are kept where they exist."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    UNAUTHORIZED = "UNAUTHORIZED"
    UNKNOWN_ENV = "UNKNOWN_ENV"
    UNKNOWN_SESSION = "UNKNOWN_SESSION"
    BAD_OVERRIDE = "BAD_OVERRIDE"
    NO_EPISODE = "NO_EPISODE"
    EPISODE_DONE = "EPISODE_DONE"
    TOO_LARGE = "TOO_LARGE"
    TIMEOUT = "TIMEOUT"
    CONNECTION_LOST = "CONNECTION_LOST"


#: After these the server closes the WebSocket (the client must open a new session).
HANGUP_ERRORS: frozenset[ErrorCode] = frozenset({ErrorCode.CAPACITY_REACHED, ErrorCode.UNAUTHORIZED,
                                                  ErrorCode.UNKNOWN_SESSION})

ERROR_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.UNKNOWN_TYPE: 400,
    ErrorCode.VALIDATION_ERROR: 422,
    ErrorCode.EXECUTION_ERROR: 500,
    ErrorCode.CAPACITY_REACHED: 429,
    ErrorCode.FACTORY_ERROR: 500,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.UNKNOWN_ENV: 404,
    ErrorCode.UNKNOWN_SESSION: 404,
    ErrorCode.BAD_OVERRIDE: 422,
    ErrorCode.NO_EPISODE: 409,
    ErrorCode.EPISODE_DONE: 409,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.CONNECTION_LOST: 502,
}


class ServiceError(Exception):
    """A refusal with a code and a message that says what to change."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(f"{code}: {message}")
        self.code = ErrorCode(code)
        self.message = message

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    def body(self) -> dict[str, Any]:
        return {"error": {"code": str(self.code), "message": self.message}}


def error_frame(code: ErrorCode, message: str) -> str:
    return dumps({"type": "error", "data": {"code": str(code), "message": message}})


def jsonable(value: Any) -> Any:
    """``info`` as JSON can carry it: tuples become lists, numpy scalars numbers, enums their
    values, dataclasses dicts, non-finite floats null, anything else its ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, PurePath):
        return str(value)
    item = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(item):
        return jsonable(item())
    if hasattr(value, "items"):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loads_or_refuse(raw: str | bytes, what: str) -> Any:
    """A request body or frame parsed, or ``INVALID_JSON`` saying why. JSON nested past the
    parser's recursion limit (``[[[...]]]``, a few hundred kB) is refused like any bad JSON: as
    a ``RecursionError`` it was a bare 500, and on a WebSocket it dropped the connection and
    its session."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServiceError(ErrorCode.INVALID_JSON, f"the {what} is not JSON: {exc}") from None
    except RecursionError:
        raise ServiceError(ErrorCode.INVALID_JSON, f"the {what} is JSON nested too deeply to parse") from None
