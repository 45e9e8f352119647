"""nsjail backend (the seed's sandbox), with the seed's limits as the default preset.

nsjail is not packaged in Debian 12: build it from https://github.com/google/nsjail and put
the binary on ``PATH`` (or pass ``nsjail="/path/to/nsjail"``). Without it this backend
raises :class:`BackendUnavailable` and tests skip. Limits map onto nsjail's own flags
(``--time_limit`` for wall time, ``--rlimit_*``); output is still cut by our reader, at
1536 characters with :data:`~sandbox.types.NSJAIL_SEED_PRESET`.
"""

from __future__ import annotations

import logging
import math
import shutil

from sandbox._limits import clean_environment
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.subprocess_backend import HARNESS, SubprocessBackend
from sandbox.types import NSJAIL_SEED_PRESET, ExecResult, Limits

__all__ = ["NsjailBackend", "nsjail_argv"]

_log = logging.getLogger(__name__)


def nsjail_argv(nsjail: str, python: str, code_path: str, limits: Limits, uid: int = 65534) -> list[str]:
    """The nsjail command line for one run (pure function, unit-tested without nsjail)."""
    argv = [
        nsjail, "--mode", "o", "--quiet",
        "--chroot", "/",  # the host tree, read-only (nsjail mounts the chroot read-only)
        "--tmpfsmount", "/tmp",
        "--bindmount_ro", f"{code_path}:/tmp/code.py",
        "--bindmount_ro", f"{HARNESS}:/tmp/harness.py",
        "--cwd", "/tmp",
        "--user", str(uid), "--group", str(uid),
        "--hostname", "sandbox",
        "--time_limit", str(max(1, math.ceil(limits.wall_s))),
        "--rlimit_cpu", str(max(1, math.ceil(limits.cpu_s))),
        "--rlimit_as", str(limits.memory_mb),
        "--rlimit_fsize", str(limits.max_file_mb),
        "--rlimit_nofile", str(limits.max_open_files),
        "--rlimit_nproc", str(limits.max_processes),
        "--pass_fd", "3",
    ]  # fmt: skip
    for key, value in clean_environment("/tmp").items():
        argv += ["--env", f"{key}={value}"]
    if limits.network:
        argv.append("--disable_clone_newnet")
    argv += ["--", python, "-I", "/tmp/harness.py", "/tmp/code.py", "3"]
    return argv


class NsjailBackend(SubprocessBackend):
    """One ``nsjail --mode o`` per run. ``preset`` fills in limits the caller leaves default."""

    name = "nsjail"
    cpu_accounted = False
    isolation = ("nsjail namespaces", "read-only chroot", "tmpfs /tmp", "uid 65534", "rlimits")

    def __init__(self, python: str | None = None, *, nsjail: str | None = None) -> None:
        super().__init__(python, quiet=True)
        found = nsjail or shutil.which("nsjail")
        if found is None:
            raise BackendUnavailable(
                "nsjail is not installed: it is not packaged in Debian; build it from "
                "https://github.com/google/nsjail and put it on PATH"
            )
        self.nsjail = found
        if python is None and self.python.startswith("/root/"):
            self.python = "/usr/bin/python3"  # uid 65534 cannot read /root (mode 0700)
            _log.warning("nsjail backend: using /usr/bin/python3 (the pyenv interpreter is unreadable)")

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Like every backend, but with no limits given the seed's preset applies."""
        return super().run(code, stdin=stdin, limits=limits or NSJAIL_SEED_PRESET)

    def _argv(self, code_path: str, rlimits: list[str], limits: Limits) -> list[str]:
        return nsjail_argv(self.nsjail, self.python, code_path, limits)

    def _returncode(self, returncode: int) -> int:
        return -(returncode - 128) if 128 < returncode < 160 else returncode
