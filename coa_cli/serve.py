"""``coa serve``: an OpenAI-compatible endpoint over a local model (see :mod:`agents.server`).

Binds to 127.0.0.1 unless told otherwise. ``--tiny DIR`` first writes the locally trained
tiny tokenizer and random model to DIR, so a demo or CI job needs no downloads.
"""

from __future__ import annotations

from pathlib import Path

import typer

from coa_cli.options import DEVICE

__all__ = ["serve_command"]


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
) -> None:
    """Serve MODEL at http://HOST:PORT/v1 (models, completions, chat/completions)."""
    import uvicorn

    from agents.server import create_app

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
    app = create_app(backend, backend.tokenizer, name, aliases=tuple(names[1:]))
    typer.echo(f"coa serve: {name} ({engine}) at http://{host}:{port}/v1")
    uvicorn.run(app, host=host, port=port, log_level="info")
