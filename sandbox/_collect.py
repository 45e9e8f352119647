"""Reading a run's output under a cap and turning how it ended into a :class:`Status`.

Shared by the backends so that every backend reports the same status for the same event.
Output is read while the run executes (never after), so a run that prints a gigabyte is
stopped as soon as it passes the hard cap instead of filling memory or a pipe.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox._harness import (
    END_RECORD,
    QUOTA_TAGS,
    STATUS_DENIED,
    STATUS_DISK,
    STATUS_END,
    STATUS_FILE_SIZE,
    STATUS_FILES,
    STATUS_MEMORY,
)
from sandbox.types import Limits, Status

__all__ = ["TRUNCATION_MARKER", "Collected", "classify", "collect", "hard_output_cap", "quota_note", "to_text"]

TRUNCATION_MARKER = "\n[... output truncated at {limit} characters]"
_CHUNK = 65536


def hard_output_cap(limits: Limits) -> int:
    """Bytes after which a run is killed with ``output_limit`` (well above the text cut)."""
    return 4 * limits.max_output_chars + 65536


@dataclass(slots=True)
class Collected:
    """Raw outcome of the read loop."""

    stdout: bytes = b""
    stderr: bytes = b""
    tags: bytes = b""
    wall_killed: bool = False
    output_killed: bool = False
    output_bytes: int = 0
    end: tuple[int, float] | None = None  # (exit code, CPU s) from the run's end record


def split_end_record(tags: bytes) -> tuple[bytes, tuple[int, float] | None]:
    """Take the first end record out of a status stream: (tags before it, (rc, cpu_s)))."""
    at = tags.find(STATUS_END)
    if at < 0 or len(tags) - at < END_RECORD.size:
        return tags, None
    _, rc, cpu_s = END_RECORD.unpack_from(tags, at)
    return tags[:at], (rc, cpu_s)


def collect(
    out_fd: int,
    err_fd: int,
    status_fd: int | None,
    done_fd: int,
    deadline: float,
    byte_cap: int,
    kill: Callable[[], None],
    stop_at_end_record: bool = False,
    status_seen: bytes = b"",
) -> Collected:
    """Read stdout/stderr/status until ``done_fd`` (a pidfd) is readable, then drain.

    With ``stop_at_end_record``, an end record on the status pipe ends the wait as well: the
    run's output is complete in the pipes by then, and ``Collected.end`` carries its exit
    code and CPU time. ``status_seen``: status bytes the caller already read from
    ``status_fd``. ``kill`` is called once, at the wall deadline or when output passes
    ``byte_cap``. The caller owns the descriptors and closes them.
    """
    result = Collected()
    keep = {out_fd: bytearray(), err_fd: bytearray()}
    if status_fd is not None:
        keep[status_fd] = bytearray(status_seen)
    poller = select.poll()
    for fd in keep:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    poller.register(done_fd, select.POLLIN)
    open_fds = set(keep)
    killed = False
    done = stop_at_end_record and split_end_record(status_seen)[1] is not None

    def read_ready(fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            poller.unregister(fd)
            open_fds.discard(fd)
            return
        if fd != status_fd:
            result.output_bytes += len(data)
        buf = keep[fd]
        if len(buf) < byte_cap:
            buf += data[: byte_cap - len(buf)]

    while open_fds and not done:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not killed:
            result.wall_killed = killed = True
            kill()
        timeout_ms = 200 if killed else max(1, int(remaining * 1000) + 1)
        for fd, _ in poller.poll(timeout_ms):
            if fd == done_fd:
                done = True
            elif fd in open_fds:
                read_ready(fd)
                if stop_at_end_record and fd == status_fd and STATUS_END in keep[fd] and not killed:
                    done = done or split_end_record(bytes(keep[fd]))[1] is not None
        if result.output_bytes > byte_cap and not killed:
            result.output_killed = killed = True
            kill()
    if not done:  # pipes closed first: wait for the process itself (bounded by the deadline)
        remaining = max(0.0, deadline - time.monotonic())
        if not select.select([done_fd], [], [], remaining)[0]:
            result.wall_killed = True
            kill()
            select.select([done_fd], [], [])
    for fd in list(open_fds):  # the process is gone: take what is already buffered
        for _ in range(64):
            before = len(open_fds)
            read_ready(fd)
            if len(open_fds) < before:
                break
            try:
                if not select.select([fd], [], [], 0)[0]:
                    break
            except OSError:
                break
    result.stdout, result.stderr = bytes(keep[out_fd]), bytes(keep[err_fd])
    if status_fd is not None:
        result.tags = bytes(keep[status_fd])
        if stop_at_end_record:
            result.tags, end = split_end_record(result.tags)
            # A run we killed is reported by how it was killed, never by a record it wrote.
            result.end = None if result.wall_killed or result.output_killed else end
    return result


def to_text(raw: bytes, max_chars: int) -> tuple[str, bool]:
    """Decode (invalid UTF-8 replaced) and cut at ``max_chars`` with a visible marker."""
    text = raw.decode("utf-8", errors="replace")
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(limit=max_chars), True


def quota_note(tags: bytes, limits: Limits, returncode: int = 0) -> bytes:
    """The line appended to a run's stderr when it used up a quota (empty when it did not)."""
    tag = tags[:1]
    if tag == STATUS_DISK:
        text = f"disk quota used up: {limits.disk_mb} MB for /tmp, the workdir and /dev/shm (Limits.disk_mb)"
    elif tag == STATUS_FILES:
        text = (f"file quota used up: {limits.max_files} files and directories in /tmp, the workdir and "
                "/dev/shm (Limits.max_files)")
    elif tag == STATUS_FILE_SIZE or returncode == -signal.SIGXFSZ:
        text = f"file size limit reached: {limits.max_file_mb} MB per file (Limits.max_file_mb)"
    else:
        return b""
    return f"\nsandbox: {text}\n".encode()


def classify(
    returncode: int,
    collected: Collected,
    cpu_s: float,
    limits: Limits,
    cpu_known: bool = True,
) -> Status:
    """Map a finished run to a status. ``returncode`` < 0 means killed by that signal.

    ``cpu_known`` is false when a wrapper (bwrap, nsjail) hides the run's CPU time; an
    unexplained SIGKILL is then taken to be the CPU limit's.
    """
    if collected.output_killed:
        return Status.OUTPUT_LIMIT
    if collected.wall_killed:
        return Status.TIMEOUT
    if returncode < 0:
        sig = -returncode
        # rusage under-counts against the kernel's RLIMIT_CPU clock on busy VMs (seen: 0.87 s
        # reported for a 1 s limit), so a SIGKILL after half the budget counts as the limit.
        cpu_exhausted = cpu_s >= 0.5 * limits.cpu_s or not cpu_known
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_exhausted):
            return Status.TIMEOUT
        if sig == signal.SIGSYS:
            return Status.VIOLATION
        if sig == signal.SIGXFSZ:
            return Status.OUTPUT_LIMIT
        return Status.ERROR
    if STATUS_MEMORY in collected.tags[:1]:
        return Status.MEMORY
    if collected.tags[:1] in QUOTA_TAGS:
        return Status.OUTPUT_LIMIT
    if STATUS_DENIED in collected.tags[:1]:
        return Status.VIOLATION
    return Status.OK if returncode == 0 else Status.ERROR
