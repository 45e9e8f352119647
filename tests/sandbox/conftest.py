"""Fixtures for the sandbox tests: the default backend, which must be the hardened pool."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import sandbox
from sandbox.backends import BackendUnavailable

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pool():
    """The process-wide default backend; skip (with the reason) when it is not the pool."""
    backend = sandbox.default_backend()
    if backend.name != "pool":
        pytest.skip(
            f"default sandbox backend is {backend.name!r}: the kernel refused namespaces here, "
            "so the hardened pool (and this security suite) cannot run"
        )
    return backend


@pytest.fixture()
def fresh_pool():
    """A private pool for tests that change the environment or kill workers."""
    try:
        backend = sandbox.get_backend("pool", size=1)
    except BackendUnavailable as exc:
        pytest.skip(f"pool backend unavailable: {exc}")
    yield backend
    backend.close()


@pytest.fixture()
def leftovers(pool):
    """Returns host pids of run processes still alive (besides the idle, prepared children)."""
    return lambda: _run_leftovers(pool.uids())


@pytest.fixture()
def leftovers_of():
    """Like ``leftovers`` for any pool: ``leftovers_of(backend)``."""
    return lambda backend: _run_leftovers(backend.uids())


def _run_leftovers(uids: list[int]) -> list[int]:
    """Processes owned by a run uid that are not PID 1 of their namespace.

    Each worker keeps one *prepared* child waiting for the next run: it runs as the slot's
    uid and is PID 1 of a fresh namespace. Anything else with such a uid is left over.
    """
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
        innermost_pid = fields.get("NSpid", entry).split()[-1]
        if uid in uids and innermost_pid != "1":
            found.append(int(entry))
    return found


@pytest.fixture(scope="session")
def write_refused() -> Callable[[sandbox.ExecResult], None]:
    """Check a run's attempt to write into the checkout: a violation (read-only view), or, for a
    checkout below ``/tmp`` (a fresh clone there), possibly a missing path: the jail's ``/tmp``
    is its own (only a venv inside the checkout is bound back, as a read-only directory)."""

    def check(result: sandbox.ExecResult) -> None:
        if result.status is sandbox.Status.ERROR and CHECKOUT.is_relative_to("/tmp"):
            assert "FileNotFoundError" in result.stderr, result
        else:
            assert result.status is sandbox.Status.VIOLATION, result

    return check
