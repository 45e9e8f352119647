"""The last steps before untrusted code runs, shared by every jailing backend.

A run's scratch space (``/tmp`` with its workdir and the ``/dev/shm`` target: one tmpfs with a
byte *and* an inode quota), then privileges dropped and the seccomp filter loaded. The pool's
run child calls this after forking into fresh namespaces; under bubblewrap the entry script
(:mod:`sandbox._boot`) calls it inside the jail, which is why this module imports nothing but the
standard library and may be loaded from a file by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
from collections.abc import Callable, Iterable
from typing import NoReturn

__all__ = ["SCRATCH", "SHM_DIR", "WAIT_ALL", "WORKDIR", "CompiledFilter", "JailError", "become_subreaper",
           "drop_privileges", "enter_cgroup_namespace", "exit_code_of_init", "fork_init", "hide",
           "kill_children", "landlock_abi", "make_scratch", "mount", "restrict_writes", "scratch_options",
           "serve_as_init", "writable_in_jail"]  # fmt: skip

#: The run's writable space: ``/tmp`` (a fresh tmpfs), its workdir, and the directory that
#: ``/dev/shm`` points at, so POSIX shared memory and semaphores work and count against the quota.
SCRATCH = "/tmp"
WORKDIR = "/tmp/work"
SHM_DIR = "/tmp/.shm"
#: Inodes the scratch tmpfs uses itself (its root, the workdir, the shm directory).
_OWN_INODES = 3

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class JailError(OSError):
    """A kernel refused an isolation step (no namespaces, no mount permission, ...)."""


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def bind(source_fd: int, target: str, writable: bool, recursive: bool = False) -> None:
    """Bind what ``source_fd`` (an ``O_PATH`` descriptor) names onto ``target``; read-only unless
    ``writable``. The remount keeps the source's locked flags (noexec) as a user namespace
    requires; nosuid and nodev are always added (a device node in a granted directory is no way
    to the host's devices: the jail's four are bound on their own)."""
    source = f"/proc/self/fd/{source_fd}"
    try:
        mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    except JailError:
        if recursive:
            raise
        # A user namespace may refuse a non-recursive bind that would uncover what another
        # mount hides below the source: take the mounts below it too.
        mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY)
    locked = os.statvfs(target).f_flag
    flags |= MS_NOEXEC if locked & os.ST_NOEXEC else 0
    mount(None, target, None, flags)


def make_mountpoint(target: str, like_fd: int, root: str = "") -> None:
    """Create ``root + target`` (parents mode 0755) as a directory or an empty file, whichever
    the descriptor ``like_fd`` names."""
    path = root + target
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if stat.S_ISDIR(os.stat(f"/proc/self/fd/{like_fd}").st_mode):
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.lexists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _new_dirs(paths: Iterable[str], below: str) -> int:
    """How many directories and mountpoints creating ``paths`` adds below ``below``."""
    made: set[str] = set()
    for path in paths:
        while path.startswith(below + "/") and path not in made:
            made.add(path)
            path = os.path.dirname(path)
    return len(made)


def scratch_options(disk_mb: int, max_files: int, extra_inodes: int = 0) -> str:
    """tmpfs mount options for a run's scratch space: ``disk_mb`` bytes, ``max_files`` inodes
    for the run's own files and directories (the scratch space's own ones come on top)."""
    return f"size={disk_mb * 1024 * 1024},nr_inodes={max_files + _OWN_INODES + extra_inodes},mode=1777"


def enter_cgroup_namespace() -> None:
    """A cgroup namespace rooted at the cgroup we are in now (the run's): it sees that as "/",
    not the host's cgroup paths. Needs CAP_SYS_ADMIN."""
    check(_libc.unshare(0x02000000), "unshare cgroup")  # CLONE_NEWCGROUP


def hide(path: str) -> None:
    """Cover directory ``path`` with an empty, read-only tmpfs (the project's own packages: a
    regular install puts them, task files with gold answers included, inside the prefix)."""
    mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,nr_inodes=1,mode=0555")


def make_scratch(
    disk_mb: int, max_files: int, owner: int, carry: Iterable[tuple[str, bool]] = (), hidden: Iterable[str] = ()
) -> None:
    """Mount the run's scratch tmpfs on :data:`SCRATCH` and lay it out (needs CAP_SYS_ADMIN).

    ``carry``: (path, writable) pairs below ``/tmp`` that were visible before (an interpreter's
    venv, a granted directory) and are bound again on top of the fresh tmpfs; ``hidden``: paths
    below them to cover again (a bind takes none of the mounts below its source).
    """
    handles = [(path, writable, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path, writable in carry]
    try:
        extra = _new_dirs((path for path, _, _ in handles), SCRATCH)
        mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, scratch_options(disk_mb, max_files, extra))
        os.mkdir(WORKDIR, 0o700)
        os.chown(WORKDIR, owner, owner)
        os.mkdir(SHM_DIR)
        os.chmod(SHM_DIR, 0o1777)
        for path, writable, fd in handles:
            make_mountpoint(path, fd)
            bind(fd, path, writable)
        for path in hidden:
            if path.startswith(SCRATCH + "/") and os.path.isdir(path):
                hide(path)
    finally:
        for _, _, fd in handles:
            os.close(fd)


def make_scratch_dirs() -> None:
    """Lay out a scratch tmpfs that a wrapper (nsjail) already mounted with its quota."""
    os.mkdir(WORKDIR, 0o700)
    os.mkdir(SHM_DIR)
    os.chmod(SHM_DIR, 0o1777)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int, seccomp_filter: CompiledFilter | None, writable: Iterable[str] | None = None) -> None:
    """Become ``uid`` (when root) and drop every capability, then lock down for good
    (``writable``: see :func:`restrict_writes`)."""
    if os.geteuid() == 0 and uid:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    check(_libc.capset(ctypes.byref(header), data), "capset")
    check(_libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0), "pdeathsig")  # reset by setuid
    check(_libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")  # own /proc/self readable
    check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if writable is not None:
        restrict_writes(writable)
    if seccomp_filter is not None:
        seccomp_filter.load()


# Landlock (syscalls 444-446 on every architecture: the generic table).
_SYS_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}
_LANDLOCK_WRITE_FILE, _LANDLOCK_RULE_PATH_BENEATH, _LANDLOCK_CREATE_RULESET_VERSION = 1 << 1, 1, 1
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled)."""
    version = _libc.syscall(_SYS_LANDLOCK["create_ruleset"], None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


def restrict_writes(writable: Iterable[str]) -> bool:
    """With Landlock, no file may be opened for writing outside ``writable`` (the scratch space,
    ``/dev``, ``/proc``, writable grants), whatever it is: a read-only mount stops regular files
    already, not a named pipe (FIFO) in a read-only grant, which a host process may read. False
    where the kernel has no Landlock (nothing is restricted then)."""
    attr = _RulesetAttr(_LANDLOCK_WRITE_FILE)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    ruleset = _libc.syscall(_SYS_LANDLOCK["create_ruleset"], ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return False
    try:
        for path in writable:
            try:
                parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not there: nothing to write to
            try:
                rule = _PathBeneath(_LANDLOCK_WRITE_FILE, parent)
                check(_libc.syscall(_SYS_LANDLOCK["add_rule"], ruleset, _LANDLOCK_RULE_PATH_BENEATH,
                                    ctypes.byref(rule), 0), f"landlock_add_rule {path}")  # fmt: skip
            finally:
                os.close(parent)
        check(_libc.syscall(_SYS_LANDLOCK["restrict_self"], ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return True


def writable_in_jail(grants: Iterable[str]) -> list[str]:
    """Where a jailed run may open files for writing (see :func:`restrict_writes`)."""
    return [SCRATCH, "/dev", "/proc", *grants]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class CompiledFilter:
    """A seccomp filter compiled to BPF once, loaded with one ``prctl`` per run.

    libseccomp compiles its rules on every ``load()`` (~0.5 ms); a pool forks a child per
    run, so the worker compiles once and each child only hands the program to the kernel.
    """

    def __init__(self, program: bytes) -> None:
        if not program or len(program) % ctypes.sizeof(_SockFilter):
            raise ValueError("not a BPF program")
        self.program = program
        count = len(program) // ctypes.sizeof(_SockFilter)
        self._instructions = (_SockFilter * count).from_buffer_copy(program)
        self._prog = _SockFprog(count, ctypes.cast(self._instructions, ctypes.POINTER(_SockFilter)))

    @classmethod
    def handed_over(cls, fd: int) -> CompiledFilter:
        """The program a harness is handed on ``fd`` (an in-memory file; closed here)."""
        program = os.pread(fd, 1 << 20, 0)
        os.close(fd)
        return cls(program)

    def load(self) -> None:
        """Install the filter on the calling thread (no_new_privs must already be set)."""
        check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0), "seccomp")


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to us, so we can wait for them (or kill them)."""
    check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")


def _children() -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children", "rb") as handle:
                found += [int(pid) for pid in handle.read().split()]
    return found


def kill_children(rounds: int = 1000) -> None:
    """Kill and reap every child until none is left. As a subreaper that covers every orphaned
    descendant, a daemon included; one that forked before dying is caught on the next round."""
    for _ in range(rounds):
        children = _children()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        if not children:
            return


def report_own_exits(report: Callable[[int], None]) -> Callable[[int], None]:
    """Make ``os._exit`` in this process (not in a fork of it) call ``report`` with the exit
    status first: the harness's end record, so that a wrapper's exit status 128 + N the code chose
    (``os._exit(137)``) reads as that exit status, not as a death by signal N. Returns the
    unwrapped ``os._exit``, for the harness's own exit after its own report."""
    real_exit, harness_pid = os._exit, os.getpid()

    def exit_reported(status: int) -> None:
        if os.getpid() == harness_pid and isinstance(status, int) and not isinstance(status, bool):
            report(status & 0xFF)
        real_exit(status)

    os._exit = exit_reported
    return real_exit


WAIT_ALL = 0x40000000  # __WALL (linux/wait.h; the os module does not export it): raw clone() children count too


def serve_as_init(
    run: int,
    report_exit: Callable[[int], None],
    report_denied: Callable[[], None],
    report_signal: Callable[[int], None] = lambda _: None,
) -> NoReturn:
    """Stay PID 1 of the run's PID namespace while its code runs as ``run`` (PID 2); never returns.

    The kernel gives a namespace's init only the signals it has a handler for: code running as
    PID 1 that killed itself (``os.kill(os.getpid(), SIGTERM)``, ``signal.alarm``, ``abort()``, even
    SIGKILL) kept running, where it dies on every other system and backend. This init holds
    nothing of the run's but ``report_exit``'s channel. It reaps every process (``report_denied``
    for one the seccomp filter killed: orphans come here). When ``run`` ends, what is left is
    killed and reaped, then an exit is reported (the end record) and passed on; a death by signal
    N exits 128 + N without a record (read back as the signal; ``report_signal`` is told N).
    """
    wait = getattr(os.waitpid, "__wrapped__", os.waitpid)  # the harness's wrapper reports for the code

    def reap(block_until: int | None) -> int | None:
        while True:
            try:
                pid, status = wait(-1, WAIT_ALL)
            except ChildProcessError:
                return None
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS:
                report_denied()
            if pid == block_until:
                return status

    status = reap(run)
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)  # as init: every other process of the namespace
    reap(None)
    if status is None or os.WIFSIGNALED(status):
        number = os.WTERMSIG(status) if status is not None else signal.SIGKILL
        report_signal(number)
        os._exit(128 + number)
    code = os.waitstatus_to_exitcode(status)
    report_exit(code)
    os._exit(code)


def fork_init(
    channel: int,
    report_exit: Callable[[int], None],
    report_denied: Callable[[], None],
    report_signal: Callable[[int], None] = lambda _: None,
    keep: tuple[int, ...] = (),
) -> bool:
    """As PID 1 of a PID namespace: fork the process the code runs in, which returns True (as
    PID 2), and stay behind as the namespace's init (:func:`serve_as_init`), holding only
    ``channel`` (the reports' descriptor) and ``keep`` of what the run was given. Not PID 1:
    False, nothing done. Raises OSError when it cannot fork."""
    if os.getpid() != 1:
        return False
    run = os.fork()
    if run == 0:
        return True
    try:
        low = 0
        for fd in sorted({channel, *keep}):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        serve_as_init(run, report_exit, report_denied, report_signal)
    finally:
        os._exit(70)


def exit_code_of_init(returncode: int, under_init: bool = True) -> int:
    """The code's exit code from its init's (see :func:`serve_as_init`), when the init wrote no
    end record: 128 + N was a death by signal N (-N). ``under_init`` false: ``returncode``."""
    return -(returncode - 128) if under_init and 128 < returncode <= 128 + 64 else returncode
