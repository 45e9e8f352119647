"""The gateway's sessions API: open, list and describe sessions, run an env tool, finish.

``POST /sessions`` opens a session (on a coa env task when ``env_id`` is given) and answers
with its ``base_url``, the question, the env's prompt messages and its tools;
``POST /sessions/{sid}/tools/{name}`` runs an env tool; ``POST /sessions/{sid}/finish`` scores
and closes it; ``GET /sessions/{sid}/trajectories`` gives what it recorded.
"""

# No ``from __future__ import annotations``: FastAPI reads the body models' annotations.
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.gateway.core import Gateway
from agents.openai_errors import APIError, refuse_unpaired_surrogates

__all__ = ["FinishBody", "OpenBody", "ToolBody", "session_routes"]


class OpenBody(BaseModel):
    """``POST /sessions``."""

    model_config = ConfigDict(extra="forbid")
    env_id: str | None = None
    task_id: str | None = None
    task_index: int | None = Field(None, ge=0)
    env_kwargs: dict[str, Any] | None = None
    seed: int | None = None
    session_id: str | None = None
    metadata: dict[str, Any] | None = None

class ToolBody(BaseModel):
    """``POST /sessions/{sid}/tools/{name}``."""

    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any] | str = Field(default_factory=dict)

class FinishBody(BaseModel):
    """``POST /sessions/{sid}/finish``."""

    model_config = ConfigDict(extra="forbid")
    answer: str | None = None
    reward: float | None = None
    error: str | None = None


def session_routes(gateway: Gateway, base: Callable[[Any], str], blocking: Callable[..., Awaitable[Any]],
                   admin_token: str | None = None) -> Any:
    """An ``APIRouter`` with the sessions API over ``gateway``; ``base(request)`` is the URL
    the session URLs are built on; ``blocking(fn, ...)`` runs blocking work off the event loop.

    A session's id (122 random bits unless the client chose it) is what lets a caller use it,
    so the one route that hands out other sessions' ids, ``GET /sessions``, needs
    ``Authorization: Bearer <admin_token>`` when an ``admin_token`` is set: in an RL group the
    agents play the same task at once, and one that could list its siblings could read the
    answer a finished sibling was paid for, or finish a sibling with a wrong one. Without an
    admin token listing is refused (403 ``listing_disabled``): any local process, a
    code-running agent's included, could otherwise read every session id."""
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    from coa_envs.service.guards import authorized

    router = APIRouter()

    def check_admin(request: Request) -> None:
        if admin_token is None:
            raise APIError(403, "listing sessions is off: the gateway was started without an admin token "
                                "(coa gateway --admin-token / $COA_GATEWAY_ADMIN_TOKEN); a session's own routes "
                                "need only its id", code="listing_disabled")
        if not authorized(request.headers, admin_token):
            raise APIError(401, "listing sessions needs the gateway's admin token (Authorization: Bearer "
                                "<token>); a session's own routes need only its id", code="invalid_api_key")

    @router.post("/sessions")
    async def open_session(body: OpenBody, request: Request) -> Any:
        refuse_unpaired_surrogates(body.model_dump())
        session = await blocking(
            gateway.open_session, session_id=body.session_id, env_id=body.env_id, task_id=body.task_id,
            task_index=body.task_index, env_kwargs=body.env_kwargs, seed=body.seed,
            info={"metadata": body.metadata} if body.metadata else None)
        return JSONResponse(gateway.describe_session(session, base(request)), status_code=201)

    @router.get("/sessions")
    def list_sessions(request: Request) -> dict[str, Any]:
        check_admin(request)
        return {"object": "list", "data": [s.describe() for s in gateway.store.live()]}

    @router.get("/sessions/{sid}")
    def describe(sid: str) -> dict[str, Any]:
        return gateway.session(sid).describe()

    @router.post("/sessions/{sid}/tools/{name}")
    async def call_tool(sid: str, name: str, body: ToolBody) -> dict[str, Any]:
        from agents.gateway.envtask import ToolCallError

        refuse_unpaired_surrogates(body.model_dump())
        session = gateway.session(sid)
        session.check_open()
        if session.task is None:
            raise APIError(404, f"session {sid!r} plays no env task, so it has no env tools", code="no_env_task")
        try:
            text = await blocking(session.task.call_tool, name, body.arguments)
        except ToolCallError as exc:
            raise APIError(400, str(exc), code="invalid_tool_call", param="arguments") from None
        return {"content": text, "done": session.task.done}

    @router.post("/sessions/{sid}/finish")
    async def finish(sid: str, body: FinishBody) -> dict[str, Any]:
        refuse_unpaired_surrogates(body.model_dump())  # kept, it failed the session's JSON (500s, its JSONL line)
        session = gateway.session(sid)
        trajectories = await blocking(gateway.finish, session, answer=body.answer, reward=body.reward,
                                               failed=body.error)
        return {"session_id": sid, **session.outcome,
                "layout": trajectories[0].info.get("gateway", {}).get("layout") if trajectories else None}

    @router.get("/sessions/{sid}/trajectories")
    def trajectories(sid: str) -> dict[str, Any]:
        session = gateway.session(sid)
        return {"object": "list", "finished": session.finished,
                "data": [t.to_dict() for t in gateway.trajectories(session)]}

    return router
