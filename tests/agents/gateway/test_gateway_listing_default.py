"""A gateway started without an admin token lists no sessions: any process that can reach it
(on a loopback bind, every local one, a code-running agent's included) could otherwise read
every live session id, and with an id it can read that session's outcome or finish it."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(scope="module")
def engine(tiny_model, tiny_tokenizer):
    from agents.engines.hf import HFEngine

    return HFEngine(tiny_model, tiny_tokenizer)


def test_without_an_admin_token_listing_sessions_is_refused(engine, tiny_tokenizer):
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.local import LocalBackend
    from coa_envs.service.running import serve_in_thread

    gateway = Gateway(LocalBackend(engine, tiny_tokenizer), "tiny")
    with serve_in_thread(create_gateway_app(gateway)) as url:
        mine = httpx.post(f"{url}/sessions", json={}).json()["session_id"]
        sibling = httpx.post(f"{url}/sessions", json={}).json()["session_id"]
        for headers in ({}, {"Authorization": "Bearer anything"}):
            refused = httpx.get(f"{url}/sessions", headers=headers)
            assert refused.status_code == 403 and sibling not in refused.text, refused.text
            assert refused.json()["error"]["code"] == "listing_disabled"
        assert httpx.get(f"{url}/sessions/{mine}").json()["session_id"] == mine
        assert httpx.get(f"{url}/health").json()["sessions"] == 2
