"""Sessions under attack: what a cell leaves behind, what it writes to the worker, what it ignores.

A cell shares its process with the harness, so it can write the worker's "cell finished"
record itself (once read whole: +528 MB in the worker from one cell), leave processes and
threads burning CPU after it returns, and ignore the soft CPU limit's SIGXCPU. None of these
may reach past the session's limits; the session keeps working afterwards.
"""

from __future__ import annotations

import os
import time

import pytest

from sandbox import Limits, Session, Status
from tests.sandbox.jails import SPINNERS_REPORTING, cpu_the_spinners_had, forging


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise KeyError(name)


def _cpu_ticks_of_uid(uid: int) -> int:
    """utime + stime (clock ticks) of every live process and thread whose real uid is ``uid``."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if _status_field(int(entry), "Uid") != uid:
                continue
            for task in os.listdir(f"/proc/{entry}/task"):
                with open(f"/proc/{entry}/task/{task}/stat", encoding="ascii") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        except (OSError, KeyError, IndexError):
            continue
    return total


FLOOD_DONE_FRAME = r"""
import os, struct, threading
size = 400 * 2**20
def flood(fd):
    try:
        os.write(fd, struct.pack(">I", size))
        chunk = b"a" * 2**20
        for _ in range(400):
            os.write(fd, chunk)
    except OSError:
        pass
threads = [threading.Thread(target=flood, args=(fd,), daemon=True) for fd in range(3, 12)]
for t in threads:
    t.start()
for t in threads:
    t.join(8)
"""


def test_a_forged_cell_record_cannot_grow_the_worker(pool):
    with Session(Limits(cpu_s=5, wall_s=10), warm_spare=False) as session:
        session.run("x = 1")
        worker = session._worker.pid
        before = _status_field(worker, "VmHWM")
        session.run(FLOOD_DONE_FRAME)
        grown_kb = _status_field(worker, "VmHWM") - before
        assert grown_kb < 64 * 1024, f"worker peak memory grew by {grown_kb // 1024} MB"
        after = session.run("print(6 * 7)", limits=Limits(wall_s=1, cpu_s=1))
        assert (after.status, after.stdout.strip().splitlines()[-1:]) == (Status.OK, ["42"]), after


LEAVE_SPINNERS = """
import os, threading
if os.fork() == 0:
    while True:
        pass
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
"""


def test_processes_and_threads_left_by_a_cell_do_not_run_between_cells(pool):
    with Session(Limits(cpu_s=5, wall_s=5), warm_spare=False) as session:
        uid = session._worker.config["uid"]
        left = session.run(LEAVE_SPINNERS)
        assert left.status is Status.OK, left
        time.sleep(0.2)
        before = _cpu_ticks_of_uid(uid)
        time.sleep(1.5)
        spent = (_cpu_ticks_of_uid(uid) - before) / os.sysconf("SC_CLK_TCK")
        assert spent < 0.3, f"the session's processes used {spent:.2f} CPU-s between cells"
        after = session.run("print(6 * 7)", limits=Limits(wall_s=3, cpu_s=3))
        assert after.stdout.endswith("42\n"), after


def test_a_cell_that_ignores_sigxcpu_still_stops_at_its_cpu_budget(pool):
    with Session(Limits(cpu_s=1, wall_s=10), warm_spare=False) as session:
        session.run("kept = 1")
        code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
        result = session.run(code)
        assert result.status is Status.TIMEOUT, result
        assert result.limit_hit == "timeout", result
        assert result.cpu_s <= 2.0, result  # (before: as long as the wall clock allowed)
        after = session.run("print(6 * 7)", limits=Limits(wall_s=1, cpu_s=1))
        assert after.stdout.endswith("42\n"), after


def test_a_cells_forked_children_share_its_cpu_budget(pool):
    """Three spinners forked by a sleeping cell say how much CPU they had: together no more than
    the cell's budget (before: each its own RLIMIT_CPU, the sleeping cell none at all)."""
    with Session(Limits(cpu_s=1, wall_s=40), warm_spare=False) as session:
        result = session.run(SPINNERS_REPORTING)
        assert result.status is Status.TIMEOUT, result
        assert cpu_the_spinners_had(result.stdout) <= 2.0, result.stdout
        assert result.cpu_s <= 2.0, result


def test_a_session_is_one_memory_budget(pool):
    code = ("import os, time\nfor _ in range(6):\n    if os.fork() == 0:\n        block = b'1' * (60 * 2**20)\n"
            "        time.sleep(2)\n        os._exit(0)\ntime.sleep(1.5)")
    with Session(Limits(memory_mb=128, cpu_s=5, wall_s=8), warm_spare=False) as session:
        result = session.run(code)
        assert (result.status, result.limit_hit) == (Status.MEMORY, "memory_limit"), result


def test_sessions_get_uids_of_their_own(pool):
    with Session(warm_spare=False) as first, Session(warm_spare=False) as second:
        uids = {first._worker.config["uid"], second._worker.config["uid"]}
        if 0 in uids:
            pytest.skip("runs keep the caller's uid here (not root)")
        assert len(uids) == 2
        assert not uids & set(pool.uids())


def test_a_session_in_another_process_gets_a_uid_of_its_own(pool):
    """Sessions numbered their uids per process from one base: the first session of every
    process ran as the same uid, sharing one process budget with the others."""
    import json
    import subprocess
    import sys

    from tests.sandbox.jails import CHECKOUT

    probe = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom sandbox import Session\n"
             "with Session(warm_spare=False) as s:\n    print(json.dumps(s._worker.config['uid']))")
    with Session(warm_spare=False) as mine:
        if mine._worker.config["uid"] == 0:
            pytest.skip("runs keep the caller's uid here (not root)")
        out = subprocess.run([sys.executable, "-c", probe, str(CHECKOUT)], capture_output=True, text=True,
                             timeout=120, check=True)  # fmt: skip
        theirs = json.loads(out.stdout.splitlines()[-1])
        assert theirs != mine._worker.config["uid"] and theirs not in pool.uids(), theirs


FORGE_CELL_RECORD = forging('struct.pack("=c16sid", b"C", os.urandom(16), 0, 0.0)',
                            'time.sleep(0.3)\nprint("late output of the forging cell", flush=True)\n'
                            "raise SystemExit(3)\n", fds=16)


def test_a_forged_cell_record_neither_ends_the_cell_nor_leaks_into_the_next(pool):
    with Session(Limits(cpu_s=5, wall_s=10), warm_spare=False) as session:
        forger = session.run(FORGE_CELL_RECORD)
        assert (forger.exit_code, forger.stdout) == (3, "late output of the forging cell\n"), forger
        after = session.run("print('next cell')")
        assert (after.status, after.exit_code, after.stdout) == (Status.OK, 0, "next cell\n"), after


SPEND_IN_A_CHILD = """
import os, resource
pid = os.fork()
if pid == 0:
    while True:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if usage.ru_utime + usage.ru_stime >= 0.6:
            os._exit(0)
os.waitpid(pid, 0)
print("spent")
"""


def test_the_session_cpu_budget_holds_for_all_cells_and_their_children(pool):
    """``session_cpu_s`` bounds every cell's processes together, not each process."""
    with Session(Limits(cpu_s=0.9, wall_s=20), session_cpu_s=1.0, warm_spare=False) as session:
        first = session.run(SPEND_IN_A_CHILD)
        assert (first.status, first.stdout) == (Status.OK, "spent\n"), first
        second = session.run(SPEND_IN_A_CHILD)  # 1.2 CPU-s in all: past the session's 1.0
        assert second.status is Status.TIMEOUT, second
        assert second.limit_hit == "timeout", second


def test_a_cell_that_ends_its_interpreter_gets_no_fresh_session_budget(pool):
    """A lost interpreter's CPU counts: each cell spent 0.6 s and then ended its interpreter, and
    the next one started with the whole ``session_cpu_s`` again (four cells: 2.4 s of a 1.0 s
    session, every one ``ok``)."""
    end_interpreter = "import sys\nsys.stdout.flush()\nos._exit(0)\n"
    with Session(Limits(cpu_s=0.9, wall_s=20), session_cpu_s=1.0, warm_spare=False) as session:
        first = session.run(SPEND_IN_A_CHILD + end_interpreter)
        assert (first.status, first.stdout) == (Status.OK, "spent\n"), first
        second = session.run(SPEND_IN_A_CHILD + end_interpreter)
        assert second.status is Status.TIMEOUT, second
        assert 0.3 <= first.cpu_s + second.cpu_s <= 2.0, (first, second)


def test_a_forged_cell_record_buys_no_time_past_the_wall_limit(pool):
    """A forged record ended the watch early, and the cell's own was then awaited for a second of
    grace past the wall limit: a cell that ran 1.3 s under ``wall_s=1`` read ``ok``."""
    late = "import time\ntime.sleep(0.7)\n" + forging('struct.pack("=c16sid", b"C", os.urandom(16), 0, 0.0)',
                                                      'time.sleep(0.6)\nprint("late", flush=True)\n', fds=16)
    with Session(Limits(cpu_s=5, wall_s=1), warm_spare=False) as session:
        session.run("kept = 1")
        result = session.run(late)
        assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
        after = session.run("print(kept)")
        assert (after.status, after.stdout.splitlines()[-1:]) == (Status.OK, ["1"]), after



def test_output_after_a_cells_record_is_read_up_to_the_cap_not_for_as_long_as_it_flows():
    """The worker read what followed a cell's record for as long as the pipe held any: processes
    the cell left running could keep it full (the worker spinning, the session's call running out)."""
    import fcntl
    import select

    from sandbox._cells import _drain

    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, 1031, 256 << 10)  # F_SETPIPE_SZ (any user, up to fs.pipe-max-size: 1 MB)
        os.write(write_end, b"x" * (200 << 10))  # a flood, written in advance: more than one read takes
        kept = bytearray()
        assert _drain(read_end, kept, 4096) is False
        assert len(kept) == 4096 and select.select([read_end], [], [], 0)[0]  # the rest was left unread
    finally:
        os.close(read_end)
        os.close(write_end)
