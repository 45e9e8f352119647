"""A served env whose server dies or freezes mid-episode: the client raises a clear error, never hangs.

The server runs in its own process (``coa serve-env --port 0``) so it can be killed or
stopped for real; each test carries a pytest timeout far below the client's own reply
timeout, so a hang fails the test instead of passing slowly.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

from coa_envs.service import RemoteEnv, RemoteEnvError
from tests.service.servers import serve_process

ENV = "coa/AIME24-v1"


@pytest.mark.timeout(120)
def test_killing_the_server_mid_step_raises_connection_lost():
    with serve_process(ENV) as (url, process):
        env = RemoteEnv(url, timeout_s=600)
        env.reset(seed=0)
        assert "3" in env.step("<code>print(1 + 2)</code>")[0]
        outcome: dict[str, BaseException] = {}

        def slow_step() -> None:
            try:
                env.step("<code>import time\ntime.sleep(60)\nprint('late')</code>")
            except BaseException as exc:
                outcome["error"] = exc

        stepping = threading.Thread(target=slow_step)
        stepping.start()
        time.sleep(1.0)  # the step is running inside the server now
        process.kill()
        stepping.join(timeout=60)
        assert not stepping.is_alive(), "the client hung after the server died"
        error = outcome["error"]
        assert isinstance(error, RemoteEnvError) and error.code == "CONNECTION_LOST"
        assert "lost during 'step'" in error.message and "reset" in error.message
        with pytest.raises(RemoteEnvError, match=r"CONNECTION_LOST.*cannot reach"):
            env.reset(seed=0)  # reconnecting says the server is gone
        env.close()


@pytest.mark.timeout(120)
def test_a_frozen_server_gives_a_timeout_error_not_a_hang():
    with serve_process(ENV) as (url, process):
        env = RemoteEnv(url, timeout_s=60.0)
        env.reset(seed=0)
        os.kill(process.pid, signal.SIGSTOP)
        env.timeout_s = 2.0  # only the frozen step is timed this tightly (a loaded machine is slow, not frozen)
        try:
            with pytest.raises(RemoteEnvError) as frozen:
                env.step("<code>print(1)</code>")
            assert frozen.value.code == "TIMEOUT" and "within 2 s" in frozen.value.message
        finally:
            os.kill(process.pid, signal.SIGCONT)
            env.timeout_s = 60.0
        # The late reply is never mistaken for the next one: the socket was dropped.
        env.reset(seed=1)
        observation = env.step("<code>print(40 + 2)</code>")[0]
        assert "42" in observation
        env.close()
