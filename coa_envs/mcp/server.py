"""``coa mcp serve``: our tools (code sandbox, wiki and web search, page crawl, file reader) as an
MCP server, over stdio or streamable HTTP.

A tool is served exactly as an env runs it (same backends, same configs, same observation
text), described by the same function definition the function-calling protocol sends
(:func:`coa_envs.protocols.tools.function_definition`). A call that fails is an MCP tool
result with ``isError`` and the reason, never a broken connection: bad arguments (schema
mismatch), a tool error, and a call over ``timeout_s`` (abandoned; the model is told).
Each result's ``_meta`` carries the coa error kind and details, so our own MCP client
(:mod:`coa_envs.mcp.client`) keeps the metrics an in-process tool would give.

The ``file reader`` is the ``visual_inspector`` tool over the files under ``files_root``
(documents read locally; images and audio need its ``openai`` backend configured).
The ``mcp`` package is imported lazily (extra ``mcp``).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coa_envs.protocols.tools import ToolArgumentError, arguments_to_query, function_definition
from coa_envs.tools import build_tool, run_tool
from coa_envs.types import ErrorKind, Task, Tool, ToolContext, ToolResult
from coa_envs.vocabulary import tool_names

__all__ = ["META_KEY", "ToolHost", "create_server", "default_tools", "http_app", "run_stdio"]

log = logging.getLogger(__name__)

META_KEY = "coa-envs/result"  # _meta entry: {"error_kind": ..., "details": {...}}
_MAX_FILES = 10_000


def default_tools() -> tuple[str, ...]:
    """What ``coa mcp serve`` serves when not told: every registered tool (a tool registered
    with :func:`coa_envs.vocabulary.register_tool` included)."""
    return tool_names()


class ToolHost:
    """The tools one server exposes, built from ``tools`` (name -> env-style tool config).

    ``env`` (optional) is an env whose runtime the tools depend on (the mini-web's local
    server); it is kept open as long as the host and closed with it.
    """

    def __init__(self, tools: Mapping[str, Mapping[str, Any]], *, files_root: str | Path | None = None,
                 timeout_s: float = 60.0, env: Any = None, context: Mapping[str, Any] | None = None):
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.timeout_s = timeout_s
        self.env = env
        self.tools: dict[str, Tool] = {}
        try:
            for name, config in tools.items():
                self.tools[name] = build_tool(name, config)
        except BaseException:
            self.close()
            raise
        self.definitions = {name: function_definition(name) for name in self.tools}
        # What a call sees as its task: the files under files_root, and ``context``, the metadata
        # every task of the served env shares (a generated world's search index, which the
        # SynthHop tasks carry rather than the tool's config).
        files = _files_under(files_root) if files_root else ()
        self.task = Task(task_id="mcp", question="", files=files, metadata=dict(context or {})) \
            if files or context else None

    @classmethod
    def from_env(cls, env_id: str, tools: list[str] | None = None,
                 overrides: Mapping[str, Mapping[str, Any]] | None = None, **options: Any) -> ToolHost:
        """The tools of a registered env, configured as that env configures them (``overrides``
        merged on top, per tool)."""
        from coa_envs.registry import make_env

        env = make_env(env_id)
        configured = dict(env.config.tools)
        missing = sorted((set(tools or ()) | set(overrides or ())) - set(configured))
        if missing:
            env.close()
            raise ValueError(f"{env_id} has no tool(s) {missing}; it has {sorted(configured)}")
        chosen = {name: {**dict(configured[name]), **dict((overrides or {}).get(name) or {})}
                  for name in (tools or configured)}
        try:
            return cls(chosen, env=env, context=_shared_metadata(env.tasks), **options)
        except BaseException:
            env.close()
            raise

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Run one call; every failure is a ToolResult (the MCP layer turns it into isError)."""
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult.failure(f"unknown tool {name!r}; available: {sorted(self.tools)}",
                                      ErrorKind.TOOL_NOT_AVAILABLE)
        try:
            query = arguments_to_query(self.definitions[name], arguments)
        except ToolArgumentError as exc:
            return ToolResult.failure(f"Invalid arguments: {exc}.", ErrorKind.BAD_ACTION)
        ctx = ToolContext(task=self.task, episode_id=f"mcp:{name}")
        try:
            return run_tool(self.tools, name, query, ctx)
        finally:
            release = getattr(tool, "end_episode", None)
            if callable(release):  # each MCP call is its own episode: drop per-call state
                with contextlib.suppress(Exception):
                    release(ctx)

    def close(self) -> None:
        for tool in self.tools.values():
            closer = getattr(tool, "close", None)
            if callable(closer):
                with contextlib.suppress(Exception):
                    closer()
        if self.env is not None:
            self.env.close()
            self.env = None


def _shared_metadata(tasks: list[Task]) -> dict[str, Any]:
    """The metadata entries every task has with the same value (the env's, not one task's)."""
    if not tasks:
        return {}
    shared = dict(tasks[0].metadata)
    for task in tasks[1:]:
        shared = {k: v for k, v in shared.items() if k in task.metadata and task.metadata[k] == v}
        if not shared:
            break
    return shared


def _files_under(root: str | Path) -> tuple[str, ...]:
    base = Path(root).resolve()
    if not base.is_dir():
        raise ValueError(f"files_root {root} is not a directory")
    files = []
    for path in sorted(base.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files.append(str(path))
            if len(files) >= _MAX_FILES:
                break
    return tuple(files)


def create_server(host: ToolHost, name: str = "coa-envs") -> Any:
    """A low-level ``mcp.server.Server`` answering ``tools/list`` and ``tools/call`` from ``host``."""
    import anyio
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    import coa_envs

    listing = [types.Tool(name=d["name"], description=d["description"], inputSchema=d["parameters"])
               for d in host.definitions.values()]

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def call_tool(_ctx: Any, params: Any) -> Any:
        if params.name not in host.tools:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; available: {sorted(host.tools)}")
        result: ToolResult | None = None
        with anyio.move_on_after(host.timeout_s):
            result = await anyio.to_thread.run_sync(host.call, params.name, params.arguments or {},
                                                    abandon_on_cancel=True)
        if result is None:
            result = ToolResult.failure(f"The {params.name} tool did not finish within {host.timeout_s:g} s; "
                                        "its call was abandoned.", ErrorKind.TOOL_TIMEOUT)
        meta = {META_KEY: {"error_kind": None if result.error_kind is None else str(result.error_kind),
                           "details": _plain(result.details)}}
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)],
                                    isError=not result.ok, _meta=meta)

    return Server(name, version=coa_envs.__version__,
                  instructions="Chain-of-Agents tools: each takes one string argument and returns text.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _plain(details: Mapping[str, Any]) -> dict[str, Any]:
    from coa_envs.service.wire import jsonable

    return jsonable(dict(details))


async def run_stdio(server: Any) -> None:
    """Serve one client over this process's stdin/stdout (the client spawned us)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(server: Any, *, path: str = "/mcp", host: str = "127.0.0.1", token: str | None = None) -> Any:
    """The streamable-HTTP ASGI app at ``path``; with ``token``, every request needs
    ``Authorization: Bearer <token>`` (401 with a JSON reason otherwise)."""
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    return app if token is None else _Bearer(app, token)


class _Bearer:
    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token.encode()
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            scheme, _, value = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                body = b'{"error": {"code": "UNAUTHORIZED", "message": "missing or wrong bearer token"}}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
