"""Linux isolation for the pool backend: the worker's allowlist root, per-run namespaces, seccomp.

Two stages. :func:`isolate_worker` runs once in a pool worker: an empty network namespace and
a mount namespace whose root is assembled from the :class:`~sandbox._root.RootPolicy` (the
interpreter and its libraries read-only, four device nodes, granted paths) and then made
read-only; the host tree is detached. :func:`enter_run` runs in every forked run child: fresh
PID, mount, IPC and UTS namespaces, its own ``/proc`` and its scratch tmpfs (see
:mod:`sandbox._lockdown`), before the child drops its privileges.
Everything here goes through libc with ``ctypes`` because Python 3.11 has no ``unshare``.

Host IPC stays out by construction: no host Unix socket file exists in the root (nothing is
there that was not listed), abstract Unix sockets belong to the network namespace (an empty
one), System V IPC and POSIX message queues to the IPC namespace (one per run), and
``/dev/shm`` points into the run's own scratch space. On top of that the seccomp filter answers
``socket(AF_UNIX)`` with EACCES, so not even a granted directory's socket can be connected to;
``socketpair`` (multiprocessing's pipes) still works.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import socket
from typing import Any

from sandbox._lockdown import (
    SCRATCH,
    SHM_DIR,
    CompiledFilter,
    JailError,
    become_subreaper,
    bind,
    check,
    drop_privileges,
    hide,
    landlock_abi,
    make_mountpoint,
    make_scratch,
    mount,
    writable_in_jail,
)
from sandbox._root import RootPolicy

__all__ = [
    "PER_RUN_LAYERS",
    "CompiledFilter",
    "JailError",
    "become_subreaper",
    "build_seccomp",
    "compile_seccomp",
    "drop_privileges",
    "enter_run",
    "isolate_worker",
    "landlock_layer",
    "new_pid_namespace_for_children",
    "unshare_pid",
    "writable_in_jail",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_MOVE = 32, 4096, 16384, 1 << 18, 8192
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 0x1, 0x2
_MNT_DETACH = 2
_SYS_MOUNT_SETATTR = 442  # same number on x86_64 and aarch64 (generic syscall table)
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
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
_libc.syscall.restype = ctypes.c_long
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _make_tree_readonly(root: str) -> None:
    """Every mount at or below ``root`` read-only and nosuid."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    result = _libc.syscall(
        _SYS_MOUNT_SETATTR, _AT_FDCWD, root.encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if result == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:
        check(-1, f"mount_setattr {root}")
    # Kernels before 5.12: remount every mount point below root read-only, keeping locked flags.
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            target, options = fields[4].replace("\\040", " "), fields[5].split(",")
            if not (target == root or target.startswith(root.rstrip("/") + "/")):
                continue
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
            flags |= MS_NODEV if "nodev" in options else 0
            flags |= MS_NOEXEC if "noexec" in options else 0
            with contextlib.suppress(JailError):  # covered by a later mount: unreachable anyway
                mount(None, target, None, flags)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def _pivot_into(new_root: str) -> None:
    """Make ``new_root`` our ``/`` and detach the host tree from this mount namespace."""
    os.chdir(new_root)
    if _SYS_PIVOT_ROOT is not None and _libc.syscall(_SYS_PIVOT_ROOT, b".", b".") == 0:
        # The old root now sits under the new one at "/": detach it (pivot_root(2), NOTES).
        check(_libc.umount2(b".", _MNT_DETACH), "umount old root")
    else:  # pivot_root refused (an initramfs root): move the mount over / and chroot into it
        mount(new_root, "/", None, MS_MOVE)
        check(_libc.chroot(b"."), "chroot")
    os.chdir("/")


def _build_root(policy: RootPolicy, new_root: str) -> None:
    """Assemble the allowlist root on a fresh tmpfs at ``new_root`` (see :mod:`sandbox._root`)."""
    binds = [(path, False) for path in policy.read_only] + [(path, True) for path in policy.writable]
    # Descriptors first: once the tmpfs is mounted, a source below new_root (a venv in /tmp) is hidden.
    handles = [(path, writable, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path, writable in binds]
    devices = [(f"/dev/{name}", os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC)) for name in policy.devices]
    proc = os.open("/proc", os.O_PATH | os.O_CLOEXEC)
    try:
        mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
        for path, target in policy.symlinks:
            os.makedirs(os.path.dirname(new_root + path), mode=0o755, exist_ok=True)
            os.symlink(target, new_root + path)
        for path, _, fd in handles:
            make_mountpoint(path, fd, new_root)
        for path, fd in devices:
            make_mountpoint(path, fd, new_root)
        links = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
                 "stderr": "/proc/self/fd/2", "shm": SHM_DIR}  # fmt: skip
        for name, target in links.items():
            os.symlink(target, f"{new_root}/dev/{name}")
        os.mkdir(new_root + "/proc", 0o555)
        os.makedirs(new_root + SCRATCH, mode=0o755, exist_ok=True)
        for path, writable, fd in handles:
            if not writable:
                bind(fd, new_root + path, writable=False)
        for path, fd in devices:
            mount(f"/proc/self/fd/{fd}", new_root + path, None, MS_BIND)
        # The worker's own view of the host's processes (it counts them for RLIMIT_NPROC); every
        # run mounts a fresh /proc of its PID namespace over it.
        mount(f"/proc/self/fd/{proc}", new_root + "/proc", None, MS_BIND | MS_REC)
        for path in policy.hidden:
            hide(new_root + path)
        _make_tree_readonly(new_root)
        for path, writable, fd in handles:
            if writable:  # after the read-only pass, which would otherwise cover them too
                bind(fd, new_root + path, writable=True)
    finally:
        for _, _, fd in handles:
            os.close(fd)
        for _, fd in devices:
            os.close(fd)
        os.close(proc)
    _pivot_into(new_root)


def isolate_worker(policy: RootPolicy) -> list[str]:
    """Enter the worker-level jail; return the isolation layers now in force.

    Not root: a user namespace maps us to root inside it, which is what allows the mounts.
    """
    layers = []
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare user")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        layers.append("user namespace")
    else:
        check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare mount+net")
    layers += ["network namespace (no interfaces)", "mount namespace"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Any directory serves as the mount point: the tmpfs covers it in our namespace only.
    _build_root(policy, SCRATCH)
    layers += [
        f"allowlist root ({len(policy.read_only)} read-only paths, {len(policy.writable)} writable grants)",
        f"minimal /dev ({', '.join(policy.devices)})",
        "read-only filesystem",
    ]
    return layers


def new_pid_namespace_for_children(own_pid_ns_fd: int) -> None:
    """Make the *next* fork land in a brand-new PID namespace (as its PID 1).

    ``unshare(CLONE_NEWPID)`` only works once per process, so first point the children's
    namespace back at our own with ``setns`` — one fork per run instead of two.
    """
    check(_libc.setns(own_pid_ns_fd, CLONE_NEWPID), "setns pid")
    check(_libc.unshare(CLONE_NEWPID), "unshare pid")


def unshare_pid() -> None:
    """The calling process's next child starts a new PID namespace (once per process)."""
    check(_libc.unshare(CLONE_NEWPID), "unshare pid")


def landlock_layer() -> str:
    """How the Landlock write restriction is named in a backend's ``isolation``."""
    if landlock_abi():
        return "landlock: no file opened for writing outside /tmp, /dev, /proc and writable grants"
    return "no landlock (kernel without it): a FIFO in a read-only grant can be written"


#: Namespaces every run child enters on top of the worker's (reported in the pool's isolation).
PER_RUN_LAYERS = ("pid namespace per run", "ipc namespace per run", "uts namespace per run",
                  "cgroup namespace per run", "fresh /proc per run")  # fmt: skip


def enter_run(
    owner: int, disk_mb: int, max_files: int, carry: tuple[tuple[str, bool], ...] = (), hidden: tuple[str, ...] = ()
) -> None:
    """In the forked run child (PID 1 of its namespace, still privileged): own namespaces, a
    fresh ``/proc``, and the scratch tmpfs with the run's quotas (``carry``: bound paths below
    ``/tmp`` to bind again on top of it; ``hidden``: paths below them to cover again)."""
    # A cgroup namespace too, entered after the child joined its run's cgroup: the run sees that
    # as "/", not the host's cgroup paths (which name the caller's pid).
    check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP), "unshare run")
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except JailError:  # user namespaces may not mount proc: hide the host's instead
        mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k")
    make_scratch(disk_mb, max_files, owner, carry, hidden)
    check(_libc.sethostname(b"sandbox", 7), "sethostname")


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


#: Answered with EPERM: memory a run could fill outside its scratch quotas, held by the kernel
#: until the run's IPC namespace goes (anonymous in-memory files, System V shared memory,
#: message queues and semaphore sets, POSIX message queues). A cgroup counts most of it too
#: (150 semaphore sets pinned ~300 MB before); refusing it holds in the per-process mode as well.
#: ``io_setup``: Linux AIO contexts draw on one host-wide pool of events (``fs.aio-max-nr``,
#: 65536 by default), which a single call could take from every other process on the host.
_REFUSED_SYSCALLS = ("memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open", "io_setup")
#: ``mmap`` flag answered with EPERM: huge pages come from the host's reserved pool, which no
#: memory cgroup counts (shmget's and memfd_create's huge-page flags are refused with the calls).
MAP_HUGETLB = 0x40000
#: ``socketpair`` types answered with EACCES: an unconnected datagram end can address any named
#: socket (``sendto``, ``sendmsg`` with a name, ``connect``), a granted directory's included.
#: (AF_UNIX's SOCK_RAW is a datagram socket too.) Stream and seqpacket pairs are connected for
#: good: the kernel ignores or refuses another address for them.
_UNCONNECTED_SOCKET_TYPES = (socket.SOCK_DGRAM, socket.SOCK_RAW)
_SOCKET_TYPE_MASK = 0xF  # SOCK_NONBLOCK and SOCK_CLOEXEC sit above it


def build_seccomp(allow_network: bool) -> Any | None:
    """A seccomp filter (pyseccomp) that kills the process on a denied call; None if absent.

    Killing (SIGSYS) rather than failing the call is deliberate: the run then reports
    ``violation`` instead of looking like an ordinary bug in the code. ``socket(AF_UNIX)`` is
    the exception: it fails with EACCES (C libraries probe for nscd or syslog that way and must
    carry on), which a run that does not handle it reports as a violation too; so do the calls in
    ``_REFUSED_SYSCALLS`` (EPERM).
    """
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError):
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
    filt.add_rule(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.EQ, socket.AF_UNIX))
    for kind in _UNCONNECTED_SOCKET_TYPES:
        filt.add_rule(sc.ERRNO(errno.EACCES), "socketpair", sc.Arg(1, sc.MASKED_EQ, _SOCKET_TYPE_MASK, int(kind)))
    for name in _REFUSED_SYSCALLS:
        with contextlib.suppress(ValueError, OSError):
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
    filt.add_rule(sc.ERRNO(errno.EPERM), "mmap", sc.Arg(3, sc.MASKED_EQ, MAP_HUGETLB, MAP_HUGETLB))
    if not allow_network:
        filt.add_rule(sc.KILL_PROCESS, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
        filt.add_rule(sc.KILL_PROCESS, "socketpair", sc.Arg(0, sc.NE, socket.AF_UNIX))
    return filt


def compile_seccomp(allow_network: bool) -> CompiledFilter | None:
    """:func:`build_seccomp` compiled to BPF (None without pyseccomp)."""
    rules = build_seccomp(allow_network)
    if rules is None:
        return None
    fd = os.memfd_create("seccomp-bpf")
    with os.fdopen(fd, "w+b") as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return CompiledFilter(handle.read())
