"""``coa serve-env`` answers JSON nested past the parser's recursion limit, and a task_id that
is no string, with a JSON error naming the problem: they were a bare 500 (``RecursionError``,
``unhashable type``), and on a WebSocket the deep frame dropped the connection and its
session, the episode in it lost."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import httpx
from websockets.sync.client import connect

from tests.service.servers import serve

ENV = "coa/AIME24-v1"
DEEP = "[" * 100_000 + "]" * 100_000  # 200 kB, under the body limit


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code, body
    return body["error"]["message"]


def test_deeply_nested_json_is_invalid_json_over_http_and_the_session_goes_on():
    with serve([ENV]) as url, httpx.Client(base_url=url, timeout=60) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        assert http.post(f"/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
        for path in ("/sessions", f"/sessions/{sid}/reset", f"/sessions/{sid}/step"):
            message = _error(http.post(path, content=('{"action": ' + DEEP + "}").encode()), 400, "INVALID_JSON")
            assert "nested too deeply" in message
        step = http.post(f"/sessions/{sid}/step", json={"action": "<answer>0</answer>"}).json()
        assert step["done"] is True


def test_deeply_nested_json_frame_keeps_the_websocket_and_its_episode():
    with serve([ENV]) as url, connect(url.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "task_index": 3}}))
        assert json.loads(ws.recv(timeout=30))["data"]["observation"]["info"]["task_id"] == "aime24-3"
        ws.send('{"type": "step", "data": {"action": ' + DEEP + "}}")
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and error["data"]["code"] == "INVALID_JSON", error
        ws.send(json.dumps({"type": "state"}))
        state = json.loads(ws.recv(timeout=30))["data"]
        assert state["task_id"] == "aime24-3" and state["in_episode"] is True


@pytest.mark.parametrize("data", [{"task_id": ["aime24-1"]}, {"task_id": {"a": 1}}, {"options": {"task_id": 3}}])
def test_a_task_id_that_is_not_a_string_is_a_validation_error(data):
    with serve([ENV]) as url, httpx.Client(base_url=url, timeout=60) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        assert "task_id" in _error(http.post(f"/sessions/{sid}/reset", json=data), 422, "VALIDATION_ERROR")


def test_binary_frames_are_read_as_json_or_refused_and_the_episode_goes_on():
    """A binary frame was a KeyError in the server: the connection dropped and its session
    (the episode in it) was closed."""
    with serve([ENV]) as url, connect(url.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "task_index": 5}}).encode())  # JSON as bytes
        assert json.loads(ws.recv(timeout=30))["data"]["observation"]["info"]["task_id"] == "aime24-5"
        ws.send(b"\xff\xfe not utf-8")
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and error["data"]["code"] == "INVALID_JSON", error
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["data"]["task_id"] == "aime24-5"
