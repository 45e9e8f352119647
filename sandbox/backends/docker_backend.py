"""Docker backend: one throw-away container per run, through the ``docker`` Python SDK.

For hosts where a Docker daemon is the accepted isolation boundary. The container's root is
the image's (not the host's), read-only; ``/tmp`` is a tmpfs with the run's byte and inode
quotas (``Limits.disk_mb``, ``Limits.max_files``) and holds the workdir; granted host paths are
volumes; no network unless ``Limits.network``, a private IPC namespace, no capabilities,
``no-new-privileges``, an unprivileged user, and memory/pids/CPU limits enforced by the daemon;
our wall-clock watchdog kills it. The code runs as PID 2 below an init of ours (see
:mod:`sandbox._container_boot`), whose last line on stderr says how it ended and what CPU the run
used. Needs ``pip install docker``, a reachable daemon and the image
(``COA_SANDBOX_DOCKER_IMAGE``, default ``python:3.11-slim``); otherwise the constructor raises
:class:`BackendUnavailable` (tests skip with that reason).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from sandbox._cgroup import RunUsage
from sandbox._collect import Collected, RunEnd, hard_output_cap, outcome
from sandbox._container_boot import DENIED_EXIT, END_LINE, FIRST_QUOTA_EXIT, MEMORY_EXIT, boot_program
from sandbox._harness import QUOTA_TAGS, STATUS_DENIED, STATUS_MEMORY
from sandbox._lockdown import SCRATCH, SHM_DIR, WORKDIR, scratch_options
from sandbox._root import Grants
from sandbox.backends.base import BackendUnavailable, refuse_unsendable, refuse_unsupported
from sandbox.types import ExecResult, Limits, Status

__all__ = ["DockerBackend", "judge_container", "read_end_line"]

_SANDBOX_DIR = Path(__file__).resolve().parent.parent
#: The image has no copy of our harness, so it travels in the command line (the code is argv[1]):
#: the code runs as PID 2 below an init that writes the run's end line (see _container_boot).
_BOOT = boot_program(
    (_SANDBOX_DIR / "_harness.py").read_text(encoding="utf-8"),
    (_SANDBOX_DIR / "_lockdown.py").read_text(encoding="utf-8"),
    WORKDIR,
    SHM_DIR,
)
_DENIED_EXIT, _MEMORY_EXIT = DENIED_EXIT, MEMORY_EXIT
#: Exit codes standing for the quota tags (disk, files, file size), in QUOTA_TAGS' order: without
#: an end line (an image run with an init of its own) the code's process reports tags this way.
_QUOTA_EXITS = {FIRST_QUOTA_EXIT + index: tag for index, tag in enumerate(QUOTA_TAGS)}


def read_end_line(stderr: bytes) -> tuple[bytes, dict | None]:
    """(stderr without it, the init's end line) when stderr ends with one, else (stderr, None).

    Only a line that ends stderr is the init's: it writes it once every process of the run is
    gone. A look-alike the code wrote anywhere else is left in the output as text.
    """
    at = stderr.rfind(END_LINE)
    if at < 0 or not stderr.endswith(b"\n"):
        return stderr, None
    try:
        line = json.loads(stderr[at + len(END_LINE) : -1])
        how = -int(line["signal"]) if "signal" in line else int(line["exit"])
        cpu_s, tags = float(line["cpu_s"]), str(line["tags"]).encode("latin-1")
    except (ValueError, KeyError, TypeError, UnicodeEncodeError):
        return stderr, None
    if not (-64 <= how <= 255 and math.isfinite(cpu_s) and cpu_s >= 0):
        return stderr, None
    return stderr[:at], {"returncode": how, "cpu_s": cpu_s, "tags": tags}


def judge_container(
    stdout: bytes, stderr: bytes, status_code: int, limits: Limits, *, timed_out: bool = False, oom: bool = False
) -> dict[str, Any]:
    """A finished container's result fields (as :func:`sandbox._collect.outcome` gives every
    backend's): from the init's end line when stderr ends with one, else from the exit status
    alone (128 + N: signal N; the reserved statuses: the harness's tags)."""
    stderr, end = read_end_line(stderr)
    if timed_out:  # we killed it, init and all: a line ending stderr may be the code's (a run we killed
        end = None  # is reported by how it was killed, never by a record it could have written)
    cap = hard_output_cap(limits)
    collected = Collected(stdout=stdout[:cap], stderr=stderr[:cap], wall_killed=timed_out,
                          output_killed=len(stdout) + len(stderr) > cap)  # fmt: skip
    if end is not None:  # the init counted every process of the run: a figure like a cgroup's
        collected.tags = end["tags"] + (STATUS_MEMORY if oom else b"")
        usage = RunUsage(cpu_s=end["cpu_s"], oom_kills=int(oom))
        return outcome(RunEnd(collected, end["returncode"], end["cpu_s"], usage), limits)
    returncode, tags = status_code, b""
    if status_code in (_DENIED_EXIT, _MEMORY_EXIT, *_QUOTA_EXITS):
        tags = {_DENIED_EXIT: STATUS_DENIED, _MEMORY_EXIT: STATUS_MEMORY}.get(status_code) or _QUOTA_EXITS[status_code]
        returncode = 1
    elif 128 < status_code <= 128 + 64:
        returncode = 128 - status_code  # PID 1 died of signal N (Docker reports 128 + N)
    collected.tags = tags + (STATUS_MEMORY if oom else b"")
    return outcome(RunEnd(collected, returncode, 0.0, cpu_known=False), limits)


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
            pids_limit=limits.max_processes + 1,  # the init is one more process, not the code's
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
        stdout = container.logs(stdout=True, stderr=False)
        stderr = container.logs(stdout=False, stderr=True)
        container.reload()
        oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        fields = judge_container(stdout, stderr, int(state.get("StatusCode", -1)), limits,
                                 timed_out=timed_out.is_set(), oom=oom)  # fmt: skip
        return ExecResult(**{**fields, "status": Status(fields["status"]), "wall_s": time.monotonic() - started})

    def close(self) -> None:
        self.client.close()
