"""A pool worker: a warm interpreter that forks one jailed child per run.

Started by :mod:`sandbox.backends.pool` as ``python -I -c ...`` with two pipes (requests on
stdin, answers on stdout, JSON frames). At start it enters its jail (see :mod:`sandbox._jail`),
imports the preloaded modules once, then keeps one child *prepared*: forked into fresh
namespaces, privileges dropped, seccomp loaded, waiting for code. A request is answered by
handing the code to that child, so the fork and the namespace setup are paid between runs
rather than during one. The forked child keeps the worker's imported modules in memory,
which is how an unprivileged child uses numpy that lives under an unreadable ``/root``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from sandbox import _jail
from sandbox._child import close_all_except, prepare_run, run_once, serve_cells, wait_for_parent
from sandbox._collect import Collected, classify, collect, hard_output_cap, to_text
from sandbox._limits import count_processes_of, shares_process_budget_in_user_namespace
from sandbox._wire import FrameError, read_frame, write_frame
from sandbox.types import Limits

__all__ = ["main"]

_READY, _FAILED, _STARTED = b"R", b"F", b"S"
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

    def close(self) -> None:
        for fd in (self.req_w, self.out_r, self.err_r, self.status_r, self.done_r, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)


class Worker:
    """State of one worker process; see the module docstring."""

    def __init__(self, config: dict[str, Any], control_in: int) -> None:
        self.control_in = control_in
        self.uid = int(config.get("uid", 0))
        self.workdir = config.get("workdir", "/tmp/work")
        self.workdir_mb = int(config.get("workdir_mb", 64))
        self.session = config.get("mode") == "session"
        self.jail = bool(config.get("jail", True))
        self.notes: list[str] = []
        self.seccomp = None
        # Not root: every run keeps the caller's real uid, whose other processes count against
        # the runs' RLIMIT_NPROC too (see _limits.shares_process_budget for user namespaces).
        self.shared_uid = os.geteuid() != 0
        if self.jail:
            keep = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path, *config.get("keep", [])]
            self.isolation = _jail.isolate_worker(config.get("hide", _jail.HIDDEN_DIRS), keep)
            # Entered by every run child (see _jail.enter_run); the first prepared child proves it.
            self.isolation += [*_jail.PER_RUN_LAYERS, f"private {self.workdir_mb} MB workdir per run"]
            if "user namespace" in self.isolation:
                self.uid = 0  # only our own uid is mapped: runs keep it, minus every capability
                self.shared_uid = shares_process_budget_in_user_namespace()
        else:
            self.isolation = ["no isolation (rlimits and wall-clock kill only)"]
        for name in config.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception as exc:  # a missing optional module must not stop the pool
                self.notes.append(f"preload {name} skipped: {type(exc).__name__}: {exc}")
        if self.jail:
            rules = _jail.build_seccomp(allow_network=False) if config.get("seccomp") else None
            self.seccomp = _jail.CompiledFilter.from_pyseccomp(rules) if rules is not None else None
            self.isolation.append("seccomp filter" if self.seccomp else "no seccomp (pyseccomp absent)")
            self.isolation += [f"uid {self.uid}" if self.uid else "no capabilities", "no_new_privs"]
        self.isolation += ["rlimits", "wall-clock kill"]
        self.pid_ns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.setns_works = self.jail
        self.worker_pid = os.getpid()
        self.prepared: _Prepared | None = None
        self.current: _Prepared | None = None  # the live session child, between cells
        self.exiting: _Prepared | None = None  # answered for, not yet reaped
        self.lost_state = False  # the last session child died: the next cell starts afresh
        if self.jail:
            _jail.become_subreaper()
        gc.freeze()  # keep the collector from touching (and so copying) inherited objects

    # -- the jailed child ---------------------------------------------------------------
    def prepare(self) -> _Prepared:
        # A run child reads its request straight from the pool's pipe (one hop fewer on
        # every run); a session child gets its cells from us through a pipe of its own.
        if self.session:
            req_r, req_w = os.pipe()
        else:
            req_r, req_w = self.control_in, -1
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        done_r, done_w = os.pipe() if self.session else (-1, -1)
        fds = (req_r, out_w, err_w, status_w, done_w)
        # Counted here, between runs: the child's own /proc shows only its namespace.
        process_base = count_processes_of(os.getuid()) if self.shared_uid else 0
        pid = self._fork_in_new_pid_namespace(lambda: self._child(*fds, process_base))
        for fd in fds:
            if fd >= 0 and fd != self.control_in:
                os.close(fd)
        return _Prepared(pid, os.pidfd_open(pid), req_w, out_r, err_r, status_r, done_r)

    def _fork_in_new_pid_namespace(self, child: Any) -> int:
        """Fork ``child`` as PID 1 of a new PID namespace; return its pid here.

        As real root one fork does it (``setns`` back to our namespace, then ``unshare``).
        Inside a user namespace ``setns`` is refused, so an intermediate process unshares,
        forks the child and exits; being a subreaper, we inherit the child and can wait on it.
        """
        if self.setns_works:
            try:
                _jail.new_pid_namespace_for_children(self.pid_ns_fd)
            except _jail.JailError:
                self.setns_works = False
        if self.setns_works:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                try:
                    child()
                finally:
                    os._exit(70)
            return pid
        if not self.jail:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                try:
                    child()
                finally:
                    os._exit(70)
            return pid
        relay_r, relay_w = os.pipe()
        middle = os.fork()
        if middle == 0:  # pragma: no cover - runs in the intermediate process
            try:
                _jail.unshare_pid()
                pid = os.fork()
                if pid == 0:
                    os.close(relay_r)
                    os.close(relay_w)
                    child()
                os.write(relay_w, struct.pack("=i", pid))
            finally:
                os._exit(0)
        os.close(relay_w)
        os.waitpid(middle, 0)
        data = os.read(relay_r, 4)
        os.close(relay_r)
        if len(data) != 4:
            raise RuntimeError("could not fork into a new PID namespace")
        return struct.unpack("=i", data)[0]

    def _child(self, req_r: int, out_w: int, err_w: int, status_w: int, done_w: int, process_base: int) -> None:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            close_all_except({req_r, out_w, err_w, status_w, done_w})
            if self.jail:
                if not self.setns_works:
                    wait_for_parent(self.worker_pid)  # see _fork_in_new_pid_namespace
                _jail.enter_run(self.workdir, self.uid, self.workdir_mb)
            else:
                os.makedirs(self.workdir, exist_ok=True)
            os.chdir(self.workdir)
            if self.jail:
                _jail.drop_privileges(self.uid, self.seccomp)
            address_space_base = 0 if self.session else prepare_run(out_w, err_w, self.workdir)
            os.write(status_w, _READY)
        except BaseException as exc:
            os.write(status_w, _FAILED + f"{type(exc).__name__}: {exc}".encode()[:1000])
            os._exit(70)
        if self.session:
            serve_cells(req_r, out_w, err_w, status_w, done_w, self.workdir, process_base)
            os._exit(0)
        run_once(req_r, status_w, address_space_base, process_base)

    def _take_prepared(self) -> _Prepared:
        for attempt in range(2):
            prepared, self.prepared = self.prepared or self.prepare(), None
            if prepared.ready:
                return prepared
            if select.select([prepared.status_r], [], [], _PREPARE_TIMEOUT_S)[0]:
                first = os.read(prepared.status_r, 1)
                if first == _READY:
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
        os.waitpid(prepared.pid, 0)
        prepared.close()

    # -- requests -----------------------------------------------------------------------
    def _await_start(self, child: _Prepared) -> tuple[dict[str, Any], bytes] | None:
        """Block until the child has read a request (its ``S`` line) or has exited.

        Returns the line's request metadata and whatever the run already wrote after it on
        the status pipe: a fast run may tag itself (``V``, ``M``) before we read the line.
        """
        select.select([child.status_r, child.pidfd], [], [])
        try:
            marker = os.read(child.status_r, 1)
        except BlockingIOError:
            marker = b""
        if marker != _STARTED:
            return None  # "E": the pool closed our pipe; nothing: the child died
        data = b""
        while b"\n" not in data:
            chunk = os.read(child.status_r, 4096)
            if not chunk:
                return None
            data += chunk
        line, _, rest = data.partition(b"\n")
        return json.loads(line), rest

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
            _, wait_status, usage = os.wait4(child.pid, 0)
        except BaseException:
            self.exiting = None
            self._discard(child)
            raise
        child.close()
        returncode = os.waitstatus_to_exitcode(wait_status)
        return _result(collected, returncode, usage.ru_utime + usage.ru_stime, limits, started)

    def finish_exiting(self) -> None:
        """Reap the child answered for by its end record; kill it if it lingers (its namespace
        and every process left in it die with it)."""
        child, self.exiting = self.exiting, None
        if child is None:
            return
        if not select.select([child.pidfd], [], [], _EXIT_GRACE_S)[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
        child.close()

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
            _, wait_status, usage = os.wait4(child.pid, 0)
            child.close()
            self.current, self.lost_state = None, True
            returncode, cpu_s = os.waitstatus_to_exitcode(wait_status), usage.ru_utime + usage.ru_stime
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
            child = self._take_prepared()  # it now blocks on the pool's pipe, not us
            started = self._await_start(child)
            if started is None:
                self._discard(child)
                break
            start, early_tags = started
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


def _result(collected: Collected, returncode: int, cpu_s: float, limits: Limits, started: float) -> dict[str, Any]:
    stdout, cut_out = to_text(collected.stdout, limits.max_output_chars)
    stderr, cut_err = to_text(collected.stderr, limits.max_output_chars)
    return {
        "stdout": stdout,
        "stderr": stderr,
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
    worker.serve(control_out)
