"""The gateway keeps finished sessions' envs for reuse within a bound: sessions opened with
distinct client overrides (any ``system_prompt`` makes a new configuration) each left an idle
env in the pool for the gateway's lifetime, so a client could grow it without end. Past the
bound the least recently returned envs are closed."""

from __future__ import annotations

import coa_envs  # noqa: F401
from agents.gateway.core import Gateway

ENV = "coa/SynthHop-v1"


def _churn(gateway: Gateway, configurations: int) -> list:
    envs = []
    for n in range(configurations):
        session = gateway.open_session(session_id=f"s{n}", env_id=ENV, task_index=0,
                                       env_kwargs={"system_prompt": f"prompt {n}"})
        envs.append(session.task.env)
        gateway.finish(session, answer="x")
    return envs


def test_idle_envs_of_distinct_configurations_are_bounded_and_the_evicted_closed(monkeypatch):
    from coa_envs.service import envpool

    closed: list = []
    monkeypatch.setattr(envpool, "close_env", lambda env: (closed.append(env), env.close()))
    gateway = Gateway(None, env_pool_size=3)
    envs = _churn(gateway, 8)
    assert len(gateway._env_pool) == 3
    assert closed == envs[:5]  # the least recently returned went
    again = gateway.open_session(session_id="again", env_id=ENV, env_kwargs={"system_prompt": "prompt 7"})
    assert again.task.env is envs[-1]  # a kept configuration is reused
    gateway.close()
    assert closed == envs[:7]  # the idle ones; the live session's env is its own


def test_one_configuration_reuses_its_env():
    gateway = Gateway(None, env_pool_size=3)
    first = gateway.open_session(session_id="a", env_id=ENV, task_index=0)
    gateway.finish(first, answer="x")
    second = gateway.open_session(session_id="b", env_id=ENV, task_index=1)
    assert second.task.env is first.task.env
    gateway.close()
