"""A session cell whose cell-done record never comes (or never holds) is killed at its wall
limit and reads ``timeout``, as any run killed there: it read ``error`` (-9) with no limit named.

Such a cell: one that replaced ``resource.getrusage`` so that the record's CPU seconds came out
negative (the worker skips a record with impossible figures and waits for the cell's own)."""

from __future__ import annotations

from sandbox import Limits, Session, Status

BACKWARDS_RUSAGE = (
    "import resource\nclass _Zero:\n    ru_utime = ru_stime = 0.0\n"
    "resource.getrusage = lambda who: _Zero()\nprint('patched')\n"
)


def test_a_cell_without_a_record_by_its_wall_limit_is_a_timeout():
    session = Session(Limits(cpu_s=5, wall_s=3), warm_spare=False)
    try:
        result = session.run(BACKWARDS_RUSAGE)
        after = session.run("print(6 * 7)")
    finally:
        session.close()
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert "wall-clock limit reached" in result.stderr, result
    assert (after.status, after.stdout) == (Status.OK, "42\n"), after
