"""The gateway's chat routes: OpenAI's chat completions, per session or for one call.

``POST /sessions/{sid}/v1/chat/completions`` answers in session ``sid`` (opened on first use);
``POST /v1/chat/completions`` answers in the session its ``X-Session-Id`` header names, or,
without one, in a one-call session finished at once. Streamed replies are server-sent events.
"""

# No ``from __future__ import annotations``: FastAPI reads the body models' annotations.
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents.gateway.core import Gateway
from agents.gateway.sessions import GatewaySession
from agents.gateway.wire import ChatRequest, check_request

__all__ = ["SESSION_HEADER", "chat_routes"]

SESSION_HEADER = "X-Session-Id"


def chat_routes(gateway: Gateway, blocking: Callable[..., Awaitable[Any]]) -> Any:
    """An ``APIRouter`` with the chat completion routes over ``gateway``; ``blocking(fn, ...)``
    runs blocking work off the event loop."""
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    from agents.http_streams import event_stream, unless_disconnected

    router = APIRouter()

    async def answer(session: GatewaySession, body: ChatRequest, one_call: bool, request: Request) -> Any:
        backend = gateway.backend
        check_request(body, local=getattr(backend, "source", None) == "engine",
                      top_logprobs=getattr(backend, "supports_top_logprobs", False))
        gateway.check_model(body.model)
        session.check_open()
        headers = {SESSION_HEADER: session.session_id}
        if not body.stream:
            try:
                result = await unless_disconnected(
                    request, backend.complete(session, body, body.model or gateway.model_name))
            finally:
                if one_call:
                    await blocking(gateway.finish, session)
            return result if not isinstance(result, dict) else JSONResponse(result, headers=headers)
        try:
            prepared = await backend.prepare_stream(session, body)
        except BaseException:
            if one_call:
                await blocking(gateway.finish, session)
            raise
        stream = backend.stream(session, body, body.model or gateway.model_name, *prepared)
        started = False

        async def events() -> AsyncIterator[str]:
            nonlocal started
            started = True
            async for event in stream:
                yield event

        async def on_close() -> None:  # runs however the response ends, the client gone included
            try:
                if started:
                    await stream.aclose()
                else:  # the client left before the first byte: the call was never made
                    await backend.discard_stream(session, *prepared)
            finally:
                if one_call:
                    await blocking(gateway.finish, session)

        return event_stream(events(), headers={**headers, "Cache-Control": "no-cache"}, on_close=on_close)

    @router.post("/sessions/{sid}/v1/chat/completions")
    async def session_chat(sid: str, body: ChatRequest, request: Request) -> Any:
        return await answer(gateway.store.get_or_open(sid), body, False, request)

    @router.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> Any:
        sid = request.headers.get(SESSION_HEADER)
        if sid:
            return await answer(gateway.store.get_or_open(sid), body, False, request)
        return await answer(gateway.open_session(), body, True, request)

    return router
