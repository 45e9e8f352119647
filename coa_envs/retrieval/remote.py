"""Client for a retrieval server speaking the Search-R1 API.

``POST {url}`` with ``{"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[hit, ...], ...]}`` where a hit is ``{"document": {"id", "contents"}, "score"}``
when scores are asked for and the bare document otherwise. Works against ``coa retriever
serve`` and against Search-R1's / FlashRAG's own ``retrieval_server.py``.

Transient failures (connection refused, timeouts, HTTP 429/5xx) are retried with
exponential backoff; when the budget is spent :class:`RetrieverUnavailable` says what went
wrong, and the tool turns it into a ``tool_timeout`` observation. An answer that is not the
API (4xx, malformed json) is not retried: :class:`RetrieverBadResponse`, ``tool_error``.
The wait before retry ``n`` is ``min(max_backoff_s, backoff_s * 2**(n-1))``.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from coa_envs.retrieval.base import RetrieverBadResponse, RetrieverUnavailable, SearchHit
from coa_envs.retrieval.corpus import CorpusError, passage_from_row

__all__ = ["RemoteRetriever"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RemoteRetriever:
    """HTTP retriever; ``httpx.Client`` is thread-safe, so one instance serves every thread."""

    backend = "remote"

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000/retrieve",
        *,
        timeout_s: float = 10.0,
        connect_timeout_s: float | None = None,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        return_scores: bool = True,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"remote retriever url must start with http:// or https://, got {url!r}")
        if retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ValueError("retries and backoff_s must be >= 0 and timeout_s > 0")
        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.return_scores = return_scores
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s or min(timeout_s, 3.0))
        self._client = httpx.Client(timeout=timeout, headers=headers, trust_env=False)

    def _post(self, payload: dict[str, Any]) -> Any:
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
            try:
                response = self._client.post(self.url, json=payload)
            except httpx.TimeoutException as exc:
                last_error = f"timed out ({type(exc).__name__})"
                continue
            except httpx.TransportError as exc:
                last_error = f"could not connect ({type(exc).__name__}: {exc})"
                continue
            if response.status_code in _RETRY_STATUS:
                last_error = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise RetrieverBadResponse(
                    f"retriever at {self.url} answered HTTP {response.status_code}: {response.text[:200]}"
                )
            try:
                return response.json()
            except ValueError as exc:
                raise RetrieverBadResponse(f"retriever at {self.url} sent invalid json") from exc
        raise RetrieverUnavailable(
            f"retriever at {self.url} unavailable after {self.retries + 1} attempt(s): {last_error}"
        )

    def search(self, queries: list[str], k: int = 3) -> list[list[SearchHit]]:
        if not queries:
            return []
        body = self._post({"queries": list(queries), "topk": int(k), "return_scores": self.return_scores})
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrieverBadResponse(f"retriever at {self.url} sent a malformed answer (no 'result' list)")
        try:
            return [[self._hit(item) for item in per_query] for per_query in result]
        except (CorpusError, TypeError, ValueError, AttributeError) as exc:
            raise RetrieverBadResponse(f"retriever at {self.url} sent a malformed hit ({exc})") from exc

    def _hit(self, item: Any) -> SearchHit:
        if isinstance(item, dict) and "document" in item:  # return_scores=True
            return SearchHit(passage_from_row(item["document"], self.url), float(item.get("score", 0.0)))
        return SearchHit(passage_from_row(item, self.url), 0.0)

    def close(self) -> None:
        self._client.close()
