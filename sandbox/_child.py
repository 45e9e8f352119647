"""What a forked, jailed child does once it holds a request: one run, or a session's cells.

Runs in the child only (after :mod:`sandbox._jail` set it up). A *run* child executes one
snippet and exits. A *session* child keeps one ``__main__`` namespace and executes cells
until its request pipe closes; after each cell it writes a frame on its ``done`` pipe, so
the worker knows the cell is over without the process having to exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import struct
import sys
import time

from sandbox._cgroup import write_limits
from sandbox._harness import STATUS_DENIED, cpu_used, execute, execute_cell, new_main_module, report_end
from sandbox._limits import apply_rlimits, scratch_profile
from sandbox._lockdown import WAIT_ALL, fork_init
from sandbox._wire import FrameError, read_frame
from sandbox.types import Limits

__all__ = [
    "CELL_DONE",
    "close_all_except",
    "install_standard_streams",
    "open_stdin",
    "prepare_run",
    "run_once",
    "serve_cells",
    "wait_for_parent",
]


#: What a session child writes after each cell on its ``done`` pipe: b"C", the cell's nonce
#: (from its request), exit code, CPU seconds. Fixed size: the worker reads exactly this much,
#: so a cell that writes its own record (it shares the process) cannot make it read more, and
#: one without the cell's nonce (a cell cannot know a later cell's) is not taken for it.
CELL_DONE = struct.Struct("=c16sid")


def close_all_except(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep | {1 << 20}):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def wait_for_parent(worker_pid: int, timeout_s: float = 5.0) -> None:
    """Block until we are re-parented to the worker.

    The parent-death signal (set later) fires on *every* re-parenting, so setting it while
    the intermediate process is still alive would kill us the moment it exits.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"PPid:"):
                    if int(line.split()[1]) == worker_pid:
                        return
                    break
        time.sleep(0.0005)
    raise RuntimeError("run child was not re-parented to its worker")


def _vm_size_bytes() -> int:
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        return int(os.read(fd, 128).split(None, 1)[0]) * _PAGE_SIZE
    finally:
        os.close(fd)


def open_stdin() -> None:
    """An empty in-memory file on fd 0, the run's stdin once :func:`_fill_stdin` wrote it.

    Made while the child is still privileged: the seccomp filter refuses ``memfd_create`` to
    the code (anonymous files no quota counts), so a session's cells reuse this one.
    """
    stdin_fd = os.memfd_create("stdin")
    os.dup2(stdin_fd, 0)
    os.close(stdin_fd)


def _install_stdin(text: str) -> None:
    """A session cell's stdin: the memfd emptied and refilled, and a new ``sys.stdin`` over it
    (the previous cell may have read, and buffered, some of the old one)."""
    os.ftruncate(0, 0)
    os.lseek(0, 0, os.SEEK_SET)
    _fill_stdin(text)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115


def _fill_stdin(text: str) -> None:
    # Nothing has read sys.stdin yet, so its buffer is empty and it reads from offset 0.
    os.write(0, text.encode("utf-8"))
    os.lseek(0, 0, os.SEEK_SET)


def install_standard_streams() -> None:
    """In the worker, once: the ``sys.stdin/stdout/stderr`` objects every run child inherits.

    A child then only points fds 0-2 at its own memfd and pipes; building three text streams
    in every child cost more than the rest of its set-up. stdout and stderr are created while
    their fds are pipes, so that they know they cannot seek (as a run's pipes cannot).
    """
    read_end, write_end = os.pipe()
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = sys.__stderr__ = open(  # noqa: SIM115
            2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
        )
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, read_end, write_end):
            os.close(fd)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115


def _reset_process_state(out_w: int, err_w: int) -> None:
    """Make the forked child look like a fresh interpreter to the code it runs.

    Streams come from :func:`install_standard_streams`, the environment is the worker's
    (already the run's, see ``_limits.clean_environment``), ``random`` was reseeded by
    ``os.fork`` itself, and SIGINT's handler is Python's default.
    """
    for source, target in ((out_w, 1), (err_w, 2)):
        os.dup2(source, target)
        os.close(source)
    if "numpy.random" in sys.modules:  # only when preloaded: importing it costs ~30 ms
        # An integer seed: seed() without one goes through SeedSequence, ~0.4 ms per run.
        with contextlib.suppress(Exception):
            sys.modules["numpy.random"].seed(int.from_bytes(os.urandom(4), "little"))


def prepare_run(out_w: int, err_w: int) -> int:
    """Everything a run child can do before its request arrives; returns its mapped size.

    Set-up (streams, seeding) that would otherwise sit between the request and the code's
    first line. fd 0 is already the empty stdin file (see :func:`open_stdin`).
    """
    _reset_process_state(out_w, err_w)
    return _vm_size_bytes()


def run_once(
    req_r: int,
    status_w: int,
    address_space_base: int,
    process_base: int = 0,
    profile: tuple[int, int] | None = None,
    quota_dir: str | None = None,
    limit_fds: list[tuple[int, str]] | None = None,
) -> None:
    """Wait for one request on the pool's pipe, run it, exit with its exit code.

    Called after :func:`prepare_run`. The pipe is closed before any of the request's code
    runs, and the worker learns the request's id and limits from the ``S`` line written
    here, before the code can write. The end record written after the code lets the worker
    answer without waiting for this process's exit. A request whose scratch quotas differ from
    ``profile`` (what this child mounted) is handed back whole on an ``X`` line instead.
    ``limit_fds``: the run cgroup's limit files, written with the request's limits and closed
    before the code runs.
    """
    init = _start_init(status_w)  # 1: the code runs as PID 2, below an init of its namespace
    code_pid = os.getpid()  # (a forked copy of the code that falls off its end is not the run)
    try:
        request = read_frame(req_r)
    except FrameError:
        os.write(status_w, b"E")
        os._exit(0)  # the pool closed the pipe
    if profile is not None and scratch_profile(Limits(**request["limits"])) != tuple(profile):
        os.write(status_w, b"X" + json.dumps(request).encode() + b"\n")
        os._exit(0)
    try:
        os.close(req_r)
        # The start time: the worker may wake to this line late, and the run began here.
        meta = {"id": request.get("id"), "limits": request["limits"], "t": time.monotonic()}
        os.write(status_w, b"S" + json.dumps(meta).encode() + b"\n")
        _fill_stdin(request.get("stdin", ""))
        limits = Limits(**request["limits"])
        # The init is one more process of the run's uid and cgroup: the code's own count is unchanged.
        apply_rlimits(limits, address_space_base, process_base + init)
        write_limits(limit_fds or [], limits.memory_mb, limits.max_processes + init)
    except BaseException as exc:  # a sandbox bug, not the code's: say so on stderr
        os.write(2, f"sandbox setup failed: {exc!r}\n".encode())
        os._exit(70)
    rc = execute(request["code"], status_w, quota_dir=quota_dir)
    if os.getpid() == code_pid <= 2 and _no_process_left():
        report_end(status_w, rc)  # the worker answers now; the exit's teardown is off the clock
    os._exit(rc)  # (else the init reports the end once every process of the run is gone)


def _start_init(status_w: int, end_record: bool = True) -> int:
    """As PID 1, stay behind as the namespace's init (see :func:`sandbox._lockdown.fork_init`)
    while the code's process (PID 2) returns 1, the init's count (else 0); before the request
    comes, off the run's clock. ``end_record``: the init reports the code's exit (a run's);
    a session's status pipe holds its cells' tags only."""
    report = (lambda rc: report_end(status_w, rc)) if end_record else (lambda rc: None)
    try:
        return int(fork_init(status_w, report, lambda: _write_quietly(status_w, STATUS_DENIED)))
    except OSError as exc:
        os.write(2, f"sandbox setup failed: no init: {exc!r}\n".encode())
        os._exit(70)


def _write_quietly(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, data)


def _no_process_left() -> bool:
    """Is the code's process alone in the run's namespace (its children reaped; besides it only
    PID 1, the init)? Only then may the worker answer before we are gone. Orphans went to the
    init: the namespace's own ``/proc`` lists them until it has reaped them."""
    while True:
        try:  # __WALL: children made by a raw clone() without an exit signal count too
            pid, _ = os.waitpid(-1, os.WNOHANG | WAIT_ALL)
        except ChildProcessError:
            break
        if pid == 0:
            return False
    alone = {"1", str(os.getpid())}
    return all(entry in alone for entry in os.listdir("/proc") if entry.isdigit())


def serve_cells(
    req_r: int,
    out_w: int,
    err_w: int,
    status_w: int,
    done_w: int,
    process_base: int = 0,
    quota_dir: str | None = None,
    limit_fds: list[tuple[int, str]] | None = None,
) -> None:
    """Session child: run cells in one namespace until the request pipe closes.

    Memory, process and file limits (and the session cgroup's, through ``limit_fds``) are set
    once, at the first cell, for the whole session. Without a cgroup (the per-process mode),
    processes a cell left behind are killed after it (best effort: the cell shares this process).
    """
    init = _start_init(status_w, end_record=False)  # 1: the cells run as PID 2 (see run_once)
    code_pid = os.getpid()
    _reset_process_state(out_w, err_w)
    main = new_main_module("<cell>")
    limited = False
    number = 0
    kill, wait = os.kill, os.waitpid  # our own references: a cell may replace the os module's
    while True:
        try:
            request = read_frame(req_r)
        except FrameError:
            os._exit(0)
        limits = Limits(**request["limits"])
        if not limited:  # memory, processes, files: once, for the whole session
            session_cpu_s = float(request.get("session_cpu_s", 600))
            apply_rlimits(limits.with_(cpu_s=session_cpu_s), _vm_size_bytes(), process_base + init)
            write_limits(limit_fds or [], limits.memory_mb, limits.max_processes + init)
            limited = True
        before = cpu_used()
        soft = int(before + limits.cpu_s) + 1  # SIGXCPU at the cell's budget; the worker's watch backs it
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))
        _install_stdin(request.get("stdin", ""))
        number += 1
        rc = execute_cell(request["code"], main, status_w, f"<cell {number}>", quota_dir)
        if request.get("kill_leftovers") and os.getpid() == code_pid <= 2:  # in a PID namespace of our own
            with contextlib.suppress(OSError):
                kill(-1, signal.SIGKILL)  # every other process of the namespace but its init
            with contextlib.suppress(ChildProcessError, OSError):
                while wait(-1, os.WNOHANG)[0]:
                    pass
        nonce = bytes.fromhex(request.get("nonce", "00" * 16))
        os.write(done_w, CELL_DONE.pack(b"C", nonce, rc & 0xFF, cpu_used() - before))
