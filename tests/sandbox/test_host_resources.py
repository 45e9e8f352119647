"""Host resources a run could take from everyone else, attacked on every jailing backend present.

Beyond memory a cgroup counts, a run could pin what the host has only one of: the host-wide pool
of asynchronous-I/O events (``fs.aio-max-nr``: one ``io_setup`` took all of it), huge pages
(reserved memory no memory cgroup counts), the CPU itself (real-time scheduling or a raised
priority, allowed whenever the caller's hard limits allow them), or kernel objects no rlimit
bounds (epoll watches: a few forks held ~100 MB). Each test here got through before the fix; after
each one the backend must still answer correctly within a 1 s wall limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from sandbox import Limits, Status
from tests.sandbox.jails import CHECKOUT, still_correct

MB = 2**20


AIO_SETUP = r"""
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
number = {"x86_64": 206, "aarch64": 0}[platform.machine()]
context = ctypes.c_ulong(0)
print(libc.syscall(number, 65536, ctypes.byref(context)), ctypes.get_errno(), flush=True)
"""


def test_a_run_cannot_take_the_hosts_asynchronous_io_events(jail):
    """``io_setup(65536)`` took the whole host's ``fs.aio-max-nr`` (65536 by default): every other
    process's ``io_setup`` failed with EAGAIN while the run lasted."""
    result = jail.run(AIO_SETUP, limits=Limits(cpu_s=3, wall_s=8))
    returned, _ = result.stdout.split()
    assert returned == "-1", result  # refused (it returned 0: a context of 65536 events)
    still_correct(jail)


HUGE_PAGES = r"""
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
MAP_HUGETLB = 0x40000
address = libc.mmap(None, 2 * 2**20, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB, -1, 0)
print(ctypes.get_errno() if address in (None, 2**64 - 1) else "mapped", flush=True)
"""


def test_huge_pages_no_memory_cgroup_counts_cannot_be_mapped(jail):
    """Huge pages come from the host's reserved pool, which a memory cgroup does not count (the
    ``hugetlb`` controller would). Refused with EPERM; on a host without reserved huge pages the
    kernel's own answer was ENOMEM (12), on one with them the mapping succeeded."""
    result = jail.run(HUGE_PAGES, limits=Limits(cpu_s=3, wall_s=8))
    assert result.stdout.strip() == "1", result  # EPERM
    still_correct(jail)


EPOLL_WATCHES = r"""
import os, select, time
ready_r, ready_w = os.pipe()
def watch_all():
    fds = [os.eventfd(0) for _ in range(250)]
    made, polls = 0, []
    try:
        while True:
            poll = select.epoll()
            polls.append(poll)
            for fd in fds:
                poll.register(fd)
                made += 1
    except OSError:
        pass
    return made, polls
kids = []
for _ in range(11):
    pid = os.fork()
    if pid == 0:
        made, polls = watch_all()
        os.write(ready_w, b"%d\n" % made)
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
made, polls = watch_all()
total = made
os.close(ready_w)
with os.fdopen(ready_r) as lines:
    total += sum(int(line) for line in lines if line.strip())
print(total, flush=True)
"""


def test_epoll_watches_count_against_the_runs_memory(jail):
    """12 processes of 250 epoll instances watching 250 descriptors each: ~750,000 watches of at
    least 128 bytes of kernel memory (~90 MB), all held before, no limit counting them."""
    limits = Limits(memory_mb=48, max_open_files=512, max_processes=16, cpu_s=20, wall_s=30)
    result = jail.run(EPOLL_WATCHES, limits=limits)
    watches = int(result.stdout.strip() or 0)
    assert watches * 128 <= 48 * MB or result.status is Status.MEMORY, result
    still_correct(jail)


SCHEDULING = r"""
import os
answers = []
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    answers.append("fifo")
except OSError:
    answers.append("no fifo")
try:
    os.setpriority(os.PRIO_PROCESS, 0, -10)
    answers.append("raised")
except OSError:
    answers.append("not raised")
print(" ".join(answers))
"""

#: Started in a fresh interpreter whose hard limits allow real-time scheduling and raised
#: priorities (as a root shell or a container may): the backend's runs must not inherit them.
_UNDER_GENEROUS_LIMITS = """
import json, resource, sys
try:
    resource.setrlimit(resource.RLIMIT_RTPRIO, (99, 99))
    resource.setrlimit(resource.RLIMIT_NICE, (40, 40))
except (ValueError, OSError) as exc:
    print(json.dumps({{"skip": f"this host's limits cannot be raised (no CAP_SYS_RESOURCE): {{exc}}"}}))
    sys.exit(0)
from sandbox import Limits
from sandbox.backends import BackendUnavailable, get_backend
try:
    backend = get_backend(sys.argv[1], **({{"size": 1}} if sys.argv[1] == "pool" else {{}}))
except BackendUnavailable as exc:
    print(json.dumps({{"skip": str(exc)}}))
    sys.exit(0)
result = backend.run({code!r}, limits=Limits(cpu_s=3, wall_s=10))
after = backend.run("print(6 * 7)", limits=Limits(cpu_s=1, wall_s=1))
backend.close()
print(json.dumps({{"stdout": result.stdout, "stderr": result.stderr[-500:], "after": after.stdout}}))
"""


@pytest.mark.parametrize("kind", ["pool", "bwrap", "nsjail"])
def test_a_run_never_gets_real_time_scheduling_or_a_raised_priority(kind):
    """A SCHED_FIFO run starves every other process on its CPUs until its CPU budget is spent
    (the watcher that would kill it among them); a raised priority takes CPU from the host's."""
    import os

    if os.geteuid() != 0:
        pytest.skip("raising RLIMIT_RTPRIO takes root")
    script = textwrap.dedent(_UNDER_GENEROUS_LIMITS).format(code=SCHEDULING)
    completed = subprocess.run([sys.executable, "-c", script, kind], capture_output=True, text=True,
                               cwd=CHECKOUT, timeout=120)  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    if "skip" in report:
        pytest.skip(f"{kind}: {report['skip']}")
    assert report["stdout"] == "no fifo not raised\n", report
    assert report["after"] == "42\n", report


SHARED_MEMORY_PAST_THE_QUOTA = r"""
from multiprocessing import shared_memory
block = shared_memory.SharedMemory(create=True, size=12 * 2**20)  # /dev/shm: sparse, then written
block.buf[:] = b"x" * (12 * 2**20)
print("written")
"""


def test_shared_memory_written_past_the_disk_quota_says_why_it_died(jail):
    """A mapped file in /dev/shm written past ``disk_mb`` dies of SIGBUS, with no code of the run
    left to explain: the result names the cause (it was a bare ``error`` with an empty stderr)."""
    result = jail.run(SHARED_MEMORY_PAST_THE_QUOTA, limits=Limits(disk_mb=8, cpu_s=5, wall_s=15))
    assert result.status is Status.ERROR and result.exit_code == -7, result
    assert "SIGBUS" in result.stderr and "disk quota, 8 MB" in result.stderr, result
    still_correct(jail)


CORE_DUMP = r"""
import os, resource
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
except ValueError:
    pass  # the hard limit is 0: it cannot be raised
if os.fork() == 0:
    os.abort()
_, status = os.wait()
print(resource.getrlimit(resource.RLIMIT_CORE), os.WCOREDUMP(status), os.path.exists("core"))
"""


def test_a_crash_dumps_no_core(jail):
    """With a pipe in ``kernel.core_pattern`` (apport, systemd-coredump) a core dump runs a helper
    on the host, as root, that writes the crashed process's memory to the host's disk, outside
    every limit of the run. bwrap runs kept the caller's hard RLIMIT_CORE (unlimited): a run
    raised its soft limit and dumped a 12 MB core (into its scratch space, with this host's
    plain ``core`` pattern)."""
    if jail.name == "docker":
        pytest.skip("docker: the daemon's ulimits apply")
    result = jail.run(CORE_DUMP, limits=Limits(cpu_s=3, wall_s=8))
    assert result.stdout == "(0, 0) False False\n", result
    still_correct(jail)
