"""The zygote: the pristine process every run child of a worker is forked from.

A forked child holds a copy of its parent's whole address space, and a run's code can read
its own memory. Forked from the worker itself, a run could read what the worker had held
before: earlier runs' output, handed-back requests. So the worker forks this zygote once,
after its jail and its preloads and before any run, and from then on asks it for children
over a socket (descriptors travel with ``SCM_RIGHTS``); the zygote never sees a request or an
answer, only the pipes it passes on. It also saves CPU: copy-on-write faults follow every fork,
and the zygote's loop touches a few pages where the worker's would touch hundreds.

The zygote is the children's parent (and subreaper): it reaps them when the worker asks, and
dies with the worker, taking them along (parent-death signals). A child is named by a token
the zygote gives it at its birth, never by its pid: pids wrap (32768 of them here) and a pid is
reused as soon as its process is reaped, so a status kept by pid could be handed to a later child.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import signal
import socket
import struct
from dataclasses import dataclass
from typing import Any

from sandbox import _jail
from sandbox._cgroup import Cgroup, RunUsage, attach_self
from sandbox._child import close_all_except, open_stdin, prepare_run, run_once, serve_cells, wait_for_parent
from sandbox._lockdown import SCRATCH, WORKDIR

__all__ = ["FAILED", "READY", "ChildMaker", "Prepared", "Zygote", "tree_cpu_s"]

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
    hidden: tuple[str, ...]
    writable: tuple[str, ...]  # the writable grants: with /tmp, /dev and /proc, all a run may write
    seccomp: Any  # a CompiledFilter, or None
    control_in: int  # the pool's request pipe, read directly by run children
    pid_ns_fd: int
    setns_works: bool

    def fork(self, meta: dict[str, Any], fds: list[int]) -> int:
        """Fork one child for ``meta`` with ``fds`` = out, err, status[, request][, done], then
        the run cgroup's ``cgroup.procs`` files (``meta["attach"]`` of them) and its limit files
        (kinds in ``meta["limits"]``)."""
        out_w, err_w, status_w, *rest = fds
        req_r = rest.pop(0) if meta["private_request"] else self.control_in
        done_w = rest.pop(0) if self.session else -1
        attach = rest[: meta.get("attach", 0)]
        limit_fds = list(zip(rest[len(attach) :], meta.get("limits", []), strict=True))
        profile = tuple(meta["profile"])
        parent = os.getpid()

        def child() -> None:
            attach_self(list(attach))  # first of all: everything the run does is the run's
            streams = (req_r, out_w, err_w, status_w, done_w)
            self._child(streams, limit_fds, meta["process_base"], profile, meta["workdir"], parent)

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
        streams: tuple[int, int, int, int, int],
        limit_fds: list[tuple[int, str]],
        process_base: int,
        profile: tuple[int, int],
        workdir: str | None,
        parent: int,
    ) -> None:
        req_r, out_w, err_w, status_w, done_w = streams
        try:  # fds 0-2 are /dev/null already (see _worker.main)
            close_all_except({*streams, *(fd for fd, _ in limit_fds)})
            open_stdin()  # before seccomp, which refuses memfd_create to the code
            if self.jail:
                if not self.setns_works:
                    wait_for_parent(parent)  # see _fork_in_new_pid_namespace
                _jail.enter_run(self.uid, *profile, self.carry, self.hidden)
                os.chdir(WORKDIR)
                _jail.drop_privileges(self.uid, self.seccomp, _jail.writable_in_jail(self.writable))
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
            serve_cells(req_r, out_w, err_w, status_w, done_w, process_base, quota_dir, limit_fds)
            os._exit(0)
        run_once(req_r, status_w, address_space_base, process_base, profile, quota_dir, limit_fds)


@dataclass(slots=True)
class Prepared:
    """The worker's handle of one child: its pipes, its pidfd, its cgroup."""

    pid: int
    token: int  # the zygote's name for this child (a pid can be reused; the token cannot)
    pidfd: int
    req_w: int
    out_r: int
    err_r: int
    status_r: int
    done_r: int = -1  # session children only: one fixed-size record per finished cell
    ready: bool = False
    workdir: str | None = None  # unjailed children only: a host directory removed after the run
    cgroup: Cgroup | None = None  # its accounting unit (cgroup mode)
    cpu_mark: float = 0.0  # session: the cgroup's CPU seconds when the last cell ended
    counted: RunUsage | None = None  # session: the cgroup's counters when the last cell ended
    cpu_at_kill: float = 0.0  # per-process mode: CPU s of its processes when it was killed

    def kill(self) -> None:
        """SIGKILL the child: PID 1, so its whole namespace dies. Without a cgroup, first note the
        CPU its processes have used: what the kernel reaps with the namespace is in no rusage (a
        run's code is PID 2, below its init: a killed run read ~0 CPU s)."""
        if self.cgroup is None:
            self.cpu_at_kill = tree_cpu_s(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def cpu_after(self, reported: float) -> float:
        """A run's CPU s once it wrote its end record: the record's figure is the code's to write
        (it can replace ``resource.getrusage`` first), so in the per-process mode it is never
        below what ``/proc`` counts for the run's processes (a cgroup's figure replaces both)."""
        return reported if self.cgroup is not None else max(reported, tree_cpu_s(self.pid))

    def close(self) -> None:
        for fd in (self.req_w, self.out_r, self.err_r, self.status_r, self.done_r, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.workdir is not None:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)


def tree_cpu_s(pid: int, depth: int = 64) -> float:
    """CPU seconds (``/proc``) of ``pid``, its reaped children and every live descendant."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    total = sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for task in tasks if depth else ():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
            total += sum(tree_cpu_s(int(child), depth - 1) for child in handle.read().split())
    return total


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

    def spawn(self, meta: dict[str, Any], fds: list[int]) -> tuple[int, int]:
        """A new child (see :meth:`ChildMaker.fork`): its pid, and the token that names it."""
        reply = self._call({"op": "spawn", **meta}, fds)
        return int(reply["pid"]), int(reply["token"])

    def reap(self, token: int) -> tuple[int, float]:
        """Wait for the child named ``token`` to exit: (wait status, CPU seconds of its own and
        its reaped children's).

        Only needed for the status: a child that ended (or was killed) is reaped by the zygote
        itself before its next fork otherwise.
        """
        reply = self._call({"op": "reap", "token": token})
        return int(reply["status"]), float(reply["cpu_s"])

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


class _Children:
    """The zygote's children by token: live ones (token -> pid, and back) and the statuses of
    those reaped before the worker asked (by token: a pid may be reused the moment its process
    is reaped, the token never is)."""

    def __init__(self) -> None:
        self.tokens = itertools.count(1)
        self.live: dict[int, int] = {}  # pid -> token
        self.pids: dict[int, int] = {}  # token -> pid
        self.exited: dict[int, tuple[int, float]] = {}  # token -> (wait status, CPU s)

    def born(self, pid: int) -> int:
        token = next(self.tokens)
        self.live[pid], self.pids[token] = token, pid
        return token

    def reap_exited(self, keep: int = 64) -> None:
        """Collect every child that has exited (without blocking), remembering the last ``keep``
        statuses of known children; an orphan re-parented to us is just reaped."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            token = self.live.pop(pid, None)
            if token is None:
                continue
            del self.pids[token]
            self.exited[token] = (status, usage.ru_utime + usage.ru_stime)
            if len(self.exited) > keep:
                del self.exited[next(iter(self.exited))]

    def reap(self, token: int) -> tuple[int, float]:
        if token in self.exited:
            return self.exited.pop(token)
        pid = self.pids.pop(token, None)
        if pid is None:
            raise LookupError(f"no child {token} (reaped long ago, or never born)")
        del self.live[pid]
        _, status, usage = os.wait4(pid, 0)  # unreaped, so the pid is still this child's
        return status, usage.ru_utime + usage.ru_stime


def _serve(sock: socket.socket, maker: ChildMaker) -> None:
    """The zygote's loop: one request, one reply, until the worker closes the socket.

    Children the worker has answered for without needing their exit status (the usual run,
    answered on its end record) are reaped here before each new fork, sparing the worker a
    round trip per run; their statuses are kept a while, by token, in case it asks after all.
    """
    children = _Children()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 16)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        try:
            if message["op"] == "spawn":
                children.reap_exited()
                pid = maker.fork(message, fds)
                reply: dict[str, Any] = {"pid": pid, "token": children.born(pid)}
            else:
                status, cpu_s = children.reap(int(message["token"]))
                reply = {"status": status, "cpu_s": cpu_s}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(reply).encode())
