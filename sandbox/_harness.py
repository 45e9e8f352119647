"""Child-side runner: executes untrusted code as ``__main__`` and reports how it ended.

Used by every Python-based backend, either imported by a forked pool child or run as a
script (``python -I _harness.py CODE_FILE STATUS_FD``). It must import nothing from the
project, because it runs inside a jail that may not see the project.

Why a harness instead of ``python -c``: it can tell a *denied* operation (the sandbox said
no: ``PermissionError``, read-only file system, unreachable network) and a ``MemoryError``
from an ordinary crash, and report that on a private status descriptor. The code under test
can write to that descriptor too. A denial or memory tag only makes its own result look worse.
A forged end record (see :data:`STATUS_END`) makes the pool answer at once with an exit code
and CPU time of the code's choosing, as ``os._exit`` could, and stop reading its output; the
worker then kills the run's whole namespace within 50 ms, before it prepares the next run, so
nothing carries over. The CPU time of a pool run is therefore self-reported.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
import types

__all__ = [
    "END_RECORD",
    "STATUS_DENIED",
    "STATUS_END",
    "STATUS_MEMORY",
    "execute",
    "execute_cell",
    "install_process_limit_markers",
    "is_denial",
    "new_main_module",
    "report_end",
]

STATUS_DENIED = b"V"
STATUS_MEMORY = b"M"
#: Last record a pool run child writes on its status pipe: b"D", exit code (int32), CPU
#: seconds (float64). It lets the worker answer before the child's exit, whose teardown
#: (the forked address space, the namespaces) costs milliseconds nobody needs to wait for.
STATUS_END = b"D"
END_RECORD = struct.Struct("=cid")

_DENIAL_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EHOSTUNREACH,
        errno.EAFNOSUPPORT,
        errno.ESRCH,
    }
)


def is_denial(exc: BaseException) -> bool:
    """True when ``exc`` means the sandbox refused an operation (not a bug in the code)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, PermissionError):
            return True
        if isinstance(exc, OSError) and exc.errno in _DENIAL_ERRNOS:
            return True
        if type(exc).__name__ == "gaierror":  # DNS lookup refused: there is no network
            return True
        if getattr(exc, "_sandbox_process_limit", False):
            return True
        if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def _mark_process_limit(function):  # type: ignore[no-untyped-def]
    """Wrap a process-creating call so hitting the process limit counts as a denial."""

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return function(*args, **kwargs)
        except BlockingIOError as exc:  # EAGAIN from fork: RLIMIT_NPROC said no
            exc._sandbox_process_limit = True  # type: ignore[attr-defined]
            raise

    wrapper.__wrapped__ = function  # type: ignore[attr-defined]
    return wrapper


def install_process_limit_markers() -> None:
    """Make hitting the process limit in fork/spawn calls count as a denial (idempotent)."""
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name) and not hasattr(getattr(os, name), "__wrapped__"):
            setattr(os, name, _mark_process_limit(getattr(os, name)))
    try:
        import _posixsubprocess
    except ImportError:
        return
    if not hasattr(_posixsubprocess.fork_exec, "__wrapped__"):
        _posixsubprocess.fork_exec = _mark_process_limit(_posixsubprocess.fork_exec)


def _report(status_fd: int | None, tag: bytes) -> None:
    if status_fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(status_fd, tag)


def report_end(status_fd: int, rc: int) -> None:
    """Write the end record (see :data:`STATUS_END`): the run's code is done, output flushed."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    _report(status_fd, END_RECORD.pack(STATUS_END, rc, cpu_s))


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
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


def _run_in(namespace: dict, code: str, status_fd: int | None, filename: str) -> int:
    """Execute ``code`` in ``namespace``; classify how it ended; return an exit code."""
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)
    except SystemExit as exc:
        return _exit_code(exc)
    except MemoryError as exc:
        _report(status_fd, STATUS_MEMORY)
        _print_traceback(exc)
        return 1
    except BaseException as exc:
        if is_denial(exc):
            _report(status_fd, STATUS_DENIED)
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


def execute(code: str, status_fd: int | None = None, filename: str = "<sandbox>") -> int:
    """Run ``code`` as a fresh ``__main__`` module; return the process exit code to use.

    Mirrors ``python -c``: ``SystemExit`` sets the exit code, an uncaught exception prints a
    traceback and gives 1, non-daemon threads and ``atexit`` handlers run before the end.
    """
    import atexit

    atexit._clear()  # handlers inherited from a forked worker are not the run's business
    main = new_main_module(filename)
    rc = _run_in(main.__dict__, code, status_fd, filename)
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException as exc:
        _print_traceback(exc)
    return _flush(rc)


def execute_cell(code: str, main: types.ModuleType, status_fd: int | None, filename: str) -> int:
    """One notebook cell: like :func:`execute` but the namespace outlives it.

    ``SystemExit`` ends the cell, not the session.
    """
    return _flush(_run_in(main.__dict__, code, status_fd, filename))


def _main(argv: list[str]) -> None:
    """``_harness.py CODE_FILE STATUS_FD [CPU AS NPROC FSIZE NOFILE]``: limit self, then run.

    The limits are applied here, in the child, rather than with ``preexec_fn`` because the
    latter is unsafe when the parent has threads (many callers submit runs at once).
    """
    import resource

    code_file, status_fd = argv[1], int(argv[2])
    names = ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE")
    for name, value in zip(names, argv[3:8], strict=False):
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))
    with open(code_file, encoding="utf-8") as handle:
        code = handle.read()
    os.chdir(os.environ.get("HOME") or os.path.dirname(os.path.abspath(code_file)))
    os._exit(execute(code, status_fd))


if __name__ == "__main__":
    _main(sys.argv)
