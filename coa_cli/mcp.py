"""``coa mcp serve``: our tools as an MCP server (see :mod:`coa_envs.mcp.server`).

``coa mcp serve --tools code,wiki_search`` speaks MCP over stdin/stdout (an MCP client
spawns it); ``--transport http --port 8200`` serves streamable HTTP at ``/mcp``.
``--env coa/MiniWeb-v0`` serves that env's tools configured as it configures them (its
mini-web included); ``--tool-config 'wiki_search={index: DIR}'`` sets a tool's config.
"""

from __future__ import annotations

import os
import sys

import typer

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Model Context Protocol: serve coa tools to MCP clients.")


@app.command("serve")
def serve_command(
    tools: str | None = typer.Option(None, help="Comma-separated tools (default: every registered tool, "
                                                "or the --env's)."),
    env: str | None = typer.Option(None, help="Serve this registered env's tools with its configuration."),
    tool_config: list[str] = typer.Option([], help="TOOL=YAML mapping or TOOL.KEY=VALUE, e.g. "
                                                   "'code={backend: subprocess}' or code.backend=subprocess "
                                                   "(repeatable)."),
    files_root: str | None = typer.Option(None, help="Directory whose files visual_inspector (the file reader) "
                                                     "may open."),
    timeout: float = typer.Option(60.0, help="Seconds a tool call may take before it is abandoned."),
    transport: str = typer.Option("stdio", help="stdio | http"),
    host: str = typer.Option("127.0.0.1", help="http: interface to bind."),
    port: int = typer.Option(8200, help="http: port (0 = any free port, printed)."),
    path: str = typer.Option("/mcp", help="http: endpoint path."),
    token: str | None = typer.Option(None, help="http: require 'Authorization: Bearer TOKEN' (default "
                                                "$COA_MCP_TOKEN)."),
) -> None:
    """Serve coa tools over MCP (stdio by default)."""
    from coa_cli.options import key_values
    from coa_envs.mcp.server import ToolHost, create_server, default_tools

    if transport not in ("stdio", "http"):
        raise typer.BadParameter(f"{transport!r}; use stdio or http", param_hint="--transport")
    names = [t.strip() for t in tools.split(",") if t.strip()] if tools else None
    configs = key_values(tool_config, "--tool-config")
    try:
        if env is not None:
            import coa_envs  # noqa: F401  (registers the ids)

            host_tools = ToolHost.from_env(env, names, configs, files_root=files_root, timeout_s=timeout)
        else:
            chosen = names or list(default_tools())
            unknown = sorted(set(configs) - set(chosen))
            if unknown:
                raise ValueError(f"--tool-config for {unknown}, which --tools does not serve")
            host_tools = ToolHost({n: dict(configs.get(n) or {}) for n in chosen}, files_root=files_root,
                                  timeout_s=timeout)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    server = create_server(host_tools)
    listed = ", ".join(host_tools.tools)
    try:
        if transport == "stdio":
            import anyio

            from coa_envs.mcp.server import run_stdio

            typer.echo(f"coa mcp: serving {listed} over stdio", err=True)  # stdout is the protocol
            anyio.run(run_stdio, server)
        else:
            from coa_envs.mcp.server import http_app
            from coa_envs.service.running import run_server

            secret = token or os.environ.get("COA_MCP_TOKEN") or None
            if secret is None and host not in ("127.0.0.1", "localhost", "::1"):
                typer.echo(f"coa mcp: warning: serving on {host} without --token; anyone who can reach it can "
                           f"call {listed} (the code sandbox included)", err=True)
            asgi = http_app(server, path=path, host=host, token=secret)

            def ready(url: str) -> None:
                typer.echo(f"coa mcp: serving {listed} at {url}{path}")

            run_server(asgi, host=host, port=port, on_ready=ready)
    finally:
        host_tools.close()
        sys.stderr.flush()
