"""bubblewrap backend: a fresh ``bwrap`` jail around a fresh interpreter for every run.

Isolation comparable to the pool (new user/PID/network/IPC/UTS namespaces, read-only
root, private ``/tmp`` with the workdir below it, ``/root``, ``/home`` and ``/run`` hidden
(except the interpreter),
seccomp) but paid per run: a process start plus the interpreter's own imports. Install with
``apt-get install bubblewrap``. As root the run is moved to an unprivileged uid with
``setpriv`` (root ignores the process limit); the uid rotates so concurrent runs differ.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile

from sandbox._jail import build_seccomp, hide_plan, interpreter_dirs, parents_below, tmp_keeps
from sandbox._limits import clean_environment
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.subprocess_backend import HARNESS, SubprocessBackend
from sandbox.types import Limits

__all__ = ["BwrapBackend"]

_UID_BASE = 63000
_uids = itertools.count()


class BwrapBackend(SubprocessBackend):
    """``bwrap ... python -I harness.py`` per run (see the module docstring)."""

    name = "bwrap"
    cpu_accounted = False

    def __init__(self, python: str | None = None, *, bwrap: str | None = None, seccomp: bool = True) -> None:
        super().__init__(python, quiet=True)
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise BackendUnavailable("bubblewrap is not installed (apt-get install bubblewrap)")
        self.setpriv = shutil.which("setpriv") if os.geteuid() == 0 else None
        self.hidden = hide_plan((self.python, *interpreter_dirs(self.python)))
        self.tmp_kept = tmp_keeps(interpreter_dirs(self.python))
        self._seccomp_path: str | None = None
        filt = build_seccomp(allow_network=False) if seccomp else None
        if filt is not None:
            with tempfile.NamedTemporaryFile(prefix="coa-bwrap-", suffix=".bpf", delete=False) as handle:
                filt.export_bpf(handle)
            self._seccomp_path = handle.name
        self.isolation = (
            "user/pid/net/ipc/uts namespaces",
            "read-only root",
            "private /tmp workdir",
            "/root, /home, /run hidden",
            "seccomp filter" if self._seccomp_path else "no seccomp",
            "unprivileged uid" if self.setpriv else "caller's uid",
            "rlimits",
            "wall-clock kill",
        )
        probe = self.run("print('ok')")
        if probe.stdout != "ok\n":
            raise BackendUnavailable(f"bwrap cannot start a jail here: {probe.stderr.strip()[-300:]}")

    def _argv(self, code_path: str, rlimits: list[str], limits: Limits) -> list[str]:
        argv = [self.bwrap, "--ro-bind", "/", "/"]
        for directory, tops in self.hidden:
            argv += ["--tmpfs", directory]  # homes and /run hidden, the interpreter kept
            for top in tops:
                argv += ["--ro-bind", f"{directory}/{top}", f"{directory}/{top}"]
        argv += [
            "--tmpfs", "/tmp",
            "--perms", "01777", "--dir", "/tmp/work",
            "--ro-bind", code_path, "/tmp/code.py",
            "--ro-bind", HARNESS, "/tmp/harness.py",
        ]  # fmt: skip
        for kept in self.tmp_kept:  # a venv below /tmp stays usable, and only the venv
            for parent in parents_below(kept):
                argv += ["--perms", "0755", "--dir", parent]
            argv += ["--ro-bind", kept, kept]
        argv += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--chdir", "/tmp/work",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]  # fmt: skip
        for key, value in clean_environment("/tmp/work").items():
            argv += ["--setenv", key, value]
        if self._seccomp_path:
            argv += ["--seccomp", "4"]
        python = [self.python, "-I", "/tmp/harness.py", "/tmp/code.py", "3", *rlimits]
        if self.setpriv:
            uid = str(_UID_BASE + next(_uids) % 1000)
            # No user namespace as root: the uid switch must be a real one for RLIMIT_NPROC.
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"]
            argv += [self.setpriv, "--reuid", uid, "--regid", uid, "--clear-groups", "--inh-caps=-all"]
            return argv + python
        return [*argv, "--unshare-user", "--", *python]

    def _open_extra_fds(self) -> list[tuple[int, int]]:
        if not self._seccomp_path:
            return []
        return [(os.open(self._seccomp_path, os.O_RDONLY), 4)]  # bwrap --seccomp 4 reads it

    def _returncode(self, returncode: int) -> int:
        # bwrap reports a child killed by signal N as exit status 128 + N.
        return -(returncode - 128) if 128 < returncode < 160 else returncode

    def _environment(self, workdir: str) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin"}  # bwrap clears and sets the run's environment itself

    def close(self) -> None:
        if self._seccomp_path:
            os.unlink(self._seccomp_path)
            self._seccomp_path = None
