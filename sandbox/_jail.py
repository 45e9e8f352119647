"""Linux isolation primitives for the pool backend (namespaces, mounts, privileges, seccomp).

Two stages. :func:`isolate_worker` runs once in a pool worker: a private mount namespace
with the whole tree read-only and unreadable home directories hidden, and an empty network
namespace. :func:`enter_run` runs in every forked run child: fresh PID, mount, IPC and UTS
namespaces, its own ``/proc`` and a private writable workdir, then :func:`drop_privileges`.
Everything here goes through libc with ``ctypes`` because Python 3.11 has no ``unshare``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = [
    "HIDDEN_DIRS",
    "PER_RUN_LAYERS",
    "CompiledFilter",
    "JailError",
    "become_subreaper",
    "build_seccomp",
    "drop_privileges",
    "enter_run",
    "hide_plan",
    "isolate_worker",
    "new_pid_namespace_for_children",
    "unshare_pid",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 0x1, 0x2
_SYS_MOUNT_SETATTR = 442  # same number on x86_64 and aarch64 (generic syscall table)
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_CLONE_NEW_FLAGS = (
    CLONE_NEWNS,
    CLONE_NEWUTS,
    CLONE_NEWIPC,
    CLONE_NEWUSER,
    CLONE_NEWPID,
    CLONE_NEWNET,
    0x02000000,
    0x00000080,
)  # ..., cgroup, time namespaces

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long


class JailError(OSError):
    """A kernel refused an isolation step (no namespaces, no mount permission, ...)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _make_tree_readonly() -> None:
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    result = _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if result == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:
        _check(-1, "mount_setattr /")
    # Kernels before 5.12: remount every mount point read-only, keeping its locked flags.
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            target, options = fields[4], fields[5].split(",")
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
            flags |= MS_NODEV if "nodev" in options else 0
            flags |= MS_NOEXEC if "noexec" in options else 0
            # Mounts hidden under another mount cannot be reached; they are covered anyway.
            with contextlib.suppress(JailError):
                _mount(None, target.replace("\\040", " "), None, flags)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _hide(directory: str, keep: Iterable[str]) -> None:
    """Cover ``directory`` with an empty read-only tmpfs, re-exposing only ``keep`` paths."""
    kept = sorted(
        {
            os.path.realpath(p)
            for p in keep
            if os.path.realpath(p).startswith(directory.rstrip("/") + "/") and os.path.exists(p)
        }
    )
    handles = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in kept]
    try:
        _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for path, fd in handles:
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    finally:
        for _, fd in handles:
            os.close(fd)


#: Directories runs see as empty: homes (secrets in dotfiles) and /run (host unix sockets such
#: as a database's or Docker's, which a read-only mount does not stop a client connecting to).
HIDDEN_DIRS = ("/root", "/home", "/run")


def hide_plan(keep: Iterable[str], hidden: Iterable[str] = HIDDEN_DIRS) -> list[tuple[str, tuple[str, ...]]]:
    """For wrapper backends: each existing hidden directory and the top-level entries below it
    to bind back read-only because a ``keep`` path (the interpreter) lives there.

    Whole top-level entries, not the kept paths themselves: bwrap creates missing parents
    with mode 0700, which an unprivileged run could not traverse.
    """
    plan = []
    for directory in hidden:
        if not os.path.isdir(directory):
            continue
        prefix = directory.rstrip("/") + "/"
        real = [os.path.realpath(path) for path in keep]
        tops = {path[len(prefix) :].split("/")[0] for path in real if path.startswith(prefix)}
        plan.append((directory, tuple(sorted(t for t in tops if t))))
    return plan


#: Entries the wrapper backends create in the jail's own ``/tmp``; nothing may be bound over them.
JAIL_TMP_ENTRIES = ("work", "code.py", "harness.py")


def tmp_keeps(keep: Iterable[str], tmp: str = "/tmp") -> tuple[str, ...]:
    """The ``keep`` directories (a venv's prefix) below ``tmp``, to bind back read-only.

    Wrapper backends mount a fresh tmpfs on ``/tmp``; an interpreter started from a venv
    there (``/tmp/venv/bin/python``) must be bound back or the jail cannot exec it. Exactly
    those directories are bound, never their siblings (a venv inside a checkout must not expose
    the checkout); a path nested in another kept one, or one over the jail's own entries, is
    left out.
    """
    prefix = tmp.rstrip("/") + "/"
    kept = sorted({path.rstrip("/") for path in keep if path.startswith(prefix) and len(path) > len(prefix)})
    chosen: list[str] = []
    for path in kept:
        if path[len(prefix) :].split("/")[0] in JAIL_TMP_ENTRIES:
            continue
        if not any(path.startswith(parent + "/") for parent in chosen):
            chosen.append(path)
    return tuple(chosen)


def interpreter_dirs(python: str) -> tuple[str, ...]:
    """Directories an interpreter needs (its prefix: a venv's site-packages, the stdlib)."""
    if python == sys.executable:
        return (sys.prefix, sys.base_prefix)
    return (os.path.dirname(os.path.dirname(python)),)  # .../bin/python -> ...


def parents_below(path: str, tmp: str = "/tmp") -> list[str]:
    """The directories between ``tmp`` and ``path``, outermost first (``/tmp/a/b/c`` -> a, a/b)."""
    parts = path[len(tmp.rstrip("/")) + 1 :].split("/")[:-1]
    return [f"{tmp.rstrip('/')}/{'/'.join(parts[: i + 1])}" for i in range(len(parts))]


_DEVICES = ("null", "zero", "full", "random", "urandom")


def _minimal_dev() -> None:
    """Replace ``/dev`` with the few harmless nodes programs expect (no kmsg, fuse, kvm...)."""
    handles = [(name, os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC)) for name in _DEVICES]
    try:
        _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
        for name, fd in handles:
            with open(f"/dev/{name}", "w"):
                pass
            _mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
    finally:
        for _, fd in handles:
            os.close(fd)
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"/dev/{link}")
    os.mkdir("/dev/shm", 0o755)


def isolate_worker(hide: Iterable[str], keep: Iterable[str]) -> list[str]:
    """Enter the worker-level jail; return the isolation layers now in force.

    Not root: a user namespace maps us to root inside it, which is what allows the mounts.
    """
    layers = []
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare user")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        layers.append("user namespace")
    else:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare mount+net")
    layers += ["network namespace (no interfaces)", "mount namespace"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = list(keep)
    for directory in hide:
        if os.path.isdir(directory):
            _hide(directory, keep)
            layers.append(f"{directory} hidden")
    _minimal_dev()
    layers.append("minimal /dev")
    _make_tree_readonly()
    layers.append("read-only filesystem")
    return layers


def new_pid_namespace_for_children(own_pid_ns_fd: int) -> None:
    """Make the *next* fork land in a brand-new PID namespace (as its PID 1).

    ``unshare(CLONE_NEWPID)`` only works once per process, so first point the children's
    namespace back at our own with ``setns`` — one fork per run instead of two.
    """
    _check(_libc.setns(own_pid_ns_fd, CLONE_NEWPID), "setns pid")
    _check(_libc.unshare(CLONE_NEWPID), "unshare pid")


def unshare_pid() -> None:
    """The calling process's next child starts a new PID namespace (once per process)."""
    _check(_libc.unshare(CLONE_NEWPID), "unshare pid")


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to us, so we can wait for them directly."""
    _check(_libc.prctl(36, 1, 0, 0, 0), "PR_SET_CHILD_SUBREAPER")


#: Namespaces every run child enters on top of the worker's (reported in the pool's isolation).
PER_RUN_LAYERS = ("pid namespace per run", "ipc namespace per run", "uts namespace per run")


def enter_run(workdir: str, owner: int, workdir_mb: int) -> list[str]:
    """In the forked run child (PID 1 of its namespace, still privileged).

    A fresh tmpfs is mounted on the workdir's parent (``/tmp`` by default) and left owned by
    root, so the run can write only in its workdir below it, never in ``/tmp`` itself.
    """
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS), "unshare run")
    layers = ["pid namespace", "ipc namespace", "uts namespace"]
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        layers.append("private /proc")
    except JailError:  # user namespaces may not mount proc: hide the host's instead
        _mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k")
        layers.append("/proc hidden")
    scratch = os.path.dirname(workdir.rstrip("/")) or "/"
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={workdir_mb}m,mode=0755")
    os.mkdir(workdir, 0o700)
    os.chown(workdir, owner, owner)
    layers.append(f"private {workdir_mb} MB workdir")
    _check(_libc.sethostname(b"sandbox", 7), "sethostname")
    return layers


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int, seccomp_filter: Any | None) -> None:
    """Become ``uid`` (root) or drop every capability (user namespace), then lock down."""
    if os.geteuid() == 0 and uid:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0), "pdeathsig")  # reset by setuid
    _check(_libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")  # own /proc/self readable
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp_filter is not None:  # a CompiledFilter or a pyseccomp SyscallFilter
        seccomp_filter.load()


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
        count = len(program) // ctypes.sizeof(_SockFilter)
        self._instructions = (_SockFilter * count).from_buffer_copy(program)
        self._prog = _SockFprog(count, ctypes.cast(self._instructions, ctypes.POINTER(_SockFilter)))

    @classmethod
    def from_pyseccomp(cls, seccomp_filter: Any) -> CompiledFilter:
        fd = os.memfd_create("seccomp-bpf")
        with os.fdopen(fd, "w+b") as handle:
            seccomp_filter.export_bpf(handle)
            handle.seek(0)
            return cls(handle.read())

    def load(self) -> None:
        """Install the filter on the calling thread (no_new_privs must already be set)."""
        _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0), "seccomp")


# Kernel interfaces a snippet never needs and an escape usually does. io_uring is listed
# because its operations bypass seccomp's per-syscall checks.
_DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "acct",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "syslog",
    "iopl",
    "ioperm",
    "fanotify_init",
    "fsopen",
    "fsmount",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kcmp",
    "pidfd_getfd",
    "lookup_dcookie",
    "vhangup",
    "sethostname",
    "setdomainname",
)


def build_seccomp(allow_network: bool) -> Any | None:
    """A seccomp filter (pyseccomp) that kills the process on a denied call; None if absent.

    Killing (SIGSYS) rather than failing the call is deliberate: the run then reports
    ``violation`` instead of looking like an ordinary bug in the code.
    """
    try:
        import pyseccomp as sc
    except (ImportError, OSError):
        return None
    filt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED_SYSCALLS:
        with contextlib.suppress(ValueError, OSError):  # not a syscall on this architecture
            filt.add_rule(sc.KILL_PROCESS, name)
    for bit in _CLONE_NEW_FLAGS:
        filt.add_rule(sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    # clone3 passes its flags in memory seccomp cannot read: answer ENOSYS so libc falls
    # back to clone, whose flags the rules above do check.
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if not allow_network:
        filt.add_rule(sc.KILL_PROCESS, "socket", sc.Arg(0, sc.NE, 1))  # only AF_UNIX
        filt.add_rule(sc.KILL_PROCESS, "socketpair", sc.Arg(0, sc.NE, 1))
    return filt
