"""Attacks on the default backend (the pool). Each must be refused and leave the host unaffected.

Network (TCP to the host's loopback, DNS), the filesystem outside the scratch space (project
checkout, host /tmp, deletion), another run's workdir, fork bomb, memory bomb, CPU loop,
endless sleep, a gigabyte of output, signalling and ptracing the worker, host environment
secrets, /proc/1/root, and a background process outliving its run. The classes that every
jailing backend must hold (files outside the grants, host IPC, quotas, daemons) are in
``test_least_privilege_*.py``. The last test checks that the pool still answers correctly after
all of them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from sandbox import Limits, Status

REFUSED = {Status.VIOLATION, Status.TIMEOUT, Status.MEMORY}
CHECKOUT = Path(__file__).resolve().parents[2]
QUICK = Limits(cpu_s=2, wall_s=3)

def test_tcp_connection_to_host_loopback_is_refused(pool):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept_loop() -> None:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    listener = threading.Thread(target=accept_loop)
    listener.start()
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    result = pool.run(code, limits=QUICK)
    listener.join()
    server.close()
    assert result.status is Status.VIOLATION, result
    assert "connected" not in result.stdout
    assert accepted == []


def test_dns_lookup_is_refused(pool):
    result = pool.run("import socket\nprint(socket.getaddrinfo('example.com', 80))", limits=QUICK)
    assert result.status is Status.VIOLATION, result
    assert result.stdout == ""


def test_write_into_project_checkout_is_refused(pool, write_refused):
    target = CHECKOUT / f"sandbox-escape-{uuid.uuid4().hex}.txt"
    result = pool.run(f"open({str(target)!r}, 'w').write('pwned')", limits=QUICK)
    write_refused(result)
    assert not target.exists()


def test_writes_to_tmp_stay_in_the_runs_private_tmp(pool):
    target = Path("/tmp") / f"sandbox-escape-{uuid.uuid4().hex}.txt"
    code = f"open({str(target)!r}, 'w').write('pwned')\nprint(open({str(target)!r}).read())"
    result = pool.run(code, limits=QUICK)
    assert (result.status, result.stdout) == (Status.OK, "pwned\n"), result  # its own /tmp: allowed
    assert not target.exists()  # ... and the host's untouched
    again = pool.run(f"import os\nprint(os.path.exists({str(target)!r}))", limits=QUICK)
    assert again.stdout == "False\n"  # nor carried over to the next run


def test_delete_file_outside_workdir_is_refused(pool, write_refused):
    victim = CHECKOUT / "tests" / "sandbox" / f"victim-{uuid.uuid4().hex}.txt"
    victim.write_text("keep me")
    try:
        result = pool.run(f"import os\nos.remove({str(victim)!r})", limits=QUICK)
        write_refused(result)
        assert victim.read_text() == "keep me"
    finally:
        victim.unlink()


def test_other_runs_workdir_is_invisible(pool):
    secret = uuid.uuid4().hex
    holder = f"import time\nopen('secret.txt', 'w').write({secret!r})\nprint('written', flush=True)\ntime.sleep(2)"
    thief = (
        "import glob, os\n"
        "hits = []\n"
        "for pattern in ['/tmp/*/secret.txt', '/tmp/**/secret.txt', '/proc/*/root/tmp/work/secret.txt',"
        " '/proc/*/cwd/secret.txt']:\n"
        "    for path in glob.glob(pattern, recursive=True):\n"
        "        try:\n"
        "            hits.append(open(path).read())\n"
        "        except OSError:\n"
        "            pass\n"
        "print(hits)\n"
        "raise SystemExit(0 if hits else 'no other workdir is visible')"
    )
    results = {}
    holder_thread = threading.Thread(target=lambda: results.setdefault("holder", pool.run(holder, limits=QUICK)))
    holder_thread.start()
    time.sleep(0.5)  # the holder has written its secret by now
    results["thief"] = pool.run(thief, limits=QUICK)
    holder_thread.join()
    assert results["holder"].stdout.startswith("written")
    assert secret not in results["thief"].stdout
    assert results["thief"].status is Status.ERROR


def test_fork_bomb_is_contained(pool, leftovers):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = pool.run(code, limits=Limits(cpu_s=2, wall_s=2, max_processes=16))
    assert result.status in REFUSED, result
    assert leftovers() == []


def test_simple_fork_bomb_is_reported_as_violation(pool, leftovers):
    result = pool.run("import os\nwhile True:\n    os.fork()", limits=Limits(wall_s=3, max_processes=16))
    assert result.status in REFUSED, result
    assert leftovers() == []


def test_memory_bomb_is_stopped(pool):
    result = pool.run(
        "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))", limits=Limits(memory_mb=256)
    )
    assert result.status is Status.MEMORY, result


def test_cpu_loop_is_killed_at_cpu_limit(pool):
    result = pool.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=10))
    assert result.status is Status.TIMEOUT, result
    assert result.cpu_s >= 0.5  # rusage under-counts on busy VMs


def test_endless_sleep_is_killed_at_wall_limit(pool):
    result = pool.run("import time\ntime.sleep(1e9)", limits=Limits(wall_s=1))
    assert result.status is Status.TIMEOUT, result
    assert result.wall_s < 5


def test_gigabyte_of_output_is_cut(pool):
    code = "import sys\nchunk = 'x' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(chunk)"
    limits = Limits(max_output_chars=10_000, wall_s=20, cpu_s=20)
    result = pool.run(code, limits=limits)
    assert result.status is Status.OUTPUT_LIMIT, result.status
    assert result.truncated
    assert len(result.stdout) < 11_000


def test_signalling_the_worker_is_refused(pool):
    pids = pool.worker_pids()
    code = "import os, signal\n" + "".join(f"os.kill({pid}, signal.SIGKILL)\n" for pid in pids)
    result = pool.run(code, limits=QUICK)
    assert result.status is Status.VIOLATION, result
    assert pool.worker_pids() == pids
    for pid in pids:
        os.kill(pid, 0)  # still alive


def test_ptrace_of_the_worker_is_refused(pool):
    pid = pool.worker_pids()[0]
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = libc.ptrace(16, {pid}, 0, 0)\n"  # PTRACE_ATTACH
        "raise SystemExit(0 if rc == 0 else 'ptrace failed')"
    )
    result = pool.run(code, limits=QUICK)
    assert result.status is Status.VIOLATION, result
    os.kill(pid, 0)


@pytest.mark.parametrize(
    ("call", "what"),
    [
        ("libc.unshare(0x10000000)", "a new user namespace"),  # CLONE_NEWUSER: the usual first escape step
        ("libc.mount(b'none', b'/tmp/work', b'tmpfs', 0, None)", "mount"),
        ("libc.syscall(425, 8, ctypes.byref(ctypes.create_string_buffer(120)))", "io_uring"),
    ],
    ids=["unshare-user", "mount", "io_uring"],
)
def test_kernel_interfaces_used_in_escapes_are_refused(pool, call, what):
    # Without the seccomp filter these would fail with EPERM and exit 0; the filter kills the run.
    code = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = {call}\nprint('returned', rc)"
    result = pool.run(code, limits=QUICK)
    assert result.status is Status.VIOLATION, (what, result)
    assert "returned" not in result.stdout


def test_host_environment_secrets_do_not_leak(monkeypatch):
    import sandbox

    secret = f"coa-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("COA_TEST_API_KEY", secret)
    try:
        backend = sandbox.get_backend("pool", size=1)  # started *after* the secret was set
    except sandbox.BackendUnavailable as exc:
        pytest.skip(f"pool backend unavailable: {exc}")
    try:
        code = (
            "import os, glob\nprint(dict(os.environ))\n"
            "for path in glob.glob('/proc/*/environ'):\n"
            "    try:\n"
            "        print(open(path, 'rb').read())\n"
            "    except OSError:\n"
            "        pass"
        )
        result = backend.run(code, limits=QUICK)
    finally:
        backend.close()
    assert result.status is Status.OK, result
    assert secret not in result.stdout
    assert "COA_TEST_API_KEY" not in result.stdout


def test_escape_through_proc_1_root_is_refused(pool, write_refused):
    target = CHECKOUT / f"proc-escape-{uuid.uuid4().hex}.txt"
    code = f"open('/proc/1/root' + {str(target)!r}, 'w').write('pwned')"
    result = pool.run(code, limits=QUICK)
    write_refused(result)
    assert not target.exists()
    listing = pool.run("import os\nprint(os.listdir('/proc/1/root/root'))", limits=QUICK)
    assert ".bashrc" not in listing.stdout  # only what the allowlist root holds


def test_background_process_does_not_outlive_the_run(pool, leftovers):  # see test_least_privilege_limits too
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while True:\n"
        "        time.sleep(0.05)\n"
        "print('parent done')"
    )
    result = pool.run(code, limits=QUICK)
    assert result.stdout == "parent done\n"
    assert leftovers() == []


def test_pool_still_answers_after_the_attacks(pool):
    result = pool.run("import numpy as np\nprint(int(np.arange(10).sum()), input())", stdin="ok\n")
    assert (result.status, result.stdout) == (Status.OK, "45 ok\n")


SCAN_OWN_MEMORY = r"""
import re
found = set()
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
with open("/proc/self/mem", "rb", buffering=0) as mem:
    for fields in regions:
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if not fields[1].startswith("r") or end - start > 256 * 2**20 or fields[-1].startswith("[v"):
            continue
        try:
            mem.seek(start)
            data = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        found.update(m.group().decode() for m in re.finditer(rb"PREFIX[0-9a-f]{32}", data))
print(sorted(found))
"""


def test_a_run_cannot_read_earlier_runs_data_in_the_memory_it_inherits(fresh_pool):
    # Run children used to be forked from the worker, whose heap held earlier answers; a run
    # reading its own memory found them. They now come from a zygote that never sees run data.
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    first = fresh_pool.run(f"print({secret!r} * 50)\nprint(input())", stdin=secret)
    assert first.stdout.count(secret) == 51
    for _ in range(2):  # the same (only) worker, one run after the other
        scan = fresh_pool.run(SCAN_OWN_MEMORY.replace("PREFIX", "s3cr3t-"), limits=Limits(cpu_s=20, wall_s=30))
        assert scan.status is Status.OK, scan
        assert secret not in scan.stdout, "a later run found an earlier run's output in its memory"
