"""Code that signals itself dies of it on every backend, as it does outside any sandbox.

The pool's and nsjail's runs were PID 1 of their PID namespace, and the kernel gives a
namespace's init only the signals it has a handler for: ``os.kill(os.getpid(), SIGTERM)``,
``signal.raise_signal``, ``signal.alarm``, even SIGKILL were ignored and the code ran on
(``abort()`` died of SIGSEGV instead). bubblewrap's runs were PID 2 below its init and died.
"""

from __future__ import annotations

import signal

import pytest

from sandbox import Limits, Status

LIMITS = Limits(cpu_s=5, wall_s=20)
AFTER = "import time\ntime.sleep(0.3)\nprint('still running')\n"

SELF_SIGNALS = {
    "sigterm": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", signal.SIGTERM),
    "sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", signal.SIGKILL),
    "process-group": ("import os, signal\nos.kill(0, signal.SIGHUP)\n", signal.SIGHUP),
    "raise-signal": ("import signal\nsignal.raise_signal(signal.SIGUSR1)\n", signal.SIGUSR1),
    "alarm": ("import signal, time\nsignal.alarm(1)\ntime.sleep(5)\n", signal.SIGALRM),
    "abort": ("import os\nos.abort()\n", signal.SIGABRT),
}


@pytest.mark.parametrize("name", SELF_SIGNALS)
def test_code_that_signals_itself_dies_of_that_signal(jail, name):
    code, sig = SELF_SIGNALS[name]
    result = jail.run(code + AFTER, limits=LIMITS)
    assert "still running" not in result.stdout, result
    assert (result.status, result.exit_code) == (Status.ERROR, -sig), result


@pytest.mark.parametrize("status", [130, 137, 143])
def test_an_exit_status_the_code_chose_is_no_signal(jail, status):
    """The init passes on an exit as an exit: ``sys.exit(137)`` is no SIGKILL."""
    result = jail.run(f"import sys\nprint('bye', flush=True)\nsys.exit({status})\n", limits=LIMITS)
    assert (result.status, result.exit_code, result.stdout) == (Status.ERROR, status, "bye\n"), result


def test_the_init_takes_none_of_the_codes_processes(jail):
    """The init is one more process of the run's: the code still starts ``max_processes`` - 1
    children (it is one itself), and no more."""
    code = ("import os\npids = []\ntry:\n    for _ in range(3):\n        pid = os.fork()\n"
            "        if pid == 0:\n            import time\n            time.sleep(2)\n            os._exit(0)\n"
            "        pids.append(pid)\nexcept BlockingIOError:\n    pass\nprint(len(pids))\n"
            "for pid in pids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n")  # fmt: skip
    result = jail.run(code, limits=LIMITS.with_(max_processes=3))
    assert result.stdout == "2\n", result
    assert result.limit_hit == "process_limit", result


def test_a_child_killed_by_a_signal_is_the_childs_business(jail):
    """Only the code's own death ends the run: a child it forked and killed is reaped as before."""
    code = ("import os, signal\npid = os.fork()\nif pid == 0:\n    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    os._exit(3)\n_, status = os.waitpid(pid, 0)\nprint(os.WTERMSIG(status))\n")  # fmt: skip
    result = jail.run(code, limits=LIMITS)
    assert (result.status, result.stdout) == (Status.OK, f"{int(signal.SIGTERM)}\n"), result
