"""The viewer's HTTP layer: a FastAPI app serving the page, its assets and a small JSON API.

Security, because the page shows model output and may run on a shared machine:

* ``coa view`` binds 127.0.0.1 unless told otherwise, and the app only answers requests whose
  ``Host`` is one it was started for (loopback names by default), so a web page elsewhere
  cannot reach it through DNS rebinding;
* assets come from a fixed list of names and episodes are integer coordinates, so no request
  can name a file on disk;
* the page renders every trajectory string with ``textContent``, and a Content-Security-Policy
  allows only the page's own scripts and styles (no inline script, no third-party origin), so
  model output that looks like HTML stays text.

Errors come back as ``{"error": message}`` with a 4xx status; nothing a request sends can take
the server down.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint signatures' types.
from importlib import resources
from typing import Any, Literal

from agents.viewer.query import LENGTH_UNITS, SORT_KEYS, CompareQuery, EpisodeQuery
from agents.viewer.service import EpisodeNotFound, ViewerData

__all__ = ["ASSETS", "CSP", "LOOPBACK_HOSTS", "create_app", "read_asset"]

#: Every file the page loads; anything else under /assets is a 404.
ASSETS: dict[str, str] = {
    "viewer.css": "text/css; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "render.js": "text/javascript; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def read_asset(name: str) -> str:
    """The text of ``index.html`` or one of :data:`ASSETS`, from the installed package."""
    if name != "index.html" and name not in ASSETS:
        raise KeyError(name)
    return (resources.files("agents.viewer") / "static" / name).read_text(encoding="utf-8")


def create_app(data: ViewerData, allowed_hosts: list[str] | tuple[str, ...] = LOOPBACK_HOSTS) -> Any:
    """The ASGI app over ``data``; requests for other ``Host`` names get 400."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    app = FastAPI(title="coa view", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(EpisodeNotFound)
    async def not_found(request: Request, exc: EpisodeNotFound) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(FileNotFoundError)
    async def gone(request: Request, exc: FileNotFoundError) -> JSONResponse:
        return error(410, str(exc))

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return error(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}" for e in exc.errors())
        return error(422, problems or "invalid request")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error(500, f"{type(exc).__name__}: {exc}")

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(read_asset("index.html"))

    @app.get("/assets/{name}")
    def asset(name: str) -> Response:
        if name not in ASSETS:
            return error(404, f"no asset {name!r}")
        return Response(read_asset(name), media_type=ASSETS[name])

    @app.get("/api/runs")
    def runs() -> dict[str, Any]:
        return {"runs": data.runs_info(), "sort_keys": list(SORT_KEYS), "length_units": list(LENGTH_UNITS)}

    @app.get("/api/episodes")
    def episodes(run: int | None = None, env: str = "", task: str = "", task_id: str = "", status: str = "",
                 min_reward: float | None = None, max_reward: float | None = None, min_len: int | None = None,
                 max_len: int | None = None, len_unit: Literal["turns", "tokens", "chars"] = "turns",
                 tool_errors: Literal["", "none", "some"] = "", has_ids: Literal["", "yes", "no"] = "",
                 sort: Literal["file", "reward", "turns", "tokens", "chars", "tool_calls", "tool_errors", "task",
                               "status"] = "file",
                 order: Literal["asc", "desc"] = "asc", offset: int = 0, limit: int = 50) -> dict[str, Any]:
        query = EpisodeQuery(run=run, env=env, task=task, task_id=task_id, status=status, min_reward=min_reward,
                             max_reward=max_reward, min_len=min_len, max_len=max_len, len_unit=len_unit,
                             tool_errors=tool_errors, has_ids=has_ids, sort=sort, order=order, offset=offset,
                             limit=limit)
        return data.episodes(query)

    @app.get("/api/episode")
    def episode(run: int, file: int, row: int) -> dict[str, Any]:
        return data.episode(run, file, row)

    @app.get("/api/tokens")
    def tokens(run: int, file: int, row: int) -> dict[str, Any]:
        return data.tokens(run, file, row)

    @app.get("/api/compare")
    def compare(a: int = 0, b: int = 1, env: str = "", task: str = "",
                sort: Literal["delta", "task", "reward_a", "reward_b"] = "delta",
                order: Literal["asc", "desc"] = "asc", offset: int = 0, limit: int = 50) -> dict[str, Any]:
        if not 1 <= limit <= 500 or offset < 0:
            raise ValueError("limit must be 1..500 and offset >= 0")
        return data.compare(CompareQuery(a=a, b=b, env=env, task=task, sort=sort, order=order, offset=offset,
                                         limit=limit))

    return app
