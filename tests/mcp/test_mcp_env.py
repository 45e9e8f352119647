"""An env using the tools of an external MCP server (``mcp_servers:``), tested against our own
MCP server: the remote tools join the env's tools in both protocols, failures are observations."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")

import gymnasium as gym

import coa_envs  # noqa: F401
from coa_envs.mcp.server import ToolHost, create_server, http_app
from coa_envs.service.running import serve_in_thread


@pytest.fixture(scope="module")
def mcp_url():
    # The tools' own time limit is generous: a first search builds its index, which takes seconds on a
    # loaded machine (2 s made the search test flaky); a failing tool still fails the tests below.
    host = ToolHost.from_env("coa/MiniWeb-v0", timeout_s=60)
    try:
        with serve_in_thread(http_app(create_server(host))) as url:
            yield f"{url}/mcp"
    finally:
        host.close()


def test_tag_protocol_env_calls_remote_tools(mcp_url):
    env = gym.make("coa/AIME24-v1", mcp_servers={"web": {"url": mcp_url, "prefix": "remote_"}})
    _, info = env.reset(seed=0)
    assert info["tools"][0] == "code" and sorted(info["tools"][1:]) == ["remote_crawl_page", "remote_web_search"]
    assert "<remote_web_search>query</remote_web_search>" in info["messages"][0]["content"]
    observation, _, _, _, step = env.step("<remote_web_search>Belcourt Institute annual symposium events"
                                          "</remote_web_search>")
    assert step["error_kind"] is None, observation  # the observation says why the call failed
    assert "/events/index.html" in observation and step["tool"] == ["remote_web_search"]
    assert step["tool_result_details"][0]["mcp_server"] == "web"
    observation, _, _, _, step = env.step("<remote_crawl_page>http://169.254.169.254/x</remote_crawl_page>")
    assert step["error_kind"] is not None  # refused by the server-side tool, reported, not raised
    observation, _, _, _, step = env.step("<code>print(2 + 2)</code>")  # the env's own tools still work
    assert "4" in observation
    env.close()


def test_tools_protocol_env_sends_remote_schemas_and_validates_arguments(mcp_url):
    env = gym.make("coa/AIME24-v1", protocol="tools", max_turns=10,
                   mcp_servers={"web": {"url": mcp_url, "tools": ["web_search"], "prefix": "remote_"}})
    _, info = env.reset(seed=0)
    names = [t["function"]["name"] for t in info["tool_schemas"]]
    assert names == ["code", "remote_web_search"]
    call = {"role": "assistant", "tool_calls": [{"id": "s", "type": "function", "function": {
        "name": "remote_web_search", "arguments": json.dumps({"query": "Belcourt symposium"})}}]}
    (message,) = json.loads(env.step(call)[0])
    assert message["tool_call_id"] == "s" and "Belcourt" in message["content"]
    call["tool_calls"][0]["function"]["arguments"] = json.dumps({"q": "x"})
    (message,) = json.loads(env.step(call)[0])
    assert "unexpected argument" in message["content"]
    env.close()


def test_bad_mcp_config_and_unreachable_server_are_clear(mcp_url):
    with pytest.raises(ValueError, match="exactly one of url"):
        gym.make("coa/AIME24-v1", mcp_servers={"x": {}})
    with pytest.raises(ValueError, match="unknown key"):
        gym.make("coa/AIME24-v1", mcp_servers={"x": {"url": mcp_url, "timout_s": 1}})
    clash = gym.make("coa/MiniWeb-v0", mcp_servers={"web": {"url": mcp_url}})
    with pytest.raises(ValueError, match=r"'web_search' is taken; set mcp_servers\.web\.prefix"):
        clash.reset(seed=0)
    clash.close()
    gone = gym.make("coa/AIME24-v1", mcp_servers={"gone": {"url": "http://127.0.0.1:9/mcp", "connect_timeout_s": 5}})
    with pytest.raises(ConnectionError, match=r"MCP server 'gone'.*could not be reached"):
        gone.reset(seed=0)
    gone.close()
