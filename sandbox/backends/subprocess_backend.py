"""Plain subprocess backend: a fresh interpreter per run, rlimits, a clean environment.

This is the *unisolated* backend, for machines without namespaces, and never chosen unless
asked for by name (``auto`` refuses to fall back to it). It has no network, PID or file-system
isolation: the code can read the host's files, open sockets and, when the host runs as root,
ignore the process limit; ``Limits.network=False`` and the disk and file quotas are not
enforced. Choosing it is the opt-in to that; it is logged, and ``coa list``/``coa bench`` warn.
It does kill every descendant of a run at its end, daemons included (the harness is a
subreaper), unless the run's own process is killed first.

The jailing wrappers (bubblewrap, nsjail) subclass it: same spawn and read loop, another
command line around the same harness.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from sandbox._collect import classify, collect, hard_output_cap, quota_note, to_text
from sandbox._limits import clean_environment, count_processes_of
from sandbox.backends.base import refuse_unsupported
from sandbox.types import ExecResult, Limits

__all__ = ["HARNESS", "LOCKDOWN", "UNISOLATED_WARNING", "SubprocessBackend"]

_log = logging.getLogger(__name__)
HARNESS = str(Path(__file__).resolve().parent.parent / "_harness.py")
LOCKDOWN = str(Path(__file__).resolve().parent.parent / "_lockdown.py")
#: Where wrappers bind the harness inside the jail: below /tmp, so the run's own scratch tmpfs
#: covers it before any untrusted code runs.
JAIL_HARNESS_DIR = "/tmp/.sandbox"
_STATUS_FD, _CODE_FD, _EXTRA_FD = 3, 4, 5
UNISOLATED_WARNING = (
    "sandbox backend 'subprocess' is unisolated: model code can read the host's files, reach its "
    "network and Unix sockets, and ignores Limits.network=False and the disk/file quotas; use "
    "'pool', 'bwrap' or 'nsjail' where the kernel allows namespaces"
)


class SubprocessBackend:
    """``python -I _harness.py`` per run, killed by process group at the wall deadline."""

    name = "subprocess"
    #: False for wrappers (bwrap, nsjail): their rusage does not include the jailed run.
    cpu_accounted = True
    isolation: tuple[str, ...] = (
        "NO ISOLATION (explicit opt-in)",
        "rlimits",
        "process group kill",
        "descendants killed at the end",
        "clean environment",
        "temporary workdir",
    )

    def __init__(self, python: str | None = None, *, quiet: bool = False) -> None:
        self.python = python or sys.executable
        if not quiet and type(self) is SubprocessBackend:
            _log.warning(UNISOLATED_WARNING)

    def unsupported(self, limits: Limits) -> list[str]:
        """Nothing: this backend enforces only resource limits, which is what choosing it accepts."""
        return []

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        refuse_unsupported(self.name, self.unsupported(limits))
        started = time.monotonic()
        with self._host_workdir() as workdir:
            stdin_fd, code_fd = _memfd("stdin", (stdin or "").encode("utf-8")), _memfd("code", code.encode("utf-8"))
            status_r, status_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                pid = self._spawn(workdir, limits, stdin_fd, code_fd, out_w, err_w, status_w)
            finally:
                for fd in (stdin_fd, code_fd, out_w, err_w, status_w):
                    os.close(fd)
            pidfd = os.pidfd_open(pid)
            try:
                collected = collect(
                    out_r,
                    err_r,
                    status_r,
                    pidfd,
                    started + limits.wall_s,
                    hard_output_cap(limits),
                    lambda: _kill_group(pid),
                )
                _kill_group(pid)  # background processes die with the run
                _, wait_status, usage = os.wait4(pid, 0)
            finally:
                for fd in (out_r, err_r, status_r, pidfd):
                    os.close(fd)
        returncode = self._returncode(os.waitstatus_to_exitcode(wait_status))
        cpu_s = usage.ru_utime + usage.ru_stime
        stdout, cut_out = to_text(collected.stdout, limits.max_output_chars)
        stderr, cut_err = to_text(collected.stderr, limits.max_output_chars)
        return ExecResult(
            stdout=stdout,
            stderr=stderr + quota_note(collected.tags, limits, returncode).decode(),
            exit_code=returncode,
            status=classify(returncode, collected, cpu_s, limits, cpu_known=self.cpu_accounted),
            wall_s=time.monotonic() - started,
            cpu_s=cpu_s,
            truncated=cut_out or cut_err or collected.output_killed,
        )

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
    ) -> int:
        rlimits = [
            max(1, math.ceil(limits.cpu_s)),
            limits.memory_mb * 1024 * 1024,
            limits.max_processes + self._process_base(),
            limits.max_file_mb * 1024 * 1024,
            limits.max_open_files,
        ]
        config = {"status_fd": _STATUS_FD, "code_fd": _CODE_FD, "rlimits": rlimits}
        extra = self._open_extra_fd(limits)
        if extra is not None:
            config["seccomp_fd"] = _EXTRA_FD
        argv = self._argv(config, limits)
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

    def _returncode(self, returncode: int) -> int:
        """Hook for wrappers that encode a signal death in their own exit status."""
        return returncode

    def _open_extra_fd(self, limits: Limits) -> int | None:
        """A descriptor passed on as fd 5 (the wrappers' seccomp program); closed after spawn."""
        return None

    def _argv(self, config: dict, limits: Limits) -> list[str]:
        """The command line; jailing backends wrap it. ``config`` is the harness's (see _harness._main)."""
        return [self.python, "-I", "-B", HARNESS, json.dumps({**config, "reap": True})]

    def _environment(self, workdir: str | None) -> dict[str, str]:
        assert workdir is not None
        return clean_environment(workdir)

    def close(self) -> None:
        """Nothing to release: every run is its own process."""


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
