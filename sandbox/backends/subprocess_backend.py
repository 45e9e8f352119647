"""Plain subprocess backend: a fresh interpreter per run, rlimits, a clean environment.

This is the *weak* backend, for machines without namespaces. It has no network, PID or
mount isolation: the code can read the host's files, open sockets and, when the host runs as
root, ignore the process limit. It is logged as such whenever it is selected.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from sandbox._collect import classify, collect, hard_output_cap, to_text
from sandbox._limits import clean_environment, count_processes_of
from sandbox.types import ExecResult, Limits

__all__ = ["HARNESS", "SubprocessBackend"]

_log = logging.getLogger(__name__)
HARNESS = str(Path(__file__).resolve().parent.parent / "_harness.py")


class SubprocessBackend:
    """``python -I _harness.py`` per run, killed by process group at the wall deadline."""

    name = "subprocess"
    #: False for wrappers (bwrap, nsjail): their rusage does not include the jailed run.
    cpu_accounted = True
    isolation = ("rlimits", "process group kill", "clean environment", "temporary workdir")

    def __init__(self, python: str | None = None, *, quiet: bool = False) -> None:
        self.python = python or sys.executable
        if not quiet and type(self) is SubprocessBackend:
            _log.warning(
                "sandbox backend 'subprocess' is weaker: no network, PID or filesystem "
                "isolation; use the 'pool' backend where the kernel allows namespaces"
            )

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="coa-sandbox-") as workdir:
            code_path = os.path.join(workdir, ".code.py")
            Path(code_path).write_text(code, encoding="utf-8")
            stdin_fd = os.memfd_create("stdin")
            status_r, status_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                os.write(stdin_fd, (stdin or "").encode("utf-8"))
                os.lseek(stdin_fd, 0, os.SEEK_SET)
                pid = self._spawn(code_path, workdir, limits, stdin_fd, out_w, err_w, status_w)
            finally:
                for fd in (stdin_fd, out_w, err_w, status_w):
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
            stderr=stderr,
            exit_code=returncode,
            status=classify(returncode, collected, cpu_s, limits, cpu_known=self.cpu_accounted),
            wall_s=time.monotonic() - started,
            cpu_s=cpu_s,
            truncated=cut_out or cut_err or collected.output_killed,
        )

    def _spawn(
        self,
        code_path: str,
        workdir: str,
        limits: Limits,
        stdin_fd: int,
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
        argv = self._argv(code_path, [str(r) for r in rlimits], limits)
        extra = self._open_extra_fds()
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
                    (os.POSIX_SPAWN_DUP2, status_w, 3),
                    *((os.POSIX_SPAWN_DUP2, fd, target) for fd, target in extra),
                ],
                setsid=True,
            )
        finally:
            for fd, _ in extra:
                os.close(fd)

    def _process_base(self) -> int:
        """Processes the run's real uid already has (RLIMIT_NPROC counts them all).

        Zero as root: root ignores the limit, and the jailing wrappers switch to a fresh uid.
        """
        return 0 if os.geteuid() == 0 else count_processes_of(os.getuid())

    def _returncode(self, returncode: int) -> int:
        """Hook for wrappers that encode a signal death in their own exit status."""
        return returncode

    def _open_extra_fds(self) -> list[tuple[int, int]]:
        """(fd, number in the child) pairs to pass on; opened per run, closed after spawn."""
        return []

    def _argv(self, code_path: str, rlimits: list[str], limits: Limits) -> list[str]:
        """The command line; jailing backends wrap it. Status is reported on fd 3."""
        return [self.python, "-I", HARNESS, code_path, "3", *rlimits]

    def _environment(self, workdir: str) -> dict[str, str]:
        return clean_environment(workdir)

    def close(self) -> None:
        """Nothing to release: every run is its own process."""


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
