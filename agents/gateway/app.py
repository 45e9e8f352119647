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
* ``GET /sessions``, ``GET /sessions/{sid}``, ``GET /sessions/{sid}/trajectories``.

A session named in a URL or header that does not exist yet is opened on first use (not
for env tasks, which need ``POST /sessions``). Errors use OpenAI's schema everywhere.
"""

# No ``from __future__ import annotations``: FastAPI reads the body models' annotations.
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents.gateway.core import Gateway
from agents.gateway.sessions import GatewaySession
from agents.gateway.wire import ChatRequest, check_request
from agents.openai_errors import APIError, install_error_handlers

__all__ = ["SESSION_HEADER", "create_gateway_app"]

SESSION_HEADER = "X-Session-Id"


def create_gateway_app(gateway: Gateway, *, public_url: str | None = None, close_on_shutdown: bool = True) -> Any:
    """A FastAPI app over ``gateway``; ``public_url`` is the base the session URLs are built on
    (default: the URL each request came to)."""
    import time

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field

    class OpenBody(BaseModel):
        model_config = ConfigDict(extra="forbid")
        env_id: str | None = None
        task_id: str | None = None
        task_index: int | None = Field(None, ge=0)
        env_kwargs: dict[str, Any] | None = None
        seed: int | None = None
        session_id: str | None = None
        metadata: dict[str, Any] | None = None

    class ToolBody(BaseModel):
        model_config = ConfigDict(extra="forbid")
        arguments: dict[str, Any] | str = Field(default_factory=dict)

    class FinishBody(BaseModel):
        model_config = ConfigDict(extra="forbid")
        answer: str | None = None
        reward: float | None = None
        error: str | None = None

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        if close_on_shutdown:
            gateway.close()

    app = FastAPI(title="coa gateway", version="1", lifespan=lifespan)
    install_error_handlers(app)
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

    async def answer(session: GatewaySession, body: ChatRequest, one_call: bool) -> Any:
        check_request(body)
        gateway.check_model(body.model)
        session.check_open()
        backend = gateway.backend
        headers = {SESSION_HEADER: session.session_id}
        if not body.stream:
            try:
                result = await backend.complete(session, body, body.model or gateway.model_name)
            finally:
                if one_call:
                    await asyncio.to_thread(gateway.finish, session)
            return JSONResponse(result, headers=headers)
        try:
            prepared = await backend.prepare_stream(session, body)
        except BaseException:
            if one_call:
                await asyncio.to_thread(gateway.finish, session)
            raise

        async def events() -> AsyncIterator[str]:
            try:
                async for event in backend.stream(session, body, body.model or gateway.model_name, *prepared):
                    yield event
            finally:
                if one_call:
                    await asyncio.to_thread(gateway.finish, session)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={**headers, "Cache-Control": "no-cache"})

    @app.post("/sessions/{sid}/v1/chat/completions")
    async def session_chat(sid: str, body: ChatRequest) -> Any:
        return await answer(gateway.store.get_or_open(sid), body, one_call=False)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> Any:
        sid = request.headers.get(SESSION_HEADER)
        if sid:
            return await answer(gateway.store.get_or_open(sid), body, one_call=False)
        return await answer(gateway.open_session(), body, one_call=True)

    @app.post("/sessions")
    async def open_session(body: OpenBody, request: Request) -> Any:
        session = await asyncio.to_thread(
            gateway.open_session, session_id=body.session_id, env_id=body.env_id, task_id=body.task_id,
            task_index=body.task_index, env_kwargs=body.env_kwargs, seed=body.seed,
            info={"metadata": body.metadata} if body.metadata else None)
        return JSONResponse(gateway.describe_session(session, base(request)), status_code=201)

    @app.get("/sessions")
    def list_sessions() -> dict[str, Any]:
        return {"object": "list", "data": [s.describe() for s in gateway.store.live()]}

    @app.get("/sessions/{sid}")
    def describe(sid: str) -> dict[str, Any]:
        return gateway.session(sid).describe()

    @app.post("/sessions/{sid}/tools/{name}")
    async def call_tool(sid: str, name: str, body: ToolBody) -> dict[str, Any]:
        from agents.gateway.envtask import ToolCallError

        session = gateway.session(sid)
        session.check_open()
        if session.task is None:
            raise APIError(404, f"session {sid!r} plays no env task, so it has no env tools", code="no_env_task")
        try:
            text = await asyncio.to_thread(session.task.call_tool, name, body.arguments)
        except ToolCallError as exc:
            raise APIError(400, str(exc), code="invalid_tool_call", param="arguments") from None
        return {"content": text, "done": session.task.done}

    @app.post("/sessions/{sid}/finish")
    async def finish(sid: str, body: FinishBody) -> dict[str, Any]:
        session = gateway.session(sid)
        trajectories = await asyncio.to_thread(gateway.finish, session, answer=body.answer, reward=body.reward,
                                               failed=body.error)
        return {"session_id": sid, **session.outcome,
                "layout": trajectories[0].info.get("gateway", {}).get("layout") if trajectories else None}

    @app.get("/sessions/{sid}/trajectories")
    def trajectories(sid: str) -> dict[str, Any]:
        session = gateway.session(sid)
        return {"object": "list", "finished": session.finished,
                "data": [t.to_dict() for t in gateway.trajectories(session)]}

    return app
