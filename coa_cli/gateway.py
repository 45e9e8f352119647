"""``coa gateway``: a recording OpenAI-compatible endpoint for training the model inside any agent.

Serves MODEL (``hf`` or ``vllm`` engine; ``--tiny DIR`` writes and serves the tiny test model)
or passes through to ``--upstream URL``, records every call per session, and appends each
finished session's token-exact trajectories to ``--out`` (``coa train sft`` data, ``coa view``
input). See :mod:`agents.gateway.app` for the routes. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from coa_cli.options import ENV_OPTION
from coa_cli.serve import MAX_BODY_MB, body_limit

__all__ = ["gateway_command"]


def _backend(model: str | None, engine: str, upstream: str | None, upstream_model: str | None,
             upstream_key_env: str, token_ids: bool, tokenizer: str | None, chat_template: str | None,
             device: str, dtype: str, max_batch_size: int, tiny: Path | None) -> tuple[Any, str]:
    """The backend and the name it is served under by default."""
    if upstream is not None:
        if model or tiny:
            raise typer.BadParameter("give MODEL (served here) or --upstream URL (passed through), not both",
                                     param_hint="--upstream")
        from agents.gateway.upstream import UpstreamBackend

        return UpstreamBackend(upstream, model=upstream_model, api_key=os.environ.get(upstream_key_env),
                               token_ids=token_ids, tokenizer=tokenizer), upstream_model or "upstream"
    if tiny is not None:
        from agents.tiny import save_tiny

        model = str(save_tiny(tiny))
    if not model:
        raise typer.BadParameter("give a MODEL (directory, catalogue name or hub id), --tiny DIR or --upstream URL",
                                 param_hint="MODEL")
    from agents.gateway.local import LocalBackend
    from agents.gateway.prompts import resolve_chat_template

    try:
        template = resolve_chat_template(chat_template) if chat_template else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--chat-template") from None
    if engine == "hf":
        from agents.engines.hf import HFEngine

        backend = HFEngine(model, device=device, dtype=dtype, max_batch_size=max_batch_size)
    elif engine == "vllm":
        from agents.engines.vllm import VLLMEngine

        backend = VLLMEngine(model, dtype=dtype)
    else:
        raise typer.BadParameter(f"unknown engine {engine!r}; use hf or vllm", param_hint="--engine")
    return LocalBackend(backend, backend.tokenizer, chat_template=template, max_batch_size=max_batch_size), \
        Path(model).name or model


def gateway_command(
    model: str = typer.Argument(None, help="Model to serve: a HF directory, catalogue name (smollm2-135m) or hub id."),
    engine: str = typer.Option("hf", help="hf | vllm (for MODEL)."),
    upstream: str | None = typer.Option(None, help="Pass through to this OpenAI-compatible base URL "
                                                   "(http://host:8000/v1) instead of serving MODEL."),
    upstream_model: str | None = typer.Option(None, help="The upstream's name for the model (default: the "
                                                         "client's)."),
    upstream_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the upstream's "
                                                                "API key (never on the command line)."),
    upstream_token_ids: bool = typer.Option(True, "--upstream-token-ids/--hosted-api",
                                            help="Ask the upstream for token ids and logprobs (vLLM, coa serve); "
                                                 "--hosted-api for APIs that refuse unknown fields."),
    tokenizer: str | None = typer.Option(None, help="--upstream: tokenizer that decodes recorded ids."),
    chat_template: str | None = typer.Option(None, help="Render with this chat template (Jinja file, or "
                                                        "chatml-tools: ChatML with function calling)."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8300, help="Port (0 = any free port)."),
    served_model_name: str | None = typer.Option(None, help="Name in /v1/models; requests for another are 404."),
    accept_any_model: bool = typer.Option(False, help="Answer whatever model name a request gives (agents "
                                                      "configured for a hosted model)."),
    out: Path = typer.Option(Path("runs/gateway/trajectories.jsonl"), help="Finished sessions' trajectories "
                                                                            "(JSONL, appended)."),
    reward: str | None = typer.Option(None, help="module:function or file.py:function scoring sessions that "
                                                 "play no env task: fn(SessionResult) -> float."),
    client_rewards: bool = typer.Option(False, help="Let clients post a session's reward (off: a code-running "
                                                    "agent could post its own)."),
    env: list[str] = typer.Option(None, "--env", help="Env ids sessions may play (repeatable; default: all)."),
    env_option: list[str] = ENV_OPTION,
    public_url: str | None = typer.Option(None, help="Base of the session URLs handed out (behind a proxy)."),
    admin_token: str | None = typer.Option(None, envvar="COA_GATEWAY_ADMIN_TOKEN", show_default=False,
                                           help="GET /sessions (every live session's id) needs this bearer token "
                                                "(set $COA_GATEWAY_ADMIN_TOKEN; unset: listing is refused)."),
    device: str = typer.Option("cpu", help="hf engine: cpu | cuda | cuda:N"),
    dtype: str = typer.Option("float32", help="float32 | bfloat16 | float16 | auto"),
    max_batch_size: int = typer.Option(32, help="Rows per forward pass (hf)."),
    tiny: Path | None = typer.Option(None, help="Write the tiny test model to this dir and serve it."),
    max_body_mb: float = MAX_BODY_MB,
) -> None:
    """Serve MODEL (or --upstream) at http://HOST:PORT, recording sessions at /sessions/{id}/v1."""
    from agents.gateway.app import create_gateway_app
    from agents.gateway.client import load_callable
    from agents.gateway.core import Gateway
    from coa_cli.options import env_options
    from coa_envs.service.running import run_server

    max_body_bytes = body_limit(max_body_mb)
    reward_fn = None
    if reward:
        try:
            reward_fn = load_callable(reward, what="reward")
        except (ValueError, ImportError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--reward") from None
    backend, default_name = _backend(model, engine, upstream, upstream_model, upstream_key_env, upstream_token_ids,
                                     tokenizer, chat_template, device, dtype, max_batch_size, tiny)
    name = served_model_name or default_name
    gateway = Gateway(backend, name, reward_fn=reward_fn, out=out, allow_client_reward=client_rewards,
                      env_overrides=env_options(env_option), env_ids=list(env) if env else None,
                      accept_any_model=accept_any_model)
    app = create_gateway_app(gateway, public_url=public_url, admin_token=admin_token,
                             max_body_bytes=max_body_bytes)

    def ready(url: str) -> None:
        typer.echo(f"coa gateway: {name} at {url}/v1 (one session: {url}/sessions/ID/v1, or header "
                   f"X-Session-Id); trajectories -> {out}", err=True)

    run_server(app, host, port, on_ready=ready, log_level="info")
