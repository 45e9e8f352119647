"""One accounting unit per run: a cgroup (v1 or v2) holding every process of the run.

A run's memory (user memory, the files it writes to its tmpfs, and the kernel memory it makes
the kernel hold: pipe and socket buffers, semaphores, epoll and inotify watches, timers, page
tables, thread stacks), its number of processes and threads, and its CPU time are counted for
all of its processes together by the kernel's ``memory``, ``pids`` and ``cpuacct`` controllers
(v2: ``memory``, ``pids`` and the core ``cpu.stat``). Forking does not multiply a limit, and the
counters say afterwards which limit a run hit.

Layout, below the cgroup the calling process is in (so that the caller's own limits still cover
everything): ``coa-sandbox-<pid>/`` per process, one *home* below it per worker or backend, and
in a home one leaf per run (and ``worker`` for a pool or session worker itself). Every file is
reached through directory descriptors, opened before a worker enters its jail: the jail's root
holds no ``/sys``, and the descriptors still work after ``pivot_root``. A run child attaches
itself (it writes ``0`` into ``cgroup.procs`` descriptors handed to it) before it runs anything,
and writes its own limits before the code starts; it closes those descriptors first. Finding the
hierarchies and making this process's root is :mod:`sandbox._cgroup_probe`'s job.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from dataclasses import dataclass

__all__ = ["Cgroup", "CgroupUnavailable", "RunUsage", "attach_self", "limit_value", "write_limits"]

#: v1 controllers a run needs (and ``freezer``, used when mounted); v2 needs memory and pids.
V1_REQUIRED = ("memory", "pids", "cpuacct")
V1_OPTIONAL = ("freezer",)
V2_REQUIRED = ("memory", "pids")
UNIFIED = "unified"
_MB = 1 << 20


class CgroupUnavailable(RuntimeError):
    """No cgroup can be made here (not mounted, not writable, controllers missing); says why."""


@dataclass(frozen=True, slots=True)
class RunUsage:
    """What the kernel counted for one cgroup. ``oom_kills``/``process_limit_hits``: how often
    the memory limit killed a process / the process limit refused a fork or a thread;
    ``memory_peak``: bytes (0 where the kernel does not say)."""

    cpu_s: float
    oom_kills: int = 0
    process_limit_hits: int = 0
    memory_peak: int = 0


def _fields(text: str) -> dict[str, int]:
    """``key value`` lines (memory.events, pids.events, cpu.stat, memory.oom_control)."""
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            found[parts[0]] = int(parts[1])
    return found


# File names per version: (hierarchy key, file) -- v1 spreads them over controller hierarchies.
_FILES = {
    1: {"memory": ("memory", "memory.limit_in_bytes"), "memsw": ("memory", "memory.memsw.limit_in_bytes"),
        "pids": ("pids", "pids.max"), "cpu": ("cpuacct", "cpuacct.usage"), "oom": ("memory", "memory.oom_control"),
        "pid_events": ("pids", "pids.events"), "peak": ("memory", "memory.max_usage_in_bytes"),
        "procs": ("pids", "cgroup.procs")},
    2: {"memory": (UNIFIED, "memory.max"), "swap": (UNIFIED, "memory.swap.max"), "pids": (UNIFIED, "pids.max"),
        "cpu": (UNIFIED, "cpu.stat"), "oom": (UNIFIED, "memory.events"), "pid_events": (UNIFIED, "pids.events"),
        "peak": (UNIFIED, "memory.peak"), "procs": (UNIFIED, "cgroup.procs"), "freeze": (UNIFIED, "cgroup.freeze"),
        "kill": (UNIFIED, "cgroup.kill")},
}  # fmt: skip
#: (version, hierarchy key, file) the kernel was seen to offer.
_OFFERED: set[tuple[int, str, str]] = set()
#: Limit files a run child writes for itself, in this order (memsw must not be below memory).
_LIMIT_KINDS = {1: ("memory", "memsw", "pids"), 2: ("memory", "swap", "pids")}


def limit_value(kind: str, memory_mb: int, max_processes: int) -> bytes:
    """What to write into limit file ``kind`` for a run's ``memory_mb`` and ``max_processes``."""
    if kind in ("memory", "memsw"):
        return str(memory_mb * _MB).encode()
    if kind == "swap":
        return b"0"
    if kind == "pids":
        return str(max_processes).encode()
    raise ValueError(f"unknown cgroup limit {kind!r}")


def attach_self(fds: list[int]) -> None:
    """Move the calling process into the cgroup whose ``cgroup.procs`` descriptors these are
    (one per hierarchy), then close them. Called first thing in a run child."""
    try:
        for fd in fds:
            os.write(fd, b"0")
    finally:
        for fd in fds:
            os.close(fd)


def write_limits(fds: list[tuple[int, str]], memory_mb: int, max_processes: int) -> None:
    """Write the run's limits through descriptors of its own cgroup's files, then close them:
    the code that runs next cannot reach its cgroup's files any more."""
    try:
        for fd, kind in fds:
            os.write(fd, limit_value(kind, memory_mb, max_processes))
    finally:
        for fd, _ in fds:
            os.close(fd)


class Cgroup:
    """One cgroup: its directory in every hierarchy it needs, held as directory descriptors."""

    def __init__(self, version: int, paths: dict[str, str], fds: dict[str, int]) -> None:
        self.version, self.paths, self._fds = version, dict(paths), dict(fds)
        self._serial = itertools.count(1)

    # -- making and finding ------------------------------------------------------------------
    @classmethod
    def open(cls, version: int, paths: dict[str, str]) -> Cgroup:
        """Open existing directories (``paths``: hierarchy key -> absolute path)."""
        fds: dict[str, int] = {}
        opened: dict[str, int] = {}
        try:
            for key, path in paths.items():
                if path not in opened:
                    opened[path] = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                fds[key] = opened[path]
        except OSError:
            for fd in opened.values():
                os.close(fd)
            raise
        return cls(version, paths, fds)

    def child(self, name: str, delegate: bool = False, without: tuple[str, ...] = ()) -> Cgroup:
        """Make (or reuse) the child directory ``name``. ``delegate``: it will have children of
        its own (v2 must enable the controllers for them in its ``cgroup.subtree_control``);
        ``without``: v1 hierarchies to leave out (a pool run needs no freezer: its PID namespace
        dies with it; one directory fewer to make and remove per run)."""
        made: dict[str, int] = {}
        try:
            for key, fd in self._fds.items():
                if key in made or key in without:
                    continue
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                child_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                for other, other_fd in self._fds.items():  # co-mounted controllers: one directory
                    if other_fd == fd:
                        made[other] = child_fd
        except OSError:
            for fd in set(made.values()):
                os.close(fd)
            raise
        paths = {key: f"{path}/{name}" for key, path in self.paths.items() if key in made}
        child = Cgroup(self.version, paths, made)
        if delegate and self.version == 2:
            child.write(UNIFIED, "cgroup.subtree_control", " ".join(f"+{c}" for c in V2_REQUIRED))
        return child

    def new_name(self, prefix: str) -> str:
        """A child name not used before by this handle (thread-safe)."""
        return f"{prefix}-{next(self._serial)}"

    # -- files ---------------------------------------------------------------------------------
    def read(self, key: str, name: str) -> str:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._fds[key])
        try:
            return os.read(fd, 65536).decode("ascii", errors="replace")
        finally:
            os.close(fd)

    def write(self, key: str, name: str, value: str) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=self._fds[key])
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def _file(self, what: str) -> tuple[str, str] | None:
        key, name = _FILES[self.version].get(what, ("", ""))
        if key not in self._fds:
            return None
        return key, name

    def _has(self, what: str) -> bool:
        """Whether the kernel offers file ``what`` (the same for every cgroup of a hierarchy,
        so asked once: a run's cgroup is made and read on every run)."""
        found = self._file(what)
        if found is None:
            return False
        cache_key = (self.version, found[0], found[1])
        if cache_key not in _OFFERED:
            try:
                os.stat(found[1], dir_fd=self._fds[found[0]])
            except OSError:
                return False  # (not remembered: a fake or a not yet populated directory)
            _OFFERED.add(cache_key)
        return True

    def attach_files(self) -> list[int]:
        """``cgroup.procs`` of every hierarchy, open for writing: a process writing ``0`` into
        each (:func:`attach_self`) joins this cgroup."""
        attach: list[int] = []
        try:
            for path in dict.fromkeys(self.paths.values()):
                key = next(k for k, p in self.paths.items() if p == path)
                attach.append(os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=self._fds[key]))
        except OSError:
            for fd in attach:
                os.close(fd)
            raise
        return attach

    def open_for_child(self) -> tuple[list[int], list[tuple[int, str]]]:
        """Descriptors a run child attaches itself with, and those it writes its limits through."""
        attach = self.attach_files()
        limits: list[tuple[int, str]] = []
        try:
            for kind in _LIMIT_KINDS[self.version]:
                if self._has(kind):
                    key, name = self._file(kind)  # type: ignore[misc]
                    limits.append((os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=self._fds[key]), kind))
        except OSError:
            for fd in [*attach, *(fd for fd, _ in limits)]:
                os.close(fd)
            raise
        return attach, limits

    def set_limits(self, memory_mb: int, max_processes: int) -> None:
        """Set the limits from here (a backend that knows them before the run starts)."""
        for kind in _LIMIT_KINDS[self.version]:
            if self._has(kind):
                key, name = self._file(kind)  # type: ignore[misc]
                self.write(key, name, limit_value(kind, memory_mb, max_processes).decode())

    def add(self, pid: int) -> None:
        for path in dict.fromkeys(self.paths.values()):
            key = next(k for k, p in self.paths.items() if p == path)
            self.write(key, "cgroup.procs", str(pid))

    # -- counters ------------------------------------------------------------------------------
    def cpu_s(self) -> float:
        """CPU seconds used by every process that was ever in this cgroup."""
        key, name = self._file("cpu")  # type: ignore[misc]
        text = self.read(key, name)
        if self.version == 1:
            return int(text.strip() or 0) / 1e9
        return _fields(text).get("usage_usec", 0) / 1e6

    def usage(self, peak: bool = False) -> RunUsage:
        """The counters (``peak``: also the memory high-water mark, one file more to read)."""
        oom = self._file("oom")
        events = _fields(self.read(*oom)) if oom else {}
        pid_events = self._file("pid_events")
        pids = _fields(self.read(*pid_events)) if pid_events and self._has("pid_events") else {}
        high = 0
        if peak and self._has("peak"):
            with contextlib.suppress(OSError, ValueError):
                high = int(self.read(*self._file("peak")).strip())  # type: ignore[misc]
        return RunUsage(self.cpu_s(), events.get("oom_kill", 0), pids.get("max", 0), high)

    def pids(self) -> list[int]:
        """Processes in the cgroup (never this process, nor 0 or 1, whatever the file says:
        :meth:`kill` signals each of them)."""
        key, name = self._file("procs")  # type: ignore[misc]
        mine = os.getpid()
        return [pid for pid in (int(word) for word in self.read(key, name).split()) if pid > 1 and pid != mine]

    # -- freezing and killing ------------------------------------------------------------------
    def can_freeze(self) -> bool:
        return "freezer" in self._fds if self.version == 1 else self._has("freeze")

    def freeze(self, wait_s: float = 1.0) -> bool:
        """Stop every process and thread in the cgroup (they keep their state); False if the
        freezer is not available or did not finish within ``wait_s``."""
        if not self.can_freeze():
            return False
        if self.version == 1:
            self.write("freezer", "freezer.state", "FROZEN")
            done = lambda: self.read("freezer", "freezer.state").strip() == "FROZEN"  # noqa: E731
        else:
            self.write(UNIFIED, "cgroup.freeze", "1")
            done = lambda: _fields(self.read(UNIFIED, "cgroup.events")).get("frozen") == 1  # noqa: E731
        deadline = time.monotonic() + wait_s
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True

    def thaw(self) -> None:
        if self.can_freeze():
            if self.version == 1:
                self.write("freezer", "freezer.state", "THAWED")
            else:
                self.write(UNIFIED, "cgroup.freeze", "0")

    def kill(self, rounds: int = 100) -> bool:
        """SIGKILL every process in the cgroup (frozen first, so none can fork meanwhile);
        True when it is empty."""
        if self.version == 2 and self._has("kill"):
            with contextlib.suppress(OSError):
                self.write(UNIFIED, "cgroup.kill", "1")
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return True
            frozen = self.freeze(wait_s=0.2)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:
                self.thaw()  # a frozen process dies of SIGKILL only once thawed
            time.sleep(0.001)
        return not self.pids()

    def remove(self, parent: Cgroup | None = None) -> bool:
        """Kill what is left, close, and remove the directories; False when one is still busy
        (a process still exiting): call again later. ``parent``: remove through its directory
        descriptors (a jailed worker sees no ``/sys``); else by absolute path. A retry finds the
        handle closed: what was left was killed the first time and is only still exiting."""
        if self._fds:
            with contextlib.suppress(OSError):
                self.kill()
        self.close()
        removed = True
        for path in dict.fromkeys(self.paths.values()):
            try:
                if parent is None:
                    os.rmdir(path)
                else:
                    key = next(k for k, p in self.paths.items() if p == path)
                    os.rmdir(path.rsplit("/", 1)[1], dir_fd=parent._fds[key])
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise
                removed = False
        return removed

    def remove_tree(self) -> bool:
        """:meth:`remove` every child (a worker's runs), then this one (by absolute path)."""
        names: set[str] = set()
        for path in dict.fromkeys(self.paths.values()):
            with contextlib.suppress(OSError):
                names |= {entry.name for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)}
        removed = True
        for name in sorted(names):
            paths = {key: f"{path}/{name}" for key, path in self.paths.items() if os.path.isdir(f"{path}/{name}")}
            with contextlib.suppress(OSError):
                removed = Cgroup.open(self.version, paths).remove() and removed
        return self.remove() and removed

    def close(self) -> None:
        for fd in set(self._fds.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}
