"""A session cell that signals itself ends its interpreter as it would outside the sandbox, in
either accounting mode; the next cell starts afresh and says so. The session's interpreter was
PID 1 of its namespace, which ignores every signal it has no handler for: the cell ran on."""

from __future__ import annotations

import signal

import pytest

from sandbox import Limits, Session, Status
from sandbox.session import RESTART_NOTE

CELLS = {
    "sigterm": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", signal.SIGTERM),
    "sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", signal.SIGKILL),
    "alarm": ("import signal, time\nsignal.alarm(1)\ntime.sleep(5)\n", signal.SIGALRM),
    "abort": ("import os\nos.abort()\n", signal.SIGABRT),
}


@pytest.mark.parametrize("accounting", ["cgroup", "process"])
@pytest.mark.parametrize("name", CELLS)
def test_a_cell_that_signals_itself_ends_its_interpreter(pool, accounting, name):
    code, sig = CELLS[name]
    with Session(Limits(cpu_s=5, wall_s=20), warm_spare=False, accounting=accounting) as session:
        assert session.run("kept = 1").status is Status.OK
        result = session.run(code + "import time\ntime.sleep(0.3)\nprint('still running')\n")
        assert "still running" not in result.stdout, result
        assert (result.status, result.exit_code) == (Status.ERROR, -sig), result
        after = session.run("print('kept' in globals())")
        assert (after.status, after.stdout, after.stderr) == (Status.OK, "False\n", RESTART_NOTE), after


def test_a_cell_killed_for_cpu_in_the_process_mode_is_charged_what_it_used(pool):
    """The cells' process is PID 2 below the session's init: its CPU (watched through the init's
    /proc) is the cell's, and a cell killed for it is charged it."""
    with Session(Limits(cpu_s=0.5, wall_s=30), warm_spare=False, accounting="process", session_cpu_s=5) as session:
        result = session.run("while True:\n    pass\n")
        assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
        assert 0.4 <= result.cpu_s <= 2.0, result
