"""Stateful, notebook-like execution: variables persist from one ``run`` to the next.

A :class:`Session` owns one dedicated worker process (in ``session`` mode) whose jailed
child keeps a single ``__main__`` namespace for the whole episode, in the same allowlist root
as the pool's runs (plus the session's ``read_only_paths``/``writable_paths``). Each cell has
its own wall-clock and CPU limits; the scratch space's quotas (``disk_mb``, ``max_files``) are
the session's, fixed when it starts. A cell that times out, exhausts memory or kills its
process loses the session's state, and the next cell starts from a fresh namespace (its result
says so in ``stderr``). Starting a worker costs an interpreter start plus the preloaded imports,
so one spare worker is kept warm in the background and handed to the next new session.
Without namespaces a session refuses to start unless ``jail=False`` asks for the unisolated mode.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import queue
import sys
import threading
from dataclasses import asdict

from sandbox._accounting import resolve_accounting
from sandbox._limits import scratch_profile
from sandbox._root import Grants, root_policy
from sandbox._uids import lease_uids
from sandbox._workerproc import WorkerLost, WorkerProcess
from sandbox.backends.base import BackendUnavailable, refuse_unsendable, refuse_unsupported
from sandbox.backends.pool import configured_preload, pool_unsupported, result_from
from sandbox.types import ExecResult, Limits, Status

__all__ = ["RESTART_NOTE", "Session"]

_log = logging.getLogger(__name__)
RESTART_NOTE = "[sandbox: the previous cell ended the session; earlier variables are gone]\n"
_GRACE_S = 10.0
#: Limits that hold for the whole session, every cell together; ``cpu_s``, ``wall_s`` and
#: ``max_output_chars`` are each cell's (within ``session_cpu_s``).
SESSION_WIDE = ("memory_mb", "max_processes", "max_file_mb", "max_open_files")
_spares: dict[tuple, queue.Queue[WorkerProcess]] = {}
_spares_lock = threading.Lock()


def _config(
    jail: bool, preload: tuple[str, ...], policy: dict, profile: tuple[int, int], seccomp: bool, accounting: str
) -> dict:
    return {
        "mode": "session",
        "jail": jail,
        "accounting": accounting,
        "preload": list(preload),
        "policy": policy,
        "profile": list(profile),
        "seccomp": seccomp,
    }


class Session:
    """One stateful interpreter. Thread-safe; use as a context manager or call :meth:`close`.

    ``jail`` None or True: namespaces (:class:`BackendUnavailable` when the kernel refuses them);
    ``jail=False``: the unisolated mode, an explicit opt-in (logged). ``session_cpu_s`` caps the
    CPU time of the whole session. ``limits``' :data:`SESSION_WIDE` figures and scratch quotas hold
    for the whole session: a cell given other ones is refused (``ValueError``), as they could not
    apply to it. ``read_only_paths``/``writable_paths`` are checked here.
    ``accounting``: as for the pool (one cgroup per session: memory and processes for the
    whole session, CPU per cell; ``process`` is the explicit per-process mode). Every session
    runs as a uid of its own, leased for it alone.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        jail: bool | None = None,
        preload: tuple[str, ...] | list[str] | None = None,
        python: str | None = None,
        read_only_paths: tuple[str, ...] | list[str] = (),
        writable_paths: tuple[str, ...] | list[str] = (),
        seccomp: bool = True,
        session_cpu_s: float = 600.0,
        warm_spare: bool = True,
        start_timeout_s: float = 60.0,
        accounting: str | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.accounting = resolve_accounting(accounting)
        if jail is not False:
            refuse_unsupported("session", pool_unsupported(self.limits))
        self.session_cpu_s = session_cpu_s
        self._python = python or sys.executable
        self._preload = configured_preload() if preload is None else tuple(preload)
        self._seccomp = seccomp
        self._profile = scratch_profile(self.limits)
        self.grants = Grants(tuple(read_only_paths), tuple(writable_paths))
        try:
            self._policy = asdict(root_policy(self._python, self.grants))
        except OSError as exc:
            raise BackendUnavailable(str(exc)) from exc
        self._warm_spare, self._start_timeout_s = warm_spare, start_timeout_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        #: CPU seconds of the session's lost workers (what each had counted, and the cell it was
        #: lost in charged its whole budget), and what the current worker has counted so far: a
        #: replacement worker counts from zero, and would have given the session its budget again.
        self._cpu_of_lost_workers = 0.0
        self._cpu_of_worker = 0.0
        self.jail = jail
        self._worker = self._start()
        self.isolation = tuple(self._worker.isolation)

    # -- worker lifecycle ---------------------------------------------------------------
    def _key(self, jail: bool) -> tuple:
        return (self._python, jail, self._preload, self._profile, self.grants, self._seccomp, self.accounting)

    def _spawn(self, jail: bool) -> WorkerProcess:
        config = _config(jail, self._preload, self._policy, self._profile, self._seccomp, self.accounting)
        lease = lease_uids(1)
        try:
            return WorkerProcess(self._python, {**config, "uid": lease.uids[0]}, self._start_timeout_s, lease)
        except BaseException:
            lease.release()
            raise

    def _start(self) -> WorkerProcess:
        if self.jail is False:
            _log.warning("sandbox session: unjailed (explicit jail=False): no network, file or process isolation")
            return self._take_or_spawn(False)
        try:
            worker = self._take_or_spawn(True)
        except BackendUnavailable as exc:
            raise BackendUnavailable(
                f"{exc}. A session without namespaces is unisolated: pass jail=False to opt in"
            ) from exc
        self.jail = True
        return worker

    def _take_or_spawn(self, jail: bool) -> WorkerProcess:
        key = self._key(jail)
        with _spares_lock:
            spares = _spares.setdefault(key, queue.Queue())
        try:
            worker = spares.get_nowait()
        except queue.Empty:
            worker = self._spawn(jail)
        if self._warm_spare and spares.qsize() == 0:
            threading.Thread(target=self._add_spare, args=(jail, spares), daemon=True).start()
        return worker

    def _add_spare(self, jail: bool, spares: queue.Queue[WorkerProcess]) -> None:
        try:
            spares.put(self._spawn(jail))
        except BackendUnavailable as exc:
            _log.debug("sandbox session: spare worker failed to start: %s", exc)

    # -- cells --------------------------------------------------------------------------
    def run(self, code: str, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Execute one cell; names it defines stay visible to later cells."""
        limits = limits or self.limits
        self._refuse_other_session_limits(limits)
        if self.jail:
            refuse_unsupported("session", pool_unsupported(limits))
        refuse_unsendable(code, stdin)
        request = {
            "op": "cell",
            "code": code,
            "stdin": stdin or "",
            "limits": asdict(limits),
        }
        with self._lock:
            if self._closed:
                raise RuntimeError("session is closed")
            request["id"] = next(self._ids)
            # What is left of the session's budget once lost workers are counted (the worker adds
            # what it spent itself); Limits' smallest time, so that a spent session reads timeout.
            request["session_cpu_s"] = max(0.01, self.session_cpu_s - self._cpu_of_lost_workers)
            try:
                response = self._worker.call(request, limits.wall_s + _GRACE_S)
            except WorkerLost as exc:
                self._replace_lost_worker(charge=min(limits.cpu_s, request["session_cpu_s"]))
                return ExecResult(
                    "", RESTART_NOTE + f"sandbox session worker lost: {exc}\n", None, Status.ERROR, limits.wall_s, 0.0
                )
            self._cpu_of_worker = float(response.get("session_cpu_spent", self._cpu_of_worker))
        return result_from(response, RESTART_NOTE if response.get("session_restarted") else "")

    def _refuse_other_session_limits(self, limits: Limits) -> None:
        """A cell's limits may differ from the session's only in its own: ``cpu_s``, ``wall_s``,
        ``max_output_chars`` (a cell's other figures were silently ignored)."""
        if scratch_profile(limits) != self._profile:
            raise ValueError(
                f"a session's scratch quotas are fixed when it starts (disk_mb={self._profile[0]}, "
                f"max_files={self._profile[1]}); start a new Session for other ones"
            )
        asked = {name: getattr(limits, name) for name in SESSION_WIDE}
        changed = {name: value for name, value in asked.items() if value != getattr(self.limits, name)}
        if changed:
            fixed = ", ".join(f"{name}={getattr(self.limits, name)}" for name in changed)
            raise ValueError(f"a session's {fixed} hold for every cell together (fixed when it starts); a cell "
                             f"asked for {changed}: start a new Session for other ones")

    async def arun(self, code: str, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Async :meth:`run`."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self.run, code, stdin, limits)

    def reset(self) -> None:
        """Forget every variable; the next cell starts from a fresh interpreter state."""
        with self._lock:
            try:
                self._worker.call({"op": "reset", "id": next(self._ids)}, _GRACE_S)
            except WorkerLost:
                self._replace_lost_worker(charge=0.0)

    def _replace_lost_worker(self, charge: float) -> None:
        """A new worker for a lost one, the CPU the lost one counted kept against the session's
        budget, plus ``charge`` (the budget of the cell it was lost in: what it used is unknown)."""
        self._cpu_of_lost_workers += self._cpu_of_worker + charge
        self._cpu_of_worker = 0.0
        self._worker.kill()
        self._worker = self._start()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._worker.stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten session must not leave a worker behind
        if not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):
                self._worker.stop()


def _stop_spares() -> None:
    with _spares_lock:
        queues = list(_spares.values())
    for spares in queues:
        while True:
            try:
                spares.get_nowait().stop()
            except queue.Empty:
                break


atexit.register(_stop_spares)
