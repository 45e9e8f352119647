"""The zygote: the pristine process every run child of a worker is forked from.

A forked child holds a copy of its parent's whole address space, and a run's code can read
its own memory. Forked from the worker itself, a run could read what the worker had held
before: earlier runs' output, handed-back requests. So the worker forks this zygote once,
after its jail and its preloads and before any run, and from then on asks it for children
over a socket (descriptors travel with ``SCM_RIGHTS``); the zygote never sees a request or an
answer, only the pipes it passes on. It also saves CPU: copy-on-write faults follow every fork,
and the zygote's loop touches a few pages where the worker's would touch hundreds.

The zygote is the children's parent (and subreaper): it reaps them when the worker asks, and
dies with the worker, taking them along (parent-death signals).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
from dataclasses import dataclass
from typing import Any

from sandbox import _jail
from sandbox._child import close_all_except, open_stdin, prepare_run, run_once, serve_cells, wait_for_parent
from sandbox._lockdown import SCRATCH, WORKDIR

__all__ = ["FAILED", "READY", "ChildMaker", "Zygote"]

READY, FAILED = b"R", b"F"
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class ChildMaker:
    """What a run child needs to set itself up (a copy lives in the zygote)."""

    jail: bool
    session: bool
    uid: int
    carry: tuple[tuple[str, bool], ...]
    seccomp: Any  # a CompiledFilter, or None
    control_in: int  # the pool's request pipe, read directly by run children
    pid_ns_fd: int
    setns_works: bool

    def fork(self, meta: dict[str, Any], fds: list[int]) -> int:
        """Fork one child for ``meta`` with ``fds`` = out, err, status[, request][, done]."""
        out_w, err_w, status_w, *rest = fds
        req_r = rest.pop(0) if meta["private_request"] else self.control_in
        done_w = rest.pop(0) if self.session else -1
        profile = tuple(meta["profile"])
        parent = os.getpid()

        def child() -> None:
            self._child(req_r, out_w, err_w, status_w, done_w, meta["process_base"], profile, meta["workdir"], parent)

        return self._fork_in_new_pid_namespace(child)

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
        if self.setns_works or not self.jail:
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

    def _child(
        self,
        req_r: int,
        out_w: int,
        err_w: int,
        status_w: int,
        done_w: int,
        process_base: int,
        profile: tuple[int, int],
        workdir: str | None,
        parent: int,
    ) -> None:
        try:  # fds 0-2 are /dev/null already (see _worker.main)
            close_all_except({req_r, out_w, err_w, status_w, done_w})
            open_stdin()  # before seccomp, which refuses memfd_create to the code
            if self.jail:
                if not self.setns_works:
                    wait_for_parent(parent)  # see _fork_in_new_pid_namespace
                _jail.enter_run(self.uid, *profile, self.carry)
                os.chdir(WORKDIR)
                _jail.drop_privileges(self.uid, self.seccomp)
            else:
                assert workdir is not None
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                os.environ.update(HOME=workdir, TMPDIR=workdir)
                os.chdir(workdir)
            address_space_base = 0 if self.session else prepare_run(out_w, err_w)
            os.write(status_w, READY)
        except BaseException as exc:
            os.write(status_w, FAILED + f"{type(exc).__name__}: {exc}".encode()[:1000])
            os._exit(70)
        quota_dir = SCRATCH if self.jail else None
        if self.session:
            serve_cells(req_r, out_w, err_w, status_w, done_w, process_base, quota_dir)
            os._exit(0)
        run_once(req_r, status_w, address_space_base, process_base, profile, quota_dir)


class Zygote:
    """The worker's handle of its zygote: ask for a child, ask for its exit status."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self._sock = pid, sock

    @classmethod
    def start(cls, maker: ChildMaker, keep: set[int]) -> Zygote:
        """Fork the zygote; ``keep``: descriptors it needs besides its socket (the request pipe)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the zygote
            try:
                ours.close()
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                close_all_except({theirs.fileno(), maker.pid_ns_fd, *keep})
                if maker.jail:
                    _jail.become_subreaper()  # children re-parented by the user-namespace path
                _serve(theirs, maker)
            finally:
                os._exit(0)
        theirs.close()
        return cls(pid, ours)

    def _call(self, message: dict[str, Any], fds: list[int] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        payload = json.dumps(message).encode()
        if fds:
            socket.send_fds(self._sock, [payload], list(fds))
        else:
            self._sock.send(payload)
        data = self._sock.recv(1 << 16)
        if not data:
            raise RuntimeError("the zygote died")
        reply = json.loads(data)
        if "error" in reply:
            raise RuntimeError(f"zygote: {reply['error']}")
        return reply

    def spawn(self, meta: dict[str, Any], fds: list[int]) -> int:
        """A new child (see :meth:`ChildMaker.fork`); its pid."""
        return int(self._call({"op": "spawn", **meta}, fds)["pid"])

    def reap(self, pid: int) -> tuple[int, float]:
        """Wait for child ``pid`` (kill it first unless it exited): (wait status, CPU seconds).

        Only needed for the status: a child that ended (or was killed) is reaped by the zygote
        itself before its next fork otherwise.
        """
        reply = self._call({"op": "reap", "pid": pid})
        return int(reply["status"]), float(reply["cpu_s"])

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _serve(sock: socket.socket, maker: ChildMaker) -> None:
    """The zygote's loop: one request, one reply, until the worker closes the socket.

    Children the worker has answered for without needing their exit status (the usual run,
    answered on its end record) are reaped here before each new fork, sparing the worker a
    round trip per run; their statuses are kept a while in case it asks after all.
    """
    exited: dict[int, tuple[int, float]] = {}
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        try:
            if message["op"] == "spawn":
                _reap_exited(exited)
                reply: dict[str, Any] = {"pid": maker.fork(message, fds)}
            else:
                pid = message["pid"]
                if pid in exited:
                    status, cpu_s = exited.pop(pid)
                else:
                    _, status, usage = os.wait4(pid, 0)
                    cpu_s = usage.ru_utime + usage.ru_stime
                reply = {"status": status, "cpu_s": cpu_s}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(reply).encode())


def _reap_exited(exited: dict[int, tuple[int, float]], keep: int = 64) -> None:
    """Collect every child that has exited (without blocking), remembering the last ``keep``."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exited[pid] = (status, usage.ru_utime + usage.ru_stime)
        if len(exited) > keep:
            del exited[next(iter(exited))]
