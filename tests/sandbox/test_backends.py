"""The other backends behind the same API: bubblewrap, nsjail (seed preset), Docker."""

from __future__ import annotations

import itertools
import shutil
import uuid
from pathlib import Path

import pytest

from sandbox import NSJAIL_SEED_PRESET, Limits, Status
from sandbox._jail import parents_below, tmp_keeps
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


def test_bwrap_refuses_writes_network_and_hides_root(bwrap, write_refused):
    target = CHECKOUT / f"bwrap-escape-{uuid.uuid4().hex}"
    write_refused(bwrap.run(f"open({str(target)!r}, 'w')"))
    assert not target.exists()
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
    assert "--disable_clone_newnet" not in argv and "--iface_no_lo" in argv  # network stays off
    assert "ptrace" in pairs["--seccomp_string"] and "socket(domain)" in pairs["--seccomp_string"]
    assert NSJAIL_SEED_PRESET.max_output_chars == 1536


def test_nsjail_command_line_hides_root_but_keeps_the_interpreter():
    hidden = (("/root", (".pyenv",)), ("/run", ()))
    argv = nsjail_argv("nsjail", "/root/.pyenv/bin/python", "/tmp/c.py", Limits(), 64001, hidden=hidden)
    joined = " ".join(argv)
    assert "--tmpfsmount /root" in joined and "--bindmount_ro /root/.pyenv:/root/.pyenv" in joined
    assert "--tmpfsmount /run" in joined
    assert "--disable_clone_newuser --user 64001 --group 64001" in joined  # a real uid: RLIMIT_NPROC holds
    user_ns = nsjail_argv("nsjail", "/usr/bin/python3", "/tmp/c.py", Limits(), as_root=False)
    assert "--user" not in user_ns and "--disable_clone_newuser" not in user_ns


def test_a_venv_below_tmp_is_bound_back_over_the_fresh_tmp():
    assert tmp_keeps(("/tmp/venv/bin/python", "/tmp/venv", "/usr/bin/python3", "/tmpfoo/x")) == ("/tmp/venv",)
    # Exactly the venv, not the checkout around it; never over the jail's own workdir.
    assert tmp_keeps(("/tmp/proj/.venv",)) == ("/tmp/proj/.venv",)
    assert parents_below("/tmp/proj/.venv") == ["/tmp/proj"]
    assert tmp_keeps(("/tmp/work/venv", "/tmp/code.py")) == ()
    argv = nsjail_argv("nsjail", "/tmp/venv/bin/python", "/tmp/c.py", Limits(), tmp_kept=("/tmp/venv",))
    joined = " ".join(argv)
    assert joined.index("--tmpfsmount /tmp ") < joined.index("--bindmount_ro /tmp/venv:/tmp/venv")


@pytest.fixture(scope="module")
def nsjail():
    try:
        backend = get_backend("nsjail")
    except BackendUnavailable as exc:
        assert "not packaged" in str(exc)
        pytest.skip(f"nsjail unavailable: {exc}")
    yield backend
    backend.close()


def test_nsjail_backend_applies_the_seed_preset_by_default(nsjail):
    result = nsjail.run("import numpy, os\nprint(input(), os.getcwd())\nprint('x' * 4000)", stdin="hi")
    assert result.status is Status.OK and result.stdout.startswith("hi /tmp\n")
    assert result.truncated and "truncated at 1536 characters" in result.stdout  # the seed's cut


def test_nsjail_refuses_writes_network_and_escapes(nsjail, write_refused):
    quick = Limits(cpu_s=2, wall_s=4)
    target = CHECKOUT / f"nsjail-escape-{uuid.uuid4().hex}"
    write_refused(nsjail.run(f"open({str(target)!r}, 'w')", limits=quick))
    assert not target.exists()
    for code in (
        "import socket\nsocket.create_connection(('127.0.0.1', 22))",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import ctypes\nctypes.CDLL(None).unshare(0x10000000)",
    ):
        assert nsjail.run(code, limits=quick).status is Status.VIOLATION, code
    home = nsjail.run("import os\nprint(sorted(os.listdir('/root')))", limits=quick)
    assert home.status is Status.OK and home.stdout == f"{list(dict(nsjail.hidden)['/root'])}\n"  # the interpreter
    env = nsjail.run("import os\nprint(sorted(os.environ))", limits=quick)
    assert env.stdout.startswith("['HOME', 'LANG', 'LC_ALL'") and "COA_" not in env.stdout


def test_nsjail_enforces_time_memory_and_process_limits(nsjail):
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=256, max_processes=16)
    assert nsjail.run("import time\ntime.sleep(60)", limits=limits).status is Status.TIMEOUT
    assert nsjail.run("while True:\n    pass", limits=limits).status is Status.TIMEOUT
    bomb = "b = []\nwhile True:\n    b.append(bytearray(2**26))"
    assert nsjail.run(bomb, limits=limits).status is Status.MEMORY
    fork_bomb = nsjail.run("import os\nwhile True:\n    os.fork()", limits=limits)
    assert fork_bomb.status in {Status.VIOLATION, Status.TIMEOUT}


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
