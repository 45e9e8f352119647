"""Backend selection: one process-wide default, chosen by config or ``COA_SANDBOX_BACKEND``.

Names: ``pool`` (warm fork-per-run workers in namespaces; the default where the kernel
allows it), ``subprocess`` (weak, logged), ``bwrap`` (bubblewrap), ``nsjail``, ``docker``.
``auto`` picks ``pool`` and falls back to ``subprocess`` with a warning.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
from typing import Any

from sandbox.backends.base import Backend, BackendUnavailable

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "configure",
    "default_backend",
    "get_backend",
    "reset_default",
]

_log = logging.getLogger(__name__)

#: name -> (module, class). Imported lazily so e.g. the docker SDK loads only when asked for.
BACKENDS: dict[str, tuple[str, str]] = {
    "subprocess": ("sandbox.backends.subprocess_backend", "SubprocessBackend"),
    "pool": ("sandbox.backends.pool", "PoolBackend"),
    "bwrap": ("sandbox.backends.bwrap", "BwrapBackend"),
    "nsjail": ("sandbox.backends.nsjail", "NsjailBackend"),
    "docker": ("sandbox.backends.docker_backend", "DockerBackend"),
}

_lock = threading.Lock()
_default: Backend | None = None
_default_pid = 0  # a forked child must not share its parent's worker pipes


def get_backend(name: str = "auto", **options: Any) -> Backend:
    """A new backend instance. Raises :class:`BackendUnavailable` when it cannot run here."""
    if name == "auto":
        try:
            return get_backend("pool", **options)
        except (BackendUnavailable, ImportError) as exc:
            _log.warning("sandbox: pool backend unavailable (%s); falling back to subprocess", exc)
            return get_backend("subprocess")
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)}")
    module_name, class_name = BACKENDS[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**options)


def configure(name: str | None = None, **options: Any) -> Backend:
    """Replace the process-wide default backend (closing the previous one) and return it."""
    global _default, _default_pid
    with _lock:
        old = _default if _default_pid == os.getpid() else None
        _default = get_backend(name or os.environ.get("COA_SANDBOX_BACKEND", "auto"), **options)
        _default_pid = os.getpid()
    if old is not None:
        old.close()
    return _default


def default_backend() -> Backend:
    """The process-wide backend, created on first use from ``COA_SANDBOX_BACKEND``.

    After ``fork`` the child builds its own: pipes to the parent's workers are not shareable.
    """
    global _default, _default_pid
    if _default is None or _default_pid != os.getpid():
        with _lock:
            if _default is None or _default_pid != os.getpid():
                _default = get_backend(os.environ.get("COA_SANDBOX_BACKEND", "auto"))
                _default_pid = os.getpid()
    return _default


def reset_default() -> None:
    """Close the default backend; the next :func:`default_backend` call builds a new one."""
    global _default
    with _lock:
        old, _default = _default, None
    if old is not None and _default_pid == os.getpid():
        old.close()


atexit.register(reset_default)
