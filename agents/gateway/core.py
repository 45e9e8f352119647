"""The gateway: sessions over one backend, their rewards, and the trajectories they become.

:class:`Gateway` is what both front ends use: the HTTP app (:mod:`agents.gateway.app`,
``coa gateway``) and the RL loop's external-agent rollouts (``trainers/rl/external.py``),
which open sessions in-process and let agents talk to the app over HTTP.

A session is scored when it finishes, by exactly one of:

* the coa env it plays (opened with an ``env_id``): the env's reward for the final answer;
* the gateway's ``reward_fn(result: SessionResult) -> float`` (a user reward function);
* a reward the client posts, only when the operator allowed it (``allow_client_reward``):
  a code-running agent could otherwise post its own reward, so it is off by default and
  never applies to env sessions.

Finished sessions are appended to ``out`` (trajectory JSONL: ``coa train sft`` data,
``coa view`` input), one line per token-exact segment.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.gateway.assembly import session_trajectories
from agents.gateway.envtask import EnvTask
from agents.gateway.sessions import ForcedSampling, GatewayCall, GatewaySession, SessionStore
from agents.openai_errors import APIError
from agents.openai_wire import flat_message
from agents.trajectory import EpisodeStatus, Trajectory, write_trajectory

__all__ = ["Gateway", "RewardFn", "SessionResult"]

_FINISH_WAIT_S = 600.0  # longest a finish waits for the session's calls still being answered


@dataclass(frozen=True)
class SessionResult:
    """What a user reward function sees of a finished session."""

    session_id: str
    answer: str | None
    messages: list[dict[str, Any]]
    """The last call's messages followed by its reply: the conversation as the agent left it."""
    calls: list[GatewayCall]
    info: dict[str, Any] = field(default_factory=dict)


RewardFn = Callable[[SessionResult], float]


class Gateway:
    """Sessions over ``backend`` (:class:`~agents.gateway.local.LocalBackend` or
    :class:`~agents.gateway.upstream.UpstreamBackend`), served as ``model_name``."""

    def __init__(self, backend: Any, model_name: str = "policy", *, reward_fn: RewardFn | None = None,
                 out: str | Path | None = None, allow_client_reward: bool = False,
                 env_overrides: Mapping[str, Any] | None = None, client_env_overrides: frozenset[str] | None = None,
                 env_ids: list[str] | None = None, accept_any_model: bool = False, max_sessions: int = 4096,
                 idle_timeout_s: float = 3600.0, keep_finished: int = 256, env_pool_size: int = 64) -> None:
        from coa_envs.service.envpool import EnvPool
        from coa_envs.service.sessions import DEFAULT_CLIENT_OVERRIDES

        self.backend = backend
        self.model_name = model_name
        self.reward_fn = reward_fn
        self.allow_client_reward = allow_client_reward
        self.env_overrides = dict(env_overrides or {})
        self.client_env_overrides = DEFAULT_CLIENT_OVERRIDES if client_env_overrides is None else client_env_overrides
        self.env_ids = env_ids
        self.accept_any_model = accept_any_model
        self.store = SessionStore(max_live=max_sessions, idle_timeout_s=idle_timeout_s, keep_finished=keep_finished,
                                  on_expire=self._expire)
        self.out = Path(out) if out else None
        self._out_lock = threading.Lock()
        self._env_pool = EnvPool(per_key=env_pool_size, total=env_pool_size)  # finished sessions' idle envs
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)

    @property
    def tokenizer(self) -> Any:
        return getattr(self.backend, "tokenizer", None)

    def check_model(self, name: str | None) -> None:
        if name in (None, "", self.model_name) or self.accept_any_model:
            return
        raise APIError(404, f"The model `{name}` does not exist; this gateway serves `{self.model_name}`",
                          code="model_not_found", param="model")

    # -- sessions ----------------------------------------------------------------------------
    def open_session(self, *, session_id: str | None = None, env_id: str | None = None, task_id: str | None = None,
                     task_index: int | None = None, env_kwargs: Mapping[str, Any] | None = None, env: Any = None,
                     seed: int | None = None, sample_index: int = 0, forced: ForcedSampling | None = None,
                     info: Mapping[str, Any] | None = None) -> GatewaySession:
        """A new session; with ``env_id`` (or an ``env`` object) it plays a coa env task.

        ``env_kwargs`` come from a client and are limited to the episode-shaping keys
        ``coa serve-env`` lets clients set; ``env`` is an env the caller owns (the RL worker's),
        reset here and never closed or pooled.
        """
        task = None
        if env is not None or env_id is not None:
            task = self._env_task(env, env_id, env_kwargs, task_id, task_index, seed, sample_index)
        try:
            return self.store.open(session_id, task=task, forced=forced, info=info, seed=seed,
                                   sample_index=sample_index)
        except BaseException:
            if task is not None:
                self._release(task)
            raise

    def _env_task(self, env: Any, env_id: str | None, env_kwargs: Mapping[str, Any] | None, task_id: str | None,
                  task_index: int | None, seed: int | None, sample_index: int) -> EnvTask:
        options: dict[str, Any] = {}
        if task_id is not None:
            options["task_id"] = task_id
        elif task_index is not None:
            options["task_index"] = task_index
        owned = env is None
        if owned:
            env, key = self._acquire_env(str(env_id), env_kwargs)
        env_id = env_id or env.unwrapped.config.env_id
        try:
            task = EnvTask(env, str(env_id), seed=seed, options=options, sample_index=sample_index)
        except KeyError as exc:
            if owned:
                self._return_env(key, env)
            raise APIError(404, str(exc).strip("'\""), code="task_not_found", param="task_id") from None
        except BaseException:
            if owned:
                self._return_env(key, env)
            raise
        task.pool_key = key if owned else None  # type: ignore[attr-defined]
        return task

    def _acquire_env(self, env_id: str, client: Mapping[str, Any] | None) -> tuple[Any, str]:
        import json

        from coa_envs.config import deep_merge
        from coa_envs.registry import ids, make_env

        if env_id not in ids() or (self.env_ids is not None and env_id not in self.env_ids):
            served = self.env_ids if self.env_ids is not None else "every registered id (coa list)"
            raise APIError(404, f"env {env_id!r} is not served here; served: {served}", code="env_not_found",
                              param="env_id")
        client = dict(client or {})
        refused = sorted(set(client) - set(self.client_env_overrides))
        if refused:
            raise APIError(400, f"env_kwargs {refused} may not be set by a client; allowed: "
                                   f"{sorted(self.client_env_overrides)}", code="invalid_value", param="env_kwargs")
        kwargs = deep_merge(self.env_overrides, client)
        key = f"{env_id}|{json.dumps(kwargs, sort_keys=True, default=str)}"
        pooled = self._env_pool.take(key)
        if pooled is not None:
            return pooled, key
        try:
            return make_env(env_id, **kwargs), key
        except (TypeError, ValueError) as exc:
            raise APIError(400, f"{env_id}: {exc}", code="invalid_value", param="env_kwargs") from None

    def _return_env(self, key: str, env: Any) -> None:
        self._env_pool.put(key, env)  # past its bounds the least recently used idle env is closed

    def _release(self, task: EnvTask) -> None:
        key = getattr(task, "pool_key", None)
        if key is not None:
            self._return_env(key, task.env)

    def session(self, session_id: str) -> GatewaySession:
        return self.store.get(session_id)

    def describe_session(self, session: GatewaySession, base_url: str) -> dict[str, Any]:
        """What an agent is told about a session: its base URL, the model, and its env task."""
        reply: dict[str, Any] = {"session_id": session.session_id, "model": self.model_name,
                                 "base_url": f"{base_url.rstrip('/')}/sessions/{session.session_id}/v1"}
        if session.task is not None:
            reply.update(session.task.describe())
        return reply

    # -- finishing ---------------------------------------------------------------------------
    def finish(self, session: GatewaySession, *, answer: str | None = None, reward: float | None = None,
               failed: str | None = None, status: EpisodeStatus | None = None) -> list[Trajectory]:
        """Score and close ``session``; returns its trajectories (again, if already finished).

        ``failed`` (a reason) marks a run the agent could not complete (``error:agent``; RL
        never trains on it); ``status`` overrides the ending (the RL worker's timeouts) and
        does not wait for calls still in flight. Otherwise finishing waits for them.
        """
        if not session.wait_idle(0.0 if status is not None else _FINISH_WAIT_S) and status is None:
            raise APIError(409, f"session {session.session_id!r} still has calls in flight", code="session_busy")
        with session.finish_lock:
            if session.finished:
                return session.trajectories
            outcome = self._outcome(session, answer, reward, failed, status)
            trajectories = session_trajectories(session, self.tokenizer, outcome)
            session.trajectories = trajectories
            session.outcome = {"status": str(outcome.status), "reward": outcome.reward, "answer": outcome.answer,
                               "segments": len(trajectories)}
            session.finished = True
            self.store.mark_finished(session)
        if self.out is not None:
            with self._out_lock, self.out.open("a", encoding="utf-8") as handle:
                for trajectory in trajectories:
                    write_trajectory(handle, trajectory)
        if session.task is not None:
            self._release(session.task)
        return trajectories

    def _outcome(self, session: GatewaySession, answer: str | None, reward: float | None, failed: str | None,
                 status: EpisodeStatus | None) -> Trajectory:
        task = session.task
        if task is not None:
            if reward is not None:
                raise APIError(400, "this session plays a coa env task; the env scores its answer, a client "
                                       "cannot post a reward", code="invalid_value", param="reward")
            if status is not None or failed is not None:
                task.end(status or EpisodeStatus.ERROR_AGENT, failed)
            task.finish(answer)
            outcome = task.outcome()
            outcome.info["reward_source"] = "env"
            return outcome
        outcome = Trajectory(env_id=session.env_id, task_id=session.task_id, answer=answer,
                             terminated=answer is not None)
        if status is not None or failed is not None:
            outcome.status = status or EpisodeStatus.ERROR_AGENT
            if failed:
                outcome.info["error"] = failed
            return outcome
        if reward is not None:
            if not self.allow_client_reward:
                raise APIError(403, "this gateway does not take rewards from clients (coa gateway "
                                       "--client-rewards allows it)", code="client_reward_refused", param="reward")
            if not math.isfinite(float(reward)):  # NaN or inf would poison every advantage of its batch
                raise APIError(400, f"reward={reward!r}; a reward is a finite number", code="invalid_value",
                               param="reward")
            outcome.reward, outcome.info["reward_source"] = float(reward), "client"
        elif self.reward_fn is not None:
            outcome.info["reward_source"] = "reward_fn"
            try:
                scored = float(self.reward_fn(self._result(session, answer)))
                if not math.isfinite(scored):
                    raise ValueError(f"the reward function returned {scored}, not a finite number")
                outcome.reward = scored
            except Exception as exc:  # the reward's fault, not the episode's: scored 0, reported
                outcome.info["reward_error"] = f"{type(exc).__name__}: {exc}"
        else:
            outcome.info["reward_source"] = "none"
        return outcome

    @staticmethod
    def _result(session: GatewaySession, answer: str | None) -> SessionResult:
        calls = session.snapshot()
        messages = [flat_message(m) for m in calls[-1].messages] + [calls[-1].reply] if calls else []
        return SessionResult(session.session_id, answer, messages, calls, dict(session.info))

    def trajectories(self, session: GatewaySession) -> list[Trajectory]:
        """The finished session's trajectories, or a live session's so far (not scored)."""
        if session.finished:
            return session.trajectories
        return session_trajectories(session, self.tokenizer, None)

    def _expire(self, session: GatewaySession) -> None:
        with contextlib.suppress(APIError):
            self.finish(session, status=EpisodeStatus.ERROR_TIMEOUT, failed="the session was idle too long")

    def close(self) -> None:
        closer = getattr(self.backend, "close", None)
        if callable(closer):
            closer()
        self._env_pool.close()
