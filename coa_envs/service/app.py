"""The ``coa serve-env`` application: HTTP and WebSocket transport over a :class:`SessionManager`.

The wire format is documented in :mod:`coa_envs.service.wire`. This module only moves
frames: authentication (optional bearer token, compared in constant time), request size
limits (checked before a body is parsed), JSON errors with a code and a reason, and the
WebSocket loop that is OpenEnv's ``EnvClient`` protocol. fastapi/uvicorn are imported here
only (the ``serve`` extra); ``import coa_envs`` never loads this module.
"""

# No ``from __future__ import annotations``: FastAPI inspects the route signatures' types.
import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from coa_envs.service.sessions import Session, SessionManager
from coa_envs.service.wire import HANGUP_ERRORS, ErrorCode, ServiceError, dumps, error_frame

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def _authorized(headers: Mapping[str, str], token: str | None) -> bool:
    if token is None:
        return True
    given = headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


class _BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before anything parses it."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Callable) -> None:
        error = ServiceError(ErrorCode.TOO_LARGE, f"the request body is over the server's limit of {self.limit} bytes")
        payload = dumps(error.body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def create_app(manager: SessionManager, *, token: str | None = None, max_request_bytes: int = 1 << 20) -> Any:
    """A FastAPI app serving ``manager``'s envs; see :mod:`coa_envs.service.wire`."""
    from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
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
    app.add_middleware(_BodyLimit, limit=max_request_bytes)

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.code == ErrorCode.CAPACITY_REACHED else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def guard(request: Request) -> None:
        if not _authorized(request.headers, token):
            raise ServiceError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer <token>)")

    async def body(request: Request) -> dict[str, Any]:
        await guard(request)
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ServiceError(ErrorCode.INVALID_JSON, f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "the body must be a JSON object")
        return data

    # -- discovery ----------------------------------------------------------------------
    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(manager.sessions), "max_sessions": manager.max_sessions}

    @app.get("/envs")
    async def envs(request: Request) -> dict[str, Any]:
        await guard(request)
        return {"envs": manager.describe_envs()}

    @app.get("/metadata")
    async def metadata(request: Request) -> dict[str, Any]:
        await guard(request)
        return {"name": "coa-envs", "description": "Chain-of-Agents text envs: " + ", ".join(manager.env_ids),
                "version": coa_envs.__version__, "documentation_url": None, "readme_content": None,
                "author": None}

    @app.get("/schema")
    async def schema(request: Request) -> dict[str, Any]:
        await guard(request)
        return _SCHEMA

    # -- HTTP sessions ------------------------------------------------------------------
    @app.post("/sessions", status_code=201)
    async def open_session(request: Request) -> dict[str, Any]:
        data = await body(request)
        extra = sorted(set(data) - {"env_id", "overrides"})
        if extra:
            raise ServiceError(ErrorCode.VALIDATION_ERROR, f"unknown field(s) {extra}; send env_id and overrides")
        session = await manager.open(data.get("env_id"), data.get("overrides"))
        return session.describe()

    @app.get("/sessions/{session_id}")
    async def session_state(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        return manager.get(session_id).state()

    @app.get("/sessions/{session_id}/tasks")
    async def session_tasks(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        return await manager.tasks(manager.get(session_id))

    @app.post("/sessions/{session_id}/reset")
    async def session_reset(session_id: str, request: Request) -> dict[str, Any]:
        data = await body(request)
        return await manager.reset(manager.get(session_id), data)

    @app.post("/sessions/{session_id}/step")
    async def session_step(session_id: str, request: Request) -> dict[str, Any]:
        data = await body(request)
        return await manager.step(manager.get(session_id), data)

    @app.delete("/sessions/{session_id}")
    async def session_close(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        manager.get(session_id)
        await manager.close(session_id)
        return {"session_id": session_id, "closed": True}

    # -- WebSocket sessions (OpenEnv's EnvClient protocol) --------------------------------
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
        if not _authorized(websocket.headers, token):
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
            nonlocal session
            if session is None:
                if path_env_id is not None and env_id not in (None, path_env_id):
                    raise ServiceError(ErrorCode.VALIDATION_ERROR, f"this URL serves {path_env_id}, not {env_id}")
                session = await manager.open(path_env_id or env_id, overrides)
                session.on_expire = hang_up
            return session

        try:
            while True:
                try:
                    raw = await websocket.receive_text()
                except WebSocketDisconnect:
                    return
                try:
                    reply = await _ws_message(raw, ensure, lambda: session)
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

    async def _ws_message(raw: str, ensure: Callable, current: Callable[[], Session | None]) -> str | None:
        if len(raw) > max_request_bytes or len(raw.encode("utf-8", "surrogatepass")) > max_request_bytes:
            raise ServiceError(ErrorCode.TOO_LARGE,
                               f"the frame is over the server's limit of {max_request_bytes} bytes")
        try:
            message = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ServiceError(ErrorCode.INVALID_JSON, f"the frame is not JSON: {exc}") from None
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

    @app.websocket("/ws")
    async def ws_any(websocket: WebSocket) -> None:
        await ws_loop(websocket, None)

    @app.websocket("/envs/{env_id:path}/ws")
    async def ws_env(websocket: WebSocket, env_id: str) -> None:
        await ws_loop(websocket, env_id)

    return app


_SCHEMA = {
    "action": {"title": "CoAAction", "type": "object", "required": ["action"], "properties": {
        "action": {"anyOf": [{"type": "string", "description": "one model turn in the CoA tag protocol"},
                             {"type": "object", "description": "an assistant message with tool_calls "
                                                               "(protocol: tools)"}]}}},
    "observation": {"title": "CoAObservation", "type": "object", "properties": {
        "text": {"type": "string"}, "info": {"type": "object"},
        "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"}}},
    "state": {"title": "CoAState", "type": "object", "properties": {
        "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
        "session_id": {"type": "string"}, "env_id": {"type": "string"}, "task_id": {"type": ["string", "null"]},
        "done": {"type": "boolean"}}},
}
