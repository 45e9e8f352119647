"""``coa serve-env`` and lone UTF-16 surrogates (JSON's ``"\\ud800"``): an ``episode_id`` holding
one is refused at reset (it was kept, and the session's state replies failed with a 500 from
then on); an action holding one is the env's ``invalid_text`` observation."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")

import httpx

from tests.service.servers import serve

ENV = "coa/AIME24-v1"
JSON = {"content-type": "application/json"}


def test_a_lone_surrogate_episode_id_is_refused_and_the_session_stays_readable():
    with serve([ENV]) as url, httpx.Client(base_url=url, timeout=30) as http:
        sid = http.post("/sessions", json={"env_id": ENV}).json()["session_id"]
        refused = http.post(f"/sessions/{sid}/reset", content=b'{"episode_id": "ep-\\ud800"}', headers=JSON)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "VALIDATION_ERROR"
        assert "episode_id" in refused.json()["error"]["message"]
        assert http.get(f"/sessions/{sid}").status_code == 200
        paired = http.post(f"/sessions/{sid}/reset", content=b'{"episode_id": "ep-\\ud83d\\ude00"}', headers=JSON)
        assert paired.status_code == 200
        state = http.get(f"/sessions/{sid}")
        assert state.status_code == 200 and state.json()["episode_id"] == "ep-\U0001f600"
        step = http.post(f"/sessions/{sid}/step", content=b'{"action": "<answer>\\ud800</answer>"}', headers=JSON)
        assert step.status_code == 200 and "invalid" in step.json()["observation"]["text"]
        assert http.get(f"/sessions/{sid}").status_code == 200
