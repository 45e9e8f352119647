"""The other backends behind the same API: bubblewrap, nsjail (seed preset), Docker."""

from __future__ import annotations

import itertools
import shutil
import uuid
from pathlib import Path

import pytest

from sandbox import NSJAIL_SEED_PRESET, Limits, Status
from sandbox.backends import BackendUnavailable, get_backend
from sandbox.backends.nsjail import nsjail_argv

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bwrap():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    backend = get_backend("bwrap")
    yield backend
    backend.close()


def test_bwrap_runs_code_with_the_project_interpreter(bwrap):
    result = bwrap.run("import numpy, os\nprint(numpy.__version__ != '', os.getcwd(), input())", stdin="hi")
    assert (result.status, result.stdout) == (Status.OK, "True /tmp/work hi\n")


def test_bwrap_refuses_writes_network_and_hides_root(bwrap):
    target = CHECKOUT / f"bwrap-escape-{uuid.uuid4().hex}"
    write = bwrap.run(f"open({str(target)!r}, 'w')")
    assert write.status is Status.VIOLATION and not target.exists()
    net = bwrap.run("import socket\nsocket.create_connection(('127.0.0.1', 22))")
    assert net.status is Status.VIOLATION
    home = bwrap.run("import os\nprint(sorted(os.listdir('/root')))")
    assert home.stdout == "['.pyenv']\n"


def test_bwrap_enforces_cpu_and_process_limits(bwrap):
    spin = bwrap.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=10))
    assert spin.status is Status.TIMEOUT
    bomb = bwrap.run("import os\nwhile True:\n    os.fork()", limits=Limits(max_processes=16, wall_s=5))
    assert bomb.status in {Status.VIOLATION, Status.TIMEOUT}


def test_nsjail_command_line_carries_the_seed_preset():
    argv = nsjail_argv("/usr/bin/nsjail", "/usr/bin/python3", "/tmp/x/code.py", NSJAIL_SEED_PRESET)
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--time_limit"] == "7" and pairs["--rlimit_cpu"] == "5"
    assert pairs["--rlimit_as"] == "5000" and pairs["--user"] == "65534"
    assert "--disable_clone_newnet" not in argv  # network stays off
    assert NSJAIL_SEED_PRESET.max_output_chars == 1536


def test_nsjail_backend_runs_when_installed():
    try:
        backend = get_backend("nsjail")
    except BackendUnavailable as exc:
        assert "not packaged" in str(exc)
        pytest.skip(f"nsjail unavailable: {exc}")
    result = backend.run("print('x' * 4000)")
    assert result.status is Status.OK and result.truncated  # the seed cut output at 1536 chars


def test_docker_backend_when_a_daemon_is_reachable():
    try:
        backend = get_backend("docker")
    except BackendUnavailable as exc:
        pytest.skip(f"docker backend unavailable: {exc}")
    try:
        result = backend.run("print(input())", stdin="from docker")
        assert (result.status, result.stdout) == (Status.OK, "from docker\n")
        assert backend.run("import socket\nsocket.getaddrinfo('example.com', 80)").status is Status.VIOLATION
    finally:
        backend.close()
