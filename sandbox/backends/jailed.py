"""What the two per-run jail wrappers (bubblewrap, nsjail) share around their command lines.

Both start one jail per run from a fresh interpreter, so the set-up is the same: as root each
run switches to its own leased uid (``RLIMIT_NPROC`` and uid-keyed access stay per run), the
jail's root is the allowlist root built from the interpreter and the grants, the run works in
the jail's quota'd ``/tmp`` (no host work directory), and a trivial run must succeed before the
backend is handed out (a host that cannot make the namespaces fails here, not in a user's run).
Only the wrapper's command line and its own layers differ.
"""

from __future__ import annotations

import contextlib
import os

from sandbox._jail import compile_seccomp, landlock_layer
from sandbox._root import Grants, root_policy
from sandbox._uids import UidPool
from sandbox.backends.base import BackendUnavailable
from sandbox.backends.subprocess_backend import SubprocessBackend
from sandbox.types import Limits

__all__ = ["JailedBackend"]

Paths = tuple[str, ...] | list[str]


class JailedBackend(SubprocessBackend):
    """A :class:`SubprocessBackend` whose every run is wrapped in a jail of its own."""

    #: Their rusage does not include the jailed run (the wrapper's child is in another pid space).
    cpu_accounted = False
    #: The pool's seccomp program per network setting, sealed in memory (see :meth:`_seal_seccomp`).
    _seccomp: dict[bool, int] = {}

    def _seal_seccomp(self) -> None:
        """Compile the pool's seccomp filter (libseccomp: it kills every call of another ABI,
        x32 and i386 included) once per network setting into an in-memory file that each run's
        harness loads itself; without pyseccomp there is none."""
        self._seccomp = {}
        for network in (False, True):
            compiled = compile_seccomp(allow_network=network)
            if compiled is not None:
                fd = os.memfd_create(f"coa-seccomp-{int(network)}")
                os.write(fd, compiled.program)
                self._seccomp[network] = fd

    def _open_extra_fd(self, limits: Limits) -> int | None:
        fd = self._seccomp.get(limits.network)
        return os.dup(fd) if fd is not None else None

    def close(self) -> None:
        for fd in self._seccomp.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._seccomp = {}
        super().close()

    def _build_root(self, read_only_paths: Paths, writable_paths: Paths) -> None:
        """Lease the run uids (as root) and build the allowlist root; unavailable when the root
        cannot be built (an interpreter or a grant that is not there)."""
        self.as_root = os.geteuid() == 0
        self._uid_pool = UidPool(eager=True) if self.as_root else None
        self.grants = Grants(tuple(read_only_paths), tuple(writable_paths))
        try:
            self.root = root_policy(self.python, self.grants)
        except OSError as exc:
            self.close()
            raise BackendUnavailable(str(exc)) from exc

    def _layers(self, namespaces: str, syscall_filter: str, identity: str) -> tuple[str, ...]:
        """The ``isolation`` list: the wrapper's namespaces, syscall filter and identity between
        the layers every jailed run has."""
        return (
            namespaces,
            f"allowlist root ({len(self.root.read_only)} read-only paths, {len(self.root.writable)} writable grants)",
            "minimal /dev",
            "private /tmp and workdir per run (byte and inode quotas)",
            syscall_filter,
            landlock_layer(),
            identity,
            "rlimits",
            self._accounting_layer(),
            "wall-clock kill",
        )

    def _probe(self) -> None:
        """One trivial run; unavailable (and closed) when the host cannot start the jail."""
        probe = self.run("print('ok')", limits=Limits(wall_s=30, cpu_s=10))
        if probe.stdout != "ok\n":
            self.close()
            raise BackendUnavailable(f"{self.name} cannot start a jail here: {probe.stderr.strip()[-300:]}")

    def _returncode(self, returncode: int, reported: int | None) -> int:
        """The wrappers report a child killed by signal N as exit status 128 + N, the same figure
        as the child's own ``sys.exit(128 + N)``: it is an exit status when the harness's end
        record says so (the harness writes it just before it exits), else that signal."""
        if 128 < returncode < 160 and reported != returncode:
            return -(returncode - 128)
        return returncode

    def _host_workdir(self) -> contextlib.AbstractContextManager[str | None]:
        return contextlib.nullcontext(None)  # the run works in the jail's own /tmp
