"""A ``coa/Remote-v0`` env closes its session when garbage-collected and at interpreter exit,
without hanging: a program that used it and exited without ``env.close()`` never exited
(``RemoteEnv.__del__`` joined the WebSocket's reader thread during interpreter shutdown).
The client runs in its own interpreter, since the bug needs one to exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

ROOT = Path(__file__).resolve().parents[2]
ENV = "coa/MATH500-v1"


@pytest.fixture
def served():
    from coa_envs.service.app import create_app
    from coa_envs.service.running import serve_in_thread
    from coa_envs.service.sessions import SessionManager

    manager = SessionManager([ENV])
    with serve_in_thread(create_app(manager)) as url:
        yield url, manager


def _client(url: str, body: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import gymnasium as gym, coa_envs
        env = gym.make("coa/Remote-v0", base_url={url!r}, env_id={ENV!r})
        env.reset(seed=0)
        print("reset", flush=True)
    """) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _wait_for(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_program_that_never_closes_its_remote_env_exits(served):
    url, manager = served
    client = _client(url, "")  # the script ends with the env still open
    try:
        out, err = client.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        client.kill()
        pytest.fail("the client hung at interpreter exit")
    assert client.returncode == 0, err[-2000:]
    assert "reset" in out
    assert _wait_for(lambda: not manager.sessions)  # and the server was told the session is over


def test_garbage_collection_closes_the_session(served):
    url, manager = served
    client = _client(url, """
        import gc, sys
        del env
        gc.collect()
        print("collected", flush=True)
        sys.stdin.readline()  # stay alive while the test looks at the server
    """)
    try:
        assert client.stdout.readline().strip() == "reset"
        assert client.stdout.readline().strip() == "collected"
        assert _wait_for(lambda: not manager.sessions), "the collected env's session is still open"
    finally:
        client.communicate(input="\n", timeout=60)
    assert client.returncode == 0
