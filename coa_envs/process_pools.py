"""Process pools whose workers never outlive the process that made them.

A ``ProcessPoolExecutor`` worker waits on a queue whose write end it holds itself, so when its
owner dies without shutting the pool down (SIGKILL, ``os._exit``, an out-of-memory kill, a
test's timeout) the worker waits forever; under ``forkserver`` every worker also holds the fd
that would let the fork server see its client go, so the server stays too. Each CI run left such
orphans behind. :func:`owned_pool` gives every worker a watcher of its owner's pid that ends the
worker when the owner ends; the fork server then sees its last client go and ends as well.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any

__all__ = ["descendants", "kill_pool", "owned_pool", "process_alive"]

_POLL_S = 1.0
"""How often the fallback watcher (no ``pidfd_open``) checks that the owner is still alive."""


def _wait_for_exit(pid: int) -> None:
    """Return once process ``pid`` has ended (at once if it already has)."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3), or the pid is gone already
        handle = None
    if handle is not None:
        select.select([handle], [], [])  # a pidfd turns readable when its process ends
        return
    while process_alive(pid):
        time.sleep(_POLL_S)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one we may not signal, another user's, counts as running;
    0 and negative numbers name process groups, not a process)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, owned by another user
        return True
    return True


def _watch_owner(owner: int) -> None:
    def watch() -> None:
        _wait_for_exit(owner)
        os._exit(0)

    threading.Thread(target=watch, name=f"exit-with-{owner}", daemon=True).start()


def _start_worker(owner: int, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    _watch_owner(owner)
    if initializer is not None:
        initializer(*initargs)


def owned_pool(workers: int, context: BaseContext, initializer: Callable[..., Any] | None = None,
               initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` of ``workers`` processes from ``context`` whose workers end
    when this process ends, however it ends. ``initializer`` must be picklable, as usual."""
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Kill ``pool``'s workers now (a stuck call cannot be cancelled) and shut it down without
    waiting. ``_processes`` is the executor's only handle on its workers (there is no public
    one before Python 3.14's ``kill_workers``); a pool already shut down has none left."""
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
    else:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, whichever of its threads started them ([] once it exited)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue  # the thread or the process exited meanwhile
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from ``/proc/PID/task/*/children``; [] without /proc)."""
    found: list[int] = []
    pending = _children(pid)
    while pending:
        child = pending.pop()
        if child not in found:
            found.append(child)
            pending.extend(_children(child))
    return found
