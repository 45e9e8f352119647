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
import os
import select
import signal
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from sandbox import _jail
from sandbox._collect import classify, collect, hard_output_cap, to_text
from sandbox._harness import execute
from sandbox._limits import apply_rlimits, clean_environment
from sandbox._wire import FrameError, read_frame, write_frame
from sandbox.types import Limits

__all__ = ["main"]

_READY, _FAILED = b"R", b"F"
_PREPARE_TIMEOUT_S = 10.0


@dataclass(slots=True)
class _Prepared:
    pid: int
    pidfd: int
    req_w: int
    out_r: int
    err_r: int
    status_r: int
    ready: bool = False

    def close(self) -> None:
        for fd in (self.req_w, self.out_r, self.err_r, self.status_r, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_all_except(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep | {1 << 20}):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def _wait_for_parent(worker_pid: int, timeout_s: float = 5.0) -> None:
    """Block until we are re-parented to the worker.

    The parent-death signal (set later) fires on *every* re-parenting, so setting it while
    the intermediate process is still alive would kill us the moment it exits.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"PPid:"):
                    if int(line.split()[1]) == worker_pid:
                        return
                    break
        time.sleep(0.0005)
    raise RuntimeError("run child was not re-parented to its worker")


def _vm_size_bytes() -> int:
    with open("/proc/self/status", "rb") as handle:  # binary: no codec import in the child
        for line in handle:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Worker:
    """State of one worker process; see the module docstring."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.uid = int(config["uid"])
        self.workdir = config.get("workdir", "/tmp/work")
        self.workdir_mb = int(config.get("workdir_mb", 64))
        self.notes: list[str] = []
        keep = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path, *config.get("keep", [])]
        self.isolation = _jail.isolate_worker(config.get("hide", ["/root"]), keep)
        if "user namespace" in self.isolation:
            self.uid = 0  # only our own uid is mapped: runs keep it, minus every capability
        for name in config.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception as exc:  # a missing optional module must not stop the pool
                self.notes.append(f"preload {name} skipped: {type(exc).__name__}: {exc}")
        self.seccomp = _jail.build_seccomp(allow_network=False) if config.get("seccomp") else None
        self.isolation.append("seccomp filter" if self.seccomp else "no seccomp (pyseccomp absent)")
        self.isolation += [
            f"uid {self.uid}" if self.uid else "no capabilities",
            "rlimits",
            "no_new_privs",
            "wall-clock kill",
        ]
        self.pid_ns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.setns_works = True
        self.worker_pid = os.getpid()
        _jail.become_subreaper()
        self.prepared: _Prepared | None = None
        gc.freeze()  # keep the collector from touching (and so copying) inherited objects

    # -- the jailed child ---------------------------------------------------------------
    def prepare(self) -> _Prepared:
        req_r, req_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        pid = self._fork_in_new_pid_namespace(lambda: self._child(req_r, out_w, err_w, status_w))
        for fd in (req_r, out_w, err_w, status_w):
            os.close(fd)
        return _Prepared(pid, os.pidfd_open(pid), req_w, out_r, err_r, status_r)

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

    def _child(self, req_r: int, out_w: int, err_w: int, status_w: int) -> None:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            _close_all_except({req_r, out_w, err_w, status_w})
            if not self.setns_works:
                _wait_for_parent(self.worker_pid)  # see _fork_in_new_pid_namespace
            _jail.enter_run(self.workdir, self.uid, self.workdir_mb)
            os.chdir(self.workdir)
            _jail.drop_privileges(self.uid, self.seccomp)
            os.write(status_w, _READY)
        except BaseException as exc:
            os.write(status_w, _FAILED + f"{type(exc).__name__}: {exc}".encode()[:1000])
            os._exit(70)
        try:
            request = read_frame(req_r)
        except FrameError:
            os._exit(0)  # retired before use
        try:
            os.close(req_r)
            limits = Limits(**request["limits"])
            stdin_fd = os.memfd_create("stdin")
            os.write(stdin_fd, request.get("stdin", "").encode("utf-8"))
            os.lseek(stdin_fd, 0, os.SEEK_SET)
            for source, target in ((stdin_fd, 0), (out_w, 1), (err_w, 2)):
                os.dup2(source, target)
                os.close(source)
            _reset_process_state(self.workdir)
            apply_rlimits(limits, address_space_base=_vm_size_bytes())
        except BaseException as exc:  # a sandbox bug, not the code's: say so on stderr
            os.write(2, f"sandbox setup failed: {exc!r}\n".encode())
            os._exit(70)
        os._exit(execute(request["code"], status_w))

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
    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        limits = Limits(**request["limits"])
        prepared = self._take_prepared()
        started = time.monotonic()
        try:
            with contextlib.suppress(BrokenPipeError):  # a dead child shows up in collect()
                write_frame(prepared.req_w, request)
            os.close(prepared.req_w)
            prepared.req_w = -1
            collected = collect(
                prepared.out_r,
                prepared.err_r,
                prepared.status_r,
                prepared.pidfd,
                started + limits.wall_s,
                hard_output_cap(limits),
                lambda: os.kill(prepared.pid, signal.SIGKILL),  # PID 1: the namespace dies
            )
            _, wait_status, usage = os.wait4(prepared.pid, 0)
        finally:
            prepared.close()
        returncode = os.waitstatus_to_exitcode(wait_status)
        cpu_s = usage.ru_utime + usage.ru_stime
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

    def serve(self, control_in: int, control_out: int) -> None:
        while True:
            if self.prepared is None:
                self.prepared = self.prepare()  # between runs, off the caller's clock
            try:
                request = read_frame(control_in)
            except FrameError:
                break
            response = {"id": request.get("id")}
            try:
                response.update(self.run(request))
            except Exception as exc:
                response["internal_error"] = f"{type(exc).__name__}: {exc}"
            write_frame(control_out, response)
        if self.prepared is not None:
            self._discard(self.prepared)


def _reset_process_state(workdir: str) -> None:
    """Make the forked child look like a fresh interpreter to the code it runs."""
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(  # noqa: SIM115
        2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    os.environ.clear()
    os.environ.update(clean_environment(workdir))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if "random" in sys.modules:
        sys.modules["random"].seed()
    if "numpy" in sys.modules:
        with contextlib.suppress(Exception):
            sys.modules["numpy"].random.seed()


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
        worker = Worker(config)
        worker.prepared = worker.prepare()
        worker.prepared = worker._take_prepared()  # proves the jail works on this kernel
    except Exception as exc:
        write_frame(control_out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    write_frame(
        control_out,
        {"ready": True, "pid": os.getpid(), "isolation": worker.isolation, "notes": worker.notes},
    )
    worker.serve(control_in, control_out)
