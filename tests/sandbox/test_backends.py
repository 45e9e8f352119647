"""The other backends behind the same API: bubblewrap, nsjail (seed preset), Docker.

The attacks every jailing backend must hold are in ``test_least_privilege_*.py``; here: how each
one is driven (command lines, limits, presets) and that it runs ordinary code.
"""

from __future__ import annotations

import itertools
import shutil
import uuid

import pytest

from sandbox import NSJAIL_SEED_PRESET, Limits, Status
from sandbox._root import RootPolicy
from sandbox.backends import BackendUnavailable, get_backend
from sandbox.backends.bwrap import bwrap_root_args
from sandbox.backends.nsjail import nsjail_argv
from tests.sandbox.jails import CHECKOUT

ROOT = RootPolicy(
    python="/opt/py/bin/python3",
    read_only=("/etc/ld.so.cache", "/opt/py", "/tmp/venv", "/usr/lib/x86_64-linux-gnu"),
    writable=("/srv/out",),
    symlinks=(("/lib", "usr/lib"), ("/lib64", "usr/lib64")),
)


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


def test_bwrap_refuses_writes_and_network(bwrap, write_refused):
    target = CHECKOUT / f"bwrap-escape-{uuid.uuid4().hex}"
    write_refused(bwrap.run(f"open({str(target)!r}, 'w')"))
    assert not target.exists()
    net = bwrap.run("import socket\nsocket.create_connection(('127.0.0.1', 22))")
    assert net.status is Status.VIOLATION


def test_bwrap_grants_network_when_asked(bwrap):
    # Offline, socket() itself is refused; granted, the socket opens (a refused connection to a
    # closed port of the host's loopback shows the run reached the host's network stack).
    code = ("import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 9))\n"
            "except OSError as e:\n    print(e.errno)")
    assert bwrap.run(code).status is Status.VIOLATION
    granted = bwrap.run(code, limits=Limits(network=True))
    assert granted.status is Status.OK and granted.stdout.strip().isdigit(), granted


def test_bwrap_enforces_cpu_and_process_limits(bwrap):
    spin = bwrap.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=10))
    assert spin.status is Status.TIMEOUT
    bomb = bwrap.run("import os\nwhile True:\n    os.fork()", limits=Limits(max_processes=16, wall_s=5))
    assert bomb.status in {Status.VIOLATION, Status.TIMEOUT}


def test_bwrap_command_line_assembles_the_allowlist_root():
    joined = " ".join(bwrap_root_args(ROOT))
    assert "--ro-bind / /" not in joined  # nothing of the host but what is listed
    assert "--ro-bind /opt/py /opt/py" in joined and "--bind /srv/out /srv/out" in joined
    assert "--symlink usr/lib /lib" in joined and "--dev-bind /dev/null /dev/null" in joined
    assert "--symlink /tmp/.shm /dev/shm" in joined
    # Parents are made 0755 before anything lands in them (bwrap would make them 0700).
    assert joined.index("--perms 0755 --dir /opt") < joined.index("--ro-bind /opt/py")


def test_nsjail_command_line_carries_the_seed_preset():
    argv = nsjail_argv("/usr/bin/nsjail", "/usr/bin/python3", NSJAIL_SEED_PRESET, ROOT, {"status_fd": 3})
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--time_limit"] == "7" and pairs["--rlimit_cpu"] == "5"
    assert pairs["--rlimit_as"] == "5000" and pairs["--user"] == "65534"
    assert "--disable_clone_newnet" not in argv and "--iface_no_lo" in argv  # network stays off
    policy = pairs["--seccomp_string"]
    assert "ptrace" in policy and "socket(domain)" in policy and "ERRNO(13)" in policy
    assert NSJAIL_SEED_PRESET.max_output_chars == 1536


def test_nsjail_command_line_assembles_the_allowlist_root_and_quotas():
    argv = nsjail_argv("nsjail", "/opt/py/bin/python3", Limits(disk_mb=32, max_files=100), ROOT, {}, 64001)
    joined = " ".join(argv)
    assert "--chroot" not in joined  # nsjail's own empty root, the allowlist bound into it
    assert "--bindmount_ro /opt/py:/opt/py" in joined and "--bindmount /srv/out:/srv/out" in joined
    assert "--symlink usr/lib:/lib" in joined
    assert f"--mount none:/tmp:tmpfs:size={32 * 2**20},nr_inodes=" in joined
    # A path below /tmp (a venv there) is bound over the fresh tmpfs, after it.
    assert joined.index("--mount none:/tmp:tmpfs") < joined.index("--bindmount_ro /tmp/venv:/tmp/venv")
    assert "--disable_clone_newuser --user 64001 --group 64001" in joined  # a real uid: RLIMIT_NPROC holds
    user_ns = nsjail_argv("nsjail", "/usr/bin/python3", Limits(), ROOT, {}, as_root=False)
    assert "--user" not in user_ns and "--disable_clone_newuser" not in user_ns
    assert "--disable_clone_newnet" in nsjail_argv("nsjail", "/usr/bin/python3", Limits(network=True), ROOT, {})


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
    assert result.status is Status.OK and result.stdout.startswith("hi /tmp/work\n")
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
    env = nsjail.run("import os\nprint(sorted(os.environ))", limits=quick)
    assert env.stdout.startswith("['HOME', 'LANG', 'LC_ALL'") and "COA_" not in env.stdout


def test_nsjail_enforces_time_memory_and_process_limits(nsjail):
    limits = Limits(cpu_s=1, wall_s=3, memory_mb=256, max_processes=16)
    assert nsjail.run("import time\ntime.sleep(60)", limits=limits).status is Status.TIMEOUT
    assert nsjail.run("while True:\n    pass", limits=limits).status is Status.TIMEOUT
    # The memory bomb reaches 256 MB within a second of starting, but a jail started on a busy
    # host may not start within 3 s: a wall limit that binds first would hide the memory one.
    bomb = "b = []\nwhile True:\n    b.append(bytearray(2**26))"
    roomy = Limits(cpu_s=20, wall_s=60, memory_mb=256, max_processes=16)
    assert nsjail.run(bomb, limits=roomy).status is Status.MEMORY
    fork_bomb = nsjail.run("import os\nwhile True:\n    os.fork()", limits=limits)
    assert fork_bomb.status in {Status.VIOLATION, Status.TIMEOUT}


def test_docker_backend_when_a_daemon_is_reachable(tmp_path):
    granted = tmp_path / "granted"  # readable by the container's uid (tmp_path itself is 0700)
    granted.mkdir(mode=0o755)
    (granted / "granted.txt").write_text("granted")
    try:
        backend = get_backend("docker", read_only_paths=[str(granted)])
    except BackendUnavailable as exc:
        pytest.skip(f"docker backend unavailable: {exc}")
    try:
        result = backend.run("import os\nprint(input(), os.getcwd())", stdin="from docker")
        assert (result.status, result.stdout) == (Status.OK, "from docker /tmp/work\n"), result
        assert backend.run("import socket\nsocket.getaddrinfo('example.com', 80)").status is Status.VIOLATION
        assert backend.run(f"print(open({str(granted / 'granted.txt')!r}).read())").stdout == "granted\n"
        refused = backend.run(f"open({str(granted / 'granted.txt')!r}, 'a')")
        assert refused.status is Status.VIOLATION, refused
        flood_code = "n = 0\nwhile True:\n    open(f'f{n}', 'w').close()\n    n += 1"
        flood = backend.run(flood_code, limits=Limits(max_files=50))
        assert flood.status is Status.OUTPUT_LIMIT and "file quota used up: 50" in flood.stderr, flood
        spin = backend.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=10))
        assert spin.status is Status.TIMEOUT
    finally:
        backend.close()
