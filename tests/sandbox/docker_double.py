"""A stand-in for the ``docker`` SDK's client at its API boundary, for hosts without a daemon.

:func:`local_client` answers ``docker.from_env()``: ``containers.create(**spec)`` records the
container spec the backend built, and its container runs the spec's command on this machine the
way a container's first process runs: as PID 1 of a fresh PID namespace (``unshare --pid``), with
a private tmpfs on ``/tmp``, the spec's user (no capabilities), environment and CPU ulimit.
Docker's StatusCode is 128 + N for a first process killed by signal N, as here. What it does not
give: the image's root, the daemon's seccomp profile, memory and pids cgroups, the network.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from typing import Any


def available() -> str | None:
    """None when the double can run here, else why not."""
    if os.geteuid() != 0:
        return "running a container's first process as PID 1 of its namespace needs root"
    missing = [tool for tool in ("unshare", "setpriv") if shutil.which(tool) is None]
    return f"missing {missing}" if missing else None


class LocalContainer:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec, self.attrs = spec, {"State": {"OOMKilled": False}}
        self._process: subprocess.Popen | None = None
        self._stdin: socket.socket | None = None
        self._out, self._err = b"", b""
        self.removed = False

    def attach_socket(self, params: dict) -> socket.socket:
        ours, self._stdin = socket.socketpair()
        return ours

    def _argv(self) -> list[str]:
        command = list(self.spec["command"])
        # The image's python: the interpreter itself, not a venv's link to it, since a venv
        # under /tmp (CI's) would be hidden by the container's private /tmp. The harness runs
        # isolated (-I), on the standard library alone.
        command[0] = os.path.realpath(sys.executable)
        private_tmp = "" if command[0].startswith("/tmp/") else "mount -t tmpfs -o mode=1777 none /tmp && "
        uid, gid = self.spec["user"].split(":")
        ulimits = {limit.name: limit for limit in self.spec.get("ulimits", [])}
        cpu = ulimits["cpu"]["Hard"] if "cpu" in ulimits else "unlimited"
        script = (f"{private_tmp}ulimit -t {cpu} && exec setpriv --reuid {uid} "
                  f"--regid {gid} --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs "
                  + shlex.join(command))  # fmt: skip
        return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
                "sh", "-c", script]  # fmt: skip

    def start(self) -> None:
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **self.spec.get("environment", {})}
        self._process = subprocess.Popen(self._argv(), stdin=self._stdin, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=environment, cwd="/")  # fmt: skip
        self._stdin.close()  # type: ignore[union-attr]

    def wait(self) -> dict[str, int]:
        assert self._process is not None
        self._out, self._err = self._process.communicate()
        code = self._process.returncode
        return {"StatusCode": 128 - code if code < 0 else code}

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)

    def logs(self, stdout: bool = True, stderr: bool = True) -> bytes:
        return (self._out if stdout else b"") + (self._err if stderr else b"")

    def reload(self) -> None:
        pass

    def remove(self, force: bool = False) -> None:
        self.kill()
        self.removed = True


class _Containers:
    def __init__(self) -> None:
        self.created: list[LocalContainer] = []

    def create(self, image: str, **spec: Any) -> LocalContainer:
        container = LocalContainer({"image": image, **spec})
        self.created.append(container)
        return container


class _Images:
    def get(self, image: str) -> str:
        return image


class LocalClient:
    def __init__(self) -> None:
        self.containers, self.images = _Containers(), _Images()

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass


def local_client(monkeypatch) -> LocalClient:  # type: ignore[no-untyped-def]
    """Make ``docker.from_env`` answer with a :class:`LocalClient` (returned)."""
    import docker

    client = LocalClient()
    monkeypatch.setattr(docker, "from_env", lambda **_: client)
    return client
