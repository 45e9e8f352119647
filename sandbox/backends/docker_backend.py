"""Docker backend: one throw-away container per run, through the ``docker`` Python SDK.

For hosts where a Docker daemon is the accepted isolation boundary. The container's root is
the image's (not the host's), read-only; ``/tmp`` is a tmpfs with the run's byte and inode
quotas (``Limits.disk_mb``, ``Limits.max_files``) and holds the workdir; granted host paths are
volumes; no network unless ``Limits.network``, a private IPC namespace, no capabilities,
``no-new-privileges``, an unprivileged user, and memory/pids/CPU limits enforced by the daemon;
our wall-clock watchdog kills it. Needs ``pip install docker``, a reachable daemon and the image
(``COA_SANDBOX_DOCKER_IMAGE``, default ``python:3.11-slim``); otherwise the constructor raises
:class:`BackendUnavailable` (tests skip with that reason).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from sandbox._collect import TRUNCATION_MARKER, hard_output_cap, quota_note
from sandbox._harness import QUOTA_TAGS
from sandbox._lockdown import SCRATCH, WORKDIR, scratch_options
from sandbox._root import Grants
from sandbox.backends.base import BackendUnavailable, refuse_unsendable, refuse_unsupported
from sandbox.types import ExecResult, Limits, Status

__all__ = ["DockerBackend"]

_HARNESS_SOURCE = (Path(__file__).resolve().parent.parent / "_harness.py").read_text(encoding="utf-8")
_DENIED_EXIT, _MEMORY_EXIT = 212, 213
#: Exit codes standing for the quota tags (disk, files, file size), in QUOTA_TAGS' order.
_QUOTA_EXITS = {214 + index: tag for index, tag in enumerate(QUOTA_TAGS)}
# The image has no copy of our harness, so it travels in the command line; the code is
# argv[1]. Tags reported by the harness become reserved exit codes.
_BOOT = (
    _HARNESS_SOURCE.replace('if __name__ == "__main__":\n    _main(sys.argv)', "")
    + f"\nos.makedirs({WORKDIR!r}, exist_ok=True)\nos.makedirs('/tmp/.shm', exist_ok=True)\nos.chdir({WORKDIR!r})\n"
    + f"_r, _w = os.pipe()\n_rc = execute(sys.argv[1], _w, quota_dir=({SCRATCH!r}, '/dev/shm'))\n"
    # Every tag counts wherever it is (a junk byte the code wrote first hid them), as the judge's.
    + "os.set_blocking(_r, False)\n_tags = b''\n"
    "while True:\n    try:\n        _chunk = os.read(_r, 65536)\n    except BlockingIOError:\n        break\n"
    "    if not _chunk:\n        break\n    _tags += _chunk\n"
    "_seen = {bytes([_byte]) for _byte in set(_tags)}\n"
    f"_quota = [code for code, tag in {_QUOTA_EXITS!r}.items() if tag in _seen]\n"
    f"os._exit({_MEMORY_EXIT} if STATUS_MEMORY in _seen else {_DENIED_EXIT} if STATUS_PROCESS_LIMIT in _seen"
    f" else _quota[0] if _quota else {_DENIED_EXIT} if STATUS_DENIED in _seen else _rc)\n"
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

    def __init__(
        self,
        image: str | None = None,
        *,
        user: str = "65534:65534",
        pull: bool = False,
        read_only_paths: tuple[str, ...] | list[str] = (),
        writable_paths: tuple[str, ...] | list[str] = (),
    ) -> None:
        image = image or os.environ.get("COA_SANDBOX_DOCKER_IMAGE", "python:3.11-slim")
        self.grants = Grants(tuple(read_only_paths), tuple(writable_paths))
        self._volumes = {path: {"bind": path, "mode": "ro"} for path in self.grants.read_only_paths}
        self._volumes.update({path: {"bind": path, "mode": "rw"} for path in self.grants.writable_paths})
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

    def unsupported(self, limits: Limits) -> list[str]:
        return []  # every limit maps onto a container option

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        refuse_unsupported(self.name, self.unsupported(limits))
        refuse_unsendable(code, stdin)
        started = time.monotonic()
        container = self.client.containers.create(
            self.image,
            command=["python", "-I", "-B", "-c", _BOOT, code],
            user=self.user,
            network_disabled=not limits.network,
            read_only=True,
            tmpfs={SCRATCH: scratch_options(limits.disk_mb, limits.max_files)},
            volumes=self._volumes,
            shm_size=limits.disk_mb * 1024 * 1024,
            ipc_mode="private",
            working_dir="/",
            environment={"HOME": WORKDIR, "TMPDIR": WORKDIR, "PYTHONIOENCODING": "utf-8"},
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
            # Not detached: only then is StdinOnce set, so closing our end of the attached
            # stdin gives the program its EOF (detached, input() without a newline hung).
            detach=False,
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
        note = ""
        if timed_out.is_set():
            status = Status.TIMEOUT
        elif oom or exit_code == _MEMORY_EXIT:
            status = Status.MEMORY
        elif exit_code in _QUOTA_EXITS:
            status = Status.OUTPUT_LIMIT
            note = quota_note(_QUOTA_EXITS[exit_code], limits).decode()
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
        stderr += note
        if exit_code in (_DENIED_EXIT, _MEMORY_EXIT, *_QUOTA_EXITS):
            exit_code = 1
        return ExecResult(stdout, stderr, exit_code, status, time.monotonic() - started, 0.0, truncated)

    def close(self) -> None:
        self.client.close()
