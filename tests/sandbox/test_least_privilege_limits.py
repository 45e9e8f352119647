"""Least privilege over the host's disk, memory and process table, attacked on every jailing
backend present (pool, bwrap, nsjail, docker).

Floods of files, directories, links and bytes stop at the scratch quotas; memory no limit
counts is refused; daemonised grandchildren die with the run. After each, the backend must
still answer correctly and the host must hold no process or file the run left. (Host files:
``test_least_privilege_files.py``; host IPC: ``test_least_privilege_ipc.py``.)
"""

from __future__ import annotations

import ast
import os
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import Status
from tests.sandbox.jails import QUICK, leftover_processes

# -- quotas -------------------------------------------------------------------------------------
FLOODS = {
    "files": "n = 0\nwhile True:\n    open(f'f{n}', 'w').close()\n    n += 1",
    "directories": "import os\nn = 0\nwhile True:\n    os.mkdir(f'd{n}')\n    n += 1",
    "symlinks": "import os\nn = 0\nwhile True:\n    os.symlink('/x', f'l{n}')\n    n += 1",
    "hard-links": "import os\nopen('f', 'w').close()\nn = 0\nwhile True:\n    os.link('f', f'h{n}')\n    n += 1",
    "tmp-and-shm": "import os\nn = 0\nwhile True:\n    open(f'/tmp/t{n}', 'w').close()\n"
    "    open(f'/dev/shm/s{n}', 'w').close()\n    n += 1",
    "swallowed": "n = 0\nwhile True:\n    try:\n        open(f'f{n}', 'w').close()\n"
    "    except OSError:\n        break\n    n += 1\nprint('gave up at', n)",
}


@pytest.mark.parametrize("flood", list(FLOODS))
def test_inode_floods_stop_at_the_file_quota(jail, flood):
    result = jail.run(FLOODS[flood], limits=QUICK.with_(max_files=300))
    assert result.status is Status.OUTPUT_LIMIT, result
    assert "file quota used up: 300 files" in result.stderr
    fresh = jail.run("import os\nprint(os.listdir('.'), sorted(os.listdir('/tmp')))", limits=QUICK)
    # a new scratch; an interpreter installed under /tmp (a venv there) is mounted read-only into it
    interpreter = {Path(p).parts[2] for p in {sys.prefix, sys.base_prefix} if p.startswith("/tmp/")}
    workdir, entries = fresh.stdout.strip().split("] ", 1)
    assert workdir == "[" and [e for e in ast.literal_eval(entries) if e not in interpreter] in (
        [".shm", "work"], [".sandbox", ".shm", "work"]), fresh


@pytest.mark.parametrize("target", ["workdir", "/tmp", "/dev/shm"])
def test_byte_floods_stop_at_the_disk_quota(jail, target):
    path = "big" if target == "workdir" else f"{target}/big"
    code = f"chunk = b'x' * 2**20\nwith open({path!r}, 'wb') as f:\n    while True:\n        f.write(chunk)"
    result = jail.run(code, limits=QUICK.with_(disk_mb=8, max_file_mb=64))
    assert result.status is Status.OUTPUT_LIMIT, result
    assert "disk quota used up: 8 MB" in result.stderr
    big_file = jail.run("open('big', 'wb').write(b'x' * 3 * 2**20)", limits=QUICK.with_(max_file_mb=1))
    assert big_file.status is Status.OUTPUT_LIMIT and "file size limit reached: 1 MB" in big_file.stderr, big_file


UNCOUNTED_MEMORY = {
    "memfd": """
        import os
        fds = [os.memfd_create(f'm{i}') for i in range(60)]
        for fd in fds:
            os.ftruncate(fd, 16 * 2**20)
            os.write(fd, b'x' * 2**20)
        print('filled')
    """,
    "sysv-shm": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        ids = []
        for i in range(64):
            ident = libc.shmget(0, 256 * 2**20, 0o1600)
            if ident < 0:
                raise PermissionError(ctypes.get_errno(), 'shmget refused')
            ids.append(ident)
        print('made')
    """,
    "sysv-msg": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.msgget(0, 0o1600) < 0:
            raise PermissionError(ctypes.get_errno(), 'msgget refused')
        print('made')
    """,
    # (x86-64's number; nsjail's kafel policy could not name it and let it through)
    "memfd-secret": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        if libc.syscall(447, 0) < 0:
            raise PermissionError(ctypes.get_errno(), 'memfd_secret refused')
        print('made')
    """,
}


@pytest.mark.parametrize("kind", list(UNCOUNTED_MEMORY))
def test_memory_no_limit_counts_is_refused(jail, kind):
    # In-memory files and System V segments hold memory that neither RLIMIT_AS (once unmapped)
    # nor the scratch quotas count: the seccomp filter refuses to make them at all.
    if jail.name == "docker":
        pytest.skip("docker: the daemon's own seccomp profile and cgroup memory limit apply")
    result = jail.run(textwrap.dedent(UNCOUNTED_MEMORY[kind]), limits=QUICK)
    assert result.status is Status.VIOLATION, result
    assert result.stdout == ""


# -- processes ----------------------------------------------------------------------------------
DAEMONS = {
    "double-fork-setsid": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in range(3):
                    os.close(fd)
                while True:
                    time.sleep(0.05)
            os._exit(0)
        os.wait()
        print('launched')
    """,
    "keeps-stdout-open": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.05)
            os._exit(0)
        os.wait()
        print('launched')
    """,
    "popen-new-session": """
        import subprocess, sys
        sleeper = [sys.executable, '-c', 'import time; time.sleep(600)']
        quiet = {'stdout': subprocess.DEVNULL, 'stderr': subprocess.DEVNULL}
        subprocess.Popen(sleeper, start_new_session=True, **quiet)
        print('launched')
    """,
    "ignores-sigterm": """
        import os, signal, time
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            os.setsid()
            while True:
                time.sleep(0.05)
        print('launched')
    """,
}


@pytest.mark.parametrize("daemon", list(DAEMONS))
def test_daemonised_grandchildren_die_with_the_run(jail, daemon):
    result = jail.run(textwrap.dedent(DAEMONS[daemon]), limits=QUICK)
    assert (result.status, result.stdout) == (Status.OK, "launched\n"), result
    assert result.wall_s < QUICK.wall_s  # the run ends when its code does, not at the deadline
    assert leftover_processes(jail) == []


def test_each_jail_still_answers_and_left_nothing_on_the_host(jail):
    host = {directory: set(os.listdir(directory)) for directory in ("/tmp", "/dev/shm", "/var/tmp")}
    code = ("import numpy as np, os\nfor d in ('/tmp', '/dev/shm', '.'):\n    open(os.path.join(d, 'left'), 'w')\n"
            "print(int(np.arange(10).sum()), input())")  # fmt: skip
    result = jail.run(code, stdin="ok\n", limits=QUICK)
    assert (result.status, result.stdout) == (Status.OK, "45 ok\n"), result
    assert leftover_processes(jail) == []
    for directory, before in host.items():
        new = {name for name in set(os.listdir(directory)) - before if "coa" in name or name == "left"}
        assert new == set(), directory  # (another user's files would not be named so)


def test_the_unisolated_backend_still_kills_daemons_at_the_end():
    from sandbox.backends import get_backend

    backend = get_backend("subprocess", quiet=True)
    code = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.write(w, str(os.getpid()).encode())\n        time.sleep(600)\n    os._exit(0)\n"
            "os.wait()\nprint(os.read(r, 20).decode())")  # fmt: skip
    result = backend.run(code, limits=QUICK)
    pid = int(result.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
