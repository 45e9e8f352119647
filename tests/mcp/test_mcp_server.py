"""``coa mcp serve`` driven by the real ``mcp`` client SDK, over stdio (a spawned server) and
streamable HTTP: the listing is our function definitions, calls run the real tools, and
bad arguments, unknown tools, tool errors and timeouts come back as errors with reasons."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra")

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from coa_envs.mcp.server import META_KEY, ToolHost, create_server, http_app
from coa_envs.protocols.tools import function_definition
from coa_envs.service.running import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]


def _stdio(*args: str) -> StdioServerParameters:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return StdioServerParameters(command=sys.executable, args=["-m", "coa_cli.main", "mcp", "serve", *args],
                                 env=env, cwd=str(ROOT))


def test_stdio_server_lists_our_definitions_and_runs_the_sandbox(tmp_path):
    (tmp_path / "notes.csv").write_text("city,population\nBrackenridge,48213\n")
    (tmp_path / "other.txt").write_text("nothing to see")

    async def session() -> None:
        params = _stdio("--tools", "code,wiki_search,visual_inspector", "--tool-config",
                        "visual_inspector={backend: files}", "--tool-config", "code={wall_s: 60, cpu_s: 60}",
                        "--files-root", str(tmp_path), "--timeout", "10")  # the server's limit stops the sleep
        async with Client(stdio_client(params)) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert sorted(listed) == ["code", "visual_inspector", "wiki_search"]
            for name, tool in listed.items():
                definition = function_definition(name)
                assert tool.description == definition["description"]
                assert tool.input_schema == definition["parameters"]

            ran = await client.call_tool("code", {"code": "print(6 * 7)"})
            assert not ran.is_error and ran.content[0].text == "42"
            assert ran.meta[META_KEY]["details"]["status"] == "ok"

            crashed = await client.call_tool("code", {"code": "1 / 0"})
            assert crashed.is_error and "ZeroDivisionError" in crashed.content[0].text
            assert crashed.meta[META_KEY]["error_kind"] == "tool_error"

            wrong = await client.call_tool("code", {"query": "print(1)"})
            assert wrong.is_error and "takes only 'code'" in wrong.content[0].text
            assert wrong.meta[META_KEY]["error_kind"] == "bad_action"
            typed = await client.call_tool("code", {"code": 7})
            assert typed.is_error and "as a string" in typed.content[0].text

            slow = await client.call_tool("code", {"code": "import time\ntime.sleep(60)"})
            assert slow.is_error and "did not finish within 10 s" in slow.content[0].text
            assert slow.meta[META_KEY]["error_kind"] == "tool_timeout"

            unconfigured = await client.call_tool("wiki_search", {"query": "Belcourt"})
            assert unconfigured.is_error and unconfigured.meta[META_KEY]["error_kind"] == "not_configured"

            read = await client.call_tool("visual_inspector", {"query": "notes.csv"})
            assert not read.is_error and "Brackenridge" in read.content[0].text and "48213" in read.content[0].text
            outside = await client.call_tool("visual_inspector", {"query": "/etc/passwd"})
            assert outside.is_error and "root:" not in outside.content[0].text  # only files under the root

            with pytest.raises(MCPError, match="unknown tool 'teleport'"):
                await client.call_tool("teleport", {})
            # after all of that the server still serves
            again = await client.call_tool("code", {"code": "print('still here')"})
            assert again.content[0].text == "still here"

    anyio.run(session)


def test_http_server_serves_an_envs_tools_behind_a_token():
    host = ToolHost.from_env("coa/MiniWeb-v0")
    app = http_app(create_server(host), token="s3cret")
    try:
        with serve_in_thread(app) as url:
            endpoint = f"{url}/mcp"

            async def session() -> None:
                client_http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret"})
                async with Client(streamable_http_client(endpoint, http_client=client_http)) as client:
                    assert sorted(t.name for t in (await client.list_tools()).tools) == ["crawl_page", "web_search"]
                    query = {"query": "Belcourt Institute annual symposium events"}
                    found = await client.call_tool("web_search", query)
                    assert not found.is_error and "/events/index.html" in found.content[0].text
                    page = next(w for w in found.content[0].text.split() if w.endswith("/events/index.html"))
                    crawled = await client.call_tool("crawl_page", {"query": f"{page} | 2024 symposium"})
                    assert not crawled.is_error and "symposium" in crawled.content[0].text.lower()
                    blocked = await client.call_tool("crawl_page", {"query": "http://169.254.169.254/latest | x"})
                    assert blocked.is_error  # the env's SSRF rules hold over MCP too

            anyio.run(session)
            refused = httpx2.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401 and "bearer token" in refused.text
    finally:
        host.close()


def test_serving_synthhops_tools_over_stdio_searches_its_world():
    """`coa mcp serve --env coa/SynthHop-v0` served a wiki_search that answered "not configured":
    the world's index travels in its tasks' metadata, not in the tool's config."""

    async def session() -> None:
        async with Client(stdio_client(_stdio("--env", "coa/SynthHop-v0"))) as client:
            found = await client.call_tool("wiki_search", {"query": "university founded"})
            assert not found.is_error, found.content[0].text
            assert "Doc 1 (Title:" in found.content[0].text and "not configured" not in found.content[0].text

    anyio.run(session)
