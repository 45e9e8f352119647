"""Per-run accounting, attacked on every jailing backend present (pool, bwrap, nsjail).

A run is one accounting unit: its memory (kernel memory included), its processes and its CPU
time are counted for all of its processes together, so forking does not multiply a limit, and
the result says which limit was hit. Each attack here got through when the limits were
per-process rlimits (``memory_mb`` as RLIMIT_AS, ``cpu_s`` as RLIMIT_CPU); after each one the
backend must still answer correctly (within a 1 s wall limit, see :func:`tests.sandbox.jails.still_correct`).
"""

from __future__ import annotations

import json
import math
import os
import textwrap

import pytest

from sandbox import Limits, Status
from sandbox.backends import BackendUnavailable, get_backend
from tests.sandbox.jails import (
    SPINNERS_REPORTING,
    cpu_the_spinners_had,
    jail_backend,
    leftover_processes,
    still_correct,
)

MB = 2**20


# -- memory: one budget for every process of the run --------------------------------------------
FORKED_MEMORY = r"""
import os, time
ready_r, ready_w = os.pipe()
kids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        block = b"\1" * (100 * 2**20)  # written, so resident: 100 MB per child
        os.write(ready_w, b"%d\n" % os.getpid())
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
time.sleep(2)
os.set_blocking(ready_r, False)
try:
    ready = [int(word) for word in os.read(ready_r, 4096).split()]  # children that wrote their block
except BlockingIOError:
    ready = []
print(sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in ready), flush=True)  # ... and still hold it
for pid in kids:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
"""


def test_forked_children_share_one_memory_budget(jail):
    """8 children of 100 MB each under ``memory_mb=128``: at most one can hold its block."""
    result = jail.run(FORKED_MEMORY, limits=Limits(memory_mb=128, cpu_s=10, wall_s=15))
    assert result.status is Status.MEMORY, result
    assert result.limit_hit == "memory_limit", result
    if result.stdout.strip():
        assert int(result.stdout) * 100 <= 128, result  # children that held 100 MB at the same time
    still_correct(jail)


def test_one_process_over_its_memory_says_memory_limit(jail):
    result = jail.run("blocks = []\nwhile True:\n    blocks.append(b'1' * 2**24)",
                      limits=Limits(memory_mb=96, cpu_s=5, wall_s=10))
    assert (result.status, result.limit_hit) == (Status.MEMORY, "memory_limit"), result
    still_correct(jail)


# -- CPU: one budget for every process of the run ------------------------------------------------
FORKED_CPU = r"""
import os
import textwrap
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        while True:
            pass
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("children done")
"""


def test_forked_children_share_one_cpu_budget(jail):
    """Three spinning children under ``cpu_s=1`` used 3 CPU-s (each had its own RLIMIT_CPU)."""
    result = jail.run(FORKED_CPU, limits=Limits(cpu_s=1, wall_s=60))
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert result.cpu_s <= 2.0, result  # the run's CPU time, all processes together (3 s before)
    still_correct(jail)


WIDENED_CPU = r"""
import os
import textwrap
os.sched_setaffinity(0, range(os.cpu_count()))  # every CPU, whatever its caller was pinned to
for _ in range(os.cpu_count() - 1):
    if os.fork() == 0:
        break
while True:
    pass
"""


@pytest.fixture()
def pinned_to_one_cpu():
    """This process (and what it starts) on one CPU, as under ``taskset`` or a pinned worker."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs")
    original = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(original)})
    yield
    os.sched_setaffinity(0, original)


def test_the_cpu_watch_counts_every_cpu_a_run_could_take(pinned_to_one_cpu):
    """The watch checked first when the budget could be spent on the CPUs its *caller* may use;
    a run may widen its own affinity to every CPU, and spent cpu_count budgets by then."""
    from sandbox._collect import CpuWatch

    assert CpuWatch(lambda: 0.0, 1.0).cpus == os.cpu_count()


def test_a_run_that_widens_its_affinity_stops_near_its_cpu_budget(pinned_to_one_cpu):
    """A one-worker pool started by a caller pinned to one CPU; the run takes every CPU with a
    spinner on each. (Before: the first check came after 1.5 s, by when it had used 1.5 s on
    every CPU, 3 CPU-s on two idle ones.)"""
    backend = jail_backend("pool", preload=())
    try:
        result = backend.run(WIDENED_CPU, limits=Limits(cpu_s=1.5, wall_s=60))
    finally:
        backend.close()
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert result.cpu_s <= 2.25, result


def test_children_that_outlive_their_parents_work_share_its_cpu_budget(jail):
    """Three spinners beside a sleeping parent; each says how much CPU it has had. Together they
    may not pass the run's budget (before: 1 CPU-s each, however many there were)."""
    result = jail.run(SPINNERS_REPORTING, limits=Limits(cpu_s=1, wall_s=40))
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert cpu_the_spinners_had(result.stdout) <= 2.0, result.stdout
    assert result.cpu_s <= 2.0, result
    assert leftover_processes(jail) == []
    still_correct(jail)


@pytest.mark.parametrize("cpu_s", [0.3, 1.0])
def test_reported_cpu_time_is_the_runs_and_a_plain_figure(jail, cpu_s):
    result = jail.run("x = 0\nwhile True:\n    x += 1", limits=Limits(cpu_s=cpu_s, wall_s=10))
    assert result.status is Status.TIMEOUT, result
    assert math.isfinite(result.cpu_s) and 0.5 * cpu_s <= result.cpu_s <= cpu_s + 0.5, result


# -- processes: one budget per run, and said so --------------------------------------------------
# Forks children that sleep until 64 processes run or a fork is refused (``OSError``).
FORK_BOMB = """\
while forks < 64:
    if os.fork() == 0:
        time.sleep(3)
        os._exit(0)
    forks += 1
"""

FORK_UNTIL_REFUSED = f"""\
import os, time
forks = 1
try:
{textwrap.indent(FORK_BOMB, "    ")}finally:
    print(forks, flush=True)
"""


def test_process_limit_counts_the_whole_run_and_is_reported(jail):
    result = jail.run(FORK_UNTIL_REFUSED, limits=Limits(max_processes=8, cpu_s=5, wall_s=10))
    assert result.status is Status.VIOLATION, result
    assert result.limit_hit == "process_limit", result
    assert int(result.stdout) <= 8, result
    still_correct(jail)


CAUGHT_REFUSALS = f"""\
import os, threading, time
forks = threads = 0
try:
{textwrap.indent(FORK_BOMB, "    ")}except OSError:
    pass
try:
    while threads < 64:
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
        threads += 1
except RuntimeError:
    pass
print(forks, threads, flush=True)
"""


@pytest.mark.parametrize("max_processes", [8, 32])
def test_a_refused_fork_the_code_catches_still_says_process_limit(jail, max_processes):
    """Code that catches the refusal and goes on (a fork bomb wrapped in ``try``) still hit the
    limit: the result says so, whichever refused it, the pids controller (which counts its
    refusals) or ``RLIMIT_NPROC`` (which the harness reports the moment it refuses). Before that
    report existed, a refusal by the rlimit left ``ok`` with no limit named (CI, stop 36)."""
    result = jail.run(CAUGHT_REFUSALS, limits=Limits(max_processes=max_processes, cpu_s=5, wall_s=15))
    forks, threads = (int(word) for word in result.stdout.split())
    assert forks + 1 <= max_processes and threads <= max_processes, result
    assert (result.status, result.limit_hit) == (Status.VIOLATION, "process_limit"), result
    still_correct(jail)


@pytest.mark.parametrize("kind", ["pool", "nsjail"])
def test_a_caught_refusal_is_reported_without_a_pids_controller(kind):
    """Where only ``RLIMIT_NPROC`` refuses (per-process accounting, or an rlimit that refused
    before the controller), the refusal itself is the report: the harness writes it the moment
    a fork or a thread is refused, whether or not the code catches it."""
    options = {"size": 1, "preload": ()} if kind == "pool" else {}
    try:
        backend = get_backend(kind, accounting="process", **options)
    except BackendUnavailable as missing:
        pytest.skip(str(missing))
    try:
        result = backend.run(CAUGHT_REFUSALS, limits=Limits(max_processes=8, cpu_s=5, wall_s=15))
        forks, threads = (int(word) for word in result.stdout.split())
        assert forks < 8 and threads < 8, result
        assert (result.status, result.limit_hit) == (Status.VIOLATION, "process_limit"), result
        assert backend.run("print(6 * 7)").stdout == "42\n"
    finally:
        backend.close()


def test_threads_count_against_the_process_limit(jail):
    code = ("import threading, time\nstarted = 0\ntry:\n    for _ in range(64):\n"
            "        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()\n        started += 1\n"
            "finally:\n    print(started, flush=True)")
    result = jail.run(code, limits=Limits(max_processes=8, cpu_s=5, wall_s=10))
    assert result.limit_hit == "process_limit", result
    assert int(result.stdout) < 8, result
    still_correct(jail)


# -- kernel memory: refused, or counted against the run's memory ---------------------------------
SEMAPHORES = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
made = 0
for _ in range(150):
    if libc.semget(0, 32000, 0o600 | 0o1000) < 0:  # IPC_PRIVATE, IPC_CREAT
        break
    made += 1
print(made, flush=True)
"""


def test_semaphore_sets_cannot_pin_kernel_memory_outside_the_run(jail):
    """150 sets of 32,000 semaphores pinned ~300 MB of kernel memory no limit counted."""
    result = jail.run(SEMAPHORES, limits=Limits(memory_mb=64, cpu_s=5, wall_s=10))
    made = int(result.stdout or 0)
    # ~2 MB of kernel memory per set: refused outright, or stopped at the run's memory limit.
    assert made * 2 <= 64 or result.status is Status.MEMORY, result
    still_correct(jail)


FD_BUFFERS = r"""
import fcntl, os, socket
held, total = [], 0
try:
    for _ in range(60):
        r, w = os.pipe()
        held.append((r, w))
        try:
            fcntl.fcntl(w, 1031, 2**20)  # F_SETPIPE_SZ: 1 MB of kernel memory per pipe
        except OSError:
            pass
        os.set_blocking(w, False)
        try:
            while True:
                total += os.write(w, b"x" * 65536)
        except BlockingIOError:
            pass
    for _ in range(60):
        a, b = socket.socketpair()
        held.append((a, b))
        a.setblocking(False)
        try:
            while True:
                total += a.send(b"x" * 65536)
        except BlockingIOError:
            pass
finally:
    print(json.dumps(total), flush=True)
"""


def test_pipe_and_socket_buffers_count_against_the_runs_memory(jail):
    limits = Limits(memory_mb=48, max_open_files=512, cpu_s=5, wall_s=10)
    result = jail.run("import json\n" + FD_BUFFERS, limits=limits)
    buffered = json.loads(result.stdout or "0")
    assert buffered <= 48 * MB or result.status is Status.MEMORY, result
    still_correct(jail)


def test_posix_message_queues_are_refused(jail):
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.mq_open.restype = ctypes.c_int\n"
            "fd = libc.mq_open(b'/coa', 0o100 | 2, 0o600, None)\nprint(fd)")
    result = jail.run(code, limits=Limits(cpu_s=3, wall_s=8))
    assert result.stdout.strip() in ("-1", ""), result
    still_correct(jail)


def test_a_run_sees_its_cgroup_as_the_root_not_the_hosts_paths(jail):
    if jail.name == "nsjail":
        pytest.skip("nsjail drops CAP_SYS_ADMIN before the harness joins the run's cgroup")
    result = jail.run("print(open('/proc/self/cgroup').read())", limits=Limits(cpu_s=3, wall_s=8))
    paths = {line.split(":", 2)[2] for line in result.stdout.split() if line.count(":") >= 2}
    assert paths == {"/"}, result.stdout  # (they named the caller's pid and its own cgroup)
