"""bubblewrap backend: a fresh ``bwrap`` jail around a fresh interpreter for every run.

The same policy as the pool, another mechanism: bubblewrap builds the allowlist root (see
:mod:`sandbox._root`) and the namespaces (user when not root, PID, IPC, UTS, cgroup, and network
unless ``Limits.network``), then our harness, still holding CAP_SYS_ADMIN inside the jail,
mounts the run's quota'd ``/tmp`` (bubblewrap's tmpfs has no inode limit), switches to an
unprivileged uid when root, drops every capability and loads the seccomp filter itself (see
:mod:`sandbox._lockdown`). Paid per run: a process start plus the interpreter's own imports.
Install with ``apt-get install bubblewrap``.
"""

from __future__ import annotations

import json
import os
import shutil

from sandbox._lockdown import SCRATCH, SHM_DIR
from sandbox._root import RootPolicy
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.jailed import JailedBackend
from sandbox.backends.subprocess_backend import JAIL_FILES, JAIL_HARNESS_DIR
from sandbox.types import Limits

__all__ = ["BwrapBackend", "bwrap_root_args", "dev_links"]

def dev_links() -> dict[str, str]:
    """The links every jail's ``/dev`` holds besides its four device nodes."""
    return {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
            "stderr": "/proc/self/fd/2", "shm": SHM_DIR}  # fmt: skip


def _parents(paths: list[str]) -> list[str]:
    """Every directory above ``paths``, outermost first (bwrap would make missing ones 0700)."""
    found: set[str] = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and parent not in found:
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda p: (p.count("/"), p))


def bwrap_root_args(policy: RootPolicy) -> list[str]:
    """The bwrap options that assemble ``policy``'s root (pure function, unit-tested)."""
    targets = [*policy.read_only, *policy.writable, *(path for path, _ in policy.symlinks)]
    targets += [f"/dev/{name}" for name in policy.devices] + [f"{JAIL_HARNESS_DIR}/x", f"{SCRATCH}/x", "/proc/x"]
    args: list[str] = []
    for directory in _parents(targets):
        args += ["--perms", "0755", "--dir", directory]
    for path, target in policy.symlinks:
        args += ["--symlink", target, path]
    for path in policy.read_only:
        args += ["--ro-bind", path, path]
    for path in policy.writable:
        args += ["--bind", path, path]
    for path in policy.hidden:  # the project's own packages: an empty, read-only directory
        args += ["--tmpfs", path, "--remount-ro", path]
    for name in policy.devices:
        args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for name, target in dev_links().items():
        args += ["--symlink", target, f"/dev/{name}"]
    args += ["--proc", "/proc"]
    return args


class BwrapBackend(JailedBackend):
    """``bwrap ... python -I _boot.py`` per run (see the module docstring)."""

    name = "bwrap"

    def __init__(
        self,
        python: str | None = None,
        *,
        bwrap: str | None = None,
        seccomp: bool = True,
        read_only_paths: tuple[str, ...] | list[str] = (),
        writable_paths: tuple[str, ...] | list[str] = (),
        accounting: str | None = None,
    ) -> None:
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise BackendUnavailable("bubblewrap is not installed (apt-get install bubblewrap)")
        super().__init__(python, quiet=True, accounting=accounting)
        self._build_root(read_only_paths, writable_paths)
        self._root_args = {False: bwrap_root_args(self.root), True: bwrap_root_args(self.root.with_network_files())}
        if seccomp:
            self._seal_seccomp()
        self.isolation = self._layers(
            "user/pid/net/ipc/uts namespaces" if not self.as_root else "pid/net/ipc/uts namespaces",
            "seccomp filter" if self._seccomp else "no seccomp",
            "unprivileged uid" if self.as_root else "no capabilities",
        )
        self._probe()

    def _argv(self, config: dict, limits: Limits, uid: int | None = None) -> list[str]:
        uid = uid if uid is not None else os.getuid()
        scratch = {"disk_mb": limits.disk_mb, "max_files": limits.max_files, "uid": uid,
                   "carry": [list(entry) for entry in self.root.below_scratch()],
                   "hide": list(self.root.hidden), "writable": list(self.root.writable)}  # fmt: skip
        config = {**config, "scratch": scratch}
        argv = [self.bwrap, *self._root_args[limits.network]]
        for path in JAIL_FILES:
            argv += ["--ro-bind", path, f"{JAIL_HARNESS_DIR}/{os.path.basename(path)}"]
        argv += [
            "--chdir", "/",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            # The harness mounts the run's scratch tmpfs, then drops these for good.
            "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
        ]  # fmt: skip
        if not limits.network:
            argv.append("--unshare-net")
        if not self.as_root:
            argv.append("--unshare-user")
        for key, value in self._environment_in_jail().items():
            argv += ["--setenv", key, value]
        boot = f"{JAIL_HARNESS_DIR}/{os.path.basename(JAIL_FILES[0])}"
        return [*argv, "--remount-ro", "/", "--", self.python, "-I", "-B", boot, json.dumps(config)]

    def _environment_in_jail(self) -> dict[str, str]:
        from sandbox._limits import clean_environment

        return clean_environment()

    def _environment(self, workdir: str | None) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin"}  # bwrap clears and sets the run's environment itself
