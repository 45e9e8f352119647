"""A pool worker: a warm interpreter that forks one jailed child per run.

Started by :mod:`sandbox.backends.pool` as ``python -I -c ...`` with two pipes (requests on
stdin, answers on stdout, JSON frames). At start it enters its jail (see :mod:`sandbox._jail`),
imports the preloaded modules once, then keeps one child *prepared*: forked into fresh
namespaces, scratch space mounted, privileges dropped, seccomp loaded, waiting for code. A
request is answered by handing the code to that child, so the fork and the namespace setup are
paid between runs rather than during one. The forked child keeps the worker's imported modules
in memory, which is how an unprivileged child uses numpy that lives under an unreadable ``/root``.

Run children are not forked from the worker but from its zygote (see :mod:`sandbox._zygote`),
which never holds a request or an answer: a run cannot find earlier runs' data in the memory
it inherits. The scratch space's quotas (``Limits.disk_mb``, ``Limits.max_files``) are mounted
before the request is known: the child is prepared with the last request's quotas, and a request asking for
other ones is handed back (``X`` on the status pipe) and given to a child prepared for it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from sandbox import _jail
from sandbox._child import install_standard_streams
from sandbox._collect import Collected, classify, collect, hard_output_cap, quota_note, to_text
from sandbox._harness import install_process_limit_markers
from sandbox._limits import count_processes_of, scratch_profile, shares_process_budget_in_user_namespace
from sandbox._root import RootPolicy
from sandbox._wire import FrameError, read_frame, write_frame
from sandbox._zygote import READY, ChildMaker, Zygote
from sandbox.types import Limits

__all__ = ["main"]

_STARTED, _REDO = b"S", b"X"
_PREPARE_TIMEOUT_S = 10.0
# A child past its end record is only exiting (a few ms): killing it then costs nothing, and a run
# that forged the record to stop being watched gets no more than this before it dies.
_EXIT_GRACE_S = 0.05


@dataclass(slots=True)
class _Prepared:
    pid: int
    pidfd: int
    req_w: int
    out_r: int
    err_r: int
    status_r: int
    done_r: int = -1  # session children only: one frame per finished cell
    ready: bool = False
    workdir: str | None = None  # unjailed children only: a host directory removed after the run

    def close(self) -> None:
        for fd in (self.req_w, self.out_r, self.err_r, self.status_r, self.done_r, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.workdir is not None:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)


class Worker:
    """State of one worker process; see the module docstring."""

    def __init__(self, config: dict[str, Any], control_in: int) -> None:
        self.control_in = control_in
        self.uid = int(config.get("uid", 0))
        self.session = config.get("mode") == "session"
        self.jail = bool(config.get("jail", True))
        self.scratch_root = config.get("scratch_root")  # unjailed only: where run workdirs go
        #: (disk_mb, max_files) the next child's scratch space is mounted with.
        self.profile: tuple[int, int] = tuple(config.get("profile", scratch_profile(Limits())))  # type: ignore[assignment]
        self.notes: list[str] = []
        self.seccomp = None
        # Not root: every run keeps the caller's real uid, whose other processes count against
        # the runs' RLIMIT_NPROC too (see _limits.shares_process_budget for user namespaces).
        self.shared_uid = os.geteuid() != 0
        if self.jail:
            policy = RootPolicy(**{k: _tuples(v) for k, v in config["policy"].items()})
            self.carry = policy.below_scratch()
            # Compiled before the root is swapped: libseccomp is found through ldconfig.
            self.seccomp = _jail.compile_seccomp(allow_network=False) if config.get("seccomp") else None
            self.isolation = _jail.isolate_worker(policy)
            # Entered by every run child (see _jail.enter_run); the first prepared child proves it.
            self.isolation += [*_jail.PER_RUN_LAYERS, "private /tmp and workdir per run (byte and inode quotas)"]
            if "user namespace" in self.isolation:
                self.uid = 0  # only our own uid is mapped: runs keep it, minus every capability
                self.shared_uid = shares_process_budget_in_user_namespace()
            self.isolation.append("seccomp filter" if self.seccomp else "no seccomp (pyseccomp absent)")
            self.isolation += [f"uid {self.uid}" if self.uid else "no capabilities", "no_new_privs"]
        else:
            self.carry = ()
            self.isolation = ["no isolation (rlimits and wall-clock kill only)"]
        for name in config.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception as exc:  # a missing optional module must not stop the pool
                self.notes.append(f"preload {name} skipped: {type(exc).__name__}: {exc}")
        install_process_limit_markers()  # once here rather than in every child
        install_standard_streams()
        self.isolation += ["rlimits", "wall-clock kill", "runs forked from a zygote that never sees run data"]
        self.prepared: _Prepared | None = None
        self.current: _Prepared | None = None  # the live session child, between cells
        self.exiting: _Prepared | None = None  # answered for, not yet reaped
        self.lost_state = False  # the last session child died: the next cell starts afresh
        gc.freeze()  # keep the collector from touching (and so copying) inherited objects
        maker = ChildMaker(
            jail=self.jail,
            session=self.session,
            uid=self.uid,
            carry=self.carry,
            seccomp=self.seccomp,
            control_in=control_in,
            pid_ns_fd=os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC),
            setns_works=self.jail,
        )
        self.zygote = Zygote.start(maker, keep={control_in})  # before any run: its memory stays clean
        os.close(maker.pid_ns_fd)

    # -- the jailed child ---------------------------------------------------------------
    def prepare(self, private_request: bool = False) -> _Prepared:
        # A run child reads its request straight from the pool's pipe (one hop fewer on every
        # run); a session child, or one taking over a handed-back request, through its own.
        private = self.session or private_request
        req_r, req_w = os.pipe() if private else (-1, -1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        done_r, done_w = os.pipe() if self.session else (-1, -1)
        fds = [fd for fd in (out_w, err_w, status_w, req_r, done_w) if fd >= 0]
        workdir = None if self.jail else tempfile.mkdtemp(prefix="run-", dir=self.scratch_root)
        # Counted here, between runs: the child's own /proc shows only its namespace.
        process_base = count_processes_of(os.getuid()) if self.shared_uid else 0
        meta = {"profile": list(self.profile), "process_base": process_base, "workdir": workdir,
                "private_request": private}  # fmt: skip
        try:
            pid = self.zygote.spawn(meta, fds)
        finally:
            for fd in fds:
                os.close(fd)
        return _Prepared(pid, os.pidfd_open(pid), req_w, out_r, err_r, status_r, done_r, workdir=workdir)

    def _take_prepared(self, private_request: bool = False) -> _Prepared:
        for attempt in range(2):
            if private_request:
                prepared = self.prepare(private_request=True)
            else:
                prepared, self.prepared = self.prepared or self.prepare(), None
            if prepared.ready:
                return prepared
            if select.select([prepared.status_r], [], [], _PREPARE_TIMEOUT_S)[0]:
                first = os.read(prepared.status_r, 1)
                if first == READY:
                    prepared.ready = True
                    return prepared
                detail = os.read(prepared.status_r, 1000).decode(errors="replace")
            else:
                detail = "child did not become ready"
            self._discard(prepared)
            if attempt:
                raise RuntimeError(f"cannot prepare a jailed child: {detail}")
        raise AssertionError("unreachable")

    def _discard(self, prepared: _Prepared) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(prepared.pid, signal.SIGKILL)
        self.zygote.reap(prepared.pid)
        prepared.close()

    # -- requests -----------------------------------------------------------------------
    def _await_start(self, child: _Prepared) -> tuple[bytes, dict[str, Any], bytes] | None:
        """Block until the child has read a request (its ``S`` or ``X`` line) or has exited.

        Returns the marker, the line's JSON (``S``: the request's id and limits; ``X``: the whole
        request, handed back because it asks for other scratch quotas than the child has) and
        whatever the run already wrote after it on the status pipe: a fast run may tag itself
        (``V``, ``M``) before we read the line.
        """
        select.select([child.status_r, child.pidfd], [], [])
        try:
            marker = os.read(child.status_r, 1)
        except BlockingIOError:
            marker = b""
        if marker not in (_STARTED, _REDO):
            return None  # "E": the pool closed our pipe; nothing: the child died
        data = b""
        while b"\n" not in data:
            chunk = os.read(child.status_r, 1 << 16)
            if not chunk:
                return None
            data += chunk
        line, _, rest = data.partition(b"\n")
        return marker, json.loads(line), rest

    def _start_run(self) -> tuple[_Prepared, dict[str, Any], bytes] | None:
        """The child that took the next request, with its start line; None when the pool left.

        A request handed back for other quotas goes to a child prepared with them; later
        children keep them (a caller usually sends the same limits every time).
        """
        child = self._take_prepared()  # it now blocks on the pool's pipe, not us
        started = self._await_start(child)
        if started is None:
            self._discard(child)
            return None
        marker, payload, early_tags = started
        if marker == _STARTED:
            return child, payload, early_tags
        self._discard(child)
        self.profile = scratch_profile(Limits(**payload["limits"]))
        child = self._take_prepared(private_request=True)
        write_frame(child.req_w, payload)
        started = self._await_start(child)
        if started is None or started[0] != _STARTED:
            self._discard(child)
            raise RuntimeError("a child prepared for the request's quotas did not start it")
        return child, started[1], started[2]

    def run(self, child: _Prepared, start: dict[str, Any], early_tags: bytes = b"") -> dict[str, Any]:
        """Watch a run the child has started: output, wall clock, then reap it.

        A child that wrote its end record has finished its work: the answer goes out at once
        and :meth:`finish_exiting` reaps it after the answer, off the caller's clock.
        """
        limits = Limits(**start["limits"])
        started = time.monotonic()
        try:
            collected = self._collect(child, child.pidfd, started, limits, True, early_tags)
            if collected.end is not None:
                self.exiting = child
                returncode, cpu_s = collected.end
                return _result(collected, returncode, cpu_s, limits, started)
            select.select([child.pidfd], [], [])  # exited (collect waited for it or killed it)
            wait_status, cpu_s = self.zygote.reap(child.pid)
        except BaseException:
            self.exiting = None
            self._discard(child)
            raise
        child.close()
        return _result(collected, os.waitstatus_to_exitcode(wait_status), cpu_s, limits, started)

    def finish_exiting(self) -> None:
        """Reap the child answered for by its end record; kill it if it lingers (its namespace
        and every process left in it die with it)."""
        child, self.exiting = self.exiting, None
        if child is None:
            return
        if not select.select([child.pidfd], [], [], _EXIT_GRACE_S)[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            select.select([child.pidfd], [], [])  # gone before the next child is forked
        child.close()  # the zygote reaps it before its next fork

    def _collect(
        self,
        child: _Prepared,
        done_fd: int,
        started: float,
        limits: Limits,
        stop_at_end_record: bool = False,
        status_seen: bytes = b"",
    ) -> Collected:
        return collect(
            child.out_r,
            child.err_r,
            child.status_r,
            done_fd,
            started + limits.wall_s,
            hard_output_cap(limits),
            lambda: os.kill(child.pid, signal.SIGKILL),  # PID 1: its whole namespace dies
            stop_at_end_record,
            status_seen,
        )

    def cell(self, request: dict[str, Any]) -> dict[str, Any]:
        """One cell of a session: state persists in ``self.current`` until it dies."""
        limits = Limits(**request["limits"])
        restarted, self.lost_state = self.lost_state, False
        child = self.current = self.current or self._take_prepared()
        started = time.monotonic()
        with contextlib.suppress(BrokenPipeError):
            write_frame(child.req_w, request)
        collected = self._collect(child, child.done_r, started, limits)
        done = None
        if not (collected.wall_killed or collected.output_killed):
            with contextlib.suppress(FrameError, OSError):
                done = read_frame(child.done_r, time.monotonic() + 5)
        if done is None:  # the cell killed the session (or we did): report how it died
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            wait_status, cpu_s = self.zygote.reap(child.pid)
            child.close()
            self.current, self.lost_state = None, True
            returncode = os.waitstatus_to_exitcode(wait_status)
        else:
            returncode, cpu_s = int(done["rc"]), float(done["cpu_s"])
        response = _result(collected, returncode, cpu_s, limits, started)
        response["session_restarted"] = restarted
        response["session_alive"] = self.current is not None
        return response

    def reset(self) -> dict[str, Any]:
        if self.current is not None:
            self._discard(self.current)
            self.current = None
        self.lost_state = False
        return {"reset": True}

    def serve(self, control_out: int) -> None:
        if self.session:
            self._serve_session(control_out)
            return
        while True:
            try:
                started = self._start_run()
            except RuntimeError as exc:  # cannot prepare a child: the pool replaces us
                with contextlib.suppress(OSError):
                    write_frame(control_out, {"id": None, "internal_error": str(exc)})
                break
            if started is None:
                break
            child, start, early_tags = started
            response: dict[str, Any] = {"id": start.get("id")}
            try:
                response.update(self.run(child, start, early_tags))
            except Exception as exc:
                response["internal_error"] = f"{type(exc).__name__}: {exc}"
            write_frame(control_out, response)
            self.finish_exiting()  # off the caller's clock, like the next child's set-up
            self.prepared = self.prepare()

    def _serve_session(self, control_out: int) -> None:
        while True:
            if self.prepared is None and self.current is None:
                self.prepared = self.prepare()  # between requests, off the caller's clock
            try:
                request = read_frame(self.control_in)
            except FrameError:
                break
            response = {"id": request.get("id")}
            op = request.get("op")
            try:
                if op == "cell":
                    response.update(self.cell(request))
                elif op == "reset":
                    response.update(self.reset())
                else:
                    response["internal_error"] = f"operation {op!r} not served by a session worker"
            except Exception as exc:
                response["internal_error"] = f"{type(exc).__name__}: {exc}"
            write_frame(control_out, response)
        for child in (self.prepared, self.current):
            if child is not None:
                self._discard(child)


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples a frozen dataclass holds."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


def _result(collected: Collected, returncode: int, cpu_s: float, limits: Limits, started: float) -> dict[str, Any]:
    stdout, cut_out = to_text(collected.stdout, limits.max_output_chars)
    stderr, cut_err = to_text(collected.stderr, limits.max_output_chars)
    return {
        "stdout": stdout,
        "stderr": stderr + quota_note(collected.tags, limits, returncode).decode(),
        "exit_code": returncode,
        "status": classify(returncode, collected, cpu_s, limits).value,
        "wall_s": time.monotonic() - started,
        "cpu_s": cpu_s,
        "truncated": cut_out or cut_err or collected.output_killed,
    }


def main() -> None:
    """Entry point: handshake on fds 0/1, then serve until the pool closes the pipe."""
    control_in, control_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for fd in (control_in, control_out):
        os.set_inheritable(fd, False)
    config = read_frame(control_in)
    try:
        try:
            worker = Worker(config, control_in)
            worker.prepared = worker.prepare()
            worker.prepared = worker._take_prepared()  # proves the jail works on this kernel
        except Exception as exc:
            write_frame(control_out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return
        write_frame(
            control_out,
            {"ready": True, "pid": os.getpid(), "isolation": worker.isolation, "notes": worker.notes},
        )
        try:
            worker.serve(control_out)
        finally:
            worker.zygote.close()
    finally:
        # Unjailed runs worked below this host directory; the handle removes it too, but not if
        # its process is gone first (a spare worker still starting when its caller exits).
        if config.get("scratch_root"):
            import shutil

            shutil.rmtree(config["scratch_root"], ignore_errors=True)
