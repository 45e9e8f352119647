"""A pool run answers on its end record, before its exit, without giving up any guarantee."""

from __future__ import annotations

import os
import threading
import time

from sandbox import Limits, Status
from sandbox._collect import collect, find_end_record, split_end_record
from sandbox._harness import END_RECORD, STATUS_DENIED, STATUS_END
from tests.sandbox.jails import forging


def _pipes(count: int) -> list[tuple[int, int]]:
    return [os.pipe() for _ in range(count)]


def test_collect_stops_at_the_end_record_with_the_output_already_written():
    (out_r, out_w), (err_r, err_w), (status_r, status_w), (never_r, never_w) = _pipes(4)
    try:
        os.write(out_w, b"answer\n")
        os.write(status_w, STATUS_DENIED + END_RECORD.pack(STATUS_END, 3, 0.25))
        # ``never_r`` stands in for a pidfd that is not readable yet: the process has not exited.
        collected = collect(out_r, err_r, status_r, never_r, time.monotonic() + 5, 1 << 20, lambda: None,
                            stop_at_end_record=True)
        assert not collected.wall_killed
        assert (collected.stdout, collected.tags, collected.end) == (b"answer\n", STATUS_DENIED, (3, 0.25))
    finally:
        for fd in (out_r, out_w, err_r, err_w, status_r, status_w, never_r, never_w):
            os.close(fd)


def test_an_end_record_read_with_the_start_line_counts_too():
    (out_r, out_w), (err_r, err_w), (status_r, status_w), (never_r, never_w) = _pipes(4)
    try:
        seen = END_RECORD.pack(STATUS_END, 0, 0.01)
        collected = collect(out_r, err_r, status_r, never_r, time.monotonic() + 5, 1 << 20, lambda: None,
                            stop_at_end_record=True, status_seen=seen)
        assert collected.end == (0, 0.01) and not collected.wall_killed
    finally:
        for fd in (out_r, out_w, err_r, err_w, status_r, status_w, never_r, never_w):
            os.close(fd)


def test_a_partial_end_record_is_not_an_end():
    record = END_RECORD.pack(STATUS_END, 1, 0.5)
    assert split_end_record(record[:-1]) == (record[:-1], None)
    assert split_end_record(b"M" + record) == (b"M", (1, 0.5))


def test_a_forked_copy_finishing_first_does_not_answer_for_the_run(pool):
    code = "import os, time\nif os.fork() == 0:\n    print('copy')\nelse:\n    time.sleep(0.3)\n    print('main')"
    result = pool.run(code, limits=Limits(wall_s=5))
    assert result.status is Status.OK, result
    assert sorted(result.stdout.split()) == ["copy", "main"]


def test_exit_codes_and_errors_come_through_the_end_record(pool):
    assert pool.run("raise SystemExit(7)").exit_code == 7
    crashed = pool.run("1 / 0")
    assert (crashed.status, crashed.exit_code) == (Status.ERROR, 1) and "ZeroDivisionError" in crashed.stderr
    busy = pool.run("x = 0\nfor i in range(3_000_000):\n    x += i\nprint(x)", limits=Limits(cpu_s=5, wall_s=10))
    assert busy.status is Status.OK and busy.cpu_s > 0.05  # CPU time is the run's own, from the record


FORGE = forging('struct.pack("=cid", b"D", 0, 0.0)',
                # then something that would outlive the run if it could
                'subprocess.Popen(["sleep", "60"])\nwhile True:\n    pass\n')


def test_a_forged_end_record_ends_only_the_forger(fresh_pool, leftovers_of):
    """The code can claim to be done (it shares a process with the harness), but all it buys is
    its own early answer: its namespace is killed before the same worker runs anything else."""
    forged = fresh_pool.run(FORGE, limits=Limits(cpu_s=5, wall_s=10))
    assert forged.status is Status.OK  # what it claimed: os._exit(0) could have said the same
    after = fresh_pool.run("import os\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))",
                           limits=Limits(wall_s=5))
    assert (after.status, after.stdout) == (Status.OK, "2\n")  # a fresh namespace (its init, the code): nothing left
    assert leftovers_of(fresh_pool) == []


def test_records_with_impossible_figures_are_looked_at_once_not_on_every_status_read(monkeypatch):
    """A run filled its status pipe with end records holding impossible figures, then wrote one
    byte at a time: the worker searched the whole stream again on every read (each invalid record
    cut out by copying the rest), 50 ms of its CPU per byte the run wrote and none of the run's
    own: 2.3 worker CPU-s for the run's 0.13 in 5 s (load 4.6 on 2 cores; 0.2 now)."""
    import sandbox._collect as collecting

    unpacked = []

    class CountingRecord:
        size = END_RECORD.size

        def unpack_from(self, buffer, offset=0):  # type: ignore[no-untyped-def]
            unpacked.append(offset)
            return END_RECORD.unpack_from(buffer, offset)

    monkeypatch.setattr(collecting, "END_RECORD", CountingRecord())
    invalid = END_RECORD.pack(STATUS_END, -1, 0.0) * 400
    (out_r, out_w), (err_r, err_w), (status_r, status_w), (exited_r, exited_w) = _pipes(4)

    def run() -> None:
        os.write(status_w, invalid)
        for _ in range(20):
            time.sleep(0.02)
            os.write(status_w, b"x")
        os.write(exited_w, b"!")  # stands in for the pidfd of the run's exit

    writer = threading.Thread(target=run)
    writer.start()
    try:
        collected = collect(out_r, err_r, status_r, exited_r, time.monotonic() + 60, 1 << 20, lambda: None,
                            stop_at_end_record=True)
    finally:
        writer.join()
        for fd in (out_r, out_w, err_r, err_w, status_r, status_w, exited_r, exited_w):
            os.close(fd)
    assert collected.end is None and collected.tags == invalid + b"x" * 20  # a forger's bytes only count against it
    assert len(unpacked) <= 2 * 400  # once while watching, once for the final split (before: ~400 per read)


def test_the_one_pass_split_cuts_at_the_first_possible_record_and_keeps_the_impossible_ones():
    bad, good = END_RECORD.pack(STATUS_END, 300, 0.0), END_RECORD.pack(STATUS_END, 2, 0.5)
    assert split_end_record(b"V" + bad + b"M" + bad + good + b"tail") == (b"V" + bad + b"M" + bad, (2, 0.5))
    assert split_end_record(bad + b"Q" + bad) == (bad + b"Q" + bad, None)
    assert find_end_record(b"ab" + bad + good) == (2 + len(bad), (2, 0.5))
    assert find_end_record(b"ab" + bad + good[:-1]) == (2 + len(bad), None)  # resume at the partial one
    assert find_end_record(b"ab" + bad, 1) == (2 + len(bad), None)
