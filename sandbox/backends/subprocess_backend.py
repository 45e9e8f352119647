"""Plain subprocess backend: a fresh interpreter per run, rlimits, a clean environment.

This is the *unisolated* backend, for machines without namespaces, and never chosen unless
asked for by name (``auto`` refuses to fall back to it). It has no network, PID or file-system
isolation: the code can read the host's files, open sockets and, when the host runs as root,
ignore the process limit; ``Limits.network=False`` and the disk and file quotas are not
enforced. Choosing it is the opt-in to that; it is logged, and ``coa list``/``coa bench`` warn.
It does kill every descendant of a run at its end, daemons included (the harness is a
subreaper, and the run's cgroup is emptied), unless the run's own process is killed first.
Accounting: one cgroup per run where one can be made (memory, processes and CPU time for all of
the run's processes), else per-process rlimits (shown in ``isolation``); the unisolated backend
is the one that falls back by itself, having given up every guarantee already.

The jailing wrappers (bubblewrap, nsjail) subclass it: same spawn and read loop, another
command line around the same harness, and no fallback: ``accounting="process"`` is explicit.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from sandbox._accounting import PROCESS_MODE_NOTE, cgroup_layer, new_home, resolve_accounting
from sandbox._cgroup import Cgroup
from sandbox._collect import Collected, CpuWatch, RunEnd, collect, hard_output_cap, outcome, take_exit_record
from sandbox._limits import clean_environment, count_processes_of
from sandbox._uids import UidPool
from sandbox.backends.base import BackendUnavailable, refuse_unsendable, refuse_unsupported
from sandbox.types import ExecResult, Limits, Status

__all__ = ["BOOT", "JAIL_FILES", "UNISOLATED_WARNING", "SubprocessBackend"]

_log = logging.getLogger(__name__)
#: The entry script of a run (``python -I -B _boot.py CONFIG_JSON``) and the two modules it
#: loads from beside it: the files a wrapper binds into the jail's JAIL_HARNESS_DIR.
_HERE = Path(__file__).resolve().parent.parent
JAIL_FILES = tuple(str(_HERE / f"{name}.py") for name in ("_boot", "_harness", "_lockdown"))
BOOT = JAIL_FILES[0]
#: Where wrappers bind the harness inside the jail: below /tmp, so the run's own scratch tmpfs
#: covers it before any untrusted code runs.
JAIL_HARNESS_DIR = "/tmp/.sandbox"
_STATUS_FD, _CODE_FD, _EXTRA_FD, _CGROUP_FD = 3, 4, 5, 6
UNISOLATED_WARNING = (
    "sandbox backend 'subprocess' is unisolated: model code can read the host's files, reach its "
    "network and Unix sockets, and ignores Limits.network=False and the disk/file quotas; use "
    "'pool', 'bwrap' or 'nsjail' where the kernel allows namespaces"
)


class SubprocessBackend:
    """``python -I _boot.py`` per run, killed by process group at the wall deadline."""

    name = "subprocess"
    #: False for wrappers (bwrap, nsjail): their rusage does not include the jailed run.
    cpu_accounted = True
    #: Processes the harness adds to the run (its PID 1's init), counted in the process limits.
    init_processes = 0
    isolation: tuple[str, ...] = (
        "NO ISOLATION (explicit opt-in)",
        "rlimits",
        "process group kill",
        "descendants killed at the end",
        "clean environment",
        "temporary workdir",
    )

    def __init__(self, python: str | None = None, *, quiet: bool = False, accounting: str | None = None) -> None:
        self.python = python or sys.executable
        if not quiet and type(self) is SubprocessBackend:
            _log.warning(UNISOLATED_WARNING)
        self._home: Cgroup | None = None
        self._unremoved: list[Cgroup] = []
        self._uid_pool: UidPool | None = None  # set by wrappers that run as root
        strict = accounting is not None or type(self) is not SubprocessBackend
        self.accounting = resolve_accounting(accounting)
        if self.accounting == "cgroup":
            try:
                self._home = new_home(self.name)
            except BackendUnavailable:
                if strict:
                    raise
                self.accounting = "process"
        self.isolation = (*self.isolation, self._accounting_layer())

    def _accounting_layer(self) -> str:
        if self._home is None:
            return PROCESS_MODE_NOTE
        return cgroup_layer(self._home.version)

    def unsupported(self, limits: Limits) -> list[str]:
        """Nothing: this backend enforces only resource limits, which is what choosing it accepts."""
        return []

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        refuse_unsupported(self.name, self.unsupported(limits))
        refuse_unsendable(code, stdin)
        started = time.monotonic()
        cgroup = self._run_cgroup(limits)
        uid = self._take_uid()
        try:
            with self._host_workdir() as workdir:
                returncode, collected, rusage_cpu_s = self._execute(code, stdin, limits, workdir, cgroup, uid, started)
            usage = cgroup.usage() if cgroup is not None else None
        finally:
            if cgroup is not None:
                self._remove(cgroup)
            if uid is not None:
                self._give_back_uid(uid)
        collected.tags, reported = take_exit_record(collected.tags)
        returncode = self._returncode(returncode, reported)
        if returncode == -signal.SIGKILL and time.monotonic() - started >= limits.wall_s:
            collected.wall_killed = True  # a wrapper's own wall limit (nsjail's) fired before ours
        fields = outcome(RunEnd(collected, returncode, rusage_cpu_s, usage, cpu_known=self.cpu_accounted), limits)
        return ExecResult(
            stdout=fields["stdout"],
            stderr=fields["stderr"],
            exit_code=returncode,
            status=Status(fields["status"]),
            wall_s=time.monotonic() - started,
            cpu_s=fields["cpu_s"],
            truncated=fields["truncated"],
            limit_hit=fields["limit_hit"],
        )

    def _execute(
        self,
        code: str,
        stdin: str | None,
        limits: Limits,
        workdir: str | None,
        cgroup: Cgroup | None,
        uid: int | None,
        started: float,
    ) -> tuple[int, Collected, float]:
        """Spawn the run, read it to its end, reap it: (raw exit status, collected, rusage CPU s)."""
        stdin_fd, code_fd = _memfd("stdin", (stdin or "").encode("utf-8")), _memfd("code", code.encode("utf-8"))
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        files = cgroup.attach_files() if cgroup is not None else []
        try:  # far above the descriptors posix_spawn moves to 3-6..., so that no move overwrites another
            attach = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in files]
        finally:
            for fd in files:
                os.close(fd)
        try:
            pid = self._spawn(workdir, limits, stdin_fd, code_fd, out_w, err_w, status_w, attach, uid)
        finally:
            for fd in (stdin_fd, code_fd, out_w, err_w, status_w, *attach):
                os.close(fd)
        pidfd = os.pidfd_open(pid)

        def kill() -> None:
            _kill_group(pid)
            if cgroup is not None:
                cgroup.kill()  # what left the process group (setsid) too

        watch = CpuWatch(cgroup.cpu_s, limits.cpu_s) if cgroup is not None else None
        try:
            collected = collect(out_r, err_r, status_r, pidfd, started + limits.wall_s, hard_output_cap(limits),
                                kill, cpu_watch=watch)  # fmt: skip
            _kill_group(pid)  # background processes die with the run
            _, wait_status, usage = os.wait4(pid, 0)
        finally:
            for fd in (out_r, err_r, status_r, pidfd):
                os.close(fd)
        return os.waitstatus_to_exitcode(wait_status), collected, usage.ru_utime + usage.ru_stime

    def uids(self) -> list[int]:
        """The uids runs execute as: leased for this backend alone, one per concurrent run, when
        a wrapper switches runs to other uids (as root); none to tell apart otherwise."""
        return self._uid_pool.uids() if self._uid_pool is not None else []

    def _take_uid(self) -> int | None:
        """A uid for the next run (None: the wrapper's own choice); given back after it."""
        return self._uid_pool.take() if self._uid_pool is not None else None

    def _give_back_uid(self, uid: int) -> None:
        if self._uid_pool is not None:
            self._uid_pool.give_back(uid)

    def _run_cgroup(self, limits: Limits) -> Cgroup | None:
        """A fresh cgroup for one run, its limits set (None in the per-process mode)."""
        if self._home is None:
            return None
        pending, self._unremoved = self._unremoved, []
        for cgroup in pending:
            self._remove(cgroup)
        cgroup = self._home.child(self._home.new_name("run"), without=("freezer",))
        try:
            cgroup.set_limits(limits.memory_mb, limits.max_processes + self.init_processes)
        except OSError:
            self._remove(cgroup)
            raise
        return cgroup

    def _remove(self, cgroup: Cgroup) -> None:
        try:
            removed = cgroup.remove()
        except OSError:
            removed = False
        if not removed:
            self._unremoved.append(cgroup)

    def _host_workdir(self) -> contextlib.AbstractContextManager[str | None]:
        """A host directory for the run to work in; the jailing wrappers need none (their runs
        work in the jail's own ``/tmp``)."""
        return tempfile.TemporaryDirectory(prefix="coa-sandbox-")

    def _spawn(
        self,
        workdir: str | None,
        limits: Limits,
        stdin_fd: int,
        code_fd: int,
        out_w: int,
        err_w: int,
        status_w: int,
        cgroup_fds: list[int],
        uid: int | None,
    ) -> int:
        rlimits = [
            max(1, math.ceil(limits.cpu_s)),
            limits.memory_mb * 1024 * 1024,
            # With a cgroup one more: its pids controller must refuse first (only it counts refusals).
            limits.max_processes + self._process_base() + (1 if cgroup_fds else 0) + self.init_processes,
            limits.max_file_mb * 1024 * 1024,
            limits.max_open_files,
        ]
        config = {"status_fd": _STATUS_FD, "code_fd": _CODE_FD, "rlimits": rlimits}
        cgroup_targets = list(range(_CGROUP_FD, _CGROUP_FD + len(cgroup_fds)))
        if cgroup_fds:
            config["cgroup_fds"] = cgroup_targets
        extra = self._open_extra_fd(limits)
        if extra is not None:
            config["seccomp_fd"] = _EXTRA_FD
        argv = self._argv(config, limits, uid)
        try:
            # posix_spawn keeps this safe with many calling threads (no preexec_fn).
            return os.posix_spawn(
                argv[0],
                argv,
                self._environment(workdir),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                    (os.POSIX_SPAWN_DUP2, err_w, 2),
                    (os.POSIX_SPAWN_DUP2, status_w, _STATUS_FD),
                    (os.POSIX_SPAWN_DUP2, code_fd, _CODE_FD),
                    *([(os.POSIX_SPAWN_DUP2, extra, _EXTRA_FD)] if extra is not None else []),
                    *[(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in zip(cgroup_fds, cgroup_targets, strict=True)],
                ],
                setsid=True,
            )
        finally:
            if extra is not None:
                os.close(extra)

    def _process_base(self) -> int:
        """Processes the run's real uid already has (RLIMIT_NPROC counts them all).

        Zero as root: root ignores the limit, and the jailing wrappers switch to a fresh uid.
        """
        return 0 if os.geteuid() == 0 else count_processes_of(os.getuid())

    def _returncode(self, returncode: int, reported: int | None) -> int:
        """Hook for wrappers that encode a signal death in their own exit status (``reported``:
        the exit code in the harness's end record, None without one)."""
        return returncode

    def _open_extra_fd(self, limits: Limits) -> int | None:
        """A descriptor passed on as fd 5 (the wrappers' seccomp program); closed after spawn."""
        return None

    def _argv(self, config: dict, limits: Limits, uid: int | None = None) -> list[str]:
        """The command line; jailing backends wrap it (``uid``: the run's, from :meth:`_take_uid`).
        ``config`` is the entry script's (see _boot.main)."""
        return [self.python, "-I", "-B", BOOT, json.dumps({**config, "reap": True})]

    def _environment(self, workdir: str | None) -> dict[str, str]:
        assert workdir is not None
        return clean_environment(workdir)

    def close(self) -> None:
        """Remove the backend's cgroups, give back its uids (every run is its own process)."""
        home, self._home = self._home, None
        if home is not None:
            home.remove_tree()
        if self._uid_pool is not None:
            self._uid_pool.release()


def _memfd(name: str, data: bytes) -> int:
    """An in-memory file holding ``data``, read from offset 0 (nothing lands on the host's disk)."""
    fd = os.memfd_create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
