"""Run uids unique on the host: one block per pool, session or jailing backend, while it lives.

The kernel counts processes per uid (RLIMIT_NPROC), and anything one run can touch by uid
another run under the same uid can touch too. So no two pools, sessions or backends, in this
process or any other on the host, hand out the same uid at the same time: each leases blocks
of :data:`BLOCK` uids, held by an ``flock`` on a file per block (released by the kernel when the
holder exits, whatever way it ends) and never a block that some process is already running as.
Only root switches runs to other uids; an unprivileged caller's runs keep its own uid.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import random
import tempfile
import threading

__all__ = ["BASE", "BLOCK", "UidLease", "UidPool", "lease_uids"]

#: Far above ordinary users, system accounts, ``nobody`` and the usual subordinate-uid ranges.
BASE = 2_000_000_000
BLOCK = 256
BLOCKS = 4096
_lock = threading.Lock()


class UidLease:
    """Uids leased to one owner; :meth:`release` (or the process's exit) gives them back."""

    def __init__(self, uids: list[int], handles: list[int]) -> None:
        self.uids, self._handles = uids, handles

    def release(self) -> None:
        handles, self._handles = self._handles, []
        for fd in handles:
            with contextlib.suppress(OSError):
                os.close(fd)


class UidPool:
    """Per-run uids for backends that start one jail per run (bwrap, nsjail): a uid is taken
    for a run and given back after it; more blocks are leased when every uid is busy. Uids
    rotate (first given back, last taken again), so a run never starts under the uid whose
    previous run may still have processes being reaped, counted by ``RLIMIT_NPROC``."""

    def __init__(self, eager: bool = False) -> None:
        self._free: collections.deque[int] = collections.deque()
        self._leases: list[UidLease] = []
        self._lock = threading.Lock()
        if eager:  # lease the first block now (so that uids() names them before any run)
            self.give_back(self.take())

    def take(self) -> int:
        with self._lock:
            if not self._free:
                lease = lease_uids(BLOCK)
                self._leases.append(lease)
                self._free.extend(lease.uids)
            return self._free.popleft()

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._free.append(uid)

    def uids(self) -> list[int]:
        with self._lock:
            return [uid for lease in self._leases for uid in lease.uids]

    def release(self) -> None:
        with self._lock:
            for lease in self._leases:
                lease.release()
            self._leases = []
            self._free.clear()


def _lock_dir() -> str:
    for candidate in ("/run/coa-sandbox/uids", os.path.join(tempfile.gettempdir(), f"coa-sandbox-uids-{os.geteuid()}")):
        with contextlib.suppress(OSError):
            os.makedirs(candidate, mode=0o700, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return candidate
    raise OSError("no writable directory for the sandbox's uid leases")


def _uids_in_use() -> set[int]:
    used = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                used.add(os.stat(f"/proc/{entry}").st_uid)
    return used


def lease_uids(count: int) -> UidLease:
    """``count`` uids no other lease holds and no process runs as (as root); else the
    caller's own uid ``count`` times (an unprivileged caller cannot switch runs to others)."""
    if os.geteuid() != 0:
        return UidLease([os.getuid()] * count, [])
    with _lock:
        directory, in_use = _lock_dir(), _uids_in_use()
        uids: list[int] = []
        handles: list[int] = []
        start = random.randrange(BLOCKS)  # leases of concurrent processes rarely collide
        for step in range(BLOCKS):
            if len(uids) >= count:
                break
            block = (start + step) % BLOCKS
            first = BASE + block * BLOCK
            if any(first <= uid < first + BLOCK for uid in in_use):
                continue
            fd = os.open(os.path.join(directory, str(block)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            handles.append(fd)
            uids += range(first, first + BLOCK)
        if len(uids) < count:
            UidLease([], handles).release()
            raise OSError(f"no free block of run uids left ({BLOCKS} blocks of {BLOCK} from {BASE})")
        return UidLease(uids[:count], handles)
