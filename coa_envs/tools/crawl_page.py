"""The ``crawl_page`` tool: fetch one or more URLs and show the model their readable text.

Query format (the CoA ``<crawl_page>`` span): ``URL``, several URLs separated by ``|``,
and optionally free text among them that states the goal (``URL | who founded it?``).
The goal steers the optional LLM summary; without a summary endpoint the page text is
shown directly, cut at ``max_chars`` with a visible marker, followed by the page's links.

Backends: ``httpx`` (fast, static HTML/PDF/text), ``playwright`` and ``selenium`` (headless
Chromium for JavaScript pages; PDFs and other non-HTML bodies still go through httpx).
Every URL passes the SSRF guard before any connection (see :mod:`coa_envs.web.ssrf`).
Nothing raises: each failure is an observation with an :class:`ErrorKind`.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from coa_envs.options import Schema
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec
from coa_envs.web.browsers import BrowserError, BrowserRenderer
from coa_envs.web.extract import ExtractedPage, ExtractionError, extract
from coa_envs.web.fetch import FetchFailure, HttpFetcher, api_client
from coa_envs.web.llm import ChatEndpoint, ChatError, chat
from coa_envs.web.ssrf import UrlGuard, literal_only_resolver

__all__ = ["BACKENDS", "SPEC", "CrawlConfig", "CrawlPageTool", "build", "option_schema", "parse_crawl_query"]

SPEC = ToolSpec(name="crawl_page", usage="URL | what to look for", summary="read a web page (text extracted).",
                argument="a page URL, optionally followed by ' | ' and what to look for on it",
                retrieves=True)

BACKENDS: tuple[str, ...] = ("httpx", "playwright", "selenium")
_URL_RE = re.compile(r"^[a-z][a-z0-9+.\-]*://\S+$", re.I)
_BARE_DOMAIN_RE = re.compile(r"^(www\.)?[\w\-]+(\.[\w\-]+)*\.[a-z]{2,}(:\d+)?(/\S*)?$", re.I)
# Chromium's built-in PDF viewer (its extension id / embed type) replaces the document.
_PDF_VIEWER_MARKS = ("mhjfbmdgcfjbbpaeojofohoefgiehjai", 'type="application/pdf"')
_SUMMARY_PROMPT = (
    "You read web pages for a research agent. Goal: {goal}\n\n"
    "From the page below, report every piece of information that helps with the goal: exact "
    "names, numbers, dates and short verbatim quotes, plus any link that looks worth following. "
    "Do not add facts that are not on the page. If nothing on the page is relevant, answer "
    "exactly 'The page contains no information relevant to the goal.'\n\n"
    "Page URL: {url}\nPage title: {title}\nPage text:\n{text}"
)


@dataclass(frozen=True, slots=True)
class CrawlConfig:
    """Options of the crawl tool (all optional). ``allow_hosts`` opens hosts/CIDRs to the
    agent (e.g. ``["127.0.0.1:8000"]`` for a local site; a bare ``127.0.0.1`` opens only servers
    this process runs); ``resolve_dns=False`` accepts IP
    literals only (offline setups: no DNS query ever leaves the machine); ``summary`` is an OpenAI-compatible
    endpoint block (``base_url``, ``model``, ``api_key_env``, ``max_input_chars``)."""

    timeout_s: float = 15.0
    max_bytes: int = 3_000_000
    max_redirects: int = 5
    max_chars: int = 8000
    max_links: int = 25
    max_urls: int = 3
    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    resolve_dns: bool = True
    verify_tls: bool | str = True
    summary: Mapping[str, Any] | None = None
    browser_workers: int = 1
    browser_max_memory_mb: int = 1024
    settle_ms: int = 300
    executable_path: str | None = None
    chromedriver_path: str | None = None

    @classmethod
    def from_kwargs(cls, **config: Any) -> CrawlConfig:
        known = set(cls.__dataclass_fields__)
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"unknown crawl_page option(s) {sorted(unknown)}; known: {sorted(known)}")
        if isinstance(config.get("allow_hosts"), str | bytes):
            raise ValueError(f"crawl_page allow_hosts must be a list, not one string: [{config['allow_hosts']!r}]")
        if "allow_hosts" in config:
            config["allow_hosts"] = tuple(config["allow_hosts"] or ())
        return cls(**config)


def parse_crawl_query(query: str) -> tuple[list[str], str]:
    """Split a crawl query into URLs (in order, deduplicated) and the free-text goal."""
    urls: list[str] = []
    goal_parts: list[str] = []
    for part in (p.strip() for p in query.replace("\n", "|").split("|")):
        if not part:
            continue
        if _URL_RE.match(part):
            candidate = part
        elif " " not in part and _BARE_DOMAIN_RE.match(part):
            candidate = "https://" + part
        else:
            goal_parts.append(part)
            continue
        if candidate not in urls:
            urls.append(candidate)
    return urls, " ".join(goal_parts)


@dataclass(frozen=True, slots=True)
class _PageOutcome:
    url: str
    page: ExtractedPage | None = None
    final_url: str = ""
    truncated_body: bool = False
    error: str = ""
    kind: ErrorKind | None = None
    transient: bool = False


class CrawlPageTool:
    """``crawl_page`` over one backend. Thread-safe; call :meth:`close` to stop browsers."""

    name = "crawl_page"

    def __init__(self, backend: str = "httpx", config: CrawlConfig | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown crawl_page backend {backend!r}; choose one of {BACKENDS}")
        self.backend = backend
        self.config = config or CrawlConfig()
        self.guard = UrlGuard(self.config.allow_hosts, allow_private=self.config.allow_private,
                              resolver=None if self.config.resolve_dns else literal_only_resolver,
                              dns_timeout_s=self.config.timeout_s)
        self._summary = ChatEndpoint.from_config(self.config.summary)
        self._summary_input_chars = int((self.config.summary or {}).get("max_input_chars", 30000))
        # One pooled client for summaries: a fresh client per call would rebuild its TLS context.
        self._llm_client = api_client(self._summary.timeout_s) if self._summary is not None else None
        self._fetcher = HttpFetcher(
            self.guard, timeout_s=self.config.timeout_s, max_bytes=self.config.max_bytes,
            max_redirects=self.config.max_redirects, verify_tls=self.config.verify_tls,
        )
        self._renderer: BrowserRenderer | None = None
        if backend != "httpx":
            self._renderer = BrowserRenderer(
                backend, self.guard, executable_path=self.config.executable_path,
                chromedriver_path=self.config.chromedriver_path, timeout_s=self.config.timeout_s,
                settle_ms=self.config.settle_ms, workers=self.config.browser_workers,
                max_chars=self.config.max_bytes + 1,  # one more than fits: the cut shows as truncation
                max_memory_mb=self.config.browser_max_memory_mb,
            )

    def close(self) -> None:
        self._fetcher.close()
        if self._llm_client is not None:
            self._llm_client.close()
        if self._renderer is not None:
            self._renderer.close()

    def cache_context(self, ctx: ToolContext) -> str:
        """What besides the query shapes the answer, for the record/replay cache key.

        Without a summary endpoint the page text depends on the URL alone, so every task
        shares one entry per URL. With one, the summary is steered by the goal, which falls
        back to the task's question when the query states none (and by the summary model):
        a replay must not serve one task's summary to another task.
        """
        if self._summary is None:
            return ""
        question = ctx.task.question if ctx.task is not None else ""
        digest = hashlib.sha256(f"{self._summary.model}\n{question}".encode()).hexdigest()[:16]
        return f"summary:{digest}"

    # -- fetching -------------------------------------------------------------------------
    def _via_http(self, url: str) -> _PageOutcome:
        fetched = self._fetcher.fetch(url)
        if isinstance(fetched, FetchFailure):
            return _PageOutcome(url, error=fetched.message, kind=fetched.kind, transient=fetched.transient)
        try:
            page = extract(fetched.body, fetched.content_type, fetched.charset, fetched.final_url,
                           max_links=self.config.max_links)
        except ExtractionError as exc:
            return _PageOutcome(url, final_url=fetched.final_url, error=str(exc), kind=ErrorKind.TOOL_ERROR)
        return _PageOutcome(url, page, fetched.final_url, fetched.truncated)

    def _via_browser(self, url: str) -> _PageOutcome:
        assert self._renderer is not None
        started = time.monotonic()
        verdict = self.guard.check(url)  # refuse before the browser opens any connection
        if verdict.status == "blocked":
            return _PageOutcome(url, error=f"refused to fetch {url}: {verdict.reason}", kind=ErrorKind.BLOCKED_URL)
        if not verdict.allowed:
            return _PageOutcome(url, error=verdict.reason, kind=ErrorKind.TOOL_ERROR,
                                transient=verdict.status == "dns_error")
        try:  # the page load gets what the check's DNS wait left of timeout_s: one deadline per crawl
            rendered = self._renderer.render(url, max(0.05, self.config.timeout_s - (time.monotonic() - started)))
        except BrowserError as exc:
            if "download" in str(exc).lower():  # non-HTML bodies make Chromium start a download
                return self._via_http(url)
            return _PageOutcome(url, error=str(exc), kind=exc.kind,
                                transient=exc.kind in (ErrorKind.TOOL_TIMEOUT, ErrorKind.TOOL_ERROR))
        if rendered.status is not None and rendered.status >= 400:
            return _PageOutcome(url, final_url=rendered.final_url, error=f"HTTP {rendered.status} for {url}",
                                kind=ErrorKind.TOOL_ERROR, transient=rendered.status >= 500)
        non_html = rendered.content_type not in ("text/html", "application/xhtml+xml")
        if non_html or any(mark in rendered.html[:5000] for mark in _PDF_VIEWER_MARKS):
            # Chromium wraps PDFs, images and text in its own viewer pages: read the body itself.
            return self._via_http(rendered.final_url)
        body = rendered.html.encode("utf-8")[: self.config.max_bytes]
        try:
            page = extract(body, "text/html", "utf-8", rendered.final_url, max_links=self.config.max_links)
        except ExtractionError as exc:
            return _PageOutcome(url, final_url=rendered.final_url, error=str(exc), kind=ErrorKind.TOOL_ERROR)
        return _PageOutcome(url, page, rendered.final_url, len(rendered.html) > len(body))

    def _crawl(self, url: str) -> _PageOutcome:
        try:
            return self._via_http(url) if self._renderer is None else self._via_browser(url)
        except Exception as exc:  # last line of defence: a library bug must not end the episode
            return _PageOutcome(url, error=f"crawler error: {type(exc).__name__}: {exc}", kind=ErrorKind.TOOL_ERROR)

    # -- rendering ------------------------------------------------------------------------
    def _summarise(self, outcome: _PageOutcome, goal: str) -> tuple[str | None, str]:
        assert self._summary is not None and outcome.page is not None
        prompt = _SUMMARY_PROMPT.format(
            goal=goal or "describe what the page says", url=outcome.final_url,
            title=outcome.page.title, text=outcome.page.text[: self._summary_input_chars],
        )
        try:
            return chat(self._summary, [{"role": "user", "content": prompt}], self._llm_client), ""
        except ChatError as exc:
            return None, str(exc)

    def _render_page(self, outcome: _PageOutcome, goal: str) -> tuple[str, dict[str, Any]]:
        info: dict[str, Any] = {"url": outcome.url, "final_url": outcome.final_url or outcome.url}
        if outcome.page is None:
            info.update(ok=False, error_kind=str(outcome.kind), error=outcome.error)
            return f"Could not crawl {outcome.url}: {outcome.error}", info
        page = outcome.page
        header = f"URL: {outcome.final_url}"
        if outcome.final_url != outcome.url:
            header += f" (redirected from {outcome.url})"
        if page.title:
            header += f"\nTitle: {page.title}"
        if page.note:
            header += f"\n[{page.note}]"
        info.update(ok=True, kind=page.kind, chars=len(page.text), truncated_body=outcome.truncated_body)
        if page.note:
            info["extraction_note"] = page.note
        if self._summary is not None:
            summary, error = self._summarise(outcome, goal)
            if summary is not None:
                info["summarised"] = True
                if len(summary) > self.config.max_chars:  # the endpoint's answer keeps to the page's budget
                    summary = summary[: self.config.max_chars].rstrip() + "\n[... summary cut ...]"
                    info["cut"] = True
                return f"{header}\nSummary toward the goal:\n{summary}", info
            info["summary_error"] = error
            header += f"\n[summary unavailable ({error}); showing the page text]"
        text = page.text or "(the page has no readable text)"
        if len(text) > self.config.max_chars:
            text = (text[: self.config.max_chars].rstrip()
                    + f"\n[... page cut: showed {self.config.max_chars} of {len(page.text)} characters ...]")
            info["cut"] = True
        elif outcome.truncated_body:
            text += f"\n[... page cut: the download stopped at {self.config.max_bytes} bytes ...]"
            info["cut"] = True
        parts = [header, text]
        if page.links and self.config.max_links > 0:
            parts.append(f"Links on this page:\n{_link_list(page.links, self.config.max_chars)}")
        return "\n".join(parts), info

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        urls, goal = parse_crawl_query(query or "")
        if not urls:
            return ToolResult.failure(
                "crawl_page needs a URL, e.g. <crawl_page>https://example.org/page | what to look for"
                "</crawl_page>.", ErrorKind.BAD_ACTION)
        if not goal and ctx.task is not None:
            goal = ctx.task.question
        skipped = urls[self.config.max_urls:]
        urls = urls[: self.config.max_urls]
        if len(urls) == 1:
            outcomes = [self._crawl(urls[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(urls)) as pool:
                outcomes = list(pool.map(self._crawl, urls))
        rendered = [self._render_page(outcome, goal) for outcome in outcomes]
        if len(rendered) == 1:
            text = rendered[0][0]
        else:
            text = "\n\n".join(f"--- Page {i}/{len(rendered)} ---\n{body}" for i, (body, _) in enumerate(rendered, 1))
        if skipped:
            text += f"\n\n[ignored {len(skipped)} more URL(s); at most {self.config.max_urls} per call]"
        details = {
            "backend": self.backend,
            "pages": [info for _, info in rendered],
            # A failed summary is shown as the raw page, but must not be frozen into a replay cache.
            "transient": any(o.transient for o in outcomes) or any("summary_error" in i for _, i in rendered),
        }
        failures = [o for o in outcomes if o.page is None]
        if len(failures) == len(outcomes):
            first = failures[0]
            return ToolResult(text=text, ok=False, error_kind=first.kind or ErrorKind.TOOL_ERROR, details=details)
        return ToolResult(text=text, details=details)


def _link_list(links: tuple[tuple[str, str], ...], budget: int) -> str:
    """One line per link, as many as fit in ``budget`` characters (the page text's own budget):
    25 links of 2,000-character URLs were 50 kB past ``max_chars``."""
    lines: list[str] = []
    used = 0
    for anchor, href in links:
        line = f"- {anchor or '(no text)'}: {href}"
        if lines and used + len(line) > budget:
            lines.append(f"[... {len(links) - len(lines)} more links not shown ...]")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def option_schema(backend: str) -> Schema:
    """The fields of :class:`CrawlConfig` (checked at make time)."""
    return Schema.of_dataclass("tools.crawl_page", CrawlConfig, minimums={
        "timeout_s": 0, "max_bytes": 1, "max_redirects": 0, "max_chars": 1, "max_links": 0, "max_urls": 1,
        "browser_workers": 1, "settle_ms": 0, "browser_max_memory_mb": 64})


def build(backend: str = "httpx", **config: Any) -> CrawlPageTool:
    """Registry entry point: ``crawl_page: {backend: httpx, allow_hosts: [...], summary: {...}}``."""
    return CrawlPageTool(backend, CrawlConfig.from_kwargs(**config))
