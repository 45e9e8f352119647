"""Helpers shared by the sandbox test modules: every jailing backend present, and what a run
left behind on the host. (A module of its own so that test modules can import it; pytest's
conftest is not importable as a module.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import sandbox
from sandbox import Limits, Status
from sandbox.backends import BackendUnavailable, get_backend

CHECKOUT = Path(__file__).resolve().parents[2]
#: Every backend that jails runs; the attack suites run on each one present.
JAILS = ("pool", "bwrap", "nsjail", "docker")
#: The limits of one attack run in the least-privilege suites (the wrappers start an
#: interpreter per run, so the wall limit leaves room for that).
QUICK = Limits(cpu_s=3, wall_s=8)

_jails: dict[str, object] = {}


def jail_backend(name: str, **options: object) -> object:
    """A backend of kind ``name`` (skips with the reason when it cannot run here). Without
    options the instance is shared by the session (the pool one is the default backend)."""
    if not options and name in _jails:
        return _jails[name]
    try:
        if name == "pool" and not options:
            backend = sandbox.default_backend()
            if backend.name != "pool":
                pytest.skip(f"default backend is {backend.name!r}, not the pool")
        else:
            backend = get_backend(name, **(dict(size=1) if name == "pool" else {}), **options)
    except BackendUnavailable as exc:
        pytest.skip(f"{name} backend unavailable: {exc}")
    if not options:
        _jails[name] = backend
    return backend


def still_correct(backend) -> None:
    """The next run after an attack answers correctly: within a 1 s wall limit on the pool (a
    warm child per run); the wrappers start an interpreter per run, which takes longer than that
    on a loaded 2-core host, so they get 5 s."""
    wall_s = 1 if backend.name == "pool" else 5
    after = backend.run("print(6 * 7)", limits=Limits(wall_s=wall_s, cpu_s=1))
    assert (after.status, after.stdout) == (Status.OK, "42\n"), after


def forging(record: str, then: str, fds: int = 64) -> str:
    """Attack code that packs ``record`` (a ``struct.pack`` expression for one of the sandbox's
    own records: end of run, end of cell), writes it to every descriptor from 3 below ``fds``
    the run may hold (one of them is the channel the sandbox reads such records from), then
    runs ``then``."""
    return ("import os, struct, subprocess, time\n"
            f"record = {record}\n"
            f"for fd in range(3, {fds}):\n"
            "    try:\n        os.write(fd, record)\n    except OSError:\n        pass\n"
            f"{then}")


def run_uids(backend) -> set[int]:
    """The uids a backend's runs execute as (as root: per pool slot, or a rotating range)."""
    if hasattr(backend, "uids"):
        return set(backend.uids())
    return set()


def _processes_of(uids: set[int]) -> list[tuple[int, str, int]]:
    """(host pid, innermost pid, host parent pid) of the processes whose real uid is in ``uids``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        uid = int(fields.get("Uid", "-1").split()[0])
        if uid in uids:
            found.append((int(entry), fields.get("NSpid", entry).split()[-1], int(fields.get("PPid", "0"))))
    return found


def leftover_processes(backend, settle_s: float = 2.0) -> list[int]:
    """Run processes still alive once ``settle_s`` has passed (none is what every test wants).

    A pool keeps one *prepared* child per worker waiting for the next run: it runs as the
    slot's uid and is PID 1 of a fresh namespace (the init), with PID 2 (the process the code
    will run in) below it; so a pool's PID-1 processes and their PID-2 children are not counted.
    """
    uids = run_uids(backend)
    if not uids:
        return []
    deadline = time.monotonic() + settle_s
    while True:
        found = _processes_of(uids)
        prepared = {pid for pid, inner, _ in found if backend.name == "pool" and inner == "1"}
        left = [pid for pid, inner, up in found if pid not in prepared and not (inner == "2" and up in prepared)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)




#: Three spinning children beside a sleeping parent, each printing "<pid> <its CPU seconds>" as it
#: goes: how much CPU a run's processes really had, whatever the sandbox reports. With per-process
#: limits of 1 s they get 3 s together; a budget for the run holds them to ~1 s (plus the time the
#: watcher takes to notice on a loaded machine: tests allow up to 2 s).
SPINNERS_REPORTING = r"""
import os, resource, time
for _ in range(3):
    if os.fork() == 0:
        reported = 0.0
        while True:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            spent = usage.ru_utime + usage.ru_stime
            if spent - reported >= 0.1:
                print(os.getpid(), round(spent, 2), flush=True)
                reported = spent
time.sleep(60)
"""


def cpu_the_spinners_had(stdout: str) -> float:
    """Total CPU seconds :data:`SPINNERS_REPORTING`'s children said they had."""
    spent: dict[str, float] = {}
    for line in stdout.split("\n"):
        if len(line.split()) == 2:
            pid, seconds = line.split()
            spent[pid] = max(spent.get(pid, 0.0), float(seconds))
    return sum(spent.values())


def close_shared() -> None:
    """Close the shared backends (the default pool is closed at exit by sandbox itself)."""
    for name, backend in list(_jails.items()):
        if name != "pool":
            backend.close()
    _jails.clear()
