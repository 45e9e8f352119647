"""Which accounting a backend uses, and the cgroup homes of its workers and runs.

``cgroup`` (the default): one cgroup per run, so ``memory_mb``, ``cpu_s`` and ``max_processes``
hold for all of a run's processes together and kernel memory counts (see :mod:`sandbox._cgroup`).
``process``: the explicit opt-in for hosts without cgroups: every process of a run gets the
limits as rlimits of its own, so a run that forks can use a multiple of them. A backend asked for
``cgroup`` where none can be made does not start (:class:`BackendUnavailable` saying why and how
to opt in); it never falls back on its own.
"""

from __future__ import annotations

import os

from sandbox._cgroup import Cgroup, CgroupUnavailable
from sandbox._cgroup_probe import sandbox_root
from sandbox.backends.base import BackendUnavailable

__all__ = ["ACCOUNTING_MODES", "PROCESS_MODE_NOTE", "cgroup_layer", "new_home", "resolve_accounting", "worker_home"]

ACCOUNTING_MODES = ("cgroup", "process")
#: A pool or session worker's own limits: it holds the preloaded interpreter and one run's
#: answer at a time (frames from runs are capped far below this).
WORKER_MEMORY_MB = 2048
WORKER_PROCESSES = 64
PROCESS_MODE_NOTE = "per-process limits (explicit accounting='process'): a run that forks can use a multiple"


def cgroup_layer(version: int) -> str:
    """How the cgroup mode is named in a backend's ``isolation``."""
    return f"cgroup v{version} per run (memory incl. kernel memory, processes, CPU time)"


def resolve_accounting(accounting: str | None) -> str:
    """``accounting`` as given, else ``COA_SANDBOX_ACCOUNTING``, else ``cgroup``."""
    value = accounting or os.environ.get("COA_SANDBOX_ACCOUNTING", "").strip() or "cgroup"
    if value not in ACCOUNTING_MODES:
        raise ValueError(f"sandbox accounting must be one of {ACCOUNTING_MODES}, got {value!r}")
    return value


def new_home(backend: str) -> Cgroup:
    """A fresh cgroup below this process's sandbox root, for one worker's or backend's runs."""
    try:
        root = sandbox_root()
        return root.child(root.new_name("home"), delegate=True)
    except (CgroupUnavailable, OSError) as exc:
        raise BackendUnavailable(
            f"the {backend!r} sandbox backend enforces memory_mb, cpu_s and max_processes per run with a cgroup, "
            f"and none can be made here ({exc}). To run with per-process limits instead (each process of a run "
            "gets them for itself, so a run that forks can use a multiple), pass accounting='process' or set "
            "COA_SANDBOX_ACCOUNTING=process"
        ) from exc


def worker_home(backend: str) -> tuple[Cgroup, dict]:
    """A home for a pool or session worker, its ``worker`` leaf limited, and the config the
    worker needs to join the leaf and make its runs' cgroups in the home."""
    home = new_home(backend)
    try:
        leaf = home.child("worker")
        leaf.set_limits(WORKER_MEMORY_MB, WORKER_PROCESSES)
        config = {"version": home.version, "home": dict(home.paths), "worker": dict(leaf.paths)}
        leaf.close()
    except OSError as exc:
        home.remove_tree()
        raise BackendUnavailable(f"cannot make the {backend!r} worker's cgroup: {exc}") from exc
    return home, config
