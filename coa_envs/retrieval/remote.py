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

import http.client
import json
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from coa_envs.retrieval.base import RetrieverBadResponse, RetrieverUnavailable, SearchHit
from coa_envs.retrieval.corpus import CorpusError, passage_from_row

__all__ = ["RemoteRetriever"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# A kept-alive connection the server has since closed fails like this before any byte of an
# answer arrives; that is not the server being down, so it is retried once on a new connection.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class RemoteRetriever:
    """HTTP retriever over one keep-alive connection per calling thread.

    ``http.client`` rather than ``httpx``: on loopback the client's own per-request cost is
    most of the round trip, and the standard library's is about half of httpx's. Proxies
    from the environment are never used. ``timeout_s`` bounds each socket operation
    (connect: ``connect_timeout_s``).
    """

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
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.return_scores = return_scores
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s or min(timeout_s, 3.0)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        self._local = threading.local()
        # every thread's connection, to close them all; weak, so a finished thread's goes with it
        self._connections: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.connect_timeout_s)
            self._local.conn = conn
            with self._lock:
                self._connections.add(conn)
        if conn.sock is None:
            conn.timeout = self.connect_timeout_s
            conn.connect()
            conn.sock.settimeout(self.timeout_s)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()  # reconnects on next use

    def _request(self, body: bytes) -> tuple[int, bytes]:
        for fresh in (False, True):
            reused = getattr(self._local, "conn", None) is not None and self._local.conn.sock is not None
            conn = self._connection()
            try:
                conn.request("POST", self._path, body=body, headers=self._headers)
                response = conn.getresponse()
                return response.status, response.read()
            except _STALE:
                self._drop_connection()
                if not reused or fresh:
                    raise
            except BaseException:
                self._drop_connection()
                raise
        raise AssertionError("unreachable")

    def _post(self, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
            try:
                status, content = self._request(body)
            except TimeoutError as exc:
                last_error = f"timed out ({type(exc).__name__})"
                continue
            except (OSError, http.client.HTTPException) as exc:
                last_error = f"could not connect ({type(exc).__name__}: {exc})"
                continue
            if status in _RETRY_STATUS:
                last_error = f"HTTP {status}"
                continue
            if status != 200:
                text = content[:200].decode("utf-8", "replace")
                raise RetrieverBadResponse(f"retriever at {self.url} answered HTTP {status}: {text}")
            try:
                return json.loads(content)
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
        with self._lock:
            for conn in list(self._connections):
                conn.close()  # a later search from the same thread reconnects
