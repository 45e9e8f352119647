"""Servers for the service tests: ``coa serve-env`` in a thread (API tests) or in its own
process (load and kill tests, where the client must not share the server's interpreter)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serve(env_ids: list[str], *, token: str | None = None, max_request_bytes: int = 1 << 20,
          **manager_options: Any) -> Iterator[str]:
    """``coa serve-env`` in a background thread; yields its base URL."""
    from coa_envs.service.app import create_app
    from coa_envs.service.running import serve_in_thread
    from coa_envs.service.sessions import SessionManager

    manager = SessionManager(env_ids, **manager_options)
    app = create_app(manager, token=token, max_request_bytes=max_request_bytes)
    with serve_in_thread(app) as url:
        yield url


@contextlib.contextmanager
def serve_process(*args: str, timeout_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``coa serve-env ARGS --port 0`` as a child process; yields (base URL, process)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "coa_cli.main", "serve-env", *args, "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        deadline, seen = time.monotonic() + timeout_s, []
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"coa serve-env exited: {''.join(seen)}")
            seen.append(line)
            match = re.search(r"at (http://\S+) ", line)
            if match:
                yield match.group(1), process
                break
        else:
            raise RuntimeError(f"coa serve-env did not start in {timeout_s} s: {''.join(seen)}")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
