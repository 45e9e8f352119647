"""The default backend: a pool of warm, pre-forking, jailed Python workers.

Each worker (see :mod:`sandbox._worker`) imports the preloaded modules once and keeps one
jailed child ready; a run costs a pipe round trip plus the child's own work. This module is
the parent side: it starts workers, hands each run to an idle one, and replaces a worker
that dies or stops answering. Every :meth:`PoolBackend.run` call returns exactly one
result: answers carry the request id, a lost worker's run is retried once on a fresh worker,
and a run that kills two workers is reported as a ``violation``.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import sys
import threading
from dataclasses import asdict
from typing import Any

from sandbox._accounting import resolve_accounting
from sandbox._limits import scratch_profile
from sandbox._root import Grants, root_policy
from sandbox._uids import lease_uids
from sandbox._workerproc import WorkerLost, WorkerProcess
from sandbox.backends.base import BackendUnavailable, refuse_unsendable, refuse_unsupported
from sandbox.types import ExecResult, Limits, Status

__all__ = ["DEFAULT_PRELOAD", "PoolBackend", "configured_preload", "configured_size", "pool_unsupported", "result_from"]

_log = logging.getLogger(__name__)
#: Imported once per worker. numpy is the expensive one; the rest keep common solutions from
#: reading the standard library from disk in every run.
DEFAULT_PRELOAD = (
    "numpy",
    "numpy.random",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "math",
    "re",
    "string",
    "random",
    "typing",
    "dataclasses",
    "fractions",
    "decimal",
    "statistics",
    "copy",
    "operator",
    "json",
    "array",
    "datetime",
    "threading",
    "traceback",
)
_GRACE_S = 10.0  # the worker enforces the wall limit; this only catches a wedged worker


def pool_unsupported(limits: Limits) -> list[str]:
    """What the pool (and a jailed session) cannot honour: network access, which it never grants."""
    if limits.network:
        return ["network=True: runs get an empty network namespace; use the bwrap, nsjail or docker backend"]
    return []


def result_from(response: dict[str, Any], stderr_prefix: str = "") -> ExecResult:
    """The :class:`ExecResult` a worker's answer describes (pool runs and session cells)."""
    return ExecResult(
        stdout=response["stdout"],
        stderr=stderr_prefix + response["stderr"],
        exit_code=response["exit_code"],
        status=Status(response["status"]),
        wall_s=response["wall_s"],
        cpu_s=response["cpu_s"],
        truncated=response["truncated"],
        limit_hit=response.get("limit_hit"),
    )


def configured_preload() -> tuple[str, ...]:
    """Modules to preload: ``COA_SANDBOX_PRELOAD`` if set, else :data:`DEFAULT_PRELOAD`.

    The variable is a comma-separated list; a leading ``+`` adds to the default list
    (``+sympy`` makes every run find sympy already imported, at ~1 s more per worker start).
    """
    value = os.environ.get("COA_SANDBOX_PRELOAD")
    if value is None:
        return DEFAULT_PRELOAD
    names = tuple(name.strip() for name in value.lstrip("+").split(",") if name.strip())
    return DEFAULT_PRELOAD + names if value.startswith("+") else names


def configured_size() -> int:
    """Workers in a pool: ``COA_SANDBOX_POOL_SIZE`` if set, else twice the CPU count."""
    value = os.environ.get("COA_SANDBOX_POOL_SIZE", "").strip()
    if value:
        size = int(value)
        if size < 1:
            raise ValueError(f"COA_SANDBOX_POOL_SIZE must be >= 1, got {value!r}")
        return size
    return max(2, 2 * (os.cpu_count() or 1))


class PoolBackend:
    """Warm fork-per-run workers in namespaces (see the module docstring).

    ``size`` workers (default ``COA_SANDBOX_POOL_SIZE`` or ``2 × cpu_count``) run as
    root-owned processes; each run's child becomes its slot's uid, leased for this pool alone
    (no other pool, session or backend on the host uses it meanwhile; ``uid_base`` pins them to
    ``uid_base + slot`` instead), so concurrent runs cannot touch each other or use up each
    other's process budget. ``accounting``: ``cgroup`` (default, or ``COA_SANDBOX_ACCOUNTING``):
    one cgroup per run; ``process``: per-process limits, the explicit choice where no cgroup can
    be made (see :mod:`sandbox._accounting`). ``preload`` defaults to :func:`configured_preload`.
    Runs see the allowlist root (:mod:`sandbox._root`) plus ``read_only_paths`` and
    ``writable_paths`` (checked here: a path that does not exist or may not be granted is a
    ``ValueError``; a writable one must be writable by the run uids).
    """

    name = "pool"

    def __init__(
        self,
        size: int | None = None,
        *,
        preload: tuple[str, ...] | list[str] | None = None,
        python: str | None = None,
        uid_base: int | None = None,
        read_only_paths: tuple[str, ...] | list[str] = (),
        writable_paths: tuple[str, ...] | list[str] = (),
        seccomp: bool = True,
        start_timeout_s: float = 60.0,
        accounting: str | None = None,
    ) -> None:
        if not sys.platform.startswith("linux"):
            raise BackendUnavailable("the pool backend needs Linux namespaces")
        self.size = size or configured_size()
        self.accounting = resolve_accounting(accounting)
        preload = configured_preload() if preload is None else tuple(preload)
        self.preload = preload
        self.python = python or sys.executable
        self._start_timeout_s = start_timeout_s
        self.grants = Grants(tuple(read_only_paths), tuple(writable_paths))
        try:
            self.root = root_policy(self.python, self.grants)
        except OSError as exc:
            raise BackendUnavailable(str(exc)) from exc
        self._uid_lease = None if uid_base is not None else lease_uids(self.size)
        uids = [uid_base + slot for slot in range(self.size)] if uid_base is not None else self._uid_lease.uids
        self._configs = [
            {
                "uid": uids[slot],
                "accounting": self.accounting,
                "preload": list(preload),
                "policy": asdict(self.root),
                "profile": list(scratch_profile(Limits())),
                "seccomp": seccomp,
                "slot": slot,
            }
            for slot in range(self.size)
        ]
        self._ids = itertools.count(1)
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._workers: dict[int, WorkerProcess] = {}
        self._lock = threading.Lock()
        self._closed = False
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.size) as starter:
            futures = [starter.submit(self._start, config) for config in self._configs]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            self.close()
            raise BackendUnavailable(str(errors[0]))
        first = next(iter(self._workers.values()))
        self.isolation = tuple(first.isolation)
        self._owner_pid = os.getpid()
        _log.info("sandbox pool: %d workers; isolation: %s", self.size, ", ".join(self.isolation))
        for note in first.notes:
            _log.info("sandbox pool: %s", note)

    def _start(self, config: dict[str, Any]) -> WorkerProcess:
        worker = WorkerProcess(self.python, config, self._start_timeout_s)
        with self._lock:
            if self._closed:
                worker.stop()
                raise BackendUnavailable("pool closed while starting")
            self._workers[config["slot"]] = worker
        self._idle.put(worker)
        return worker

    def worker_pids(self) -> list[int]:
        """Host pids of the live workers (tests use them as attack targets)."""
        with self._lock:
            return [w.pid for w in self._workers.values()]

    def uids(self) -> list[int]:
        """The unprivileged uids runs execute as, one per worker slot."""
        return [config["uid"] for config in self._configs]

    def _acquire(self) -> WorkerProcess:
        if os.getpid() != self._owner_pid:
            raise BackendUnavailable("this pool belongs to the parent process; build one after fork")
        while True:
            if self._closed:
                raise BackendUnavailable("sandbox pool is closed")
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                with self._lock:
                    if not self._workers:
                        raise BackendUnavailable("sandbox pool has no live workers") from None

    def _replace(self, worker: WorkerProcess) -> None:
        slot = worker.config["slot"]
        worker.kill()
        with self._lock:
            if self._workers.get(slot) is worker:
                del self._workers[slot]
        if self._closed:
            return
        try:
            self._start(self._configs[slot])
        except BackendUnavailable as exc:
            _log.error("sandbox pool: could not replace worker %d: %s", slot, exc)

    def unsupported(self, limits: Limits) -> list[str]:
        return pool_unsupported(limits)

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        refuse_unsupported(self.name, self.unsupported(limits))
        refuse_unsendable(code, stdin)
        request = {"code": code, "stdin": stdin or "", "limits": asdict(limits)}
        lost = ""
        for _attempt in range(2):
            request["id"] = next(self._ids)
            worker = self._acquire()
            try:
                response = worker.call(request, limits.wall_s + _GRACE_S)
            except WorkerLost as exc:
                lost = str(exc)
                _log.warning("sandbox pool: worker %d lost (%s); replacing", worker.pid, lost)
                self._replace(worker)
                continue
            except BaseException:  # (an interrupt mid-call): its pipes' state is unknown, and it is ours
                threading.Thread(target=self._replace, args=(worker,), daemon=True).start()
                raise
            self._idle.put(worker)
            return result_from(response)
        return ExecResult(
            "", f"sandbox: this run broke two workers ({lost})", None, Status.VIOLATION, limits.wall_s, 0.0
        )

    def close(self) -> None:
        if getattr(self, "_owner_pid", os.getpid()) != os.getpid():
            return  # a forked child must not stop its parent's workers
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.stop()
        lease, self._uid_lease = getattr(self, "_uid_lease", None), None
        if lease is not None:
            lease.release()
