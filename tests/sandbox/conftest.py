"""Fixtures for the sandbox tests: the default backend (which must be the hardened pool), and every
jailing backend present on this machine, for the attack suites that run on each of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import sandbox
from sandbox.backends import BackendUnavailable, get_backend
from tests.sandbox.jails import JAILS, close_shared, jail_backend, leftover_processes


@pytest.fixture(scope="session")
def pool():
    """The process-wide default backend; skip (with the reason) when it is not the pool."""
    try:
        backend = sandbox.default_backend()
    except BackendUnavailable as exc:
        pytest.skip(f"no isolating backend starts here: {exc}")
    if backend.name != "pool":
        pytest.skip(
            f"default sandbox backend is {backend.name!r}: the kernel refused namespaces here, "
            "so the hardened pool (and this security suite) cannot run"
        )
    return backend


@pytest.fixture(scope="session", params=JAILS)
def jail(request):
    """Each jailing backend present (pool, bwrap, nsjail, docker), shared by the session."""
    return jail_backend(request.param)


def pytest_sessionfinish(session, exitstatus):
    close_shared()


@pytest.fixture()
def leftovers(pool) -> Callable[[], list[int]]:
    """Host pids of the default pool's run processes still alive (besides prepared children)."""
    return lambda: leftover_processes(pool)


@pytest.fixture()
def leftovers_of() -> Callable[[object], list[int]]:
    """Like ``leftovers`` for any backend: ``leftovers_of(backend)``."""
    return leftover_processes


@pytest.fixture(scope="session")
def fresh_pool_factory():
    """Start a private pool (``size=1``) with options; skips with the reason when impossible."""

    def start(**options: object):
        try:
            return get_backend("pool", size=1, **options)
        except BackendUnavailable as exc:
            pytest.skip(f"pool backend unavailable: {exc}")

    return start


@pytest.fixture()
def fresh_pool(fresh_pool_factory) -> Iterator[object]:
    """A private pool for tests that change the environment or kill workers."""
    backend = fresh_pool_factory()
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def write_refused() -> Callable[[sandbox.ExecResult], None]:
    """Check a run's attempt to write outside its scratch space and grants: refused as a violation
    (a read-only directory of the root) or, for a path the allowlist root does not hold at all
    (a checkout, a home directory), failed because the path is not there."""

    def check(result: sandbox.ExecResult) -> None:
        if result.status is sandbox.Status.ERROR:
            assert "FileNotFoundError" in result.stderr, result
        else:
            assert result.status is sandbox.Status.VIOLATION, result

    return check
