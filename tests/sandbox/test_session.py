"""Stateful sessions: notebook semantics, per-cell limits, recovery and isolation."""

from __future__ import annotations

import asyncio

import pytest

from sandbox import Limits, Session, Status
from sandbox.session import RESTART_NOTE


@pytest.fixture()
def session(pool):
    with Session(Limits(cpu_s=2, wall_s=2)) as s:
        yield s


def test_variables_and_imports_persist_between_cells(session):
    assert session.run("import numpy as np\ntotal = 40").status is Status.OK
    second = session.run("total += 2\nprint(total, int(np.ones(3).sum()))")
    assert second.stdout == "42 3\n"


def test_each_cell_gets_its_own_stdin(session):
    assert session.run("print(input())", stdin="first").stdout == "first\n"
    assert session.run("print(input())", stdin="second").stdout == "second\n"


def test_error_in_a_cell_keeps_the_state(session):
    session.run("kept = 'yes'")
    failed = session.run("1 / 0")
    assert failed.status is Status.ERROR and "ZeroDivisionError" in failed.stderr
    assert session.run("print(kept)").stdout == "yes\n"
    exited = session.run("raise SystemExit(4)")
    assert exited.exit_code == 4
    assert session.run("print(kept)").stdout == "yes\n"


def test_timeout_ends_the_session_and_the_next_cell_says_so(session):
    session.run("lost = 1")
    slow = session.run("import time\ntime.sleep(30)")
    assert slow.status is Status.TIMEOUT
    after = session.run("print('lost' in globals())")
    assert after.stdout == "False\n"
    assert after.stderr.startswith(RESTART_NOTE)


def test_reset_forgets_everything(session):
    session.run("secret = 5")
    session.reset()
    assert session.run("print('secret' in globals())").stdout == "False\n"


def test_sessions_do_not_share_state_or_files(pool):
    with Session() as first, Session() as second:
        first.run("shared = 1\nopen('mine.txt', 'w').write('a')")
        probe = second.run("import os\nprint('shared' in globals(), os.listdir('.'))")
        assert probe.stdout == "False []\n"


def test_session_is_jailed_like_the_pool(session):
    assert "network namespace (no interfaces)" in session.isolation
    refused = session.run("open('/etc/hostname-copy', 'w')")
    assert refused.status is Status.VIOLATION


def test_async_cells(session):
    async def cells() -> list[str]:
        await session.arun("n = 5")
        result = await session.arun("print(n * 2)")
        return [result.stdout]

    assert asyncio.run(cells()) == ["10\n"]


def test_unjailed_session_still_keeps_state_and_limits():
    with Session(Limits(wall_s=1), jail=False, preload=()) as s:
        assert "no isolation" in s.isolation[0]
        s.run("v = 3")
        assert s.run("print(v)").stdout == "3\n"
        assert s.run("import time\ntime.sleep(10)").status is Status.TIMEOUT


def test_a_session_never_falls_back_to_the_unisolated_mode_on_its_own(monkeypatch):
    # Without namespaces a session used to start unjailed with only a log line; now that takes
    # an explicit jail=False.
    import sandbox.session as session_module
    from sandbox import BackendUnavailable

    real = session_module.WorkerProcess

    def no_namespaces(python, config, timeout, *lease):
        if config["jail"]:
            raise BackendUnavailable("sandbox worker cannot jail runs: unshare: Operation not permitted")
        return real(python, config, timeout, *lease)

    monkeypatch.setattr(session_module, "WorkerProcess", no_namespaces)
    with pytest.raises(BackendUnavailable, match="jail=False"):
        Session(Limits(wall_s=2), preload=(), warm_spare=False)
    with Session(Limits(wall_s=2), jail=False, preload=(), warm_spare=False) as unjailed:  # the explicit opt-in
        assert unjailed.run("print(6 * 7)").stdout == "42\n"


def test_a_cell_cannot_ask_for_other_session_wide_limits(pool):
    """``memory_mb``, ``max_processes`` and the per-process rlimits are set for the whole session at
    its first cell: a later cell's own were silently ignored (a cell given ``memory_mb=64`` held
    200 MB and read ``ok``). Its own ``cpu_s`` and ``wall_s`` still apply."""
    with Session(Limits(cpu_s=5, wall_s=20), warm_spare=False) as session:
        session.run("x = 1")
        with pytest.raises(ValueError, match="memory_mb"):
            session.run("block = b'1' * (200 << 20)", limits=Limits(cpu_s=5, wall_s=20, memory_mb=64))
        with pytest.raises(ValueError, match="max_processes"):
            session.run("pass", limits=Limits(cpu_s=5, wall_s=20, max_processes=500))
        kept = session.run("print(x)", limits=Limits(cpu_s=1, wall_s=5))
        assert (kept.status, kept.stdout) == (Status.OK, "1\n"), kept
