"""Isolated execution of untrusted, model-written code.

One API whatever the backend: ``run(code, stdin=None, limits=Limits()) -> ExecResult``, its
``await arun(...)`` twin, and :class:`Session` for notebook-style multi-cell execution
(``with Session() as s: s.run("x = 1"); s.run("print(x)")``).
The backend comes from :func:`configure` or the ``COA_SANDBOX_BACKEND`` environment
variable (``auto`` | ``pool`` | ``bwrap`` | ``nsjail`` | ``docker`` | ``subprocess``; ``auto``
never picks the unisolated ``subprocess``); the pool's size and preloaded modules from
``configure("pool", size=..., preload=...)`` or ``COA_SANDBOX_POOL_SIZE`` / ``COA_SANDBOX_PRELOAD``
(comma-separated, ``+sympy`` appends). Runs see an allowlist root (see :mod:`sandbox._root`);
:class:`Grants` (``read_only_paths``/``writable_paths``, backend or session options) add host
paths. A backend refuses with :class:`UnsupportedLimits` what it cannot enforce.
This package imports nothing from the rest of the project.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sandbox._root import Grants
from sandbox.backends import BackendUnavailable, configure, default_backend, get_backend, unisolated_warning
from sandbox.session import Session
from sandbox.types import NSJAIL_SEED_PRESET, PRESETS, ExecResult, Limits, Status, UnsupportedLimits

__all__ = [
    "NSJAIL_SEED_PRESET",
    "PRESETS",
    "BackendUnavailable",
    "ExecResult",
    "Grants",
    "Limits",
    "Session",
    "Status",
    "UnsupportedLimits",
    "arun",
    "configure",
    "default_backend",
    "get_backend",
    "run",
    "unisolated_warning",
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
