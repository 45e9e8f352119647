"""Least privilege, attacked on every jailing backend present (pool, bwrap, nsjail, docker).

Each class of attack the allowlist root must stop: host files outside the grants (whatever the
directory, whatever the spelling of the path), host Unix sockets (in any directory, or in the
abstract namespace), host System V IPC and POSIX shared memory, floods of files, directories,
links and bytes against the scratch quotas, daemonised grandchildren. After each, the backend
must still answer correctly and the host must hold no process or file the run left.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import errno
import json
import os
import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest

from sandbox import Limits, Status
from sandbox._root import DEVICES
from tests.sandbox.jails import CHECKOUT, jail_backend, leftover_processes

QUICK = Limits(cpu_s=3, wall_s=8)
_libc = ctypes.CDLL(None, use_errno=True)
_IPC_CREAT, _IPC_RMID = 0o1000, 0


def _needs_root_policy(jail) -> None:
    if not hasattr(jail, "root"):
        pytest.skip(f"{jail.name}: the container image is the root, not an allowlist of the host's")


# -- host files ---------------------------------------------------------------------------------
#: Host directories a secret is planted in: configuration, data, homes, the checkout, /tmp, ...
SECRET_DIRS = ("/etc", "/opt", "/srv", "/var/lib", "/var/tmp", "/home", "/root", "/tmp", "/mnt", "/usr/local",
               "/usr/share", "/run", str(CHECKOUT))  # fmt: skip


@pytest.fixture(scope="module")
def host_secrets():
    """A fresh directory with a secret file in each of :data:`SECRET_DIRS` (removed after)."""
    secret = f"coa-secret-{uuid.uuid4().hex}"
    made = []
    for parent in SECRET_DIRS:
        if not os.path.isdir(parent):
            continue
        directory = Path(parent) / f"coa-test-{uuid.uuid4().hex[:8]}"
        directory.mkdir(mode=0o755)
        (directory / "secret.txt").write_text(secret)
        (directory / "secret.txt").chmod(0o644)
        made.append(directory)
    yield secret, [str(d / "secret.txt") for d in made]
    for directory in made:
        shutil.rmtree(directory, ignore_errors=True)


READ_EVERY_WAY = r"""
import json, os
secret_paths = json.loads(PATHS)
found = {}
for path in secret_paths + ["/etc/passwd", "/etc/shadow", "/etc/hostname", "/root/.bashrc"]:
    spellings = [path, "/proc/self/root" + path, "/proc/1/root" + path, "/tmp/../.." + path,
                 "/proc/self/cwd/../../.." + path]
    link = "link-" + str(abs(hash(path)))
    try:
        os.symlink(path, link)
        spellings.append(link)
    except OSError:
        pass
    for spelling in spellings:
        try:
            with open(spelling, "rb") as handle:
                found[spelling] = handle.read(200).decode(errors="replace")
        except OSError:
            pass
found["environ"] = open("/proc/self/environ").read()
print(json.dumps(found))
"""


def test_host_files_outside_the_root_cannot_be_read_by_any_path(jail, host_secrets):
    secret, paths = host_secrets
    result = jail.run(READ_EVERY_WAY.replace("PATHS", repr(json.dumps(paths))), limits=QUICK)
    assert result.status is Status.OK, result
    found = json.loads(result.stdout)
    assert secret not in result.stdout
    environ = found.pop("environ")
    if hasattr(jail, "root"):  # (a container has its image's /etc: not the host's, but there)
        assert found == {}  # /etc/passwd and friends do not exist in the jail either
    assert "HOME=/tmp/work" in environ and "COA_" not in environ


WALK_ROOT = r"""
import json, os
allowed = json.loads(ALLOWED)
extra = []
def walk(path):
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if any(full == a or full.startswith(a.rstrip("/") + "/") for a in allowed):
            continue
        if os.path.isdir(full) and not os.path.islink(full) and any(a.startswith(full + "/") for a in allowed):
            walk(full)  # a parent of kept paths: nothing else may be in it
            continue
        extra.append(full)
walk("/")
print(json.dumps({"extra": extra, "dev": sorted(os.listdir("/dev")), "etc": sorted(os.listdir("/etc"))}))
"""


def test_the_root_holds_the_allowlist_and_nothing_else(jail):
    _needs_root_policy(jail)
    root = jail.root
    allowed = [*root.read_only, *root.writable, *(path for path, _ in root.symlinks), "/proc", "/dev", "/tmp"]
    result = jail.run(WALK_ROOT.replace("ALLOWED", repr(json.dumps(allowed))), limits=QUICK)
    assert result.status is Status.OK, result
    seen = json.loads(result.stdout)
    assert seen["extra"] == []
    assert seen["dev"] == sorted([*DEVICES, "fd", "stdin", "stdout", "stderr", "shm"])
    assert seen["etc"] == sorted(os.path.basename(p) for p in root.read_only if os.path.dirname(p) == "/etc")


def test_writes_outside_the_scratch_space_are_refused(jail, write_refused):
    targets = [CHECKOUT / f"escape-{uuid.uuid4().hex}", Path("/etc") / f"escape-{uuid.uuid4().hex}"]
    for target in targets:
        write_refused(jail.run(f"open({str(target)!r}, 'w').write('pwned')", limits=QUICK))
        assert not target.exists()
    prefix = os.path.realpath(os.path.dirname(os.__file__))  # the interpreter's own files: read-only
    result = jail.run(f"open({prefix + '/os.py'!r}, 'a').write('pwned')", limits=QUICK)
    assert result.status is Status.VIOLATION, result


@pytest.mark.parametrize("kind", ["pool", "bwrap", "nsjail"])
@pytest.mark.parametrize("below_tmp", [True, False], ids=["grant-below-tmp", "grant-elsewhere"])
def test_grants_expose_exactly_what_was_granted(kind, below_tmp, tmp_path):
    base = tmp_path if below_tmp else Path("/srv") / f"coa-test-{uuid.uuid4().hex[:8]}"
    readable, writable, sibling = base / "data", base / "out", base / "private"
    for directory in (readable, writable, sibling):
        directory.mkdir(parents=True)
    (readable / "input.txt").write_text("granted")
    (sibling / "secret.txt").write_text("not granted")
    writable.chmod(0o777)  # runs execute as other uids
    server = socket.socket(socket.AF_UNIX)  # a socket in a granted directory is still no way out
    server.bind(str(writable / "daemon.sock"))
    server.listen()
    server.settimeout(0.3)
    backend = None
    try:
        backend = jail_backend(kind, read_only_paths=[str(readable)], writable_paths=[str(writable)])
        code = (
            "import os, socket\n"
            f"print(open({str(readable / 'input.txt')!r}).read())\n"
            f"open({str(writable / 'result.txt')!r}, 'w').write('written')\n"
            f"print(sorted(os.listdir({str(base)!r})))\n"
            f"for path in [{str(sibling / 'secret.txt')!r}]:\n"
            "    try:\n        print(open(path).read())\n"
            "    except OSError as exc:\n        print(type(exc).__name__)\n"
            "try:\n"
            f"    s = socket.socket(socket.AF_UNIX); s.connect({str(writable / 'daemon.sock')!r}); print('connected')\n"
            "except OSError as exc:\n    print('socket', exc.errno)\n"
        )
        result = backend.run(code, limits=QUICK)
        assert result.status is Status.OK, result
        lines = result.stdout.splitlines()
        assert lines == ["granted", "['data', 'out']", "FileNotFoundError", f"socket {errno.EACCES}"], result
        assert (writable / "result.txt").read_text() == "written"
        refused = backend.run(f"open({str(readable / 'input.txt')!r}, 'a').write('x')", limits=QUICK)
        assert refused.status is Status.VIOLATION, refused
        assert (readable / "input.txt").read_text() == "granted"
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
        if backend is not None:
            backend.close()
        if not below_tmp:
            shutil.rmtree(base, ignore_errors=True)


# -- host IPC -----------------------------------------------------------------------------------
SOCKET_DIRS = ("/tmp", "/var/tmp", "/run", "/dev/shm", "/root", "/srv", str(CHECKOUT))


@pytest.fixture()
def host_sockets():
    """Listening Unix sockets (stream and datagram) in several host directories and in the
    abstract namespace; yields their addresses and a function counting what reached them."""
    servers, addresses, made = [], [], []
    for directory in SOCKET_DIRS:
        if not os.path.isdir(directory):
            continue
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            path = f"{directory}/coa-test-{uuid.uuid4().hex[:8]}.sock"
            server = socket.socket(socket.AF_UNIX, kind)
            server.bind(path)
            os.chmod(path, 0o777)
            made.append(path)
            servers.append(server)
            addresses.append(path)
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        name = f"\0coa-test-{uuid.uuid4().hex}"
        server = socket.socket(socket.AF_UNIX, kind)
        server.bind(name)
        servers.append(server)
        addresses.append(name)
    for server in servers:
        if server.type == socket.SOCK_STREAM:
            server.listen()
        server.setblocking(False)

    def reached() -> list[str]:
        hits = []
        for server, address in zip(servers, addresses, strict=True):
            with contextlib.suppress(BlockingIOError):
                server.accept() if server.type == socket.SOCK_STREAM else server.recv(100)
                hits.append(address)
        return hits

    yield addresses, reached
    for server in servers:
        server.close()
    for path in made:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


CONNECT_ALL = r"""
import json, os, socket
addresses = json.loads(ADDRESSES)
outcome = {}
for address in addresses:
    spellings = [address] if address.startswith("\0") else [address, "/proc/self/root" + address]
    for spelling in spellings:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):
            try:
                s = socket.socket(socket.AF_UNIX, kind)
            except OSError as exc:
                outcome[repr(spelling) + str(kind)] = "socket: " + exc.strerror
                continue
            try:
                s.connect(spelling)
                s.send(b"hello")
                outcome[repr(spelling) + str(kind)] = "connected"
            except OSError as exc:
                outcome[repr(spelling) + str(kind)] = "connect: " + exc.strerror
a, b = socket.socketpair()  # still works: multiprocessing's pipes need it
a.send(b"pair")
outcome["socketpair"] = b.recv(4).decode()
print(json.dumps(outcome))
"""


@pytest.mark.parametrize("network", [False, True], ids=["offline", "network-granted"])
def test_no_host_unix_socket_is_reachable(jail, host_sockets, network):
    addresses, reached = host_sockets
    if network and jail.name == "pool":
        pytest.skip("the pool never grants network (refusing it is tested in test_api)")
    limits = QUICK.with_(network=network)
    result = jail.run(CONNECT_ALL.replace("ADDRESSES", repr(json.dumps(addresses))), limits=limits)
    assert result.status is Status.OK, result
    outcome = json.loads(result.stdout)
    assert outcome.pop("socketpair") == "pair"
    assert outcome and not [key for key, value in outcome.items() if value == "connected"], outcome
    assert reached() == []


def _sysv(call: str, *args: int) -> int:
    result = getattr(_libc, call)(*args)
    if result < 0:
        raise OSError(ctypes.get_errno(), f"{call} failed")
    return result


@pytest.fixture()
def host_ipc():
    """A System V shared memory segment, semaphore set and message queue, and a POSIX shared
    memory object, all world-accessible, on the host."""
    key = int.from_bytes(os.urandom(3), "little") | 0x10000000
    shm = _sysv("shmget", key, 4096, _IPC_CREAT | 0o666)
    sem = _sysv("semget", key, 1, _IPC_CREAT | 0o666)
    msg = _sysv("msgget", key, _IPC_CREAT | 0o666)
    posix = Path("/dev/shm") / f"coa-test-{uuid.uuid4().hex[:8]}"
    posix.write_text("host shared memory")
    posix.chmod(0o666)
    yield key, posix
    _libc.shmctl(shm, _IPC_RMID, None)
    _libc.semctl(sem, 0, _IPC_RMID)
    _libc.msgctl(msg, _IPC_RMID, None)
    posix.unlink(missing_ok=True)


PROBE_IPC = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
key = KEY
found = {
    "shmget": libc.shmget(key, 0, 0), "semget": libc.semget(key, 0, 0), "msgget": libc.msgget(key, 0),
    "dev_shm": sorted(os.listdir("/dev/shm")),
    "sysvipc": [len(open(f"/proc/sysvipc/{n}").read().splitlines()) for n in ("shm", "sem", "msg")],
}
try:
    found["posix"] = open(POSIX).read()
except OSError as exc:
    found["posix"] = type(exc).__name__
# Its own IPC works: a POSIX segment and the semaphores behind multiprocessing's locks.
from multiprocessing import shared_memory
import multiprocessing
segment = shared_memory.SharedMemory(create=True, size=4096)
segment.buf[:2] = b"ok"
found["own_shm"] = bytes(segment.buf[:2]).decode()
lock = multiprocessing.Lock()
with lock:
    found["own_lock"] = "ok"
with multiprocessing.Pool(2) as workers:
    found["pool"] = workers.map(abs, [-1, -2])
segment.close()
segment.unlink()
print(json.dumps(found))
"""


def test_no_host_sysv_ipc_or_posix_shared_memory(jail, host_ipc):
    key, posix = host_ipc
    before = sorted(os.listdir("/dev/shm"))
    code = PROBE_IPC.replace("KEY", str(key)).replace("POSIX", repr(str(posix)))
    result = jail.run(code, limits=QUICK)
    assert result.status is Status.OK, result
    found = json.loads(result.stdout)
    assert (found["shmget"], found["semget"], found["msgget"]) == (-1, -1, -1)
    assert found["posix"] == "FileNotFoundError" and found["dev_shm"] == []
    assert found["sysvipc"] == [1, 1, 1]  # only the header line: an IPC namespace of its own
    assert (found["own_shm"], found["own_lock"], found["pool"]) == ("ok", "ok", [1, 2])
    assert sorted(os.listdir("/dev/shm")) == before  # nothing of the run's reached the host's


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
    "memfd": "import os\nfds = [os.memfd_create(f'm{i}') for i in range(60)]\n"
    "for fd in fds:\n    os.ftruncate(fd, 16 * 2**20)\n    os.write(fd, b'x' * 2**20)\nprint('filled')",
    "sysv-shm": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nids = []\nfor i in range(64):\n"
    "    ident = libc.shmget(0, 256 * 2**20, 0o1600)\n    if ident < 0:\n"
    "        raise PermissionError(ctypes.get_errno(), 'shmget refused')\n    ids.append(ident)\nprint('made')",
    "sysv-msg": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.msgget(0, 0o1600) < 0:\n    raise PermissionError(ctypes.get_errno(), 'msgget refused')\nprint('made')",
}


@pytest.mark.parametrize("kind", list(UNCOUNTED_MEMORY))
def test_memory_no_limit_counts_is_refused(jail, kind):
    # In-memory files and System V segments hold memory that neither RLIMIT_AS (once unmapped)
    # nor the scratch quotas count: the seccomp filter refuses to make them at all.
    if jail.name == "docker":
        pytest.skip("docker: the daemon's own seccomp profile and cgroup memory limit apply")
    result = jail.run(UNCOUNTED_MEMORY[kind], limits=QUICK)
    assert result.status is Status.VIOLATION, result
    assert result.stdout == ""


# -- processes ----------------------------------------------------------------------------------
DAEMONS = {
    "double-fork-setsid": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        for fd in range(3):\n            os.close(fd)\n        while True:\n            time.sleep(0.05)\n"
    "    os._exit(0)\nos.wait()\nprint('launched')",
    "keeps-stdout-open": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        while True:\n            time.sleep(0.05)\n    os._exit(0)\nos.wait()\nprint('launched')",
    "popen-new-session": "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
    " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint('launched')",
    "ignores-sigterm": "import os, signal, time\nif os.fork() == 0:\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "    os.setsid()\n    while True:\n        time.sleep(0.05)\nprint('launched')",
}


@pytest.mark.parametrize("daemon", list(DAEMONS))
def test_daemonised_grandchildren_die_with_the_run(jail, daemon):
    result = jail.run(DAEMONS[daemon], limits=QUICK)
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
