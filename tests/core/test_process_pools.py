"""Worker processes die with the process that made them, however it dies.

Each CI run used to leave a math-verify fork server and its worker behind (parent pid 1,
waiting forever): a test's subprocess that scored a math answer and was then killed never shut
its pool down. The owner here kills itself with SIGKILL, so no exit handler can help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_MATH_OWNER = r"""
import json, os, signal
from coa_envs.rewards.math_verify import build
from coa_envs.types import Task
import coa_envs.rewards.math_verify as mv

assert build()(r"\boxed{2}", Task("t", "1+1?", gold=("2",))).score == 1.0
pool, _ = mv._helper_pool()
server = pool.submit(os.getppid).result()
print(json.dumps([*pool._processes, server]), flush=True)  # every worker, and their fork server
os.kill(os.getpid(), signal.SIGKILL)
"""

_POOL_OWNER = r"""
import json, os, signal, sys
from multiprocessing import get_context
from coa_envs.process_pools import owned_pool

pool = owned_pool(2, get_context(sys.argv[1]))
pids = sorted({pool.submit(os.getpid).result() for _ in range(8)})
print(json.dumps(pids), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    try:  # an exited child of ours not yet reaped by its (new) parent is a zombie: gone for us
        return state.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _orphans_of(script: str, out: Path, *args: str) -> list[int]:
    """Run ``script`` as a process that prints its pool's pids and SIGKILLs itself; the pids
    still alive 30 s later. Its output goes to a file: an orphan would hold a pipe open."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (out / "stdout").open("w") as stdout, (out / "stderr").open("w") as stderr:
        owner = subprocess.Popen([sys.executable, "-c", script, *args], stdout=stdout, stderr=stderr, env=env)
        assert owner.wait(timeout=600) == -9, (out / "stderr").read_text()
    pids = json.loads((out / "stdout").read_text().strip().splitlines()[-1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if _alive(p)]
    for pid in alive:  # do not leave them to the next test run either
        os.kill(pid, 9)
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the owners kill themselves with SIGKILL")
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_owned_pool_workers_end_when_their_owner_is_killed(context, tmp_path):
    assert _orphans_of(_POOL_OWNER, tmp_path, context) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the owner kills itself with SIGKILL")
def test_the_math_helper_and_its_fork_server_end_with_the_process_that_scored(tmp_path):
    assert _orphans_of(_MATH_OWNER, tmp_path) == []
