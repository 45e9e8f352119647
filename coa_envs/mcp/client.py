"""Tools from an external MCP server, as :class:`~coa_envs.types.Tool` objects an env can run.

An env config names servers under ``mcp_servers:`` (``{name: {url: ...}}`` for streamable
HTTP, ``{name: {command: [...]}}`` for a stdio server it spawns); each server's tools become
tools of the env. :class:`MCPConnection` keeps one MCP session per server on a private
event-loop thread, so the env's synchronous ``step`` can call it from any worker thread.

Nothing here raises into the env: an unreachable server, a call over ``timeout_s``, a tool
that errors and arguments that fail the tool's schema all come back as a failed
:class:`ToolResult` with an error kind and a message fit for the model. A lost connection
is reopened on the next call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from coa_envs.protocols.tools import ToolArgumentError, query_to_arguments
from coa_envs.types import ErrorKind, ToolContext, ToolResult

__all__ = ["SERVER_KEYS", "MCPConnection", "MCPTool", "open_mcp_tools", "tag_specs", "validate_server_config"]

log = logging.getLogger(__name__)

SERVER_KEYS: dict[str, str] = {
    "url": "streamable-HTTP endpoint, e.g. http://127.0.0.1:8200/mcp",
    "command": "stdio server to spawn: a list, e.g. [coa, mcp, serve, --tools, code]",
    "env": "extra environment variables for a spawned server (mapping)",
    "cwd": "working directory of a spawned server",
    "token_env": "name of an environment variable holding a bearer token for the url",
    "tools": "list of the server's tools to use (default: all)",
    "prefix": "text put before every tool name (to avoid clashes, e.g. 'remote_')",
    "timeout_s": "seconds a call may take (default 60)",
    "connect_timeout_s": "seconds to connect and list tools (default 30)",
}


def validate_server_config(name: str, config: Any) -> None:
    """Refuse a ``mcp_servers.<name>`` entry that could never connect, saying what to change."""
    if not isinstance(config, Mapping):
        raise ValueError(f"mcp_servers.{name} must be a mapping (e.g. {{url: http://host:8200/mcp}})")
    unknown = sorted(set(config) - set(SERVER_KEYS))
    if unknown:
        raise ValueError(f"mcp_servers.{name}: unknown key(s) {unknown}; allowed: {sorted(SERVER_KEYS)}")
    if bool(config.get("url")) == bool(config.get("command")):
        raise ValueError(f"mcp_servers.{name}: give exactly one of url (HTTP server) or command (stdio server)")
    command = config.get("command")
    if command is not None and (isinstance(command, str) or not isinstance(command, Sequence) or not command):
        raise ValueError(f"mcp_servers.{name}.command must be a non-empty list, e.g. [coa, mcp, serve]")
    for key in ("timeout_s", "connect_timeout_s"):
        value = config.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"mcp_servers.{name}.{key}={value!r} is not valid; allowed: a positive number")
    tools = config.get("tools")
    if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
        raise ValueError(f"mcp_servers.{name}.tools must be a list of tool names")


def open_mcp_tools(servers: Mapping[str, Mapping[str, Any]], taken: Sequence[str] = ()) -> dict[str, MCPTool]:
    """Connect to every server and return its (chosen) tools under their env names
    (``prefix`` + remote name). Raises ``ValueError``/``ConnectionError`` with the reason
    when a server is unreachable, a chosen tool is missing or a name clashes."""
    import re

    tools: dict[str, MCPTool] = {}
    try:
        for server, config in servers.items():
            connection = MCPConnection(server, config)
            listing = {d["name"]: d for d in connection.list_tools()}
            wanted = list(config.get("tools") or listing)
            missing = sorted(set(wanted) - set(listing))
            if missing:
                connection.close()
                raise ValueError(f"mcp_servers.{server}: the server has no tool(s) {missing}; it has "
                                 f"{sorted(listing)}")
            for remote in wanted:
                local = f"{config.get('prefix', '')}{remote}"
                if not re.fullmatch(r"[a-z_][a-z0-9_]*", local):
                    raise ValueError(f"mcp_servers.{server}: tool name {local!r} is not a lower-case identifier; "
                                     "set prefix (or pick the tools) so every name is one")
                if local in tools or local in taken:
                    raise ValueError(f"mcp_servers.{server}: tool name {local!r} is taken; set "
                                     f"mcp_servers.{server}.prefix (e.g. 'remote_')")
                tools[local] = MCPTool(connection, remote, {**listing[remote], "name": local})
    except BaseException:
        for tool in tools.values():
            tool.connection.close()
        raise
    return tools


def tag_specs(tools: Mapping[str, MCPTool]) -> list[Any]:
    """How MCP tools are listed in a tag-protocol system prompt (their body is the one
    string argument, or a JSON object of arguments)."""
    from coa_envs.protocols.tools import string_parameter
    from coa_envs.types import ToolSpec

    specs = []
    for name, tool in tools.items():
        usage = string_parameter(tool.definition) or "JSON object of arguments"
        specs.append(ToolSpec(name=name, summary=tool.definition.get("description") or "an MCP tool.",
                              usage=usage, argument=usage))
    return specs


class MCPConnection:
    """One MCP server, connected lazily; thread-safe ``list_tools`` and ``call``."""

    def __init__(self, name: str, config: Mapping[str, Any]):
        validate_server_config(name, config)
        self.name = name
        self.config = dict(config)
        self.timeout_s = float(config.get("timeout_s", 60.0))
        self.connect_timeout_s = float(config.get("connect_timeout_s", 30.0))
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError(f"mcp_servers.{name}: timeouts must be > 0")
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._session: concurrent.futures.Future | None = None
        self._listing: list[dict[str, Any]] | None = None

    # -- the event-loop thread -----------------------------------------------------------
    def _start_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"coa-mcp-{self.name}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _transport(self) -> Any:
        if self.config.get("url"):
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {}
            token_env = self.config.get("token_env")
            if token_env:
                token = os.environ.get(str(token_env))
                if not token:
                    raise ValueError(f"mcp_servers.{self.name}.token_env: ${token_env} is not set")
                headers["Authorization"] = f"Bearer {token}"
            return streamable_http_client(str(self.config["url"]), http_client=create_mcp_http_client(headers=headers))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = [str(part) for part in self.config["command"]]
        env = {str(k): str(v) for k, v in (self.config.get("env") or {}).items()}
        return stdio_client(StdioServerParameters(command=command[0], args=command[1:], env=env or None,
                                                  cwd=self.config.get("cwd")))

    async def _hold_session(self, ready: concurrent.futures.Future) -> None:
        """Own the MCP session for its whole life (anyio scopes must exit in the task that
        entered them); ``ready`` gets the tool listing, or the reason the session failed."""
        from mcp import Client

        self._stop = asyncio.Event()
        try:
            async with Client(self._transport()) as client:
                listing = await client.list_tools()
                self._client = client
                ready.set_result([{"name": t.name, "description": t.description or "",
                                   "parameters": dict(t.input_schema or {"type": "object"})} for t in listing.tools])
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("MCP server %s: the session ended: %s", self.name, _reason(exc))
        finally:
            self._client = None

    def _connect(self) -> None:
        """Open the session (the caller holds ``_lock``); raises with the reason on failure."""
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._session = asyncio.run_coroutine_threadsafe(self._hold_session(ready), self._start_loop())
        try:
            self._listing = ready.result(timeout=self.connect_timeout_s)
        except BaseException:
            self._disconnect()
            raise

    def _disconnect(self) -> None:
        loop, stop, session = self._loop, self._stop, self._session
        self._client, self._session = None, None
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        if session is not None:
            with contextlib.suppress(BaseException):
                session.result(timeout=5)
            session.cancel()

    def _ensure(self) -> None:
        with self._lock:
            if self._client is None:
                self._connect()

    # -- what the env uses ---------------------------------------------------------------
    def list_tools(self) -> list[dict[str, Any]]:
        """Function definitions (``name``, ``description``, ``parameters``) of the server's tools."""
        if self._listing is None:
            try:
                self._ensure()
            except BaseException as exc:
                raise ConnectionError(f"MCP server {self.name!r} ({self._where()}) could not be reached: "
                                      f"{_reason(exc)}") from None
        return list(self._listing or [])

    def call(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        try:
            self._ensure()
        except BaseException as exc:
            return ToolResult.failure(f"The MCP server {self.name} is unreachable: {_reason(exc)}",
                                      ErrorKind.TOOL_ERROR, mcp_server=self.name)
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(self._client.call_tool(tool, dict(arguments)), self._loop)
        try:
            result = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return ToolResult.failure(f"The tool {tool} (MCP server {self.name}) did not answer within "
                                      f"{self.timeout_s:g} s.", ErrorKind.TOOL_TIMEOUT, mcp_server=self.name)
        except BaseException as exc:  # an MCP error reply, or the connection broke mid-call
            if self._client is None or not _is_protocol_error(exc):
                with self._lock:
                    self._disconnect()  # reconnect on the next call
            return ToolResult.failure(f"The tool {tool} (MCP server {self.name}) failed: {_reason(exc)}",
                                      ErrorKind.TOOL_ERROR, mcp_server=self.name)
        return _to_tool_result(result, self.name)

    def close(self) -> None:
        with self._lock:
            self._disconnect()
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)

    def _where(self) -> str:
        return str(self.config.get("url") or " ".join(map(str, self.config["command"])))


def _is_protocol_error(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

    return isinstance(exc, MCPError)


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # anyio wraps the real cause
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _to_tool_result(result: Any, server: str) -> ToolResult:
    parts = []
    for block in result.content or ():
        text = getattr(block, "text", None)
        parts.append(text if text is not None else f"[{getattr(block, 'type', 'content')} omitted]")
    text = "\n".join(parts) or "[no output]"
    meta = (getattr(result, "meta", None) or {}).get("coa-envs/result") or {}
    details = {**dict(meta.get("details") or {}), "mcp_server": server}
    if not result.is_error:
        return ToolResult(text=text, details=details)
    try:
        kind = ErrorKind(meta.get("error_kind") or ErrorKind.TOOL_ERROR)
    except ValueError:
        kind = ErrorKind.TOOL_ERROR
    return ToolResult(text=text, ok=False, error_kind=kind, details=details)


class MCPTool:
    """One tool of an MCP server, under the name the env gives it (``prefix`` + remote name).

    ``definition`` is the function definition the model sees (the server's description and
    input schema); the query is the tool's one string argument, or the JSON text of its
    arguments (see :mod:`coa_envs.protocols.tools`).
    """

    def __init__(self, connection: MCPConnection, remote_name: str, definition: Mapping[str, Any]):
        self.connection, self.remote_name = connection, remote_name
        self.definition = dict(definition)
        self.name = self.definition["name"]

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        try:
            arguments = query_to_arguments(self.definition, query)
        except ToolArgumentError as exc:
            return ToolResult.failure(f"Invalid arguments: {exc}.", ErrorKind.BAD_ACTION)
        return self.connection.call(self.remote_name, arguments)

    def close(self) -> None:
        self.connection.close()
