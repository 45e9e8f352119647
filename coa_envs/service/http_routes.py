"""The HTTP routes of ``coa serve-env``: discovery (health, envs, metadata, schema) and
sessions under ``/sessions`` (open, state, tasks, reset, step, close).

Each route checks the bearer token and hands the request to the :class:`SessionManager`;
the wire format is :mod:`coa_envs.service.wire`'s.
"""

# No ``from __future__ import annotations``: FastAPI inspects the route signatures' types.
from typing import Any

from coa_envs.service.guards import authorized
from coa_envs.service.sessions import SessionManager
from coa_envs.service.wire import ErrorCode, ServiceError, loads_or_refuse

__all__ = ["SCHEMA", "http_routes"]


def http_routes(manager: SessionManager, token: str | None) -> Any:
    """An ``APIRouter`` with the discovery and HTTP session routes over ``manager``."""
    from fastapi import APIRouter, Request

    import coa_envs

    router = APIRouter()

    async def guard(request: Request) -> None:
        if not authorized(request.headers, token):
            raise ServiceError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token (Authorization: Bearer <token>)")

    async def body(request: Request) -> dict[str, Any]:
        await guard(request)
        raw = await request.body()
        if not raw.strip():
            return {}
        data = loads_or_refuse(raw, "body")
        if not isinstance(data, dict):
            raise ServiceError(ErrorCode.VALIDATION_ERROR, "the body must be a JSON object")
        return data

    # -- discovery ----------------------------------------------------------------------
    @router.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": len(manager.sessions), "max_sessions": manager.max_sessions}

    @router.get("/envs")
    async def envs(request: Request) -> dict[str, Any]:
        await guard(request)
        return {"envs": manager.describe_envs()}

    @router.get("/metadata")
    async def metadata(request: Request) -> dict[str, Any]:
        await guard(request)
        return {"name": "coa-envs", "description": "Chain-of-Agents text envs: " + ", ".join(manager.env_ids),
                "version": coa_envs.__version__, "documentation_url": None, "readme_content": None,
                "author": None}

    @router.get("/schema")
    async def schema(request: Request) -> dict[str, Any]:
        await guard(request)
        return SCHEMA

    # -- HTTP sessions ------------------------------------------------------------------
    @router.post("/sessions", status_code=201)
    async def open_session(request: Request) -> dict[str, Any]:
        data = await body(request)
        extra = sorted(set(data) - {"env_id", "overrides"})
        if extra:
            raise ServiceError(ErrorCode.VALIDATION_ERROR, f"unknown field(s) {extra}; send env_id and overrides")
        session = await manager.open(data.get("env_id"), data.get("overrides"))
        return session.describe()

    @router.get("/sessions/{session_id}")
    async def session_state(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        return manager.get(session_id).state()

    @router.get("/sessions/{session_id}/tasks")
    async def session_tasks(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        return await manager.tasks(manager.get(session_id))

    @router.post("/sessions/{session_id}/reset")
    async def session_reset(session_id: str, request: Request) -> dict[str, Any]:
        data = await body(request)
        return await manager.reset(manager.get(session_id), data)

    @router.post("/sessions/{session_id}/step")
    async def session_step(session_id: str, request: Request) -> dict[str, Any]:
        data = await body(request)
        return await manager.step(manager.get(session_id), data)

    @router.delete("/sessions/{session_id}")
    async def session_close(session_id: str, request: Request) -> dict[str, Any]:
        await guard(request)
        manager.get(session_id)
        await manager.close(session_id)
        return {"session_id": session_id, "closed": True}

    return router


SCHEMA = {
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
