"""The ``web_search`` tool: a query in, numbered results (title, URL, snippet) out.

Backends:
- ``serper``: Google results through Serper's HTTP API (``POST {base_url}/search``, key in
  ``SERPER_API_KEY`` or ``api_key``); without a key every call is a ``NOT_CONFIGURED``
  observation, so an env can be built and inspected before a key is set.
- ``searxng``: any SearXNG-compatible JSON API (``GET {base_url}/search?q=..&format=json``).
- ``local``: BM25 over a local page collection (see :mod:`coa_envs.web.collection`), the
  offline engine for the mini-web, tests and demos.

Transient API trouble (timeouts, 429, 5xx) is retried with backoff, then reported with
``details["transient"] = True`` so the record/replay cache does not store it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from coa_envs.options import Schema
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec
from coa_envs.web.decoding import BodyTooLarge, accepted_encodings, read_capped
from coa_envs.web.extract import cut_text
from coa_envs.web.fetch import api_client, deadline

__all__ = ["BACKENDS", "SPEC", "SearchHit", "WebSearchTool", "build", "option_schema", "render_hits"]

SPEC = ToolSpec(name="web_search", usage="query", summary="search the web; returns numbered titles, URLs and snippets.",
                argument="the web search query", retrieves=True)

BACKENDS: tuple[str, ...] = ("serper", "searxng", "local")


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str


def render_hits(query: str, hits: list[SearchHit]) -> str:
    """Numbered entries, one blank line apart: ``N. title`` / ``URL: ...`` / snippet."""
    if not hits:
        return f"No results found for '{query}'. Try different or fewer keywords."
    blocks = [
        "\n".join(part for part in (f"{i}. {h.title or '(untitled)'}", h.url and f"URL: {h.url}", h.snippet) if part)
        for i, h in enumerate(hits, 1)
    ]
    return f"Search results for '{query}':\n\n" + "\n\n".join(blocks)


class _HttpSearch:
    """Shared JSON-over-HTTP plumbing for the serper and searxng backends."""

    def __init__(self, timeout_s: float, retries: int, max_response_bytes: int = 2_000_000) -> None:
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.max_response_bytes = int(max_response_bytes)
        # Redirects are followed here, not by httpx: httpx keeps custom headers (X-API-KEY) on a
        # redirect to another host, so a redirect would hand the key to whoever it names.
        self._client = api_client(self.timeout_s, follow_redirects=False,
                                  headers={"Accept-Encoding": accepted_encodings()})

    def request_json(self, method: str, url: str, **kwargs: Any) -> Any | ToolResult:
        last: ToolResult | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.25 * 2 ** (attempt - 1), 4.0))
            try:
                outcome = self._request_once(method, url, **kwargs)
            except _ForeignRedirect as exc:
                return ToolResult.failure(f"The search API redirected to another site ({exc}); not followed, "
                                          "so the API key stays with the configured base_url.", ErrorKind.TOOL_ERROR)
            except BodyTooLarge as exc:  # not retried: the same query gets the same answer
                return ToolResult.failure(f"The search API's answer was not read: {exc} (max_response_bytes); "
                                          "a search answer is a few kB.", ErrorKind.TOOL_ERROR, transient=True)
            except httpx.TimeoutException:
                last = ToolResult.failure(f"The search API did not answer within {self.timeout_s:g}s.",
                                          ErrorKind.TOOL_TIMEOUT, transient=True)
                continue
            except httpx.HTTPError as exc:
                last = ToolResult.failure(f"The search API is unreachable ({type(exc).__name__}: {exc}).",
                                          ErrorKind.TOOL_ERROR, transient=True)
                continue
            status = outcome.details.get("status", 0) if isinstance(outcome, ToolResult) else 0
            if status == 429 or status >= 500:
                last = outcome
                continue
            return outcome
        assert last is not None
        return last

    def _request_once(self, method: str, url: str, **kwargs: Any) -> Any | ToolResult:
        """One request (with its same-site redirects); the JSON answer or a failure to report."""
        # One deadline for the whole exchange: httpx's timeout bounds each read, and a server sending
        # its head a byte at a time, each inside it, held a search for as long as it liked.
        with deadline(self.timeout_s), contextlib.closing(
                self._send_following_redirects(self._client.build_request(method, url, **kwargs))) as response:
            status = response.status_code
            body = read_capped(response, self.max_response_bytes)
        if status == 429 or status >= 500:
            return ToolResult.failure(f"The search API is unavailable (HTTP {status}); try again later.",
                                      ErrorKind.TOOL_ERROR, transient=True, status=status)
        if status in (401, 403):
            return ToolResult.failure(f"The search API rejected the credentials (HTTP {status}).",
                                      ErrorKind.NOT_CONFIGURED, status=status)
        if status >= 400:
            text = body[:200].decode("utf-8", "replace")
            return ToolResult.failure(f"The search API refused the query (HTTP {status}: {text}).",
                                      ErrorKind.TOOL_ERROR, status=status)
        try:
            return json.loads(body)
        except ValueError:
            return ToolResult.failure("The search API returned a body that is not JSON.",
                                      ErrorKind.TOOL_ERROR, transient=True)

    def _send_following_redirects(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, following redirects within its own origin (an http to https upgrade of
        the same host too); a redirect elsewhere raises :class:`_ForeignRedirect`."""
        origin = request.url
        for _ in range(_MAX_REDIRECTS + 1):
            response = self._client.send(request, stream=True)
            if response.next_request is None:
                return response
            target = response.next_request.url
            same_site = target.host == origin.host and (target.port or _DEFAULT_PORTS.get(target.scheme)) == (
                origin.port or _DEFAULT_PORTS.get(origin.scheme))
            upgrade = (target.host == origin.host and origin.scheme == "http" and target.scheme == "https"
                       and origin.port is None and target.port is None)
            if not (same_site and target.scheme == origin.scheme) and not upgrade:
                response.close()
                raise _ForeignRedirect(f"HTTP {response.status_code} to {target.copy_with(query=None)}")
            response.close()
            request = response.next_request
        raise httpx.TooManyRedirects(f"more than {_MAX_REDIRECTS} redirects from {origin}", request=request)

    def close(self) -> None:
        self._client.close()


class _ForeignRedirect(Exception):
    """The search API answered with a redirect to another origin."""


_MAX_REDIRECTS = 5
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _clean(value: Any) -> str:
    return " ".join(str(value or "").split())


# What one remote hit may add to the observation: a search API relays text from any site (SearXNG
# passes its engines' snippets on), and a hit of megabytes went into the observation whole.
MAX_HIT_TITLE_CHARS = 300
MAX_HIT_SNIPPET_CHARS = 1_000
MAX_HIT_URL_CHARS = 2_000


def _bounded(hits: list[SearchHit], top_k: int) -> list[SearchHit]:
    """The first ``top_k`` hits with a usable URL, titles and snippets cut to their caps."""
    kept = [SearchHit(cut_text(h.title, MAX_HIT_TITLE_CHARS), h.url, cut_text(h.snippet, MAX_HIT_SNIPPET_CHARS))
            for h in hits if len(h.url) <= MAX_HIT_URL_CHARS]
    return kept[:top_k]


class WebSearchTool:
    """``web_search`` over one backend; thread-safe. ``top_k`` results per query."""

    name = "web_search"

    def __init__(self, backend: str, *, top_k: int = 5, timeout_s: float = 15.0, retries: int = 2,
                 base_url: str | None = None, api_key: str | None = None, api_key_env: str = "SERPER_API_KEY",
                 gl: str | None = None, hl: str | None = None, categories: str | None = None,
                 language: str | None = None, path: str | None = None, page_base_url: str = "http://127.0.0.1",
                 snippet_chars: int = 300, max_response_bytes: int = 2_000_000) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown web_search backend {backend!r}; choose one of {BACKENDS}")
        if top_k < 1:
            raise ValueError("web_search top_k must be at least 1")
        self.backend = backend
        self.top_k = int(top_k)
        self.snippet_chars = int(snippet_chars)
        self._api_key, self._api_key_env = api_key, api_key_env
        self._params = {"gl": gl, "hl": hl, "categories": categories, "language": language}
        self._http: _HttpSearch | None = None
        self._index_lock = threading.Lock()
        self._index: Any = None
        if backend == "serper":
            self.base_url = (base_url or "https://google.serper.dev").rstrip("/")
            self._http = _HttpSearch(timeout_s, retries, max_response_bytes)
        elif backend == "searxng":
            if not base_url:
                raise ValueError("web_search backend 'searxng' needs base_url (e.g. http://localhost:8888)")
            self.base_url = base_url.rstrip("/")
            self._http = _HttpSearch(timeout_s, retries, max_response_bytes)
        else:
            if not path:
                raise ValueError("web_search backend 'local' needs path: a JSONL of {url,title,text} pages "
                                 "or a directory of them")
            self.path = _resolve(path)
            self.page_base_url = page_base_url

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def _serper(self, query: str) -> list[SearchHit] | ToolResult:
        assert self._http is not None
        key = self._api_key or os.environ.get(self._api_key_env)
        if not key:
            return ToolResult.failure(
                f"web_search is not configured: set the {self._api_key_env} environment variable to a Serper "
                "API key (https://serper.dev), or use the 'local' or 'searxng' backend.", ErrorKind.NOT_CONFIGURED)
        body: dict[str, Any] = {"q": query, "num": self.top_k}
        body.update({k: v for k, v in self._params.items() if k in ("gl", "hl") and v})
        data = self._http.request_json("POST", f"{self.base_url}/search", json=body,
                                       headers={"X-API-KEY": key, "Content-Type": "application/json"})
        if isinstance(data, ToolResult):
            return data
        if not isinstance(data, Mapping):
            return ToolResult.failure("The search API returned an unexpected JSON shape.", ErrorKind.TOOL_ERROR)
        hits = []
        box = data.get("answerBox")
        if isinstance(box, Mapping) and (box.get("answer") or box.get("snippet")):
            hits.append(SearchHit(_clean(box.get("title") or "Answer box"), _clean(box.get("link")),
                                  _clean(box.get("answer") or box.get("snippet"))))
        for row in data.get("organic") or []:
            if isinstance(row, Mapping) and row.get("link"):
                snippet = _clean(row.get("snippet"))
                if row.get("date"):
                    snippet = f"{_clean(row['date'])} — {snippet}"
                hits.append(SearchHit(_clean(row.get("title")), _clean(row["link"]), snippet))
        return _bounded(hits, self.top_k)

    def _searxng(self, query: str) -> list[SearchHit] | ToolResult:
        assert self._http is not None
        params = {"q": query, "format": "json"}
        params.update({k: v for k, v in self._params.items() if k in ("categories", "language") and v})
        data = self._http.request_json("GET", f"{self.base_url}/search", params=params)
        if isinstance(data, ToolResult):
            return data
        if not isinstance(data, Mapping):
            return ToolResult.failure("The search API returned an unexpected JSON shape.", ErrorKind.TOOL_ERROR)
        hits = [
            SearchHit(_clean(row.get("title")), _clean(row["url"]), _clean(row.get("content")))
            for row in data.get("results") or [] if isinstance(row, Mapping) and row.get("url")
        ]
        return _bounded(hits, self.top_k)

    def _local(self, query: str) -> list[SearchHit] | ToolResult:
        from coa_envs.web.collection import best_snippet, shared_index

        with self._index_lock:
            if self._index is None:
                try:
                    self._index = shared_index(self.path, self.page_base_url)
                except (OSError, ValueError) as exc:
                    return ToolResult.failure(f"The local search index is unavailable: {exc}",
                                              ErrorKind.NOT_CONFIGURED)
        return [SearchHit(page.title, page.url, best_snippet(page.text, query, self.snippet_chars))
                for page, _ in self._index.search(query, self.top_k)]

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        query = " ".join((query or "").split())
        if not query:
            return ToolResult.failure("web_search needs a query, e.g. <web_search>capital of Mongolia</web_search>.",
                                      ErrorKind.BAD_ACTION)
        search = {"serper": self._serper, "searxng": self._searxng, "local": self._local}[self.backend]
        try:
            hits = search(query)
        except Exception as exc:  # last line of defence: a backend bug must not end the episode
            return ToolResult.failure(f"web_search failed: {type(exc).__name__}: {exc}", ErrorKind.TOOL_ERROR)
        if isinstance(hits, ToolResult):
            return hits
        return ToolResult(render_hits(query, hits),
                          details={"backend": self.backend, "urls": [h.url for h in hits]})


def _resolve(path: str) -> str:
    try:
        from coa_envs.registry import resolve_path
    except ImportError:  # registry not importable in a stripped-down install
        return path
    return str(resolve_path(path))


def option_schema(backend: str) -> Schema:
    """The options of every backend: the constructor's keyword parameters (checked at make time)."""
    return Schema.of_callable("tools.web_search", WebSearchTool.__init__, skip=("backend",),
                              minimums={"top_k": 1, "retries": 0, "snippet_chars": 1, "timeout_s": 0,
                                        "max_response_bytes": 1})


def build(backend: str = "serper", **config: Any) -> WebSearchTool:
    """Registry entry point, e.g. ``web_search: {backend: local, path: pkg:data/miniweb/pages.jsonl}``."""
    return WebSearchTool(backend, **config)
