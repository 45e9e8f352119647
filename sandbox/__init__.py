"""Isolated execution of untrusted, model-written code.

One API whatever the backend: ``run(code, stdin=None, limits=Limits()) -> ExecResult``, its
``await arun(...)`` twin, and :class:`Session` for notebook-style multi-cell execution
(``with Session() as s: s.run("x = 1"); s.run("print(x)")``).
The backend comes from :func:`configure` or the ``COA_SANDBOX_BACKEND`` environment
variable (``pool`` | ``subprocess`` | ``bwrap`` | ``nsjail`` | ``docker`` | ``auto``); the
pool's size and preloaded modules from ``configure("pool", size=..., preload=...)`` or
``COA_SANDBOX_POOL_SIZE`` / ``COA_SANDBOX_PRELOAD`` (comma-separated, ``+sympy`` appends).
This package imports nothing from the rest of the project.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sandbox.backends import BackendUnavailable, configure, default_backend, get_backend
from sandbox.session import Session
from sandbox.types import NSJAIL_SEED_PRESET, PRESETS, ExecResult, Limits, Status

__all__ = [
    "NSJAIL_SEED_PRESET",
    "PRESETS",
    "BackendUnavailable",
    "ExecResult",
    "Limits",
    "Session",
    "Status",
    "arun",
    "configure",
    "default_backend",
    "get_backend",
    "run",
]

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def run(code: str, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
    """Run ``code`` with the default backend (see :mod:`sandbox.backends`)."""
    return default_backend().run(code, stdin=stdin, limits=limits or Limits())


def _async_executor() -> ThreadPoolExecutor:
    # A dedicated executor: asyncio's default one has only cpu_count + 4 threads, which
    # would cap concurrency far below what the pool can absorb while runs wait on I/O.
    global _executor
    with _executor_lock:
        if _executor is None:
            from concurrent.futures import ThreadPoolExecutor

            _executor = ThreadPoolExecutor(64, thread_name_prefix="sandbox")
        return _executor


async def arun(code: str, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
    """Async :func:`run`: awaits the result without blocking the event loop."""
    import asyncio

    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_async_executor(), run, code, stdin, limits)
