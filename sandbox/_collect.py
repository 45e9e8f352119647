"""Reading a run's output under a cap and turning how it ended into a :class:`Status`.

Shared by the backends so that every backend reports the same status for the same event.
Output is read while the run executes (never after), so a run that prints a gigabyte is
stopped as soon as it passes the hard cap instead of filling memory or a pipe.
"""

from __future__ import annotations

import dataclasses
import math
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox._cgroup import RunUsage
from sandbox._harness import (
    END_RECORD,
    QUOTA_TAGS,
    STATUS_DENIED,
    STATUS_DISK,
    STATUS_END,
    STATUS_FILE_SIZE,
    STATUS_FILES,
    STATUS_MEMORY,
    STATUS_PROCESS_LIMIT,
)
from sandbox.types import Limits, Status

__all__ = [
    "TRUNCATION_MARKER",
    "Collected",
    "CpuWatch",
    "RunEnd",
    "collect",
    "find_end_record",
    "hard_output_cap",
    "judge",
    "limit_note",
    "outcome",
    "quota_note",
    "split_end_record",
    "tags_in",
    "take_exit_record",
    "timed_outcome",
    "to_text",
]

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
    wall_killed: bool = False  # the run passed its wall limit (killed for it, or see ``ended_late``)
    ended_late: bool = False  # it ended by itself, only as its wall limit passed: nothing was killed
    output_killed: bool = False
    cpu_killed: bool = False  # the run's CPU time (all its processes) passed its budget
    output_bytes: int = 0
    end: tuple[int, float] | None = None  # (exit code, CPU s) from the run's end record


@dataclass(slots=True)
class CpuWatch:
    """The run's CPU time so far (``used``: seconds, every process of the run, from its cgroup)
    and its ``budget``. Checked when it could first have run out with every CPU busy, then again
    as it nears the budget: a short run is never checked at all. Every CPU of the host counts,
    not only those the watcher's own affinity allows: a run may widen its affinity to all."""

    used: Callable[[], float]
    budget: float
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)

    def next_check(self, now: float, spent: float = 0.0) -> float:
        return now + max(0.005, (self.budget - spent) / self.cpus)


#: An end record's CPU seconds above this are not a figure any run could have produced.
_MAX_RECORD_CPU_S = 1e6


def _valid_end(tags: bytes | bytearray, at: int) -> tuple[int, float] | None:
    _, rc, cpu_s = END_RECORD.unpack_from(tags, at)
    if 0 <= rc <= 255 and math.isfinite(cpu_s) and 0.0 <= cpu_s <= _MAX_RECORD_CPU_S:
        return rc, cpu_s
    return None


def find_end_record(tags: bytes | bytearray, start: int = 0) -> tuple[int, tuple[int, float] | None]:
    """The first valid end record at or after ``start``: (its offset, (rc, cpu_s)); without one,
    (where to look again once more bytes came: a record still incomplete, or the end), None.
    Records with impossible figures are stepped over, so each byte is looked at once however
    often the stream grows (a run that filled it with them made every later read rescan it all)."""
    at = tags.find(STATUS_END, start)
    while at >= 0 and len(tags) - at >= END_RECORD.size:
        end = _valid_end(tags, at)
        if end is not None:
            return at, end
        at = tags.find(STATUS_END, at + END_RECORD.size)
    return (len(tags) if at < 0 else at), None


def split_end_record(tags: bytes) -> tuple[bytes, tuple[int, float] | None]:
    """Take the first end record out of a status stream: (tags before it, (rc, cpu_s))).

    A record whose figures are impossible (an exit code outside 0-255, a CPU time that is not a
    finite, non-negative number of plausible size) is no end record, and the run is watched until
    it exits, like one that wrote none. (Only a forgery can hold such figures.) Its bytes stay in
    the tags: a tag the harness wrote may sit inside what a partial forgery made look like one.
    """
    at, end = find_end_record(tags)
    return (tags, None) if end is None else (tags[:at], end)


def take_exit_record(tags: bytes) -> tuple[bytes, int | None]:
    """The harness's end record, when the status stream ends with one: (the tags before it, its
    exit code); else (``tags``, None). The harness writes it just before it exits, so a run killed
    by a signal has none (a forgery can only make such a death read as the same-numbered exit)."""
    at = len(tags) - END_RECORD.size
    end = _valid_end(tags, at) if at >= 0 and tags[at : at + 1] == STATUS_END else None
    return (tags, None) if end is None else (tags[:at], end[0])


def tags_in(tags: bytes) -> set[bytes]:
    """Every tag byte a status stream holds: any tag counts wherever it is, so a junk byte or a
    forged record written first hides none that the harness wrote after it."""
    return {bytes([value]) for value in set(tags)}


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
    cpu_watch: CpuWatch | None = None,
) -> Collected:
    """Read stdout/stderr/status until ``done_fd`` (a pidfd) is readable, then drain.

    With ``stop_at_end_record``, an end record on the status pipe ends the wait as well: the
    run's output is complete in the pipes by then, and ``Collected.end`` carries its exit
    code and CPU time. ``status_seen``: status bytes the caller already read from
    ``status_fd``. ``kill`` is called once: at the wall deadline, when output passes
    ``byte_cap``, or when ``cpu_watch`` says the run's CPU budget is spent (whatever signals the
    code ignores). The caller owns the descriptors and closes them.
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
    end_scan = 0  # where the status stream has not been searched for an end record yet
    if stop_at_end_record:
        end_scan, found = find_end_record(status_seen)
        done = found is not None
    else:
        done = False
    check_cpu_at = cpu_watch.next_check(time.monotonic()) if cpu_watch else math.inf

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

    while not done:  # until the process exits (or has said it is done), even with its pipes closed
        now = time.monotonic()
        if not killed and now >= deadline:
            if select.select([done_fd], [], [], 0)[0]:
                break  # it has ended already (a late look at it): nothing to kill, see below
            result.wall_killed = killed = True
            kill()
        elif not killed and cpu_watch is not None and now >= check_cpu_at:
            spent = cpu_watch.used()
            if spent >= cpu_watch.budget:
                result.cpu_killed = killed = True
                kill()
            else:
                check_cpu_at = cpu_watch.next_check(now, spent)
        wake_at = 0.2 if killed else max(0.0, min(deadline, check_cpu_at) - now)
        for fd, _ in poller.poll(max(1, int(wake_at * 1000) + 1)):
            if fd == done_fd:
                done = True
            elif fd in open_fds:
                read_ready(fd)
                if stop_at_end_record and fd == status_fd and not killed:
                    end_scan, found = find_end_record(keep[fd], end_scan)
                    done = done or found is not None
        if result.output_bytes > byte_cap and not killed:
            result.output_killed = killed = True
            kill()
    if not killed and time.monotonic() >= deadline:
        # It ended (or said so) only as the deadline passed: the poll woke for its end, not for
        # the deadline, and it ran past its wall limit all the same (a sleep just past it read ok).
        result.wall_killed = result.ended_late = True
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
            result.end = None if killed else end
    return result


def to_text(raw: bytes, max_chars: int) -> tuple[str, bool]:
    """Decode (invalid UTF-8 replaced) and cut at ``max_chars`` with a visible marker."""
    text = raw.decode("utf-8", errors="replace")
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(limit=max_chars), True


def quota_note(tags: bytes, limits: Limits, returncode: int = 0) -> bytes:
    """The line appended to a run's stderr when it used up a quota (empty when it did not)."""
    seen = tags_in(tags)
    if STATUS_DISK in seen:
        text = f"disk quota used up: {limits.disk_mb} MB for /tmp, the workdir and /dev/shm (Limits.disk_mb)"
    elif STATUS_FILES in seen:
        text = (f"file quota used up: {limits.max_files} files and directories in /tmp, the workdir and "
                "/dev/shm (Limits.max_files)")
    elif STATUS_FILE_SIZE in seen or returncode == -signal.SIGXFSZ:
        text = f"file size limit reached: {limits.max_file_mb} MB per file (Limits.max_file_mb)"
    elif returncode == -signal.SIGBUS:  # no code of the run is left to say which: name both causes
        text = (f"killed by SIGBUS: a memory-mapped file could not be backed (a file in /tmp or /dev/shm past "
                f"the disk quota, {limits.disk_mb} MB, Limits.disk_mb; or a mapping past its file's end)")
    else:
        return b""
    return f"\nsandbox: {text}\n".encode()


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a finished run ended, as its backend measured it: what its status, limit and notes
    are judged from. One record, because the four call sites passed these positionally in
    three different orders.

    ``returncode`` < 0 means killed by that signal. ``usage``: what the run's cgroup counted
    (None in the per-process mode, where ``cpu_s`` is the process's own). ``cpu_known`` is false
    when a wrapper hides even that (a jail's child is outside the backend's rusage); a cgroup's
    figure is always known (:func:`outcome` sets it).
    """

    collected: Collected
    returncode: int
    cpu_s: float
    usage: RunUsage | None = None
    cpu_known: bool = True


def judge(end: RunEnd, limits: Limits) -> tuple[Status, str | None]:
    """How a finished run ended, and which limit (if any) ended or shaped it.

    Without ``end.usage`` an unexplained SIGKILL after half the CPU budget is taken to be
    RLIMIT_CPU's. A denial or a memory tag only makes the run's own result look worse.
    """
    collected, usage, cpu_s, returncode = end.collected, end.usage, end.cpu_s, end.returncode
    seen = tags_in(collected.tags)
    if collected.output_killed:
        return Status.OUTPUT_LIMIT, "output_limit"
    if collected.wall_killed or collected.cpu_killed:
        return Status.TIMEOUT, "timeout"
    if usage is not None and usage.cpu_s > limits.cpu_s:  # spent it all before a check came round
        return Status.TIMEOUT, "timeout"
    if (usage is not None and usage.oom_kills) or STATUS_MEMORY in seen:
        return Status.MEMORY, "memory_limit"
    if returncode < 0:
        sig = -returncode
        # rusage under-counts against the kernel's RLIMIT_CPU clock on busy VMs (seen: 0.87 s
        # reported for a 1 s limit), so a SIGKILL after half the budget counts as the limit.
        cpu_exhausted = cpu_s >= 0.5 * limits.cpu_s or not end.cpu_known
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_exhausted):
            return Status.TIMEOUT, "timeout"
        if sig == signal.SIGSYS:
            return Status.VIOLATION, None
        if sig == signal.SIGXFSZ:
            return Status.OUTPUT_LIMIT, "output_limit"
        return Status.ERROR, None
    if (usage is not None and usage.process_limit_hits) or STATUS_PROCESS_LIMIT in seen:
        return Status.VIOLATION, "process_limit"
    if seen.intersection(QUOTA_TAGS):
        return Status.OUTPUT_LIMIT, "output_limit"
    if STATUS_DENIED in seen:
        return Status.VIOLATION, None
    return (Status.OK if returncode == 0 else Status.ERROR), None


def limit_note(limit_hit: str | None, end: RunEnd, limits: Limits) -> str:
    """The line appended to stderr saying which per-run limit stopped the run ('' for none)."""
    if limit_hit == "timeout":
        text = (f"wall-clock limit reached: {limits.wall_s:g} s (Limits.wall_s)" if end.collected.wall_killed else
                f"CPU time limit reached: {limits.cpu_s:g} s for all of the run's processes together (Limits.cpu_s)")
    elif limit_hit == "memory_limit" and end.usage is not None and end.usage.oom_kills:
        text = (f"memory limit reached: {limits.memory_mb} MB for all of the run's processes together, kernel "
                "memory and /tmp files included (Limits.memory_mb); the kernel killed a process of the run")
    elif limit_hit == "process_limit":
        text = f"process limit reached: {limits.max_processes} processes and threads per run (Limits.max_processes)"
    else:
        return ""
    return f"\nsandbox: {text}\n"


def outcome(end: RunEnd, limits: Limits) -> dict[str, Any]:
    """Every field of a result but ``wall_s``: output cut to size with the notes appended, the
    status and the limit hit. The CPU time is the cgroup's when ``end.usage`` is given."""
    if end.usage is not None:  # the cgroup counted every process of the run, a jail's included
        end = dataclasses.replace(end, cpu_s=end.usage.cpu_s, cpu_known=True)
    collected, returncode, cpu_s = end.collected, end.returncode, end.cpu_s
    status, limit_hit = judge(end, limits)
    stdout, cut_out = to_text(collected.stdout, limits.max_output_chars)
    stderr, cut_err = to_text(collected.stderr, limits.max_output_chars)
    notes = quota_note(collected.tags, limits, returncode).decode() + limit_note(limit_hit, end, limits)
    return {
        "stdout": stdout,
        "stderr": stderr + notes,
        "exit_code": returncode,
        "status": status.value,
        "cpu_s": max(0.0, float(cpu_s)) if math.isfinite(cpu_s) else 0.0,
        "truncated": cut_out or cut_err or collected.output_killed,
        "limit_hit": limit_hit,
    }


def timed_outcome(end: RunEnd, limits: Limits, started: float) -> dict[str, Any]:
    """:func:`outcome` plus ``wall_s`` since ``started`` (a worker's answer for a run or cell)."""
    wall_s = time.monotonic() - started
    if end.usage is None:  # the per-process mode's CPU time is self-reported: bound it by what it could be
        end = dataclasses.replace(end, cpu_s=min(end.cpu_s, (wall_s + 1.0) * (os.cpu_count() or 1)))
    return {**outcome(end, limits), "wall_s": wall_s}
