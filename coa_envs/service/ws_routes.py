"""The WebSocket routes of ``coa serve-env``: OpenEnv's ``EnvClient`` protocol at ``/ws`` and
``/envs/<id>/ws``, one session per connection.

Frames are ``{"type": ..., "data": {...}}`` (:mod:`coa_envs.service.wire`): reset, step,
state, close, open and tasks. A malformed frame is answered with an error frame; an error
that ends the conversation (auth, size, an expired session) is answered, then the socket
closes; the session closes with its connection.
"""

# No ``from __future__ import annotations``: FastAPI inspects the route signatures' types.
import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from coa_envs.service.guards import authorized
from coa_envs.service.sessions import Session, SessionManager
from coa_envs.service.wire import HANGUP_ERRORS, ErrorCode, ServiceError, dumps, error_frame, loads_or_refuse

__all__ = ["ws_routes"]


def ws_routes(manager: SessionManager, token: str | None, max_request_bytes: int) -> Any:
    """An ``APIRouter`` with the WebSocket routes over ``manager``."""
    from fastapi import APIRouter, WebSocket, WebSocketDisconnect

    router = APIRouter()

    async def refuse(websocket: WebSocket, error: ServiceError) -> None:
        """Answer the client's first frame with ``error`` and hang up: request/reply clients
        (OpenEnv's too) then raise the reason instead of a bare closed connection."""
        with contextlib.suppress(WebSocketDisconnect):
            await websocket.receive_text()
            await websocket.send_text(error_frame(error.code, error.message))
        with contextlib.suppress(Exception):
            await websocket.close(code=1008)

    async def ws_loop(websocket: WebSocket, path_env_id: str | None) -> None:
        await websocket.accept()
        if not authorized(websocket.headers, token):
            await refuse(websocket, ServiceError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token "
                                                                         "(Authorization: Bearer <token>)"))
            return
        if path_env_id is not None:
            try:
                manager.resolve_env_id(path_env_id)
            except ServiceError as exc:
                await refuse(websocket, exc)
                return
        session: Session | None = None
        loop = asyncio.get_running_loop()
        farewells: set[asyncio.Task] = set()

        def hang_up() -> None:  # the reaper expired this connection's session
            async def bye() -> None:
                with contextlib.suppress(Exception):
                    await websocket.send_text(error_frame(ErrorCode.UNKNOWN_SESSION, f"the session expired after "
                                                          f"{manager.idle_timeout_s:g} s without a request"))
                    await websocket.close(code=1001)
            task = loop.create_task(bye())
            farewells.add(task)
            task.add_done_callback(farewells.discard)

        async def ensure(env_id: Any, overrides: Any) -> Session:
            """The connection's session, opened on its first frame; a later frame naming other
            overrides reconfigures it (they were ignored), one naming another env is refused."""
            nonlocal session
            if path_env_id is not None and env_id not in (None, path_env_id):
                raise ServiceError(ErrorCode.VALIDATION_ERROR, f"this URL serves {path_env_id}, not {env_id}")
            if session is None:
                session = await manager.open(path_env_id or env_id, overrides)
                session.on_expire = hang_up
                return session
            if env_id not in (None, session.env_id):
                raise ServiceError(ErrorCode.VALIDATION_ERROR, f"this connection's session serves {session.env_id}; "
                                                               "open another connection for another env")
            await manager.reconfigure(session, overrides)
            return session

        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                try:
                    reply = await _answer(_frame_text(message), manager, max_request_bytes, ensure, lambda: session)
                except ServiceError as exc:
                    await websocket.send_text(error_frame(exc.code, exc.message))
                    if exc.code in HANGUP_ERRORS:
                        await websocket.close(code=1008 if exc.code != ErrorCode.UNKNOWN_SESSION else 1001)
                        return
                    continue
                if reply is None:  # close
                    return
                await websocket.send_text(reply)
        except WebSocketDisconnect:
            return
        finally:
            if session is not None:
                await manager.close(session.session_id)
            with contextlib.suppress(Exception):
                await websocket.close()

    @router.websocket("/ws")
    async def ws_any(websocket: WebSocket) -> None:
        await ws_loop(websocket, None)

    @router.websocket("/envs/{env_id:path}/ws")
    async def ws_env(websocket: WebSocket, env_id: str) -> None:
        await ws_loop(websocket, env_id)

    return router


def _frame_text(message: dict) -> str:
    """A frame's text; a binary frame is read as UTF-8 JSON (some clients send JSON as bytes).
    It was a ``KeyError`` that dropped the connection and closed its session."""
    if message.get("text") is not None:
        return message["text"]
    try:
        return (message.get("bytes") or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ServiceError(ErrorCode.INVALID_JSON, "a binary frame must hold UTF-8 JSON") from None


async def _answer(raw: str, manager: SessionManager, max_request_bytes: int, ensure: Callable,
                  current: Callable[[], Session | None]) -> str | None:
    """The reply frame to one client frame (None for ``close``); a bad frame raises ServiceError."""
    if len(raw) > max_request_bytes or len(raw.encode("utf-8", "surrogatepass")) > max_request_bytes:
        raise ServiceError(ErrorCode.TOO_LARGE,
                           f"the frame is over the server's limit of {max_request_bytes} bytes")
    message = loads_or_refuse(raw, "frame")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ServiceError(ErrorCode.VALIDATION_ERROR, 'a frame is {"type": ..., "data": {...}}')
    kind, data = message["type"], message.get("data") or {}
    if not isinstance(data, dict):
        raise ServiceError(ErrorCode.VALIDATION_ERROR, "data must be a JSON object")
    if kind == "close":
        return None
    if kind == "reset":
        session = await ensure(data.get("env_id"), data.get("overrides"))
        return dumps({"type": "observation", "data": await manager.reset(session, data)})
    if kind == "step":
        session = current()
        if session is None:
            raise ServiceError(ErrorCode.NO_EPISODE, "no episode is running in this session; send reset first")
        return dumps({"type": "observation", "data": await manager.step(session, data)})
    if kind == "state":
        session = current()
        state = session.state() if session is not None else {"episode_id": None, "step_count": 0}
        return dumps({"type": "state", "data": state})
    if kind == "open":
        session = await ensure(data.get("env_id"), data.get("overrides"))
        return dumps({"type": "opened", "data": session.describe()})
    if kind == "tasks":
        session = await ensure(data.get("env_id"), data.get("overrides"))
        return dumps({"type": "tasks", "data": await manager.tasks(session)})
    raise ServiceError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind!r}; "
                                               "use reset, step, state, close, open or tasks")
