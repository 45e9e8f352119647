"""``coa serve-env``: serve registered env ids over HTTP and WebSocket (see :mod:`coa_envs.service`).

``coa serve-env coa/MATH500-v1 coa/NQ-v1 --port 8100 -e max_turns=4`` builds each id once
(a bad ``--env-option`` fails here, not in a client), then serves sessions until interrupted.
``-e`` is the ``KEY=VALUE`` syntax of ``coa eval`` (:mod:`coa_cli.options`); the old ``--set``
still works for one release, with a message saying where it moved.
Binds to 127.0.0.1 unless told otherwise; give ``--token`` (or ``$COA_ENV_TOKEN``) before
binding anything else. ``--port 0`` picks a free port and prints it.
"""

from __future__ import annotations

import os

import typer

from coa_cli.options import key_values

__all__ = ["serve_env_command"]


def serve_env_command(
    env_ids: list[str] = typer.Argument(..., help="Registered ids to serve (`coa list`)."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8100, help="Port (0 = any free port, printed)."),
    env_option: list[str] = typer.Option(
        [], "--env-option", "-e", help="gym.make option for every served id, KEY=VALUE (dotted keys reach into "
        "mappings, values read as YAML; repeatable), e.g. -e max_turns=4 -e tools.code.backend=subprocess"),
    set_: list[str] = typer.Option([], "--set", hidden=True, help="Moved to --env-option (-e)."),
    allow_override: list[str] = typer.Option([], help="Extra gym.make keys clients may set (repeatable); "
                                                      "by default only episode-shaping ones."),
    max_sessions: int = typer.Option(256, help="Concurrent sessions; more are refused with 429."),
    idle_timeout: float = typer.Option(600.0, help="Seconds without a request before a session is closed."),
    step_threads: int = typer.Option(64, help="Threads running env resets and steps."),
    max_request_bytes: int = typer.Option(1 << 20, help="Largest request body / WebSocket frame."),
    token: str | None = typer.Option(None, help="Require 'Authorization: Bearer TOKEN' (default "
                                                "$COA_ENV_TOKEN; none = open)."),
    expose_answers: bool = typer.Option(False, help="Include gold answers in task listings (for an "
                                                    "oracle client); off for benchmark serving."),
) -> None:
    """Serve ENV_IDS at http://HOST:PORT (WebSocket /ws and /envs/<id>/ws, HTTP /sessions)."""
    import coa_envs  # noqa: F401  (registers the ids)
    from coa_envs.service.app import create_app
    from coa_envs.service.running import run_server
    from coa_envs.service.sessions import DEFAULT_CLIENT_OVERRIDES, SessionManager
    from coa_envs.service.wire import ServiceError

    if set_:
        typer.echo("coa serve-env: --set moved to --env-option (-e), the syntax of coa eval (dotted keys reach "
                   "into mappings); --set is accepted until the next release", err=True)
    overrides = key_values([*set_, *env_option], "--env-option")
    token = token or os.environ.get("COA_ENV_TOKEN") or None
    if max_request_bytes < 1024:
        raise typer.BadParameter("must be at least 1024", param_hint="--max-request-bytes")
    try:
        manager = SessionManager(env_ids, overrides=overrides,
                                 client_overrides=DEFAULT_CLIENT_OVERRIDES | set(allow_override),
                                 max_sessions=max_sessions, idle_timeout_s=idle_timeout,
                                 step_threads=step_threads, expose_answers=expose_answers)
        manager.check()
    except ServiceError as exc:
        raise typer.BadParameter(exc.message, param_hint="ENV_IDS/--env-option") from None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if host not in ("127.0.0.1", "localhost", "::1") and token is None:
        typer.echo(f"coa serve-env: warning: serving on {host} without --token; anyone who can reach it "
                   "can run episodes (and their tools)", err=True)
    app = create_app(manager, token=token, max_request_bytes=max_request_bytes)

    def ready(url: str) -> None:
        typer.echo(f"coa serve-env: {', '.join(manager.env_ids)} at {url} (WebSocket {url}/ws)", err=False)

    run_server(app, host=host, port=port, on_ready=ready, log_level="warning")
