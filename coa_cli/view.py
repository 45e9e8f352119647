"""``coa view RUN…``: browse eval, RL and distill trajectories in a local web page.

Each RUN is a ``coa eval --out`` directory, a ``coa train rl`` output directory (its
trajectory JSONL files: rollout dumps, ``warm_start/oracle.jsonl``) or a trajectory JSONL
file (``coa distill --out``). The server binds 127.0.0.1 unless ``--host`` says otherwise;
``--export FILE`` writes one self-contained HTML file instead of serving (see
:mod:`agents.viewer.export` for its caps). See :mod:`agents.viewer` for how large files stay
out of memory.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

import typer

__all__ = ["view_command"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def view_command(
    runs: list[Path] = typer.Argument(..., help="Run directories (coa eval / coa train rl output) or "
                                                 "trajectory JSONL files (coa distill output)."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (anything but loopback exposes the "
                                               "trajectories to the network)."),
    port: int = typer.Option(8765, help="Port (0 = any free port)."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer dir or cached hub id that decodes token ids "
                                                    "(default: the run's model, when it names one)."),
    export: Path | None = typer.Option(None, "--export", help="Write one self-contained HTML file and exit."),
    max_episodes: int = typer.Option(500, help="--export: most episodes embedded."),
    max_mb: float = typer.Option(25.0, help="--export: most megabytes of embedded episode data."),
    tokens: bool = typer.Option(True, help="--export: embed token pieces of episodes with token ids."),
    env: str = typer.Option("", help="--export: only this env id."),
    task: str = typer.Option("", help="--export: only task ids containing this."),
    status: str = typer.Option("", help="--export: only this status (e.g. ok)."),
    min_reward: float | None = typer.Option(None, help="--export: only rewards >= this."),
    max_reward: float | None = typer.Option(None, help="--export: only rewards <= this."),
    sort: str = typer.Option("file", help="--export: order tasks by file | reward | turns | tokens | chars | "
                                          "tool_calls | tool_errors | task | status."),
    descending: bool = typer.Option(False, "--desc", help="--export: sort descending."),
) -> None:
    """Serve a page to browse RUNS (filter, sort, episode view, run comparison), or --export it."""
    from agents.viewer import NotARunError, ViewerData
    from agents.viewer.query import EpisodeQuery

    try:
        data = ViewerData(runs, tokenizer=tokenizer)
    except NotARunError as exc:
        raise typer.BadParameter(str(exc), param_hint="RUNS") from None
    for info in data.runs_info():
        problems = f", {info['unreadable']} unreadable lines" if info["unreadable"] else ""
        typer.echo(f"run {info['run']}: {info['label']} ({info['kind']}): {info['episodes']} episodes in "
                   f"{len(info['files'])} file(s){problems}")
    if export is not None:
        from agents.viewer import export_html

        try:
            query = EpisodeQuery(env=env, task=task, status=status, min_reward=min_reward, max_reward=max_reward,
                                 sort=sort, order="desc" if descending else "asc")  # type: ignore[arg-type]
            result = export_html(data, export, query, max_episodes=max_episodes,
                                 max_bytes=int(max_mb * 1024 * 1024), with_tokens=tokens)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        flag = {"max_episodes": "--max-episodes", "max_bytes": "--max-mb"}.get(result.capped_by or "")
        capped = f"; capped by {flag}" if flag else ""
        typer.echo(f"wrote {result.path}: {result.included} of {result.matched} matching episodes, "
                   f"{result.bytes / 1e6:.1f} MB{capped}")
        return

    import uvicorn

    from agents.viewer import create_app
    from agents.viewer.app import LOOPBACK_HOSTS

    allowed = list(LOOPBACK_HOSTS)
    if not _is_loopback(host):
        typer.echo(f"warning: binding {host} serves these trajectories to every machine that can reach it", err=True)
        allowed = ["*"] if host in ("0.0.0.0", "::") else [*allowed, host]
    app = create_app(data, allowed_hosts=allowed)
    if port == 0:  # pick the port here, so the printed address is the real one
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host.strip("[]"), 0))
            port = probe.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"coa view: http://{shown}:{port}/  (Ctrl+C stops)")
    sys.stdout.flush()
    uvicorn.run(app, host=host, port=port, log_level="warning")
