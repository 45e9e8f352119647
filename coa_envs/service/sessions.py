"""Sessions of ``coa serve-env``: one env instance per session, nothing shared between them.

The manager owns every live env. It opens sessions under a cap (a refusal, not a queue, so a
full server answers at once), runs each reset/step on a thread pool (a slow tool blocks only
its own session), serialises the calls of one session, expires idle sessions and keeps a
small pool of closed sessions' envs per configuration so that clients which open a session
per episode do not pay for building an env each time (envs are fully reset on ``reset``;
:class:`~coa_envs.service.envpool.EnvPool` bounds it per configuration and in all).

Overrides: the operator's (``coa serve-env -e``) apply to every session; a client may add
only the keys in ``client_overrides`` (default: episode-shaping settings that read no server
files and start nothing), and under ``task_options`` only ``split`` and ``limit``. A reset,
open or tasks request that names other overrides for an open session gets them: the session's
env is swapped for one of that configuration and its episode ends.
Transport (HTTP, WebSocket) lives in :mod:`coa_envs.service.app`; this module knows none.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coa_envs.configkit import merge_mappings as deep_merge
from coa_envs.service.envpool import EnvPool
from coa_envs.service.session import BusySession, Session, encodable
from coa_envs.service.wire import ErrorCode, ServiceError, jsonable

__all__ = ["DEFAULT_CLIENT_OVERRIDES", "Session", "SessionManager"]

log = logging.getLogger(__name__)

DEFAULT_CLIENT_OVERRIDES: frozenset[str] = frozenset({
    "max_turns", "max_observation_chars", "context_budget_chars", "allow_parallel_tools",
    "prompt", "system_prompt", "task_options", "protocol",
})
_CLIENT_TASK_OPTIONS = frozenset({"split", "limit"})
_RESET_KEYS = frozenset({"seed", "options", "task_id", "task_index", "episode_id", "env_id", "overrides"})
_EXPIRED_MEMORY = 4096  # how many expired ids keep their precise error message


def _pool_key(env_id: str, overrides: Mapping[str, Any]) -> str:
    return f"{env_id}|{json.dumps(overrides, sort_keys=True, default=str)}"


def _refuse_unknown(given: Iterable[str], allowed: Iterable[str], what: str, code: ErrorCode) -> None:
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ServiceError(code, f"{what} {extra} not allowed here; allowed: {sorted(allowed)}")


class SessionManager:
    """Sessions over the served ``env_ids``; see the module docstring for the rules."""

    def __init__(
        self,
        env_ids: Iterable[str],
        *,
        overrides: Mapping[str, Any] | None = None,
        client_overrides: Iterable[str] = DEFAULT_CLIENT_OVERRIDES,
        max_sessions: int = 256,
        idle_timeout_s: float = 600.0,
        step_threads: int = 64,
        pool_size: int = 16,
        pool_total: int = 64,
        expose_answers: bool = False,
    ):
        from coa_envs.registry import ids, suggest_id

        self.env_ids = list(env_ids)
        known = set(ids())
        unknown = [e for e in self.env_ids if e not in known]
        if not self.env_ids or unknown:
            hints = "".join(suggest_id(e) for e in unknown[:3])
            raise ServiceError(ErrorCode.UNKNOWN_ENV, f"unknown env id(s) {unknown}{hints}; `coa list` shows "
                                                      "the registered ids" if unknown else "no env id given")
        if max_sessions < 1 or idle_timeout_s <= 0 or step_threads < 1:
            raise ValueError("max_sessions and step_threads must be >= 1 and idle_timeout_s > 0")
        self.overrides = dict(overrides or {})
        self.client_overrides = frozenset(client_overrides)
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.pool_size = pool_size
        self.expose_answers = expose_answers
        self.sessions: dict[str, Session] = {}
        self._opening = 0
        self._expired: OrderedDict[str, str] = OrderedDict()
        self._pool = EnvPool(pool_size, pool_total)
        self._executor = ThreadPoolExecutor(step_threads, thread_name_prefix="coa-serve-env")
        self._counter = itertools.count()

    # -- configuration -------------------------------------------------------------------
    def resolve_env_id(self, env_id: str | None) -> str:
        if env_id is None:
            if len(self.env_ids) == 1:
                return self.env_ids[0]
            raise ServiceError(ErrorCode.VALIDATION_ERROR,
                               f"this server serves {self.env_ids}; name one as env_id")
        if env_id not in self.env_ids:
            from coa_envs.options import did_you_mean

            raise ServiceError(ErrorCode.UNKNOWN_ENV, f"env id {env_id!r} is not served here"
                                                      f"{did_you_mean(env_id, self.env_ids)}; served: {self.env_ids}")
        return env_id

    def effective_overrides(self, client: Mapping[str, Any] | None) -> dict[str, Any]:
        """The operator's overrides with the client's allowed ones merged on top."""
        client = client or {}
        if not isinstance(client, Mapping):
            raise ServiceError(ErrorCode.BAD_OVERRIDE, "overrides must be a JSON object of gym.make keywords")
        _refuse_unknown(client, self.client_overrides, "client override(s)", ErrorCode.BAD_OVERRIDE)
        task_options = client.get("task_options")
        if task_options is not None:
            if not isinstance(task_options, Mapping):
                raise ServiceError(ErrorCode.BAD_OVERRIDE, "task_options must be a JSON object")
            _refuse_unknown(task_options, _CLIENT_TASK_OPTIONS, "client task_options", ErrorCode.BAD_OVERRIDE)
        return deep_merge(self.overrides, client)

    def _build(self, env_id: str, overrides: Mapping[str, Any]) -> Any:
        from coa_envs.registry import make_env

        try:
            return make_env(env_id, **overrides)
        except (ValueError, TypeError) as exc:
            raise ServiceError(ErrorCode.BAD_OVERRIDE, f"{env_id}: {exc}") from None
        except Exception as exc:
            log.exception("building %s failed", env_id)
            raise ServiceError(ErrorCode.FACTORY_ERROR,
                               f"{env_id} could not be built: {type(exc).__name__}: {exc}") from None

    def check(self) -> None:
        """Build every served env once (at startup), so a bad ``--env-option`` fails before serving."""
        for env_id in self.env_ids:
            env = self._build(env_id, self.overrides)
            self._release(_pool_key(env_id, self.overrides), env)

    def describe_envs(self) -> list[dict[str, Any]]:
        from coa_envs.registry import describe

        return [jsonable(describe(env_id)) for env_id in self.env_ids]

    # -- session lifecycle ---------------------------------------------------------------
    async def open(self, env_id: str | None, overrides: Mapping[str, Any] | None = None) -> Session:
        env_id = self.resolve_env_id(env_id)
        effective = self.effective_overrides(overrides)
        if len(self.sessions) + self._opening >= self.max_sessions:
            raise ServiceError(ErrorCode.CAPACITY_REACHED,
                               f"the server is at its cap of {self.max_sessions} concurrent sessions; "
                               "close a session or retry later")
        key = _pool_key(env_id, effective)
        self._opening += 1
        try:
            env = self._pool.take(key) or await self._run(self._build, env_id, effective)
        finally:
            self._opening -= 1
        session = Session(session_id=f"s-{next(self._counter)}-{uuid.uuid4().hex[:12]}", env_id=env_id,
                          env=env, pool_key=key)
        self.sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            reason = self._expired.get(session_id)
            raise ServiceError(ErrorCode.UNKNOWN_SESSION, reason or f"unknown session {session_id!r} (closed, or "
                                                                    "never opened here); open a new one")
        return session

    async def close(self, session_id: str, reason: str = "closed") -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        message = f"session {session_id!r} was {reason}; open a new one"
        self._remember(session_id, message)
        session.closed_reason = message
        async with session.lock:  # let a running step finish before the env goes back to the pool
            session.closed = True
            await self._run(self._release, session.pool_key, session.env)

    def _release(self, key: str, env: Any) -> None:
        self._pool.put(key, env)

    async def reconfigure(self, session: Session, overrides: Mapping[str, Any] | None) -> None:
        """Give ``session`` the configuration ``overrides`` name (None: keep its own)."""
        key, effective = self._configuration(session, overrides)
        if key != session.pool_key:
            async with self._busy(session):
                await self._swap_env(session, key, effective)

    def _configuration(self, session: Session, overrides: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        """The pool key and overrides a request asks of ``session`` (its own when it names none)."""
        if overrides is None:
            return session.pool_key, {}
        effective = self.effective_overrides(overrides)
        return _pool_key(session.env_id, effective), effective

    async def _swap_env(self, session: Session, key: str, effective: dict[str, Any]) -> None:
        """Replace the session's env (the caller holds its lock) with one of configuration ``key``.
        A reset carrying new overrides kept the session's first env: the client believed it had
        the configuration it asked for. The episode ends; a failed build keeps the old env."""
        if key == session.pool_key:
            return
        env = self._pool.take(key) or await self._run(self._build, session.env_id, effective)
        old_key, old_env = session.pool_key, session.env
        session.env, session.pool_key = env, key
        session.episode_id, session.task_id, session.step_count = None, None, 0
        session.in_episode = session.done = False
        await self._run(self._release, old_key, old_env)

    def _remember(self, session_id: str, reason: str) -> None:
        self._expired[session_id] = reason
        while len(self._expired) > _EXPIRED_MEMORY:
            self._expired.popitem(last=False)

    async def reap(self) -> int:
        """Close sessions idle for longer than ``idle_timeout_s``; returns how many."""
        now = time.monotonic()
        stale = [s for s in self.sessions.values() if not s.busy and now - s.last_activity > self.idle_timeout_s]
        for session in stale:
            if session.on_expire is not None:
                session.on_expire()
            await self.close(session.session_id, f"closed after {self.idle_timeout_s:g} s without a request")
        return len(stale)

    async def reap_forever(self) -> None:
        interval = max(0.05, min(self.idle_timeout_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception:  # the reaper must outlive one bad close
                log.exception("reaping idle sessions failed")

    async def shutdown(self) -> None:
        for session_id in list(self.sessions):
            await self.close(session_id, "closed: the server shut down")
        self._pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- env calls -------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def reset(self, session: Session, data: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "reset data must be a JSON object")
        _refuse_unknown(data, _RESET_KEYS, "reset field(s)", ErrorCode.VALIDATION_ERROR)
        if data.get("env_id") not in (None, session.env_id):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, f"this session serves {session.env_id}; open a new "
                                                           "session for another env")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, f"seed={seed!r}; a seed is a non-negative integer or null")
        options = data.get("options") or {}
        if not isinstance(options, Mapping):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "options must be a JSON object")
        options = dict(options)
        for key in ("task_id", "task_index"):
            if data.get(key) is not None:
                options[key] = data[key]
        if "task_id" in options and not isinstance(options["task_id"], str):  # a list was a 500 (unhashable)
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "task_id must be a string")
        if "task_index" in options and (isinstance(options["task_index"], bool)
                                        or not isinstance(options["task_index"], int)):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "task_index must be an integer")
        episode_id = data.get("episode_id")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255
                                       or not encodable(episode_id)):
            # a lone surrogate ("\ud800" in JSON) was kept, and every later state reply failed (500)
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "episode_id must be a string of at most 255 characters "
                                                           "of valid Unicode")
        key, effective = self._configuration(session, data.get("overrides"))
        async with self._busy(session):
            await self._swap_env(session, key, effective)
            try:
                observation, info = await self._run(lambda: session.env.reset(seed=seed, options=options))
            except KeyError as exc:  # an unknown task_id
                raise ServiceError(ErrorCode.VALIDATION_ERROR, str(exc.args[0]) if exc.args else str(exc)) from None
            except Exception as exc:
                log.exception("reset of %s failed", session.env_id)
                raise ServiceError(ErrorCode.EXECUTION_ERROR, f"reset failed: {type(exc).__name__}: {exc}") from None
            session.episode_id = episode_id or uuid.uuid4().hex
            session.task_id = info.get("task_id")
            session.step_count, session.in_episode, session.done = 0, True, False
        return {"observation": {"text": observation, "info": jsonable(info), "terminated": False,
                                "truncated": False}, "reward": None, "done": False}

    async def step(self, session: Session, data: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(data, Mapping) or "action" not in data:
            raise ServiceError(ErrorCode.VALIDATION_ERROR, 'step data must be {"action": <text or assistant message>}')
        _refuse_unknown(data, ("action",), "step field(s)", ErrorCode.VALIDATION_ERROR)
        action = data["action"]
        if not isinstance(action, (str, dict)):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "action must be a string (tag protocol) or an assistant "
                                                           "message object (tools protocol)")
        async with self._busy(session):
            if not session.in_episode:
                raise ServiceError(ErrorCode.NO_EPISODE, "no episode is running in this session; send reset first")
            if session.done:
                raise ServiceError(ErrorCode.EPISODE_DONE, "the episode is over (terminated or truncated); "
                                                           "send reset to start another")
            try:
                observation, reward, terminated, truncated, info = await self._run(session.env.step, action)
            except Exception as exc:  # envs do not raise on model output; if one does, say so
                log.exception("step of %s failed", session.env_id)
                raise ServiceError(ErrorCode.EXECUTION_ERROR, f"step failed: {type(exc).__name__}: {exc}") from None
            session.step_count += 1
            session.done = bool(terminated or truncated)
        return {"observation": {"text": observation, "info": jsonable(info), "terminated": bool(terminated),
                                "truncated": bool(truncated)}, "reward": float(reward), "done": session.done}

    async def tasks(self, session: Session) -> dict[str, Any]:
        session.touch()
        if self.expose_answers:
            rows = [jsonable(t.to_dict()) for t in session.env.tasks]
        else:
            rows = [{"task_id": t.task_id, "question": t.question} for t in session.env.tasks]
        return {"tasks": rows, "answers": self.expose_answers}

    def _busy(self, session: Session) -> BusySession:
        return BusySession(session)
