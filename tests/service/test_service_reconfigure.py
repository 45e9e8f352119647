"""A ``coa serve-env`` session asked for other overrides after it opened gets them: a reset
(WebSocket frame, OpenEnv's client, HTTP) or an open frame naming ``overrides`` swaps the
session's env for one of that configuration. They were ignored once the session existed, so
the client believed it played ``max_turns=1`` while the server kept the first configuration.
The idle envs kept for reuse are bounded in all, however many configurations clients name."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import httpx
from websockets.sync.client import connect

import coa_envs  # noqa: F401
from tests.service.servers import serve

ENV = "coa/AIME24-v1"
CODE = "<code>print(6 * 7)</code>"


def _frame(ws, kind: str, data=None) -> dict:
    ws.send(json.dumps({"type": kind} if data is None else {"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=30))


def test_a_websocket_reset_with_new_overrides_applies_them():
    with serve([ENV]) as url, connect(url.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
        assert _frame(ws, "reset", {"seed": 0, "overrides": {"max_turns": 3}})["type"] == "observation"
        assert _frame(ws, "step", {"action": CODE})["data"]["done"] is False
        assert _frame(ws, "reset", {"seed": 0, "overrides": {"max_turns": 1}})["type"] == "observation"
        step = _frame(ws, "step", {"action": CODE})["data"]
        assert step["done"] is True and step["observation"]["truncated"] is True  # one turn, as asked
        assert _frame(ws, "reset", {"seed": 0})["type"] == "observation"  # none named: the session's own
        assert _frame(ws, "step", {"action": CODE})["data"]["done"] is True
        opened = _frame(ws, "open", {"overrides": {"max_turns": 5}})
        assert opened["type"] == "opened" and opened["data"]["max_turns"] == 5
        assert _frame(ws, "state")["data"]["in_episode"] is False  # the swap ended the episode
        refused = _frame(ws, "reset", {"seed": 0, "overrides": {"data_path": "/etc"}})
        assert refused["data"]["code"] == "BAD_OVERRIDE"
        assert _frame(ws, "open", {})["data"]["max_turns"] == 5  # a refused swap keeps the env


def test_a_websocket_open_naming_another_env_is_refused():
    with serve([ENV, "coa/AIME25-v1"]) as url, connect(url.replace("http://", "ws://") + "/ws",
                                                        open_timeout=10) as ws:
        assert _frame(ws, "open", {"env_id": ENV})["type"] == "opened"
        refused = _frame(ws, "open", {"env_id": "coa/AIME25-v1"})
        assert refused["type"] == "error" and refused["data"]["code"] == "VALIDATION_ERROR"
        assert ENV in refused["data"]["message"]


def test_an_http_reset_with_new_overrides_applies_them():
    with serve([ENV]) as url, httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/sessions", json={"env_id": ENV, "overrides": {"max_turns": 3}}).json()["session_id"]
        assert http.post(f"/sessions/{sid}/reset", json={"seed": 0, "overrides": {"max_turns": 1}}).status_code == 200
        step = http.post(f"/sessions/{sid}/step", json={"action": CODE}).json()
        assert step["done"] is True and step["observation"]["truncated"] is True


def test_openenv_client_reset_overrides_reach_the_env():
    openenv = pytest.importorskip("openenv.core", reason="openenv-core is not installed")
    with serve([ENV]) as url, openenv.GenericEnvClient(base_url=url).sync() as client:
        client.reset(seed=0, overrides={"max_turns": 4})
        assert client.step({"action": CODE}).done is False
        client.reset(seed=0, overrides={"max_turns": 1})
        assert client.step({"action": CODE}).done is True


def test_idle_envs_are_bounded_whatever_configurations_clients_name():
    import asyncio

    from coa_envs.service.sessions import SessionManager

    async def churn() -> SessionManager:
        manager = SessionManager([ENV], pool_size=4, pool_total=6)
        for prompt in range(12):  # each its own configuration: one idle env each, before
            session = await manager.open(ENV, {"system_prompt": f"prompt {prompt}"})
            await manager.close(session.session_id)
        return manager

    manager = asyncio.run(churn())
    assert len(manager._pool) == 6
    asyncio.run(manager.shutdown())
    assert len(manager._pool) == 0
