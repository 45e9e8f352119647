"""The ``coa serve`` app: FastAPI, error handlers and the routes over one :class:`ServedModel`."""

# No ``from __future__ import annotations``: FastAPI must see the request-body classes of the
# route signatures as real types, not as strings.
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from agents.engines import Engine
from agents.openai_errors import MAX_BODY_BYTES, APIError, install_error_handlers, limit_body

__all__ = ["create_app", "serve_in_thread"]


def create_app(engine: Engine, tokenizer: Any, model_name: str, aliases: tuple[str, ...] = (), *,
               max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """A FastAPI app serving ``engine`` as ``model_name`` (requests may also name it by one of
    ``aliases``); ``tokenizer`` renders chat templates and tokens. A request body over
    ``max_body_bytes`` is a 413."""
    from fastapi import FastAPI, Request

    from agents.engines.batching import BatchingEngine
    from agents.http_streams import unless_disconnected
    from agents.server.bodies import ChatBody, CompletionBody
    from agents.server.chat import chat
    from agents.server.completions import completions
    from agents.server.model import ServedModel

    batcher = engine if isinstance(engine, BatchingEngine) else BatchingEngine(engine)
    served = ServedModel(batcher, tokenizer, model_name, aliases)

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        if batcher is not engine:  # we made it, we stop its worker
            batcher.close()

    app = FastAPI(title="coa serve", version="1", lifespan=lifespan)
    app.state.engine = batcher
    install_error_handlers(app)
    limit_body(app, max_body_bytes)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [served.model_card()]}

    @app.get("/v1/models/{name:path}")
    def one_model(name: str) -> dict[str, Any]:
        if name not in served.served_names:
            raise APIError(404, f"The model `{name}` does not exist.", code="model_not_found", param="model")
        return served.model_card()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    async def completions_route(body: CompletionBody, request: Request) -> Any:
        return await unless_disconnected(request, completions(served, body))

    @app.post("/v1/chat/completions")
    async def chat_route(body: ChatBody, request: Request) -> Any:
        return await unless_disconnected(request, chat(served, body))

    return app


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields the base URL (``…/v1``).

    ``port=0`` picks a free port. The server stops when the block exits.
    """
    from coa_envs.service.running import serve_in_thread as serve_app

    with serve_app(app, host, port) as url:
        yield f"{url}/v1"
