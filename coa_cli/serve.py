"""``coa serve``: an OpenAI-compatible endpoint over a local model (see :mod:`agents.server`).

Binds to 127.0.0.1 unless told otherwise. ``--tiny DIR`` first writes the locally trained
tiny tokenizer and random model to DIR, so a demo or CI job needs no downloads.
"""

from __future__ import annotations

from pathlib import Path

import typer

from coa_cli.options import DEVICE

__all__ = ["MAX_BODY_MB", "body_limit", "serve_command"]

# The request body limit of the OpenAI-compatible servers (coa serve, coa gateway).
MAX_BODY_MB = typer.Option(64.0, help="Largest request body in MiB; a larger one is a 413 before it is read "
                                      "(raise it for long multimodal or many-turn histories).")


def body_limit(max_body_mb: float) -> int:
    """``--max-body-mb`` in bytes; a limit that cannot hold a request is a usage error."""
    if not max_body_mb >= 0.001:  # NaN too
        raise typer.BadParameter(f"{max_body_mb} MiB holds no request; give at least 0.001", param_hint="--max-body-mb")
    return int(max_body_mb * (1 << 20))


def serve_command(
    model: str = typer.Argument(None, help="Local HF model directory, catalogue name such as "
                                           "smollm2-135m, or hub id when online."),
    engine: str = typer.Option("hf", help="hf | vllm"),
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port (0 = any free port)."),
    served_model_name: list[str] = typer.Option(
        [], help="Name in /v1/models (repeat for aliases requests may use; the first is reported). "
                 "Default: MODEL's last path part, and MODEL as given. Other names get a 404."),
    device: str = DEVICE,
    dtype: str = typer.Option("float32", help="hf/vllm: float32 | bfloat16 | float16 | auto"),
    max_batch_size: int = typer.Option(32, help="Rows per forward pass (hf)."),
    tiny: Path | None = typer.Option(None, help="Write the tiny test model to this dir and "
                                                "serve it."),
    max_body_mb: float = MAX_BODY_MB,
) -> None:
    """Serve MODEL at http://HOST:PORT/v1 (models, completions, chat/completions)."""
    import uvicorn

    from agents.server import create_app

    max_body_bytes = body_limit(max_body_mb)
    if tiny is not None:
        from agents.tiny import save_tiny

        model = str(save_tiny(tiny))
    if not model:
        raise typer.BadParameter("give a MODEL directory or --tiny DIR", param_hint="MODEL")
    if engine == "hf":
        from agents.engines.hf import HFEngine

        backend = HFEngine(model, device=device, dtype=dtype, max_batch_size=max_batch_size)
    elif engine == "vllm":
        from agents.engines.vllm import VLLMEngine

        backend = VLLMEngine(model, dtype=dtype)
    else:
        raise typer.BadParameter(f"unknown engine {engine!r}; use hf or vllm",
                                 param_hint="--engine")
    names = list(served_model_name) or [Path(model).name or model, model]
    name = names[0]
    app = create_app(backend, backend.tokenizer, name, aliases=tuple(names[1:]), max_body_bytes=max_body_bytes)
    typer.echo(f"coa serve: {name} ({engine}) at http://{host}:{port}/v1")
    uvicorn.run(app, host=host, port=port, log_level="info")
