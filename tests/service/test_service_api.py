"""``coa serve-env``'s HTTP and WebSocket API: sessions, every refusal the issue lists (with its
status and reason), and that a refused request leaves the server serving everyone else."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import httpx
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import coa_envs  # noqa: F401
from coa_cli.main import app as cli
from tests.service.servers import serve

ENV = "coa/AIME24-v1"


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code, body
    return body["error"]["message"]


def _ws(url: str, path: str = "/ws", token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return connect(url.replace("http://", "ws://") + path, additional_headers=headers, open_timeout=10)


def _frame(ws, kind: str, data=None) -> dict:
    ws.send(json.dumps({"type": kind} if data is None else {"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=30))


def test_http_session_plays_an_episode_and_refuses_a_step_after_it_ends():
    with serve([ENV]) as url, httpx.Client(base_url=url, timeout=30) as http:
        opened = http.post("/sessions", json={"env_id": ENV, "overrides": {"max_turns": 3}})
        assert opened.status_code == 201
        session = opened.json()
        assert session["env_id"] == ENV and session["max_turns"] == 3 and session["tools"] == ["code"]
        sid = session["session_id"]
        reset = http.post(f"/sessions/{sid}/reset", json={"seed": 0, "task_index": 4}).json()
        assert reset["done"] is False and reset["reward"] is None
        assert reset["observation"]["info"]["task_id"] == "aime24-4"
        step = http.post(f"/sessions/{sid}/step", json={"action": "<code>print(6 * 7)</code>"}).json()
        assert "42" in step["observation"]["text"] and step["done"] is False
        assert step["observation"]["info"]["tool"] in ("code", ["code"])
        final = http.post(f"/sessions/{sid}/step", json={"action": "<answer>0</answer>"}).json()
        assert final["done"] is True and final["observation"]["terminated"] is True and final["reward"] == 0.0
        message = _error(http.post(f"/sessions/{sid}/step", json={"action": "<answer>1</answer>"}), 409,
                         "EPISODE_DONE")
        assert "reset" in message
        state = http.get(f"/sessions/{sid}").json()
        assert state["step_count"] == 2 and state["task_id"] == "aime24-4" and state["done"] is True
        tasks = http.get(f"/sessions/{sid}/tasks").json()
        assert len(tasks["tasks"]) == 30 and "gold" not in tasks["tasks"][0]  # answers stay on the server
        assert http.delete(f"/sessions/{sid}").json()["closed"] is True
        assert "closed" in _error(http.get(f"/sessions/{sid}"), 404, "UNKNOWN_SESSION")


def test_http_bad_input_gets_a_status_and_a_reason_and_the_server_goes_on():
    with serve([ENV], max_request_bytes=4096) as url, httpx.Client(base_url=url, timeout=30) as http:
        _error(http.post("/sessions", content=b"{not json"), 400, "INVALID_JSON")
        _error(http.post("/sessions", json=[1, 2]), 422, "VALIDATION_ERROR")
        assert "coa/Nope-v0" in _error(http.post("/sessions", json={"env_id": "coa/Nope-v0"}), 404, "UNKNOWN_ENV")
        assert "max_turns" in _error(http.post("/sessions", json={"overrides": {"max_turns": 0}}), 422,
                                     "BAD_OVERRIDE")
        refused = _error(http.post("/sessions", json={"overrides": {"data_path": "/etc"}}), 422, "BAD_OVERRIDE")
        assert "data_path" in refused and "max_turns" in refused  # says what is allowed
        _error(http.post("/sessions", json={"overrides": {"task_options": {"path": "/etc/passwd"}}}), 422,
               "BAD_OVERRIDE")
        _error(http.post("/sessions/s-nope/reset", json={}), 404, "UNKNOWN_SESSION")
        sid = http.post("/sessions", json={}).json()["session_id"]
        _error(http.post(f"/sessions/{sid}/step", json={"action": "<answer>1</answer>"}), 409, "NO_EPISODE")
        _error(http.post(f"/sessions/{sid}/reset", json={"sed": 1}), 422, "VALIDATION_ERROR")
        _error(http.post(f"/sessions/{sid}/reset", json={"seed": -1}), 422, "VALIDATION_ERROR")
        assert "aime24-999" in _error(http.post(f"/sessions/{sid}/reset", json={"task_id": "aime24-999"}), 422,
                                      "VALIDATION_ERROR")
        http.post(f"/sessions/{sid}/reset", json={"seed": 1})
        _error(http.post(f"/sessions/{sid}/step", json={"action": 7}), 422, "VALIDATION_ERROR")
        _error(http.post(f"/sessions/{sid}/step", json={}), 422, "VALIDATION_ERROR")
        too_big = {"action": "<code>print(1)</code>" + " " * 5000}
        assert "4096" in _error(http.post(f"/sessions/{sid}/step", json=too_big), 413, "TOO_LARGE")
        # A malformed turn inside the limit is the model's problem: a corrective observation.
        corrected = http.post(f"/sessions/{sid}/step", json={"action": "<code>print(1)"}).json()
        assert corrected["observation"]["info"]["error_kind"] == "bad_action"
        assert "never closed" in corrected["observation"]["text"]
        # ... and none of it stopped the server: a fresh session still plays.
        other = http.post("/sessions", json={}).json()["session_id"]
        assert http.post(f"/sessions/{other}/reset", json={"seed": 2}).status_code == 200


def test_capacity_cap_refuses_with_429_and_frees_on_close():
    with serve([ENV], max_sessions=2) as url, httpx.Client(base_url=url, timeout=30) as http:
        first = http.post("/sessions", json={}).json()["session_id"]
        http.post("/sessions", json={})
        refused = http.post("/sessions", json={})
        assert "2 concurrent sessions" in _error(refused, 429, "CAPACITY_REACHED")
        assert refused.headers["retry-after"] == "1"
        with _ws(url) as ws:
            assert _frame(ws, "reset", {"seed": 0})["data"]["code"] == "CAPACITY_REACHED"
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
        http.delete(f"/sessions/{first}")
        assert http.post("/sessions", json={}).status_code == 201


def test_bearer_token_is_required_everywhere_when_set():
    from coa_envs.service import RemoteEnv, RemoteEnvError

    with serve([ENV], token="s3cret") as url, httpx.Client(base_url=url, timeout=30) as http:
        _error(http.post("/sessions", json={}), 401, "UNAUTHORIZED")
        _error(http.post("/sessions", json={}, headers={"Authorization": "Bearer wrong"}), 401, "UNAUTHORIZED")
        _error(http.get("/envs"), 401, "UNAUTHORIZED")
        assert http.post("/sessions", json={}, headers={"Authorization": "Bearer s3cret"}).status_code == 201
        with _ws(url) as ws:
            assert _frame(ws, "reset", {})["data"]["code"] == "UNAUTHORIZED"
        with pytest.raises(RemoteEnvError, match="UNAUTHORIZED"):
            RemoteEnv(url, token="wrong")
        env = RemoteEnv(url, token="s3cret")
        assert env.reset(seed=0)[1]["task_id"].startswith("aime24-")
        env.close()


def test_idle_sessions_expire_with_a_reason():
    from coa_envs.service import RemoteEnv, RemoteEnvError

    with serve([ENV], idle_timeout_s=0.3) as url, httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        env = RemoteEnv(url)
        env.reset(seed=0)
        deadline = time.monotonic() + 20
        while http.get("/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "without a request" in _error(http.post(f"/sessions/{sid}/reset", json={}), 404, "UNKNOWN_SESSION")
        with pytest.raises(RemoteEnvError) as lost:
            env.step("<answer>1</answer>")
        assert lost.value.code in ("UNKNOWN_SESSION", "CONNECTION_LOST")
        assert env.reset(seed=0)[1]["task_id"].startswith("aime24-")  # a new session
        env.close()


def test_websocket_bad_frames_get_errors_and_the_session_goes_on():
    with serve([ENV], max_request_bytes=4096) as url:
        with _ws(url) as ws:
            ws.send("{oops")
            assert json.loads(ws.recv(timeout=10))["data"]["code"] == "INVALID_JSON"
            assert _frame(ws, "teleport")["data"]["code"] == "UNKNOWN_TYPE"
            assert _frame(ws, "step", {"action": "<answer>1</answer>"})["data"]["code"] == "NO_EPISODE"
            assert _frame(ws, "reset", {"seed": 0, "bogus": 1})["data"]["code"] == "VALIDATION_ERROR"
            state = _frame(ws, "state")["data"]
            assert state["step_count"] == 0 and state["in_episode"] is False
            reset = _frame(ws, "reset", {"seed": 0, "task_index": 2})
            assert reset["type"] == "observation" and reset["data"]["observation"]["info"]["task_id"] == "aime24-2"
            big = _frame(ws, "step", {"action": "x" * 6000})
            assert big["data"]["code"] == "TOO_LARGE"
            step = _frame(ws, "step", {"action": "<code>print(2 + 2)</code>"})
            assert "4" in step["data"]["observation"]["text"]
            state = _frame(ws, "state")["data"]
            assert state["step_count"] == 1 and state["task_id"] == "aime24-2"
        with _ws(url) as ws:  # beyond twice the limit the frame is not even read: 1009
            _frame(ws, "reset", {"seed": 0})
            ws.send(json.dumps({"type": "step", "data": {"action": "x" * 20000}}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1009
        with _ws(url, f"/envs/{ENV}/ws") as ws:  # the server kept serving
            assert _frame(ws, "reset", {"seed": 3})["type"] == "observation"
        with _ws(url, "/envs/coa/Nope-v0/ws") as ws:
            assert _frame(ws, "reset", {})["data"]["code"] == "UNKNOWN_ENV"


def test_discovery_endpoints():
    with serve([ENV, "coa/AMC23-v1"]) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/health").json()["status"] == "healthy"
        assert [e["id"] for e in http.get("/envs").json()["envs"]] == [ENV, "coa/AMC23-v1"]
        assert ENV in http.get("/metadata").json()["description"]
        assert http.get("/schema").json()["action"]["required"] == ["action"]
        # Two ids served: a session must say which.
        assert "name one" in _error(http.post("/sessions", json={}), 422, "VALIDATION_ERROR")
        assert http.post("/sessions", json={"env_id": "coa/AMC23-v1"}).json()["num_tasks"] == 40


def test_cli_refuses_a_bad_set_or_id_before_serving():
    runner = CliRunner()
    bad = runner.invoke(cli, ["serve-env", ENV, "--set", "max_turns=0", "--port", "0"])
    assert bad.exit_code == 2 and "max_turns" in bad.output
    unknown = runner.invoke(cli, ["serve-env", "coa/Nope-v0", "--port", "0"])
    assert unknown.exit_code == 2 and "coa/Nope-v0" in unknown.output
    malformed = runner.invoke(cli, ["serve-env", ENV, "--set", "max_turns", "--port", "0"])
    assert malformed.exit_code == 2 and "KEY=VALUE" in malformed.output
