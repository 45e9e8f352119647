"""A run cannot hide on its status channel what it hit, and its own exit status reads as one.

The judge read only the first byte of the status stream: a junk byte written there first hid
every later tag (an uncaught ``MemoryError`` read ``error``), and a partial end record swallowed
the harness's tag into a forged record that was then dropped. A run that closed the channel, or
put ``/dev/null`` in its place, used up its disk quota and exited 0 read ``ok``. bwrap and nsjail
report a death by signal N as exit status 128 + N, so ``sys.exit(130)`` read as SIGINT (-2).
A run that slept just past its wall limit read ``ok`` when the poll woke for its end. A child
the seccomp filter killed went unreported when its parent carried on.
"""

from __future__ import annotations

import os
import time

import pytest

from sandbox import Limits, Status
from sandbox._collect import END_RECORD, collect, split_end_record, tags_in, take_exit_record
from sandbox._harness import STATUS_END, STATUS_MEMORY
from tests.sandbox.jails import forging

ROOMY = Limits(cpu_s=5, wall_s=30)
JUNK_FIRST = forging('b"Z"', "")
PARTIAL_RECORD_FIRST = forging('struct.pack("=cid", b"D", 0, 0.0)[:12]', "")
CLOSE_CHANNEL = "import os\nos.closerange(3, 4096)\n"
NULL_CHANNEL = ("import os\nnull = os.open('/dev/null', os.O_WRONLY)\nfor fd in range(3, 20):\n"
                "    if fd != null:\n        try:\n            os.dup2(null, fd)\n        except OSError:\n"
                "            pass\n")  # fmt: skip
FILL_DISK_AND_SUCCEED = """
try:
    with open('/tmp/fill', 'wb') as handle:
        while True:
            handle.write(b'x' * 65536)
except OSError:
    pass
print('done')
"""


@pytest.mark.parametrize("first", [JUNK_FIRST, PARTIAL_RECORD_FIRST], ids=["junk-byte", "partial-record"])
def test_what_a_run_writes_first_hides_no_later_tag(jail, first):
    result = jail.run(first + "raise MemoryError\n", limits=ROOMY)
    assert (result.status, result.limit_hit) == (Status.MEMORY, "memory_limit"), result


@pytest.mark.parametrize("tamper", [CLOSE_CHANNEL, NULL_CHANNEL], ids=["closed", "dev-null"])
def test_a_run_that_took_away_its_status_channel_does_not_read_ok(jail, tamper):
    if jail.name == "docker":
        pytest.skip("docker's harness reports through its exit status, not a descriptor")
    result = jail.run(tamper + FILL_DISK_AND_SUCCEED, limits=Limits(cpu_s=5, wall_s=30, disk_mb=2))
    assert result.stdout == "done\n", result
    assert result.status is not Status.OK, result
    assert "status descriptor" in result.stderr, result


@pytest.mark.parametrize("code", ["import sys\nsys.exit(130)", "import os\nos._exit(137)", "raise SystemExit(159)"],
                         ids=["sys.exit-130", "os._exit-137", "SystemExit-159"])  # fmt: skip
def test_an_exit_status_past_128_is_the_runs_own(jail, code):
    expected = int(code.rsplit("(", 1)[1].rstrip(")"))
    result = jail.run(code, limits=ROOMY)
    assert (result.status, result.exit_code, result.limit_hit) == (Status.ERROR, expected, None), result


def test_a_real_signal_still_reads_as_one(jail):
    result = jail.run("import ctypes\nctypes.string_at(0)", limits=ROOMY)  # SIGSEGV (exit status 139)
    assert (result.status, result.exit_code) == (Status.ERROR, -11), result


def test_a_run_that_ends_just_past_its_wall_limit_is_a_timeout(pool):
    for _ in range(5):  # the poll woke for the run's end, not for the deadline: 4 in 5 read ok
        result = pool.run("import time\ntime.sleep(0.5005)\nprint('late')", limits=Limits(cpu_s=5, wall_s=0.5))
        assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert pool.run("print(1)", limits=Limits(wall_s=5)).status is Status.OK


CHILD_KILLED_BY_SECCOMP = {
    "waited": "import os, socket\nif os.fork() == 0:\n    socket.socket(socket.AF_INET)\n    os._exit(0)\n"
              "print(os.wait()[1] & 0x7f)",
    "waitid": "import os, socket\npid = os.fork()\nif pid == 0:\n    socket.socket(socket.AF_INET)\n    os._exit(0)\n"
              "print(os.waitid(os.P_PID, pid, os.WEXITED).si_status)",
    "subprocess": "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
                  "'import socket; socket.socket(socket.AF_INET)']).returncode)",
    "orphan": "import os, socket, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(0.2)\n"
              "        socket.socket(socket.AF_INET)\n    os._exit(0)\nos.wait()\ntime.sleep(1)\nprint('carried on')",
}  # fmt: skip


@pytest.mark.parametrize("attack", sorted(CHILD_KILLED_BY_SECCOMP))
def test_a_child_killed_by_the_seccomp_filter_is_a_violation_though_its_parent_carries_on(jail, attack):
    if jail.name == "docker":
        pytest.skip("docker's seccomp profile is Docker's own")
    result = jail.run(CHILD_KILLED_BY_SECCOMP[attack], limits=ROOMY)
    assert result.stdout in ("31\n", "-31\n", "carried on\n"), result
    assert result.status is Status.VIOLATION, result


def test_a_run_found_ended_at_its_deadline_is_a_timeout_with_nothing_killed():
    """A watcher that looks only past the deadline (a loaded host) and finds the run ended reports a
    timeout but kills nothing: a session cell that merely ended late keeps the session's state
    (it was killed, and the session's variables were lost)."""
    pipes = [os.pipe() for _ in range(3)]
    (out_r, _), (err_r, _), (done_r, done_w) = pipes
    os.write(done_w, b"!")
    kills: list[int] = []
    try:
        collected = collect(out_r, err_r, None, done_r, time.monotonic() - 1, 1 << 20, lambda: kills.append(1))
    finally:
        for fd in (fd for pair in pipes for fd in pair):
            os.close(fd)
    assert kills == [] and collected.wall_killed and collected.ended_late


def test_every_tag_counts_wherever_it_is_and_the_exit_record_is_the_last_thing():
    record = END_RECORD.pack(STATUS_END, 130, 0.25)
    assert STATUS_MEMORY in tags_in(b"Z" + record + b"xM")
    assert take_exit_record(b"ZM" + record) == (b"ZM", 130)
    assert take_exit_record(record + b"M") == (record + b"M", None)  # not last: none of the harness's
    partial = record[:12]
    assert split_end_record(partial + STATUS_MEMORY + record) == (partial + STATUS_MEMORY, (130, 0.25))


def test_dockers_harness_counts_every_tag_too(tmp_path):
    """Docker's harness turns the tags into reserved exit statuses; it read only the first byte."""
    import subprocess
    import sys

    from sandbox.backends.docker_backend import _BOOT, _MEMORY_EXIT

    boot = _BOOT.replace("'/tmp/work'", repr(str(tmp_path))).replace("'/tmp/.shm'", repr(str(tmp_path / "shm")))
    for first in (JUNK_FIRST, ""):
        done = subprocess.run([sys.executable, "-I", "-c", boot, first + "raise MemoryError\n"], cwd=tmp_path,
                              capture_output=True, timeout=120)  # fmt: skip
        assert done.returncode == _MEMORY_EXIT, done.stderr
