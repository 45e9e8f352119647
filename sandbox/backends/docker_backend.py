"""Docker backend: one throw-away container per run, through the ``docker`` Python SDK.

For hosts where a Docker daemon is the accepted isolation boundary. The container has no
network, a read-only root, a small tmpfs ``/tmp``, no capabilities, ``no-new-privileges``,
an unprivileged user, and memory/pids/CPU limits enforced by the daemon; our wall-clock
watchdog kills it. Needs ``pip install docker`` and a reachable daemon; otherwise the
constructor raises :class:`BackendUnavailable` (tests skip with that reason).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from pathlib import Path
from typing import Any

from sandbox._collect import TRUNCATION_MARKER, hard_output_cap
from sandbox.backends.base import BackendUnavailable
from sandbox.types import ExecResult, Limits, Status

__all__ = ["DockerBackend"]

_HARNESS_SOURCE = (Path(__file__).resolve().parent.parent / "_harness.py").read_text(encoding="utf-8")
_DENIED_EXIT, _MEMORY_EXIT = 212, 213
# The image has no copy of our harness, so it travels in the command line; the code is
# argv[1]. Tags reported by the harness become two reserved exit codes.
_BOOT = (
    _HARNESS_SOURCE.replace('if __name__ == "__main__":\n    _main(sys.argv)', "")
    + "\n_r, _w = os.pipe()\n_rc = execute(sys.argv[1], _w)\nos.set_blocking(_r, False)\n"
    "try:\n    _tag = os.read(_r, 1)\nexcept BlockingIOError:\n    _tag = b''\n"
    f"os._exit({_DENIED_EXIT} if _tag == STATUS_DENIED else {_MEMORY_EXIT} if _tag == STATUS_MEMORY else _rc)\n"
)


class DockerBackend:
    """``docker run --network none --read-only ...`` per run (see the module docstring)."""

    name = "docker"
    isolation = (
        "container",
        "no network",
        "read-only root",
        "tmpfs /tmp",
        "no capabilities",
        "no-new-privileges",
        "uid 65534",
        "memory/pids/cpu limits",
        "wall-clock kill",
    )

    def __init__(self, image: str = "python:3.11-slim", *, user: str = "65534:65534", pull: bool = False) -> None:
        try:
            import docker
        except ImportError as exc:
            raise BackendUnavailable("the docker SDK is not installed (pip install docker)") from exc
        try:
            self.client = docker.from_env(timeout=10)
            self.client.ping()
        except Exception as exc:
            raise BackendUnavailable(f"no Docker daemon reachable: {exc}") from exc
        self.image, self.user = image, user
        try:
            self.client.images.get(image)
        except Exception as exc:
            if not pull:
                raise BackendUnavailable(f"image {image!r} is not present (pull it, or pull=True)") from exc
            self.client.images.pull(image)
        self._docker = docker

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        started = time.monotonic()
        container = self.client.containers.create(
            self.image,
            command=["python", "-I", "-c", _BOOT, code],
            user=self.user,
            network_disabled=not limits.network,
            read_only=True,
            tmpfs={"/tmp": "size=64m,mode=1777"},
            working_dir="/tmp",
            environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"},
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            pids_limit=limits.max_processes,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ulimits=[
                self._docker.types.Ulimit(name="cpu", soft=math.ceil(limits.cpu_s), hard=math.ceil(limits.cpu_s)),
                self._docker.types.Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
                self._docker.types.Ulimit(name="fsize", soft=limits.max_file_mb << 20, hard=limits.max_file_mb << 20),
            ],
            stdin_open=True,
            detach=True,
        )
        try:
            return self._run_container(container, stdin or "", limits, started)
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def _run_container(self, container: Any, stdin: str, limits: Limits, started: float) -> ExecResult:
        socket = container.attach_socket(params={"stdin": 1, "stream": 1})
        container.start()
        raw = getattr(socket, "_sock", socket)
        raw.sendall(stdin.encode("utf-8"))
        raw.shutdown(1)  # EOF on the program's stdin
        timed_out = threading.Event()
        timer = threading.Timer(limits.wall_s, lambda: (timed_out.set(), container.kill()))
        timer.start()
        try:
            state = container.wait()
        finally:
            timer.cancel()
            raw.close()
        exit_code = int(state.get("StatusCode", -1))
        cap = hard_output_cap(limits)
        stdout = container.logs(stdout=True, stderr=False)[:cap].decode("utf-8", errors="replace")
        stderr = container.logs(stdout=False, stderr=True)[:cap].decode("utf-8", errors="replace")
        container.reload()
        oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        if timed_out.is_set():
            status = Status.TIMEOUT
        elif oom or exit_code == _MEMORY_EXIT:
            status = Status.MEMORY
        elif exit_code == _DENIED_EXIT or exit_code == 128 + 31:
            status = Status.VIOLATION
        elif exit_code == 137:
            status = Status.TIMEOUT  # SIGKILL from RLIMIT_CPU
        else:
            status = Status.OK if exit_code == 0 else Status.ERROR
        truncated = False
        if len(stdout) > limits.max_output_chars:
            stdout = stdout[: limits.max_output_chars] + TRUNCATION_MARKER.format(limit=limits.max_output_chars)
            truncated = True
        if len(stderr) > limits.max_output_chars:
            stderr = stderr[: limits.max_output_chars] + TRUNCATION_MARKER.format(limit=limits.max_output_chars)
            truncated = True
        if exit_code in (_DENIED_EXIT, _MEMORY_EXIT):
            exit_code = 1
        return ExecResult(stdout, stderr, exit_code, status, time.monotonic() - started, 0.0, truncated)

    def close(self) -> None:
        self.client.close()
