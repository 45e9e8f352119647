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

Accounting (``accounting: cgroup``): each child gets a cgroup of its own below the worker's
*home* (see :mod:`sandbox._cgroup`), joins it before it runs anything and writes the request's
limits into it before the code starts; the worker watches its CPU time and reads its counters.
A session's cells live in :mod:`sandbox._cells`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import shutil
import signal
import tempfile
import time
from typing import Any

from sandbox import _jail
from sandbox._accounting import PROCESS_MODE_NOTE, cgroup_layer
from sandbox._cells import serve_session
from sandbox._cgroup import Cgroup
from sandbox._child import install_standard_streams
from sandbox._collect import Collected, CpuWatch, RunEnd, collect, hard_output_cap, timed_outcome
from sandbox._harness import install_process_limit_markers
from sandbox._limits import count_processes_of, scratch_profile, shares_process_budget_in_user_namespace
from sandbox._lockdown import exit_code_of_init
from sandbox._root import RootPolicy
from sandbox._wire import read_frame, write_frame
from sandbox._zygote import READY, ChildMaker, Prepared, Zygote
from sandbox.types import Limits

__all__ = ["main"]

_STARTED, _REDO = b"S", b"X"
_PREPARE_TIMEOUT_S = 10.0
# A child past its end record is only exiting (a few ms): killing it then costs nothing, and a run
# that forged the record to stop being watched gets no more than this before it dies.
_EXIT_GRACE_S = 0.05


class Worker:
    """State of one worker process; see the module docstring."""

    def __init__(self, config: dict[str, Any], control_in: int) -> None:
        self.control_in = control_in
        # First, while /sys is still in view: into our own cgroup, and a handle on the home
        # where every child's cgroup is made (its descriptors outlive the jail's pivot_root).
        self.home: Cgroup | None = None
        self.unremoved: list[Cgroup] = []  # children's cgroups still busy when first removed
        cgroup = config.get("cgroup")
        if cgroup:
            worker_cgroup = Cgroup.open(cgroup["version"], cgroup["worker"])
            worker_cgroup.add(os.getpid())
            worker_cgroup.close()
            self.home = Cgroup.open(cgroup["version"], cgroup["home"])
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
            self.carry, self.writable, self.hidden = policy.below_scratch(), policy.writable, policy.hidden
            # Compiled before the root is swapped: libseccomp is found through ldconfig.
            self.seccomp = _jail.compile_seccomp(allow_network=False) if config.get("seccomp") else None
            self.isolation = _jail.isolate_worker(policy)
            # Entered by every run child (see _jail.enter_run); the first prepared child proves it.
            self.isolation += [*_jail.PER_RUN_LAYERS, "private /tmp and workdir per run (byte and inode quotas)"]
            if "user namespace" in self.isolation:
                self.uid = 0  # only our own uid is mapped: runs keep it, minus every capability
                self.shared_uid = shares_process_budget_in_user_namespace()
            self.isolation.append("seccomp filter" if self.seccomp else "no seccomp (pyseccomp absent)")
            self.isolation.append(_jail.landlock_layer())
            self.isolation += [f"uid {self.uid}" if self.uid else "no capabilities", "no_new_privs"]
        else:
            self.carry, self.writable, self.hidden = (), (), ()
            self.isolation = ["no isolation (rlimits and wall-clock kill only)"]
        for name in config.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception as exc:  # a missing optional module must not stop the pool
                self.notes.append(f"preload {name} skipped: {type(exc).__name__}: {exc}")
        install_process_limit_markers()  # once here rather than in every child
        install_standard_streams()
        self.isolation += ["rlimits", "wall-clock kill", "runs forked from a zygote that never sees run data"]
        self.isolation.append(cgroup_layer(self.home.version) if self.home is not None else PROCESS_MODE_NOTE)
        self.prepared: Prepared | None = None
        self.current: Prepared | None = None  # the live session child, between cells
        self.exiting: Prepared | None = None  # answered for, not yet reaped
        self.lost_state = False  # the last session child died: the next cell starts afresh
        self.session_cpu_spent = 0.0  # CPU s of every cell so far, its child's or a lost one's
        gc.freeze()  # keep the collector from touching (and so copying) inherited objects
        maker = ChildMaker(
            jail=self.jail,
            session=self.session,
            uid=self.uid,
            carry=self.carry,
            hidden=self.hidden,
            writable=self.writable,
            seccomp=self.seccomp,
            control_in=control_in,
            pid_ns_fd=os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC),
            setns_works=self.jail,
        )
        self.zygote = Zygote.start(maker, keep={control_in})  # before any run: its memory stays clean
        os.close(maker.pid_ns_fd)

    # -- the jailed child ---------------------------------------------------------------
    def prepare(self, private_request: bool = False) -> Prepared:
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
        # Counted here, between runs: the child's own /proc shows only its namespace. With a
        # cgroup one more: its pids controller must refuse first, as only it counts refusals.
        process_base = (count_processes_of(os.getuid()) if self.shared_uid else 0) + (self.home is not None)
        meta = {"profile": list(self.profile), "process_base": process_base, "workdir": workdir,
                "private_request": private}  # fmt: skip
        cgroup = None
        if self.home is not None:
            self._remove_unremoved()
            # A session is frozen between cells; a run's namespace dies with it: no freezer needed.
            cgroup = self.home.child(self.home.new_name("run"), without=() if self.session else ("freezer",))
            attach, limit_files = cgroup.open_for_child()
            meta.update(attach=len(attach), limits=[kind for _, kind in limit_files])
            fds += [*attach, *(fd for fd, _ in limit_files)]
        try:
            pid, token = self.zygote.spawn(meta, fds)
        except BaseException:
            if cgroup is not None:
                self._remove_cgroup(cgroup)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return Prepared(pid, token, os.pidfd_open(pid), req_w, out_r, err_r, status_r, done_r, workdir=workdir,
                         cgroup=cgroup)  # fmt: skip

    def _remove_cgroup(self, cgroup: Cgroup) -> None:
        """Remove a child's cgroup (killing what is left in it); a busy one is tried again later."""
        assert self.home is not None
        if not cgroup.remove(parent=self.home):
            self.unremoved.append(cgroup)

    def _remove_unremoved(self) -> None:
        pending, self.unremoved = self.unremoved, []
        for cgroup in pending:
            self._remove_cgroup(cgroup)

    def release(self, child: Prepared) -> None:
        """Close a child that is gone (reaped or about to be) and remove its cgroup."""
        child.close()
        if child.cgroup is not None:
            self._remove_cgroup(child.cgroup)
            child.cgroup = None

    def take_prepared(self, private_request: bool = False) -> Prepared:
        """A child ready for a request: the prepared one (or, for a handed-back request, a new
        one with a private request pipe); a child that fails to get ready is replaced once."""
        for _attempt in range(2):
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
            self.discard(prepared)
        raise RuntimeError(f"cannot prepare a jailed child: {detail}")

    def discard(self, prepared: Prepared) -> tuple[int, float]:
        """Kill a child (and its namespace), wait for it: (wait status, CPU seconds)."""
        if prepared.cgroup is not None:
            prepared.cgroup.thaw()  # a frozen process would die only once thawed
        with contextlib.suppress(ProcessLookupError):
            os.kill(prepared.pid, signal.SIGKILL)
        try:
            return self.zygote.reap(prepared.token)
        finally:
            self.release(prepared)

    # -- requests -----------------------------------------------------------------------
    def _await_start(self, child: Prepared) -> tuple[bytes, dict[str, Any], bytes] | None:
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

    def _start_run(self) -> tuple[Prepared, dict[str, Any], bytes] | None:
        """The child that took the next request, with its start line; None when the pool left.

        A request handed back for other quotas goes to a child prepared with them; later
        children keep them (a caller usually sends the same limits every time).
        """
        child = self.take_prepared()  # it now blocks on the pool's pipe, not us
        started = self._await_start(child)
        if started is None:
            self.discard(child)
            return None
        marker, payload, early_tags = started
        if marker == _STARTED:
            return child, payload, early_tags
        self.discard(child)
        self.profile = scratch_profile(Limits(**payload["limits"]))
        child = self.take_prepared(private_request=True)
        write_frame(child.req_w, payload)
        started = self._await_start(child)
        if started is None or started[0] != _STARTED:
            self.discard(child)
            raise RuntimeError("a child prepared for the request's quotas did not start it")
        return child, started[1], started[2]

    def run(self, child: Prepared, start: dict[str, Any], early_tags: bytes = b"") -> dict[str, Any]:
        """Watch a run the child has started: output, wall clock, CPU time, then reap it.

        A child that wrote its end record has finished its work: the answer goes out at once
        and :meth:`finish_exiting` reaps it after the answer, off the caller's clock. Its CPU
        time is then the cgroup's, not the record's (the record is the code's to write).
        """
        limits = Limits(**start["limits"])
        started = _start_time(start.get("t"))
        watch = CpuWatch(child.cgroup.cpu_s, limits.cpu_s) if child.cgroup is not None else None
        try:
            collected = self.collect_from(child, child.pidfd, started, limits, True, early_tags, watch)
            if collected.end is not None:
                self.exiting = child
                usage = child.cgroup.usage() if child.cgroup is not None else None
                returncode, cpu_s = collected.end[0], child.cpu_after(collected.end[1])
                return timed_outcome(RunEnd(collected, returncode, cpu_s, usage), limits, started)
            select.select([child.pidfd], [], [])  # exited (collect waited for it or killed it)
            wait_status, cpu_s = self.zygote.reap(child.token)
            cpu_s, usage = max(cpu_s, child.cpu_at_kill), child.cgroup.usage() if child.cgroup is not None else None
        except BaseException:
            self.exiting = None
            self.discard(child)
            raise
        self.release(child)
        code = exit_code_of_init(os.waitstatus_to_exitcode(wait_status), self.jail)  # a jailed run's is its init's
        return timed_outcome(RunEnd(collected, code, cpu_s, usage), limits, started)

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
        self.release(child)  # the zygote reaps it before its next fork

    def collect_from(
        self,
        child: Prepared,
        done_fd: int,
        started: float,
        limits: Limits,
        stop_at_end_record: bool = False,
        status_seen: bytes = b"",
        cpu_watch: CpuWatch | None = None,
    ) -> Collected:
        return collect(
            child.out_r,
            child.err_r,
            child.status_r,
            done_fd,
            started + limits.wall_s,
            hard_output_cap(limits),
            child.kill,
            stop_at_end_record,
            status_seen,
            cpu_watch,
        )

    def serve(self, control_out: int) -> None:
        if self.session:
            serve_session(self, control_out)
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


def _start_time(reported: Any) -> float:
    """When the run started: the child's own clock reading on its start line (written before
    the code runs; the worker may read it late), within reason; else now."""
    now = time.monotonic()
    if isinstance(reported, float) and now - 5.0 <= reported <= now:
        return reported
    return now


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples a frozen dataclass holds."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


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
            worker.prepared = worker.take_prepared()  # proves the jail works on this kernel
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
            shutil.rmtree(config["scratch_root"], ignore_errors=True)
