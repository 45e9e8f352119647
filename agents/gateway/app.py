"""The gateway's HTTP face: OpenAI's chat completions per session, and the sessions API.

Routes (``{sid}`` is a session id):

* ``POST /sessions/{sid}/v1/chat/completions`` and ``GET /sessions/{sid}/v1/models``: the
  base URL ``http://HOST:PORT/sessions/{sid}/v1`` is all an agent framework needs to change;
* ``POST /v1/chat/completions`` with the header ``X-Session-Id: {sid}`` (frameworks that
  set default headers), or without it: a one-call session, finished at once;
* ``POST /sessions`` ``{env_id, task_id | task_index, env_kwargs, seed, session_id, metadata}``
  opens a session (on a coa env task when ``env_id`` is given) and answers with its
  ``base_url``, the question, the env's prompt messages and its tools;
* ``POST /sessions/{sid}/tools/{name}`` ``{"arguments": {...}}`` runs an env tool;
* ``POST /sessions/{sid}/finish`` ``{answer, reward, error}`` scores and closes it;
* ``GET /sessions`` (only with an admin token set, and ``Authorization: Bearer <token>``),
  ``GET /sessions/{sid}``, ``GET /sessions/{sid}/trajectories``.

A session named in a URL or header that does not exist yet is opened on first use (not
for env tasks, which need ``POST /sessions``). Errors use OpenAI's schema everywhere.
Routes live in :mod:`agents.gateway.chat_routes` and :mod:`agents.gateway.session_routes`;
this module assembles the app.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from agents.gateway.chat_routes import SESSION_HEADER, chat_routes
from agents.gateway.core import Gateway
from agents.gateway.session_routes import session_routes
from agents.openai_errors import MAX_BODY_BYTES, install_error_handlers, limit_body

__all__ = ["SESSION_HEADER", "create_gateway_app"]


def create_gateway_app(gateway: Gateway, *, public_url: str | None = None, close_on_shutdown: bool = True,
                       blocking_threads: int = 64, max_body_bytes: int = MAX_BODY_BYTES,
                       admin_token: str | None = None) -> Any:
    """A FastAPI app over ``gateway``; ``public_url`` is the base the session URLs are built on
    (default: the URL each request came to). A request body over ``max_body_bytes`` is a 413.
    ``GET /sessions`` (every live session's id) needs ``admin_token`` as a bearer token; without
    one it is refused.

    Blocking session work (env tools, opening env sessions, finishing, which waits for calls
    in flight) runs on the app's own ``blocking_threads`` threads: on asyncio's default
    executor (6 threads on two cores) six finishes waiting for their calls, or six slow
    tools, stalled every other session's tools and finishes."""
    import asyncio
    import functools
    import time
    from concurrent.futures import ThreadPoolExecutor

    from fastapi import FastAPI, Request

    executor = ThreadPoolExecutor(blocking_threads, thread_name_prefix="coa-gateway")

    async def blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
            if close_on_shutdown:
                gateway.close()

    app = FastAPI(title="coa gateway", version="1", lifespan=lifespan)
    install_error_handlers(app)
    limit_body(app, max_body_bytes)
    app.state.gateway = gateway

    def base(request: Request) -> str:
        return (public_url or str(request.base_url)).rstrip("/")

    def models_body() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": gateway.model_name, "object": "model",
                                            "created": int(time.time()), "owned_by": "coa-gateway"}]}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "sessions": len(gateway.store.live())}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return models_body()

    @app.get("/sessions/{sid}/v1/models")
    def session_models(sid: str) -> dict[str, Any]:
        return models_body()

    @app.get("/v1/models/{name:path}")
    @app.get("/sessions/{sid}/v1/models/{name:path}")
    def one_model(name: str, sid: str | None = None) -> dict[str, Any]:
        gateway.check_model(name)
        return models_body()["data"][0]

    app.include_router(chat_routes(gateway, blocking))
    app.include_router(session_routes(gateway, base, blocking, admin_token))
    return app
