"""In the per-process mode a run's or a cell's CPU time is not only what its own process says.

The end record (a run's) and the cell-done record carry CPU seconds the harness reads with
``resource.getrusage`` in the code's own process: code that replaced ``resource.getrusage`` made a
run that spun read ~0 CPU s, and every later cell of its session too. The worker now reports at
least what ``/proc`` counts for the run's processes."""

from __future__ import annotations

from sandbox import Limits, Session, Status

FAKE_RUSAGE = (
    "import resource\nclass _Zero:\n    ru_utime = ru_stime = 1000.0\n"
    "resource.getrusage = lambda who: _Zero()\n"
)
SPIN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end:\n    pass\nprint('spun')\n"
LIMITS = Limits(cpu_s=10, wall_s=60)


def test_a_run_that_fakes_its_rusage_is_charged_its_cpu(fresh_pool_factory):
    backend = fresh_pool_factory(accounting="process")
    try:
        result = backend.run(SPIN + FAKE_RUSAGE.replace("1000.0", "0.0"), limits=LIMITS)
    finally:
        backend.close()
    assert (result.status, result.stdout) == (Status.OK, "spun\n"), result
    assert result.cpu_s >= 0.45, result


def test_a_cell_after_one_that_faked_the_rusage_is_charged_its_cpu():
    session = Session(LIMITS, accounting="process", warm_spare=False)
    try:
        assert session.run(FAKE_RUSAGE).status is Status.OK
        result = session.run(SPIN)
    finally:
        session.close()
    assert (result.status, result.stdout) == (Status.OK, "spun\n"), result
    assert result.cpu_s >= 0.45, result
