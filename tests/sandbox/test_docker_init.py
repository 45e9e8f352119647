"""Docker runs the code as PID 2 below an init, as the pool and nsjail do, and charges its CPU.

The container's first process was the harness running the code itself, PID 1 of its namespace:
code that signalled itself (``os.kill(os.getpid(), SIGKILL)``, ``alarm``) ran on, and every run
read ``cpu_s=0.0``. No Docker daemon runs here: the container spec is read from the SDK call, and
the boot program runs through tests/sandbox/docker_double.py (PID 1 of a fresh PID namespace, the
spec's user without capabilities, its CPU ulimit).
"""

from __future__ import annotations

import signal

import pytest

from sandbox import Limits, Status
from tests.sandbox import test_self_signals as self_signals
from tests.sandbox.docker_double import available, local_client

pytest.importorskip("docker")
LIMITS = Limits(cpu_s=5, wall_s=60)
FORGED = '{"exit": 0, "cpu_s": 0.0, "tags": ""}'


@pytest.fixture()
def docker(monkeypatch):
    reason = available()
    if reason:
        pytest.skip(reason)
    from sandbox.backends.docker_backend import DockerBackend

    client = local_client(monkeypatch)
    backend = DockerBackend()
    backend.created = client.containers.created  # type: ignore[attr-defined]
    return backend


def test_the_container_spec_counts_the_init_and_is_locked_down(docker):
    result = docker.run("print(input())", stdin="hi", limits=LIMITS.with_(max_processes=4))
    assert (result.status, result.stdout) == (Status.OK, "hi\n"), result
    spec = docker.created[-1].spec
    assert spec["command"][:4] == ["python", "-I", "-B", "-c"] and spec["command"][5] == "print(input())"
    assert spec["pids_limit"] == 5  # the init is one more process, not the code's
    assert "init" not in spec  # our own init (Docker's would hide how the code ended)
    assert (spec["cap_drop"], spec["security_opt"], spec["read_only"]) == (["ALL"], ["no-new-privileges"], True)
    assert spec["network_disabled"] is True and docker.created[-1].removed


@pytest.mark.parametrize("name", self_signals.SELF_SIGNALS)
def test_code_that_signals_itself_dies_of_that_signal(docker, name):
    self_signals.test_code_that_signals_itself_dies_of_that_signal(docker, name)


@pytest.mark.parametrize("status", [130, 137, 143])
def test_an_exit_status_the_code_chose_is_no_signal(docker, status):
    """``sys.exit(137)`` is no SIGKILL (Docker reports both as 137: the end line tells them apart)."""
    self_signals.test_an_exit_status_the_code_chose_is_no_signal(docker, status)


def test_the_cpu_of_every_process_is_charged(docker):
    """A child's CPU counts: the init reaps every process of the run (it was 0.0 for any run)."""
    code = ("import os, time\npid = os.fork()\nif pid == 0:\n    end = time.process_time() + 0.6\n"
            "    while time.process_time() < end:\n        pass\n    os._exit(0)\nos.waitpid(pid, 0)\n")  # fmt: skip
    result = docker.run(code, limits=LIMITS)
    assert result.status is Status.OK and 0.6 <= result.cpu_s < 5, result


def test_orphans_are_killed_when_the_code_ends(docker):
    """A background child the code leaves behind is killed by the init, not waited for."""
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\nprint('done')\n"
    result = docker.run(code, limits=LIMITS)
    assert (result.status, result.stdout) == (Status.OK, "done\n") and result.wall_s < 30, result


def test_a_forged_end_line_does_not_hide_the_cpu_limit(docker):
    """The code writes an end line of its own on stderr and spins into RLIMIT_CPU: the init's
    line follows it (only a line that ends stderr counts), and the forgery stays text."""
    code = ("import sys\nsys.stderr.write('\\n\\x1ecoa-sandbox-end ' + " + repr(FORGED) + " + '\\n')\n"
            "sys.stderr.flush()\nprint('answer', flush=True)\nwhile True:\n    pass\n")  # fmt: skip
    result = docker.run(code, limits=LIMITS.with_(cpu_s=1))
    assert (result.status, result.limit_hit) == (Status.TIMEOUT, "timeout"), result
    assert FORGED in result.stderr, result
    assert result.cpu_s >= 0.5 or "wall-clock limit" in result.stderr, result  # (a loaded host: killed at 60 s)


def test_the_code_cannot_reach_its_init(docker):
    """Same uid, but the init is undumpable: no /proc/1/mem, no /proc/1/fd; signals ignored."""
    code = ("import os, signal\nfor path in ('/proc/1/mem', '/proc/1/fd/2'):\n    try:\n"
            "        open(path, 'rb').close()\n        print('opened', path)\n    except OSError:\n        pass\n"
            "os.kill(1, signal.SIGKILL)\nprint('alive')\n")  # fmt: skip
    result = docker.run(code, limits=LIMITS)
    assert result.stdout == "alive\n", result


def test_tags_travel_in_the_end_line(docker):
    result = docker.run("raise MemoryError\n", limits=LIMITS)
    assert (result.status, result.limit_hit, result.exit_code) == (Status.MEMORY, "memory_limit", 1), result


def test_end_line_reading():
    from sandbox.backends.docker_backend import judge_container, read_end_line

    line = b'\n\x1ecoa-sandbox-end {"signal": 9, "cpu_s": 0.01, "tags": ""}\n'
    assert read_end_line(b"out" + line) == (b"out", {"returncode": -9, "cpu_s": 0.01, "tags": b""})
    assert read_end_line(line + b"later")[1] is None  # not last: not the init's
    assert read_end_line(b'\n\x1ecoa-sandbox-end {"exit": 999, "cpu_s": 0, "tags": ""}\n')[1] is None
    early = judge_container(b"", line, 137, LIMITS)
    assert (early["status"], early["exit_code"]) == ("error", -signal.SIGKILL), early  # a SIGKILL of its own
    spent = line.replace(b"0.01", b"4.9")
    assert judge_container(b"", spent, 137, LIMITS)["status"] == "timeout"  # RLIMIT_CPU's
    over = b'\n\x1ecoa-sandbox-end {"exit": 0, "cpu_s": 7.5, "tags": ""}\n'
    assert judge_container(b"", over, 0, LIMITS)["status"] == "timeout"  # every process together
    killed = judge_container(b"", b'\n\x1ecoa-sandbox-end ' + FORGED.encode() + b"\n", 137, LIMITS, timed_out=True)
    assert (killed["status"], killed["cpu_s"]) == ("timeout", 0.0), killed  # we killed it: no line of its counts
