"""Applying :class:`~sandbox.types.Limits` to the current process (called in the child)."""

from __future__ import annotations

import math
import os
import resource

from sandbox._lockdown import WORKDIR
from sandbox.types import Limits

__all__ = [
    "apply_rlimits",
    "clean_environment",
    "count_processes_of",
    "scratch_profile",
    "shares_process_budget_in_user_namespace",
]


def apply_rlimits(limits: Limits, address_space_base: int = 0, process_base: int = 0) -> None:
    """Set CPU, address-space, process, file-size and open-file limits (soft = hard).

    CPU soft = hard makes the kernel send SIGKILL at the limit, which the code cannot catch.
    ``address_space_base`` is the virtual size already mapped by a preloaded worker, so the
    run gets ``memory_mb`` on top of what the shared, already-imported modules take.
    ``process_base`` is how many processes the run's real uid already has: the kernel counts
    them all against ``RLIMIT_NPROC``, which matters when runs share the caller's uid.
    """
    cpu = max(1, math.ceil(limits.cpu_s))
    memory = address_space_base + limits.memory_mb * 1024 * 1024
    pairs = [
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_NPROC, process_base + limits.max_processes),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * 1024 * 1024),
        (resource.RLIMIT_NOFILE, limits.max_open_files),
        (resource.RLIMIT_CORE, 0),
        # No real-time scheduling and no raised priority, whatever the caller's hard limits
        # allow: a SCHED_FIFO run would starve the host (and the watcher that kills it).
        (resource.RLIMIT_RTPRIO, 0),
        (resource.RLIMIT_NICE, 0),
    ]
    for which, value in pairs:
        resource.setrlimit(which, (value, value))


def scratch_profile(limits: Limits) -> tuple[int, int]:
    """The quotas a run's scratch tmpfs is mounted with, (``disk_mb``, ``max_files``)."""
    return (limits.disk_mb, limits.max_files)


def clean_environment(workdir: str = WORKDIR) -> dict[str, str]:
    """The whole environment a run sees: nothing inherited, so no host secret can leak."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def count_processes_of(uid: int, proc: str = "/proc") -> int:
    """Processes (threads included, as RLIMIT_NPROC counts them) whose real uid is ``uid``."""
    total = 0
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/status", "rb") as handle:
                fields = dict(line.split(b":", 1) for line in handle if b":" in line)
        except OSError:
            continue  # exited meanwhile
        uid_field, threads = fields.get(b"Uid", b"").split(), fields.get(b"Threads", b"1").strip()
        if uid_field and int(uid_field[0]) == uid:
            total += int(threads) if threads.isdigit() else 1
    return total


def shares_process_budget_in_user_namespace(release: str | None = None) -> bool:
    """Whether processes outside a user namespace count against RLIMIT_NPROC inside it.

    Since Linux 5.14 the count is kept per user namespace (ucounts), so a run in a fresh one
    starts from zero; before, it was one global count per real uid.
    """
    release = release or os.uname().release
    try:
        major, minor = (int(part) for part in release.split(".")[:2])
    except ValueError:
        return True  # unknown: assume the old, global count (a higher budget, still bounded)
    return (major, minor) < (5, 14)
