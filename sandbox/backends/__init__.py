"""Backend selection: one process-wide default, chosen by config or ``COA_SANDBOX_BACKEND``.

Names: ``pool`` (warm fork-per-run workers in namespaces; the default where the kernel
allows it), ``bwrap`` (bubblewrap), ``nsjail``, ``docker``, and ``subprocess`` (no isolation).
``auto`` (the default) picks the first isolating backend that starts here: ``pool``, then
``bwrap``, then ``nsjail``. It never falls back to ``subprocess``: when none starts it raises
:class:`BackendUnavailable` saying why each failed, and running untrusted code unisolated takes
an explicit ``COA_SANDBOX_BACKEND=subprocess`` (or ``configure("subprocess")``), which is
logged and shown by ``coa list`` and ``coa bench`` (:func:`unisolated_warning`).
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
    "AUTO_ORDER",
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "configure",
    "configured_name",
    "default_backend",
    "get_backend",
    "reset_default",
    "unisolated_warning",
    "unsupported_by",
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

#: What ``auto`` tries, in order: isolating backends only.
AUTO_ORDER = ("pool", "bwrap", "nsjail")
UNISOLATED = "subprocess"

_lock = threading.Lock()
_default: Backend | None = None
_default_pid = 0  # a forked child must not share its parent's worker pipes


def get_backend(name: str = "auto", **options: Any) -> Backend:
    """A new backend instance. Raises :class:`BackendUnavailable` when it cannot run here."""
    if name == "auto":
        reasons = []
        # Pool options (size, preload) are the pool's; what the root holds is every backend's.
        shared = {key: options[key] for key in ("python", "read_only_paths", "writable_paths", "accounting")
                  if key in options}  # fmt: skip
        for candidate in AUTO_ORDER:
            try:
                backend = get_backend(candidate, **(options if candidate == "pool" else shared))
            except (BackendUnavailable, ImportError) as exc:
                reasons.append(f"{candidate}: {exc}")
                continue
            if reasons:
                _log.warning("sandbox: using %r (%s)", candidate, "; ".join(reasons))
            return backend
        raise BackendUnavailable(
            "no isolating sandbox backend works here (" + "; ".join(reasons) + "). Model code is untrusted: "
            f"to run it WITHOUT isolation anyway, opt in with COA_SANDBOX_BACKEND={UNISOLATED} "
            f"or sandbox.configure({UNISOLATED!r})"
        )
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)}")
    module_name, class_name = BACKENDS[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**options)


def unsupported_by(name: str | None, limits: Any) -> list[str]:
    """What backend ``name`` would refuse of ``limits``, known without starting it (the pool's
    and sessions' rule: no network); empty for an unknown (None) or permissive backend."""
    if name == "pool":
        from sandbox.backends.pool import pool_unsupported

        return pool_unsupported(limits)
    return []


def configured_name() -> str:
    """The default backend's name as configured (``auto`` unless set), without starting it."""
    if _default is not None and _default_pid == os.getpid():
        return _default.name
    return os.environ.get("COA_SANDBOX_BACKEND", "auto")


def unisolated_warning() -> str | None:
    """A warning when the default backend is the unisolated one (for ``coa list``/``coa bench``)."""
    if configured_name() != UNISOLATED:
        return None
    from sandbox.backends.subprocess_backend import UNISOLATED_WARNING

    return f"{UNISOLATED_WARNING} (chosen by {'configure()' if _default is not None else 'COA_SANDBOX_BACKEND'})"


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
