"""Our MCP client backend (:mod:`coa_envs.mcp.client`) against our own MCP server: tools of a
remote server run as env tools, and every failure is a ToolResult with a reason, never a raise."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")

from coa_envs.mcp.client import MCPConnection, MCPTool
from coa_envs.mcp.server import ToolHost, create_server, http_app
from coa_envs.protocols.tools import function_definition
from coa_envs.service.running import serve_in_thread
from coa_envs.types import ErrorKind, ToolContext

ROOT = Path(__file__).resolve().parents[2]
CTX = ToolContext()


def _tool(connection: MCPConnection, name: str, local: str | None = None) -> MCPTool:
    definition = next(d for d in connection.list_tools() if d["name"] == name)
    return MCPTool(connection, name, {**definition, "name": local or name})


def test_http_server_tools_run_through_the_client_backend(monkeypatch):
    host = ToolHost({"code": {}}, timeout_s=30)
    monkeypatch.setenv("COA_TEST_MCP_TOKEN", "s3cret")
    try:
        with serve_in_thread(http_app(create_server(host), token="s3cret")) as url:
            connection = MCPConnection("ours", {"url": f"{url}/mcp", "token_env": "COA_TEST_MCP_TOKEN",
                                                "timeout_s": 2})
            try:
                assert connection.list_tools() == [function_definition("code")]
                tool = _tool(connection, "code", "remote_code")
                result = tool.run("print(40 + 2)", CTX)
                assert result.ok and result.text == "42" and result.details["mcp_server"] == "ours"
                assert result.details["status"] == "ok"  # the server's details travel in _meta
                failed = tool.run("raise ValueError('boom')", CTX)
                assert not failed.ok and failed.error_kind is ErrorKind.TOOL_ERROR and "boom" in failed.text
                slow = tool.run("import time\ntime.sleep(20)", CTX)
                assert slow.error_kind is ErrorKind.TOOL_TIMEOUT and "within 2 s" in slow.text
                assert tool.run("print('after a timeout')", CTX).text == "after a timeout"
            finally:
                connection.close()
            intruder = MCPConnection("ours", {"url": f"{url}/mcp", "connect_timeout_s": 10})
            with pytest.raises(ConnectionError, match="could not be reached"):
                intruder.list_tools()  # no token
            intruder.close()
    finally:
        host.close()


def test_stdio_server_is_spawned_and_closed():
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    connection = MCPConnection("spawned", {"command": [sys.executable, "-m", "coa_cli.main", "mcp", "serve",
                                                       "--tools", "code"], "env": env, "cwd": str(ROOT)})
    try:
        tool = _tool(connection, "code")
        assert tool.run("print(sum(range(5)))", CTX).text == "10"
    finally:
        connection.close()


def test_unreachable_server_and_bad_config_are_clear():
    gone = MCPConnection("gone", {"url": "http://127.0.0.1:9/mcp", "connect_timeout_s": 5})
    definition = {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                   "required": ["q"]}}
    result = MCPTool(gone, "lookup", definition).run("anything", CTX)
    assert not result.ok and result.error_kind is ErrorKind.TOOL_ERROR and "unreachable" in result.text
    gone.close()
    with pytest.raises(ValueError, match="exactly one of url"):
        MCPConnection("both", {"url": "http://x/mcp", "command": ["x"]})
    with pytest.raises(ValueError, match="unknown key"):
        MCPConnection("typo", {"url": "http://x/mcp", "timeout": 3})
    with pytest.raises(ValueError, match="non-empty list"):
        MCPConnection("str", {"command": "coa mcp serve"})


def test_arguments_that_fail_a_remote_schema_never_reach_the_server():
    definition = {"name": "add", "parameters": {"type": "object", "required": ["a", "b"],
                                                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}
    never = MCPConnection("never", {"url": "http://127.0.0.1:9/mcp"})
    tool = MCPTool(never, "add", definition)
    for query, reason in (('{"a": 1}', "'b' is a required property"), ('{"a": 1, "b": "two"}', "is not of type"),
                          ("a=1", "JSON object"), ("[1, 2]", "JSON object")):
        result = tool.run(query, CTX)
        assert result.error_kind is ErrorKind.BAD_ACTION and reason in result.text, result.text
    never.close()
