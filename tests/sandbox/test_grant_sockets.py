"""No socket inside a granted directory is reachable, whatever its type and however addressed;
no named pipe in a read-only grant takes a run's writes; no device node in a grant opens.

``socket(AF_UNIX)`` is refused, but ``socketpair`` is allowed (multiprocessing needs it), and an
unconnected datagram end of a pair can address any named socket: ``sendto``, ``sendmsg`` with an
address, or ``connect`` then ``send``. A granted directory's datagram socket took a run's
messages that way. A read-only mount does not stop writes into a FIFO (a host process reading
it gets them): Landlock does. Attacked on every jailing backend present, read-only and writable
grants.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from sandbox import Limits, Status
from sandbox._lockdown import landlock_abi
from tests.sandbox.jails import jail_backend

ATTACKS = r"""
import json, socket
paths = json.loads(PATHS)
results = {}
def attempt(name, action):
    try:
        action()
        results[name] = "sent"
    except OSError as exc:
        results[name] = exc.errno
for label, path in paths.items():
    for kind_name in ("SOCK_DGRAM", "SOCK_RAW", "SOCK_STREAM", "SOCK_SEQPACKET"):
        kind = getattr(socket, kind_name)
        try:
            a, b = socket.socketpair(socket.AF_UNIX, kind)
        except OSError as exc:
            results[f"{label} {kind_name} socketpair"] = exc.errno
            continue
        attempt(f"{label} {kind_name} sendto", lambda: a.sendto(b"sendto", path))
        attempt(f"{label} {kind_name} sendmsg", lambda: a.sendmsg([b"sendmsg"], [], 0, path))
        attempt(f"{label} {kind_name} connect", lambda: (b.connect(path), b.send(b"connect")))
        a.close()
        b.close()
print(json.dumps(results))
"""


@pytest.fixture(scope="module", params=["pool", "bwrap", "nsjail"])
def granted(request, tmp_path_factory):
    """A backend granted a read-only and a writable directory, each holding listening sockets of
    every type (world-writable, so that permissions are not what stops a run)."""
    base = tmp_path_factory.mktemp(f"grants-{request.param}")
    readable, writable = base / "ro", base / "rw"
    servers: dict[str, socket.socket] = {}
    for directory in (readable, writable):
        directory.mkdir()
        directory.chmod(0o777)
        for kind_name in ("SOCK_DGRAM", "SOCK_STREAM", "SOCK_SEQPACKET"):
            path = directory / f"{kind_name.lower()}-{uuid.uuid4().hex[:6]}.sock"
            server = socket.socket(socket.AF_UNIX, getattr(socket, kind_name))
            server.bind(str(path))
            os.chmod(path, 0o777)
            if kind_name != "SOCK_DGRAM":
                server.listen()
            server.setblocking(False)
            servers[str(path)] = server
    backend = jail_backend(request.param, read_only_paths=[str(readable)], writable_paths=[str(writable)])
    yield backend, servers
    backend.close()
    for server in servers.values():
        server.close()


def _reached(servers: dict[str, socket.socket]) -> list[str]:
    reached = []
    for path, server in servers.items():
        try:
            if server.type == socket.SOCK_DGRAM:
                reached.append(f"{path}: {server.recv(100)!r}")
            else:
                connection, _ = server.accept()
                reached.append(f"{path}: connection")
                connection.close()
        except (BlockingIOError, OSError):
            continue
    return reached


def test_no_socket_in_a_grant_is_reachable_through_a_socketpair(granted):
    backend, servers = granted
    paths = {f"{Path(p).parent.name}/{Path(p).name.split('-')[0]}": p for p in servers}
    result = backend.run(ATTACKS.replace("PATHS", repr(json.dumps(paths))), limits=Limits(cpu_s=5, wall_s=10))
    assert result.status in (Status.OK, Status.VIOLATION), result
    assert _reached(servers) == [], result.stdout
    if result.status is Status.OK:  # a connected pair ignores the address (it reaches its peer)
        outcome = json.loads(result.stdout)
        addressed = {k: v for k, v in outcome.items() if ("SOCK_DGRAM " in k or "SOCK_RAW " in k) and v == "sent"}
        assert addressed == {}, addressed
    after = backend.run("print(6 * 7)", limits=Limits(wall_s=2))
    assert after.stdout == "42\n", after


def test_socketpairs_for_multiprocessing_still_work(granted):
    backend, _ = granted
    code = ("import socket\na, b = socket.socketpair()\na.sendall(b'ping')\nprint(b.recv(4).decode())\n"
            "c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\nc.send(b'pong')\n"
            "print(d.recv(4).decode())")
    result = backend.run(code, limits=Limits(cpu_s=5, wall_s=10))
    assert (result.status, result.stdout) == (Status.OK, "ping\npong\n"), result


IPC_AND_DEVICES = r"""
import json, os
outcome = {}
for label, base in json.loads(BASES).items():
    try:
        fd = os.open(base + "/pipe", os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"from the run")
        outcome[label + " fifo"] = "written"
    except OSError as exc:
        outcome[label + " fifo"] = exc.errno
    try:
        with open(base + "/zero", "rb") as handle:
            outcome[label + " device"] = len(handle.read(8))
    except OSError as exc:
        outcome[label + " device"] = exc.errno
print(json.dumps(outcome))
"""


@pytest.fixture()
def srv_dir():
    """A directory outside /tmp (below /tmp, Landlock's rule for the run's scratch space covers a
    read-only grant too: see the promises page)."""
    base = Path("/srv") / f"coa-test-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("kind", ["pool", "bwrap", "nsjail"])
def test_a_read_only_grant_is_no_way_to_write_to_a_host_pipe_or_to_open_a_device(kind, srv_dir):
    bases = {"ro": srv_dir / "ro", "rw": srv_dir / "rw"}
    readers = {}
    for label, base in bases.items():
        base.mkdir()
        base.chmod(0o777)
        os.mkfifo(base / "pipe")
        (base / "pipe").chmod(0o666)
        readers[label] = os.open(base / "pipe", os.O_RDONLY | os.O_NONBLOCK)  # a host process listening
        os.mknod(base / "zero", 0o666 | 0o020000, os.makedev(1, 5))  # a copy of /dev/zero, world-readable
        (base / "zero").chmod(0o666)
    backend = jail_backend(kind, read_only_paths=[str(bases["ro"])], writable_paths=[str(bases["rw"])])
    try:
        code = IPC_AND_DEVICES.replace("BASES", repr(json.dumps({k: str(v) for k, v in bases.items()})))
        result = backend.run(code, limits=Limits(cpu_s=5, wall_s=10))
        assert result.status is Status.OK, result
        outcome = json.loads(result.stdout)
        received = {}
        for label, fd in readers.items():
            try:
                received[label] = os.read(fd, 100)
            except BlockingIOError:
                received[label] = b""
        if landlock_abi():
            assert received["ro"] == b"" and outcome["ro fifo"] != "written", outcome
        assert received["rw"] == b"from the run"  # a writable grant is the caller's to give
        if kind == "nsjail":
            pytest.skip("nsjail's command line binds grants without nodev (its config file could)")
        assert outcome["ro device"] != 8 and outcome["rw device"] != 8, outcome
    finally:
        backend.close()
        for fd in readers.values():
            os.close(fd)
