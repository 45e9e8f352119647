"""The ``coa serve-env`` application: HTTP and WebSocket transport over a :class:`SessionManager`.

The wire format is documented in :mod:`coa_envs.service.wire`. This module only assembles
the app: what may get in (:mod:`coa_envs.service.guards`: an optional bearer token, compared
in constant time; request size limits, checked before a body is parsed), JSON errors with a
code and a reason, the HTTP routes (:mod:`coa_envs.service.http_routes`) and the WebSocket
loop that is OpenEnv's ``EnvClient`` protocol (:mod:`coa_envs.service.ws_routes`).
fastapi/uvicorn are imported here only (the ``serve`` extra); ``import coa_envs`` never loads
this module.
"""

# No ``from __future__ import annotations``: FastAPI inspects the route signatures' types.
import asyncio
import contextlib
from typing import Any

from coa_envs.service.guards import BodyLimit
from coa_envs.service.http_routes import http_routes
from coa_envs.service.sessions import SessionManager
from coa_envs.service.wire import ErrorCode, ServiceError
from coa_envs.service.ws_routes import ws_routes

__all__ = ["create_app"]


def create_app(manager: SessionManager, *, token: str | None = None, max_request_bytes: int = 1 << 20) -> Any:
    """A FastAPI app serving ``manager``'s envs; see :mod:`coa_envs.service.wire`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    import coa_envs

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        reaper = asyncio.create_task(manager.reap_forever())
        try:
            yield
        finally:
            reaper.cancel()
            await manager.shutdown()

    app = FastAPI(title="coa serve-env", version=coa_envs.__version__, lifespan=lifespan)
    app.state.manager = manager
    app.state.max_request_bytes = max_request_bytes
    app.add_middleware(BodyLimit, limit=max_request_bytes)

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.code == ErrorCode.CAPACITY_REACHED else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    app.include_router(http_routes(manager, token))
    app.include_router(ws_routes(manager, token, max_request_bytes))
    return app
