"""Idle envs kept for reuse between sessions, bounded.

``coa serve-env`` and ``coa gateway`` build one env per session and, when the session ends,
keep its env for the next session of the same configuration (the env id and its overrides:
the pool key), since clients that open a session per episode would otherwise pay for a build
each time. A client chooses the configuration (its allowed overrides, ``system_prompt`` among
them), so the keys are the client's to multiply: the pool keeps at most ``per_key`` envs of one
configuration and ``total`` in all, and closes the least recently returned ones past that.
Without the total, sessions opened with distinct overrides left one idle env each for ever.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["EnvPool", "close_env"]

log = logging.getLogger(__name__)


def close_env(env: Any) -> None:
    """Close ``env``; a failure is logged, so one env that fails to close stops no other."""
    try:
        env.close()
    except Exception:
        log.exception("closing an env failed")


class EnvPool:
    """Idle envs by configuration key, at most ``per_key`` of a key and ``total`` in all.

    Thread-safe: envs come back from worker threads while the event loop takes them.
    """

    def __init__(self, per_key: int = 16, total: int = 64) -> None:
        if per_key < 0 or total < 0:
            raise ValueError(f"per_key={per_key}, total={total}; a pool size is >= 0")
        self.per_key, self.total = per_key, total
        self._idle: OrderedDict[str, list[Any]] = OrderedDict()  # least recently returned key first
        self._count = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def take(self, key: str) -> Any | None:
        """An idle env of configuration ``key``, or None (build one)."""
        with self._lock:
            envs = self._idle.get(key)
            if not envs:
                return None
            env = envs.pop()
            self._count -= 1
            if not envs:
                del self._idle[key]
            return env

    def put(self, key: str, env: Any) -> None:
        """Keep ``env`` for a later session of ``key``; what no longer fits is closed."""
        evicted: list[Any] = []
        with self._lock:
            envs = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            if len(envs) >= self.per_key:
                evicted.append(env)
            else:
                envs.append(env)
                self._count += 1
            while self._count > self.total:
                oldest_key, oldest = next(iter(self._idle.items()))
                evicted.append(oldest.pop(0))
                self._count -= 1
                if not oldest:
                    del self._idle[oldest_key]
            if not envs and key in self._idle:
                del self._idle[key]
        for stale in evicted:
            close_env(stale)

    def drain(self) -> list[Any]:
        """Every idle env, removed from the pool (the caller closes them)."""
        with self._lock:
            envs = [env for pool in self._idle.values() for env in pool]
            self._idle.clear()
            self._count = 0
        return envs

    def close(self) -> None:
        """Close every idle env."""
        for env in self.drain():
            close_env(env)
