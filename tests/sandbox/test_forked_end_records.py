"""A fork of the run's code that ends on its own writes no end record of the run.

Under bubblewrap and nsjail a forked copy of the code that left the snippet (``sys.exit``, an
exception, running off its end) went on through the harness and wrote an end record of its own
before the run's. Every byte before the run's record is read as a tag, so a child's exit status
became one: a child exiting 77 (``M``) made an ordinary run read as out of memory, 86 (``V``) as
a denied operation; a fork bomb's stray records made the nsjail limits test flaky.
"""

from __future__ import annotations

import pytest

from sandbox import Limits, Status

LIMITS = Limits(cpu_s=5, wall_s=20, max_processes=8)
CHILD_EXITS = {
    "exit-77-memory-tag": "sys.exit(77)",
    "exit-86-denied-tag": "sys.exit(86)",
    "exit-81-disk-tag": "sys.exit(81)",
    "raises": "raise ValueError('child')",
    "runs-off-the-end": "pass",
}


@pytest.mark.parametrize("child", CHILD_EXITS)
def test_a_forked_child_ending_on_its_own_leaves_the_runs_verdict_alone(jail, child):
    code = (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        f"    {CHILD_EXITS[child]}\n"
        "else:\n"
        "    os.waitpid(pid, 0)\n"
        "    print('parent done', flush=True)\n"
    )
    result = jail.run(code, limits=LIMITS)
    assert (result.status, result.limit_hit, result.stdout) == (Status.OK, None, "parent done\n"), result
    assert result.exit_code == 0, result
