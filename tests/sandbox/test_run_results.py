"""A result belongs to its run: no exit status of another process, no figure a run made up.

The pool's zygote reaps run children itself; it once remembered recently reaped children's
statuses by bare pid and handed one to a later child that reused the pid (pids wrap quickly:
``kernel.pid_max`` is 32768 here). A run that ended without an end record (``os._exit``, a crash,
the CPU-limit kill) was then reported ``ok`` with exit 0. And the end record's figures were taken
as written: a forged one put NaN into ``cpu_s``.
"""

from __future__ import annotations

import math
import os
import struct
import threading
import time

import pytest

from sandbox import Limits, Status
from tests.sandbox.jails import forging

_NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
            found += [int(child) for child in handle.read().split()]
    return found


def _alive(pid: int) -> bool:
    """Running or sleeping: not a zombie the zygote has yet to reap, not gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _prepared_child(pool) -> int | None:
    """Host pid of the prepared run child of a one-worker pool: the zygote's one live child once
    the last run's child has exited (zombies it has not reaped yet do not count)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for zygote in _children(pool.worker_pids()[0]):
            live = [child for child in _children(zygote) if _alive(child)]
            if len(live) == 1:
                return live[0]
        time.sleep(0.01)
    return None


def _steer_next_pid(pid: int, until: threading.Event) -> None:
    """Keep pointing the host's pid allocator just before ``pid`` until ``until`` is set: the
    next process forked anywhere gets ``pid`` once it is free (unless another process on the
    host forks first). The zygote forks run children in the host's PID namespace."""
    with open(_NS_LAST_PID, "w", encoding="ascii") as handle:
        while not until.is_set():
            handle.write(str(pid - 1))
            handle.flush()
            handle.seek(0)


def test_an_exit_status_is_never_taken_from_an_earlier_process_with_the_same_pid(fresh_pool):
    """A run child that ended and was reaped leaves its status with the zygote; the kernel is
    steered (``ns_last_pid``) to give its pid to a later run child, which exits 3 without an end
    record. Its result must be its own (before: the earlier child's exit 0, status ``ok``)."""
    if not os.access(_NS_LAST_PID, os.W_OK):
        pytest.skip("needs root in the host PID namespace to steer pid allocation")
    fresh_pool.run("print(0)", limits=Limits(wall_s=5))
    for _attempt in range(5):
        first = _prepared_child(fresh_pool)  # the child that serves the next run
        assert fresh_pool.run("print('first')", limits=Limits(wall_s=5)).stdout == "first\n"
        stop = threading.Event()
        steer = threading.Thread(target=_steer_next_pid, args=(first, stop))
        steer.start()
        try:
            for _ in range(30):  # each answered run makes the worker fork the next child
                fresh_pool.run("pass", limits=Limits(wall_s=5))
                if _prepared_child(fresh_pool) == first:
                    break
            reused = _prepared_child(fresh_pool) == first
        finally:
            stop.set()
            steer.join()
        if not reused:
            continue  # another process on the host took the pid first: try again
        result = fresh_pool.run("import os\nprint('partial', flush=True)\nos._exit(3)", limits=Limits(wall_s=5))
        assert (result.status, result.exit_code, result.stdout) == (Status.ERROR, 3, "partial\n"), result
        return
    pytest.skip("could not steer a run child onto a reused pid (a busy host)")


def test_many_short_runs_after_pid_churn_keep_their_own_exit_codes(fresh_pool):
    """Thread churn wraps the pid space; afterwards every run still reports its own exit code."""
    churn = "import threading\nfor _ in range(4000):\n    t = threading.Thread(target=int)\n    t.start()\n    t.join()"
    for round_ in range(4):
        assert fresh_pool.run(churn, limits=Limits(cpu_s=10, wall_s=20)).status is Status.OK
        for code in (0, 3, 7):
            result = fresh_pool.run(f"import os\nos._exit({code})", limits=Limits(wall_s=5))
            assert result.exit_code == code, (round_, result)
        killed = fresh_pool.run("while True:\n    pass", limits=Limits(cpu_s=0.3, wall_s=5))
        assert killed.status is Status.TIMEOUT, killed


@pytest.mark.parametrize(
    ("rc", "cpu"),
    [(0, float("nan")), (0, -1e300), (0, 1e300), (0, float("inf")), (2**31 - 1, 0.0), (-5, 0.0)],
    ids=["nan", "negative", "huge", "inf", "huge-rc", "negative-rc"],
)
def test_forged_end_record_figures_are_checked(pool, rc, cpu):
    code = forging(f'struct.pack("=cid", b"D", {rc}, float({str(cpu)!r}))', "time.sleep(1)\n")
    result = pool.run(code, limits=Limits(cpu_s=5, wall_s=10))
    assert math.isfinite(result.cpu_s) and 0 <= result.cpu_s <= 5.5, result
    assert math.isfinite(result.wall_s) and 0 <= result.wall_s <= 20, result
    assert result.exit_code is None or -64 <= result.exit_code <= 255, result
    after = pool.run("print(6 * 7)", limits=Limits(wall_s=1))
    assert (after.status, after.stdout) == (Status.OK, "42\n"), after


def test_every_figure_of_every_backend_is_plain(jail):
    for code in ("print(1)", "import os\nos._exit(9)", "while True:\n    pass"):
        result = jail.run(code, limits=Limits(cpu_s=0.5, wall_s=5))
        for value in (result.cpu_s, result.wall_s):
            assert isinstance(value, float) and math.isfinite(value) and value >= 0, result


def test_end_record_struct_is_what_the_forgery_above_writes():
    from sandbox._harness import END_RECORD

    assert END_RECORD.format == struct.Struct("=cid").format


@pytest.mark.parametrize(
    "code", ["raise SystemExit(137)", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"], ids=["exit", "kill"]
)
def test_a_kill_is_no_cpu_timeout_when_the_cgroup_says_the_budget_was_not_spent(jail, code):
    """bwrap and nsjail report a child killed by signal N as exit status 128 + N, and their own
    rusage misses the jailed run; a SIGKILL was then taken to be the CPU limit's whatever the
    run's cgroup had counted: a run that exited with 137 (or killed itself) after 0.01 s of a
    10 s budget read ``timeout``, "CPU time limit reached" (pool: ``error``)."""
    result = jail.run(code, limits=Limits(cpu_s=10, wall_s=30))
    assert result.limit_hit is None and result.status in (Status.ERROR, Status.OK), result
    assert "CPU time limit" not in result.stderr, result
