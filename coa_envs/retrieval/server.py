"""A retrieval HTTP server with the Search-R1 API, backed by a local bm25 or dense index.

``POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}`` ->
``{"result": [[...], ...]}`` (see :mod:`coa_envs.retrieval.remote`), ``GET /health``.

Requests are batched opportunistically: one worker takes everything that is queued, runs
it as one ``search`` call in a thread, and meanwhile new requests queue up. An idle server
therefore adds no waiting time, and a busy one amortises tokenisation/encoding over many
concurrent rollouts. fastapi and uvicorn are imported only here (the ``serve`` extra).
"""

# No `from __future__ import annotations`: FastAPI must resolve the request model, which is
# defined inside create_app (pydantic/fastapi stay lazy imports), from real annotations.
import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from coa_envs.retrieval.base import Retriever, SearchHit

__all__ = ["create_app", "run_server", "serve_in_thread"]


@dataclass(slots=True)
class _Pending:
    queries: list[str]
    topk: int
    future: asyncio.Future[list[list[SearchHit]]]


def _wire(hits: list[SearchHit], return_scores: bool) -> list[dict[str, Any]]:
    return [hit.to_wire() if return_scores else hit.passage.to_row() for hit in hits]


def create_app(retriever: Retriever, *, max_batch_queries: int = 256, max_topk: int = 100) -> Any:
    """Build the FastAPI app. ``max_batch_queries`` caps the queries in one search call."""
    from fastapi import FastAPI, Request
    from fastapi.responses import Response

    state: dict[str, Any] = {}

    def parse(body: bytes) -> tuple[list[str], int, bool] | str:
        """Validate a request by hand: pydantic's per-request cost is most of a small query's overhead."""
        try:
            data = json.loads(body)
        except ValueError:
            return "body is not valid json"
        if not isinstance(data, dict):
            return "body must be a json object"
        queries, topk, scores = data.get("queries"), data.get("topk", 3), data.get("return_scores", False)
        if not isinstance(queries, list) or not 1 <= len(queries) <= 4096:
            return "queries must be a list of 1-4096 strings"
        if not all(isinstance(query, str) for query in queries):
            return "queries must be a list of 1-4096 strings"
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= max_topk:
            return f"topk must be an integer from 1 to {max_topk}"
        if not isinstance(scores, bool):
            return "return_scores must be true or false"
        return queries, topk, scores

    async def batch_worker(queue: asyncio.Queue[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            size = len(batch[0].queries)
            while not queue.empty() and size < max_batch_queries:
                item = queue.get_nowait()
                batch.append(item)
                size += len(item.queries)
            queries = [query for item in batch for query in item.queries]
            topk = max(item.topk for item in batch)
            try:
                hits = await loop.run_in_executor(None, retriever.search, queries, topk)
            except Exception as exc:  # one bad batch must not kill the worker
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            start = 0
            for item in batch:
                chunk = [row[: item.topk] for row in hits[start : start + len(item.queries)]]
                start += len(item.queries)
                if not item.future.done():
                    item.future.set_result(chunk)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any):  # type: ignore[no-untyped-def]
        queue: asyncio.Queue[_Pending] = asyncio.Queue()
        state["queue"] = queue
        worker = asyncio.create_task(batch_worker(queue))
        try:
            yield
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    app = FastAPI(title="coa retriever", lifespan=lifespan)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Response:
        parsed = parse(await request.body())
        if isinstance(parsed, str):
            return Response(json.dumps({"detail": parsed}), status_code=422, media_type="application/json")
        queries, topk, return_scores = parsed
        future: asyncio.Future[list[list[SearchHit]]] = asyncio.get_running_loop().create_future()
        state["queue"].put_nowait(_Pending(queries, topk, future))
        try:
            hits = await future
        except Exception as exc:
            body = json.dumps({"detail": f"retrieval failed: {exc}"})
            return Response(body, status_code=500, media_type="application/json")
        result = [_wire(row, return_scores) for row in hits]
        return Response(json.dumps({"result": result}, ensure_ascii=False), media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "backend": retriever.backend,
            "num_docs": getattr(retriever, "num_docs", None),
        }

    return app


def run_server(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Serve until interrupted (Ctrl-C); used by ``coa retriever serve``."""
    import uvicorn

    uvicorn.run(create_app(retriever, **app_options), host=host, port=port, log_level="warning")


@contextlib.contextmanager
def serve_in_thread(retriever: Retriever, host: str = "127.0.0.1", port: int = 0, **app_options: Any) -> Iterator[str]:
    """Run the server in a background thread for tests/benchmarks; yields its base url
    (``port=0`` picks a free port; the server is shut down and joined when the block exits)."""
    from coa_envs.service.running import serve_in_thread as serve_app

    with serve_app(create_app(retriever, **app_options), host, port) as url:
        yield url
