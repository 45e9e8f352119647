"""One session of ``coa serve-env`` (:class:`Session`: its env, episode and lock) and the
guard that holds it for one call (:class:`BusySession`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coa_envs.service.wire import ErrorCode, ServiceError

__all__ = ["BusySession", "Session", "encodable"]


@dataclass(eq=False)
class Session:
    """One client's env. ``lock`` orders its calls; ``on_expire`` lets a transport hang up;
    ``pool_key`` names the env's configuration (env id and overrides), under which the env goes
    back to the server's pool of idle envs when the session ends or is reconfigured."""

    session_id: str
    env_id: str
    env: Any
    pool_key: str
    created_at: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.monotonic)
    last_activity_at: float = field(default_factory=time.time)
    episode_id: str | None = None
    task_id: str | None = None
    step_count: int = 0
    in_episode: bool = False
    done: bool = False
    busy: int = 0
    closed: bool = False
    closed_reason: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    on_expire: Callable[[], None] | None = None

    def touch(self) -> None:
        self.last_activity, self.last_activity_at = time.monotonic(), time.time()

    def describe(self) -> dict[str, Any]:
        config = self.env.config
        return {
            "session_id": self.session_id,
            "env_id": self.env_id,
            "family": config.family,
            "description": config.description,
            "tools": list(config.tools),
            "max_turns": config.max_turns,
            "protocol": getattr(config, "protocol", "tags"),
            "num_tasks": len(self.env.tasks),
            "observation_max_length": self.env.observation_space.max_length,
            "action_max_length": self.env.action_space.max_length,
        }

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "session_id": self.session_id,
            "env_id": self.env_id,
            "task_id": self.task_id,
            "turn": getattr(self.env, "turn", self.step_count),
            "in_episode": self.in_episode,
            "done": self.done,
            "created_at": self.created_at,
            "last_activity_at": self.last_activity_at,
        }



def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), so a JSON reply can carry it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class BusySession:
    """Holds a session's lock for one call and keeps the reaper off it meanwhile."""

    def __init__(self, session: Session):
        self.session = session

    async def __aenter__(self) -> Session:
        self.session.busy += 1
        await self.session.lock.acquire()
        if self.session.closed:  # closed (expired) while this call waited for the lock
            self.session.lock.release()
            self.session.busy -= 1
            raise ServiceError(ErrorCode.UNKNOWN_SESSION, self.session.closed_reason)
        self.session.touch()
        return self.session

    async def __aexit__(self, *exc: object) -> None:
        self.session.touch()
        self.session.lock.release()
        self.session.busy -= 1
