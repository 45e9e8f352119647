"""In the per-process mode a killed pool run still reports the CPU its code used.

The run's code is PID 2, below its namespace's init; a run killed at its wall limit dies with its
namespace, and the kernel reaps its processes without adding them to anyone's rusage: the run
read the init's ~0.007 CPU s whatever its code had spent (the cgroup mode reads its cgroup)."""

from __future__ import annotations

from sandbox import Limits, Status

#: Spins, printing its own CPU time every 0.05 s of it.
SPIN_REPORTING = """
import time
shown = 0.0
while True:
    spent = time.process_time()
    if spent - shown >= 0.05:
        print(round(spent, 3), flush=True)
        shown = spent
"""


def test_a_run_killed_at_its_wall_limit_reports_the_cpu_its_code_used(fresh_pool_factory):
    backend = fresh_pool_factory(accounting="process")
    try:
        result = backend.run(SPIN_REPORTING, limits=Limits(cpu_s=30, wall_s=2))
    finally:
        backend.close()
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    said = [float(line) for line in result.stdout.split()]
    assert said, result  # it ran: at least 0.05 CPU-s of it
    assert result.cpu_s >= said[-1] - 0.02, (result.cpu_s, said[-1])
