"""A session whose worker process is lost (killed, hung, crashed) goes on with a new worker: the
CPU the lost one had counted stays spent. The replacement counted from zero, so ``session_cpu_s``
was whole again after every loss."""

from __future__ import annotations

import os
import signal

from sandbox import Limits, Session, Status

#: Spends 0.6 CPU-s in the cell's own process, then says so.
SPEND = """
import resource
def used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start = used()
while used() - start < 0.6:
    pass
print("spent")
"""


def _lose_worker(session: Session) -> None:
    """What a lost worker looks like to the session: its process is gone."""
    os.kill(session._worker.pid, signal.SIGKILL)
    session._worker.proc.wait()


def test_a_lost_worker_gives_the_session_no_fresh_cpu_budget(pool):
    with Session(Limits(cpu_s=0.9, wall_s=20), session_cpu_s=1.0, warm_spare=False) as session:
        first = session.run(SPEND)
        assert (first.status, first.stdout) == (Status.OK, "spent\n"), first
        _lose_worker(session)
        lost = session.run("print('never runs')")
        assert lost.status is Status.ERROR and "worker lost" in lost.stderr, lost
        third = session.run(SPEND)  # 0.6 s more: past the session's 1.0 s, however many workers
        assert third.status is Status.TIMEOUT, third


def test_the_cell_a_worker_was_lost_in_is_charged_its_budget(pool):
    """What a cell used before its worker was lost is unknown: it is charged its whole ``cpu_s``
    (here 0.5 of the session's 1.0), so a later cell has no more than the rest."""
    with Session(Limits(cpu_s=0.5, wall_s=20), session_cpu_s=1.0, warm_spare=False) as session:
        assert session.run("x = 1").status is Status.OK
        _lose_worker(session)
        assert session.run("print('never runs')").status is Status.ERROR
        later = session.run(SPEND.replace("0.6", "0.55"), limits=Limits(cpu_s=0.9, wall_s=20))
        assert later.status is Status.TIMEOUT, later
