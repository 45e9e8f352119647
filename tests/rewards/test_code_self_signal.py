"""code_tests v4: a program that prints the expected output and then kills itself fails, as it
does outside the sandbox. On the pool (the default backend) it ran as PID 1 of its namespace,
which ignores its own signals: the kill was a no-op and the test passed."""

from __future__ import annotations

import pytest

from coa_envs.rewards.code_tests import VERSION, build
from coa_envs.types import Task

SUM = Task("s", "add", tests={"kind": "stdin", "cases": [{"input": "20 22\n", "output": "42\n"}]})
PRINTS_THEN = "import os, signal, sys\nprint(sum(map(int, input().split())))\nsys.stdout.flush()\n"


@pytest.mark.parametrize("ending", ["os.kill(os.getpid(), signal.SIGKILL)", "os.kill(os.getpid(), signal.SIGTERM)",
                                    "os.abort()"])
def test_a_program_that_kills_itself_after_printing_fails(ending):
    reward = build(cpu_s=2, wall_s=10)
    assert reward(f"```python\n{PRINTS_THEN}\n```", SUM).score == 1.0  # the same program, ending normally
    result = reward(f"```python\n{PRINTS_THEN}{ending}\nimport time\ntime.sleep(0.2)\n```", SUM)
    assert result.score == 0.0, result.details
    assert VERSION >= 4
