"""Least privilege over the host's IPC, attacked on every jailing backend present (pool, bwrap,
nsjail, docker).

No host Unix socket is reachable (in any directory, or in the abstract namespace), nor host
System V IPC or POSIX shared memory, while the run's own IPC keeps working. (Host files:
``test_least_privilege_files.py``; quotas and daemons: ``test_least_privilege_limits.py``.)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import uuid
from pathlib import Path

import pytest

from sandbox import Status
from tests.sandbox.jails import CHECKOUT, QUICK

_libc = ctypes.CDLL(None, use_errno=True)
_IPC_CREAT, _IPC_RMID = 0o1000, 0


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
