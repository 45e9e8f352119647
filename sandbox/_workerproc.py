"""Parent-side handle of one worker process (used by the pool and by sessions).

The worker speaks JSON frames on its stdin/stdout; see :mod:`sandbox._worker`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox._accounting import worker_home
from sandbox._limits import clean_environment
from sandbox._uids import UidLease
from sandbox._wire import FrameError, read_frame, write_frame
from sandbox.backends.base import BackendUnavailable

__all__ = ["WorkerLost", "WorkerProcess"]

_ROOT = str(Path(__file__).resolve().parents[1])
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from sandbox._worker import main; main()"


class WorkerLost(RuntimeError):
    """The worker died, hung, or answered out of turn; it must be replaced."""


class WorkerProcess:
    """Parent-side handle of one worker process. With ``config["accounting"] == "cgroup"`` it
    makes the worker's cgroup home (removed with the worker); ``uid_lease``: the run uids this
    worker alone uses, given back when it is killed."""

    def __init__(
        self, python: str, config: dict[str, Any], start_timeout_s: float, uid_lease: UidLease | None = None
    ) -> None:
        self.uid_lease = uid_lease
        self.cgroup_home = None
        if config.get("accounting") == "cgroup":
            self.cgroup_home, cgroup = worker_home("session" if config.get("mode") == "session" else "pool")
            config = {**config, "cgroup": cgroup}
        # Unjailed runs work in host directories: below one this handle removes, even when
        # the worker had to be killed before it could clean up.
        self.scratch_root = None if config.get("jail", True) else tempfile.mkdtemp(prefix="coa-sandbox-")
        config = {**config, "scratch_root": self.scratch_root}
        env = clean_environment()  # already the runs': their children need not rebuild it
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-B", "-c", _BOOT, _ROOT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None if os.environ.get("COA_SANDBOX_DEBUG") else subprocess.DEVNULL,
                env=env,
                bufsize=0,
                start_new_session=True,  # a terminal's Ctrl-C goes to the caller, not the jail
            )
        except OSError as exc:
            self._release()
            raise BackendUnavailable(f"sandbox worker did not start: {exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self.config = config
        try:
            write_frame(self._in, config)
            hello = read_frame(self._out, time.monotonic() + start_timeout_s)
        except (OSError, FrameError) as exc:
            self.kill()  # (removes the scratch root too)
            raise BackendUnavailable(f"sandbox worker did not start: {exc}") from exc
        if not hello.get("ready"):
            self.kill()
            raise BackendUnavailable(f"sandbox worker cannot jail runs: {hello.get('error')}")
        self.isolation: list[str] = hello["isolation"]
        self.notes: list[str] = hello.get("notes", [])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            write_frame(self._in, request)
            response = read_frame(self._out, time.monotonic() + timeout_s)
        except (OSError, FrameError) as exc:
            raise WorkerLost(str(exc)) from exc
        if response.get("id") != request["id"]:
            raise WorkerLost(f"answer for request {response.get('id')}, not {request['id']}")
        if "internal_error" in response:
            raise WorkerLost(response["internal_error"])
        return response

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._release()

    def _release(self) -> None:
        """Remove what this worker held: its scratch root, its cgroups (killing any process
        still in them), its uids."""
        if self.scratch_root is not None:
            shutil.rmtree(self.scratch_root, ignore_errors=True)
        home, self.cgroup_home = self.cgroup_home, None
        if home is not None:
            with contextlib.suppress(OSError):
                home.remove_tree()
        lease, self.uid_lease = self.uid_lease, None
        if lease is not None:
            lease.release()

    def stop(self) -> None:
        """Ask politely (EOF on its request pipe), then kill."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        self.kill()
