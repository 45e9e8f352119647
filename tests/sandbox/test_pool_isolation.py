"""Pools (and sessions) never share a run uid, so one cannot use up another's process budget.

The kernel counts processes per uid (RLIMIT_NPROC). Every pool used to number its run uids from
the same base, so a run at its process limit in one pool made a concurrent run of another pool
(in this process or another) fail to start a thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from sandbox import Limits, Status
from sandbox.backends import get_backend
from tests.sandbox.jails import CHECKOUT, jail_backend

HOLD_PROCESSES = r"""
import os, time
kids = []
for _ in range(15):
    pid = os.fork()
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
print("holding", flush=True)
for pid in kids:
    os.waitpid(pid, 0)
"""
START_A_THREAD = "import threading\nt = threading.Thread(target=print, args=('thread ok',))\nt.start()\nt.join()"


def _root_only(backend) -> None:
    if set(backend.uids()) == {0}:
        pytest.skip("runs keep the caller's uid here (not root): nothing to tell apart")


def test_two_pools_in_one_process_have_disjoint_uids(pool):
    _root_only(pool)
    other = get_backend("pool", size=2, preload=())
    try:
        assert not set(other.uids()) & set(pool.uids())
    finally:
        other.close()


def test_a_pool_in_another_process_has_disjoint_uids(pool):
    _root_only(pool)
    probe = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom sandbox.backends import get_backend\n"
             "b = get_backend('pool', size=2, preload=())\nprint(json.dumps(b.uids()))\nb.close()")
    out = subprocess.run([sys.executable, "-c", probe, str(CHECKOUT)], capture_output=True, text=True, timeout=120,
                         check=True)
    assert not set(json.loads(out.stdout.splitlines()[-1])) & set(pool.uids())


def test_a_run_at_its_process_limit_does_not_starve_another_pools_run(fresh_pool_factory):
    first, second = fresh_pool_factory(preload=()), fresh_pool_factory(preload=())
    try:
        _root_only(first)
        limits = Limits(max_processes=16, cpu_s=5, wall_s=10)
        held: dict[str, object] = {}
        holder = threading.Thread(target=lambda: held.setdefault("r", first.run(HOLD_PROCESSES, limits=limits)))
        holder.start()
        time.sleep(1.0)  # the holder's 16 processes are alive now
        result = second.run(START_A_THREAD, limits=limits)
        holder.join()
        assert (result.status, result.stdout) == (Status.OK, "thread ok\n"), result
        assert held["r"].stdout.startswith("holding"), held
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("kind", ["bwrap", "nsjail"])
def test_two_wrapper_backends_never_hand_out_the_same_uid(kind):
    """bwrap and nsjail switch each run to a uid of its own: two instances (here, in one process;
    in two processes the lease files keep them apart the same way) must not overlap."""
    first, second = jail_backend(kind), jail_backend(kind, read_only_paths=["/usr/share"])
    try:
        if not first.uids():
            pytest.skip(f"{kind} runs keep the caller's uid here (not root)")
        assert not set(first.uids()) & set(second.uids())
        limits = Limits(max_processes=16, cpu_s=5, wall_s=10)
        held: dict[str, object] = {}
        holder = threading.Thread(target=lambda: held.setdefault("r", first.run(HOLD_PROCESSES, limits=limits)))
        holder.start()
        time.sleep(1.0)
        result = second.run(START_A_THREAD, limits=limits)
        holder.join()
        assert (result.status, result.stdout) == (Status.OK, "thread ok\n"), result
    finally:
        second.close()
