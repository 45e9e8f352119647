"""Child-side runner: executes untrusted code as ``__main__`` and reports how it ended.

Used by every Python-based backend, either imported by a forked pool child or loaded by the
entry script of a run in a process of its own (:mod:`sandbox._boot`, which sets the run up). It
must import nothing from the project, because it runs inside a jail that may not see the project.

Why a harness instead of ``python -c``: it tells a *denied* operation (``PermissionError``, a
read-only file system, no network, a child the seccomp filter killed), a ``MemoryError`` or a
used-up quota from an ordinary crash, and reports it on a private status descriptor the code can
write to as well (a tag only makes its own result look worse). A forged end record (see
:data:`STATUS_END`) makes the pool answer at once, as ``os._exit`` could; the worker then kills
the run's namespace within 50 ms, and its CPU time comes from the run's cgroup.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import struct
import sys
import types

__all__ = ["END_RECORD", "QUOTA_TAGS", "STATUS_DENIED", "STATUS_END", "STATUS_MEMORY",
           "STATUS_PROCESS_LIMIT", "cpu_used", "execute", "execute_cell", "install_process_limit_markers",
           "is_denial", "new_main_module", "report_end", "write_tag"]  # fmt: skip

STATUS_DENIED = b"V"
#: A denial that was the process limit: a fork or a new thread refused (EAGAIN).
STATUS_PROCESS_LIMIT = b"P"
STATUS_MEMORY = b"M"
#: A quota was used up: the scratch space's bytes (``Q``), its inodes (``N``), a file's size (``F``).
STATUS_DISK, STATUS_FILES, STATUS_FILE_SIZE = b"Q", b"N", b"F"
QUOTA_TAGS = (STATUS_DISK, STATUS_FILES, STATUS_FILE_SIZE)
#: Last record a run writes on its status pipe: b"D", exit code (int32), CPU seconds (float64).
#: It lets the pool's worker answer before the child's exit (whose teardown costs milliseconds
#: nobody needs to wait for), and tells a wrapper's exit status 128 + N from a death by signal N.
STATUS_END = b"D"
END_RECORD = struct.Struct("=cid")

_DENIAL_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENETUNREACH, errno.ENETDOWN,
                            errno.EHOSTUNREACH, errno.EAFNOSUPPORT, errno.ESRCH})  # fmt: skip


def _causes(exc: BaseException | None):  # type: ignore[no-untyped-def]
    """``exc`` and what caused it (``__cause__`` or ``__context__``), each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _denied(exc: BaseException) -> bool:
    errno_denied = isinstance(exc, OSError) and exc.errno in _DENIAL_ERRNOS
    # gaierror: a DNS lookup refused, there is no network
    return isinstance(exc, PermissionError) or errno_denied or type(exc).__name__ == "gaierror"


def is_denial(exc: BaseException) -> bool:
    """True when ``exc`` means the sandbox refused an operation (not a bug in the code)."""
    return any(_denied(cause) or _is_process_limit(cause) for cause in _causes(exc))


def _is_process_limit(exc: BaseException) -> bool:
    return getattr(exc, "_sandbox_process_limit", False) or (
        isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)
    )


def hit_process_limit(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a fork or thread refused by the process limit."""
    return any(_is_process_limit(cause) for cause in _causes(exc))


def _scratch_exhausted(quota_dir: str | tuple[str, ...] | None) -> bytes | None:
    """``N``/``Q`` when the run's scratch tmpfs (or any of them: Docker mounts ``/dev/shm``
    apart) has no inode / no byte left, else None."""
    for directory in (quota_dir,) if isinstance(quota_dir, str) else quota_dir or ():
        try:
            usage = os.statvfs(directory)
        except OSError:
            continue
        if usage.f_files and usage.f_ffree == 0:
            return STATUS_FILES
        if usage.f_bavail == 0:
            return STATUS_DISK
    return None


def quota_tag(exc: BaseException, quota_dir: str | tuple[str, ...] | None) -> bytes | None:
    """The quota tag ``exc`` means (a file grew past RLIMIT_FSIZE, the scratch space is full)."""
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno == errno.EFBIG:
            return STATUS_FILE_SIZE
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return _scratch_exhausted(quota_dir)
    return None


#: Where a refused fork or thread is reported the moment it happens (the run's status descriptor,
#: set by :func:`execute`): code that catches the refusal and goes on still hit the limit. The
#: pids controller counts refusals too, but only its own: when ``RLIMIT_NPROC`` (or no cgroup at
#: all) refused first, this report is the only trace.
_refusal_sink: list[int | None] = [None]


def _report_refusal() -> None:
    sink, _refusal_sink[0] = _refusal_sink[0], None  # once per run: the first tag is what counts
    write_tag(sink, STATUS_PROCESS_LIMIT)


def _mark_process_limit(function):  # type: ignore[no-untyped-def]
    """Wrap a process- or thread-creating call so hitting the process limit counts as a denial,
    reported the moment it happens."""

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return function(*args, **kwargs)
        except BlockingIOError as exc:  # EAGAIN from fork: RLIMIT_NPROC said no
            exc._sandbox_process_limit = True  # type: ignore[attr-defined]
            _report_refusal()
            raise
        except RuntimeError as exc:  # "can't start new thread": the same limit, for a thread
            if _is_process_limit(exc):
                _report_refusal()
            raise

    wrapper.__wrapped__ = function  # type: ignore[attr-defined]
    return wrapper


def _wrap(owner: object, names: tuple[str, ...], marker) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        if hasattr(owner, name) and not hasattr(getattr(owner, name), "__wrapped__"):
            setattr(owner, name, marker(getattr(owner, name)))


def install_process_limit_markers() -> None:
    """Make hitting the process limit in fork/spawn/thread calls count as a denial and report
    it at once, and so a child killed by the seccomp filter when it is waited for (idempotent)."""
    import _posixsubprocess
    import _thread

    _wrap(os, ("fork", "forkpty", "posix_spawn", "posix_spawnp"), _mark_process_limit)
    _wrap(_thread, ("start_new_thread", "start_joinable_thread"), _mark_process_limit)
    threading = sys.modules.get("threading")  # imported already: it holds its own reference
    for name in ("_start_new_thread", "_start_joinable_thread"):
        if threading is not None and hasattr(threading, name) and not hasattr(getattr(threading, name), "__wrapped__"):
            setattr(threading, name, getattr(_thread, name.lstrip("_")))
    _wrap(_posixsubprocess, ("fork_exec",), _mark_process_limit)
    _wrap(os, ("wait", "waitpid", "wait3", "wait4", "waitid"), _mark_seccomp_kills)


def _mark_seccomp_kills(function):  # type: ignore[no-untyped-def]
    """Wrap a wait call so that a child the seccomp filter killed (SIGSYS) is reported as a
    denial: the parent that reaps it and carries on still ran code the sandbox refused."""

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = function(*args, **kwargs)
        if hasattr(result, "si_code"):  # waitid (a tuple too): who ended (CLD_KILLED 2, CLD_DUMPED 3) and how
            killed = result.si_code in (2, 3) and result.si_status == signal.SIGSYS
        else:  # (pid, status[, rusage]), or waitid's None
            status = result[1] if result and result[0] else 0
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS
        if killed:
            write_tag(_channel[2], STATUS_DENIED)
        return result

    wrapper.__wrapped__ = function  # type: ignore[attr-defined]
    return wrapper


#: The status channel's (device, inode) when the code started, whether a report was lost (a run
#: that closed or replaced the descriptor neither hides a limit it hit: :func:`_settle` fails it;
#: nor gets a tag written into a file of its own), and the descriptor.
_channel: list = [None, False, None]


def write_tag(status_fd: int | None, tag: bytes) -> None:
    if status_fd is None:
        return
    try:
        stat = os.fstat(status_fd)
        if _channel[0] not in (None, (stat.st_dev, stat.st_ino)):
            raise OSError(errno.EBADF, "the status channel was replaced")
        os.write(status_fd, tag)
    except OSError:
        _channel[1] = True


def _open_channel(status_fd: int | None) -> None:
    _channel[:] = [None, False, status_fd]
    with contextlib.suppress(OSError, TypeError):
        _channel[0] = (os.fstat(status_fd).st_dev, os.fstat(status_fd).st_ino)  # type: ignore[arg-type]


def _settle(rc: int) -> int:
    """``rc``, or 1 with a note when a report was lost because the run closed its channel."""
    if _channel[1]:
        with contextlib.suppress(OSError):
            os.write(2, b"\nsandbox: the run closed or replaced its status descriptor: a limit hit went unreported\n")
    return rc or int(_channel[1])


def cpu_used() -> float:
    """CPU seconds (user and system) of this process and of every child it has reaped."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def report_end(status_fd: int, rc: int) -> None:
    """Write the end record (see :data:`STATUS_END`): the run's code is done, output flushed."""
    write_tag(status_fd, END_RECORD.pack(STATUS_END, rc, cpu_used()))


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None or isinstance(code, int):
        return (code or 0) & 0xFF
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{code}\n")
    return 1


def _print_traceback(exc: BaseException) -> None:
    import traceback

    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is _run_in.__code__:
        tb = tb.tb_next  # hide the harness frame: show the traceback `python -c` would show
    with contextlib.suppress(Exception):
        traceback.print_exception(type(exc), exc, tb)


def _run_in(namespace: dict, code: str, status_fd: int | None, filename: str, quota_dir: str | None) -> int:
    """Execute ``code`` in ``namespace``; classify how it ended; return an exit code."""
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)
    except SystemExit as exc:
        return _exit_code(exc)
    except MemoryError as exc:
        write_tag(status_fd, STATUS_MEMORY)
        _print_traceback(exc)
        return 1
    except BaseException as exc:
        tag = quota_tag(exc, quota_dir)
        if tag is not None:
            write_tag(status_fd, tag)
        elif is_denial(exc):
            write_tag(status_fd, STATUS_PROCESS_LIMIT if hit_process_limit(exc) else STATUS_DENIED)
        _print_traceback(exc)
        return 1
    return 0


def _flush(rc: int) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            rc = rc or 120  # like CPython when flushing stdout fails at exit
    return rc


def new_main_module(filename: str = "<sandbox>") -> types.ModuleType:
    """A fresh ``__main__`` (installed in ``sys.modules``) for code that expects one."""
    install_process_limit_markers()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [filename]
    return main


def execute(code: str, status_fd: int | None = None, filename: str = "<sandbox>", quota_dir: str | None = None) -> int:
    """Run ``code`` as a fresh ``__main__`` module; return the process exit code to use.

    Mirrors ``python -c``: ``SystemExit`` sets the exit code, an uncaught exception prints a
    traceback and gives 1, non-daemon threads and ``atexit`` handlers run before the end.
    ``quota_dir``: the run's scratch tmpfs; a run that used up its bytes or inodes is tagged
    even if it caught the error (it hit the limit all the same).
    """
    import atexit

    atexit._clear()  # handlers inherited from a forked worker are not the run's business
    main = new_main_module(filename)
    _refusal_sink[0] = status_fd
    _open_channel(status_fd)
    rc = _run_in(main.__dict__, code, status_fd, filename, quota_dir)
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException as exc:
        _print_traceback(exc)
    rc = _flush(rc)
    with contextlib.suppress(OSError):  # children already dead: a seccomp kill among them is reported
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    exhausted = _scratch_exhausted(quota_dir)
    if exhausted is not None:
        write_tag(status_fd, exhausted)
    return _settle(rc)


def execute_cell(
    code: str, main: types.ModuleType, status_fd: int | None, filename: str, quota_dir: str | None = None
) -> int:
    """One notebook cell: like :func:`execute` but the namespace outlives it.

    ``SystemExit`` ends the cell, not the session.
    """
    _refusal_sink[0] = status_fd
    _open_channel(status_fd)
    return _settle(_flush(_run_in(main.__dict__, code, status_fd, filename, quota_dir)))
