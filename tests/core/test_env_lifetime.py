"""An env closes what it holds -- tools (a sandbox pool), the mini-web's server -- when it is
garbage-collected and at interpreter exit, so a program that forgets ``env.close()`` neither
leaks servers and workers while it runs nor hangs when it ends. Each case runs in its own
interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_collected_env_stops_its_mini_web_server():
    run = _python("""
        import gc, socket, urllib.parse
        import gymnasium as gym, coa_envs

        env = gym.make("coa/MiniWeb-v0")
        url = env.unwrapped.config.tasks["base_url"]
        host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
        socket.create_connection((host, port), timeout=5).close()  # serving
        del env
        gc.collect()
        try:
            socket.create_connection((host, port), timeout=5).close()
            print("still serving")
        except OSError:
            print("stopped")
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("stopped")


def test_a_program_that_never_closes_its_envs_exits_cleanly():
    run = _python("""
        import gymnasium as gym, coa_envs

        web = gym.make("coa/MiniWeb-v0")
        web.reset(seed=0)
        web.step("<web_search>institute</web_search>")
        math = gym.make("coa/MATH500-v1", tools={"code": {"stateful": True}})
        math.reset(seed=0)
        print(math.step("<code>x = 6 * 7\\nprint(x)</code>")[0].strip())
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "42" in run.stdout and "Traceback" not in run.stderr
