"""The Playwright engine: one headless Chromium per worker thread, driven over Playwright's pipe.

The session drives Playwright's asyncio API on an event loop of its own thread, so that a render
can be abandoned: ``page.evaluate`` has no timeout, and a page whose script never yields (a
``while (true) {}`` after load) held the sync API's call, and with it the worker, forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from coa_envs.types import ErrorKind
from coa_envs.web.chromium import (
    CHROMIUM_FLAGS,
    DOM_HTML_JS,
    ERROR_PAGE_JS,
    BrowserError,
    RenderedPage,
    raise_if_error_page,
    raise_if_proxy_answered,
    render_under_cap,
)
from coa_envs.web.fetch import DEFAULT_USER_AGENT
from coa_envs.web.proxy import BLOCKED_HEADER, UNREACHABLE_HEADER
from coa_envs.web.render_memory import RendererMemoryCap, browser_marker

__all__ = ["PlaywrightSession"]

_READ_MARGIN_S = 5.0  # on top of the page-load timeout and the settle time: reading the DOM, closing


class PlaywrightSession:
    def __init__(self, executable: str, proxy_url: str, timeout_s: float, settle_ms: int, max_chars: int,
                 max_memory_mb: int) -> None:
        from playwright.async_api import async_playwright

        marker = browser_marker()
        self._memory = RendererMemoryCap(marker, max_memory_mb)
        self._timeout_ms = int(timeout_s * 1000)
        self._settle_ms = settle_ms
        self._budget_s = timeout_s + settle_ms / 1000 + _READ_MARGIN_S
        self._html_js = "() => { " + DOM_HTML_JS.format(n=int(max_chars)) + " }"
        self._loop = asyncio.new_event_loop()
        self._page: Any = None
        self._last_navigation: Any = None
        self._pw = self._loop.run_until_complete(async_playwright().start())
        try:
            self._browser = self._loop.run_until_complete(self._pw.chromium.launch(
                executable_path=executable, args=[*CHROMIUM_FLAGS, f"--proxy-server={proxy_url}", marker],
                # Playwright turns Chromium's popup blocker off: a page could open windows without end.
                ignore_default_args=["--disable-popup-blocking"],
            ))
        except BaseException:
            self._stop()
            raise

    def render(self, url: str, timeout_s: float | None = None) -> RenderedPage:
        """Load ``url`` within ``timeout_s`` (the session's page-load timeout if None), its renderer
        kept under the memory cap."""
        return render_under_cap(self._memory, url, lambda: self._render_within(url, timeout_s))

    def _render_within(self, url: str, timeout_s: float | None) -> RenderedPage:
        timeout_ms = self._timeout_ms if timeout_s is None else max(1, int(timeout_s * 1000))
        budget_s = self._budget_s - (self._timeout_ms - timeout_ms) / 1000
        try:
            return self._loop.run_until_complete(asyncio.wait_for(self._render(url, timeout_ms), budget_s))
        except TimeoutError as exc:  # the page never let the DOM be read; its context is closed by now
            message = f"page did not answer within {budget_s:g}s: {url}"
            raise BrowserError(message, ErrorKind.TOOL_TIMEOUT) from exc

    async def _render(self, url: str, timeout_ms: int) -> RenderedPage:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        # A fresh context (cookies, storage, cache, service workers) per render: what one episode's
        # page stored must not be there for the next. A context costs far less than a browser launch.
        context = await self._browser.new_context(
            user_agent=DEFAULT_USER_AGENT, service_workers="block", accept_downloads=False
        )
        try:
            page = self._page = await context.new_page()
            page.on("response", self._note_navigation)
            self._last_navigation = None
            response = await page.goto(url, wait_until="load", timeout=timeout_ms)
            if self._settle_ms > 0:  # let late XHR-driven rendering finish, but never wait long
                with contextlib.suppress(PlaywrightTimeout):
                    await page.wait_for_load_state("networkidle", timeout=self._settle_ms)
            html = str(await page.evaluate(self._html_js))
            content_type = str(await page.evaluate("document.contentType") or "text/html")
            raise_if_error_page(url, await page.evaluate("() => { " + ERROR_PAGE_JS + " }"))
            # A meta refresh or script may have navigated on: judge the document now shown.
            final = self._last_navigation or response
            if final is not None:
                raise_if_proxy_answered(page.url or url, final.headers.get(BLOCKED_HEADER.lower()),
                                        final.headers.get(UNREACHABLE_HEADER.lower()))
            return RenderedPage(url, page.url, html, final.status if final else None, content_type)
        except PlaywrightTimeout as exc:
            raise BrowserError(f"page load timed out: {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except PlaywrightError as exc:
            raise BrowserError(f"browser could not load {url}: {exc.message.splitlines()[0]}") from exc
        finally:
            # Closing the context stops what the page started (timers, the windows it opened, a
            # popup holding ``opener``, a script that never yields) and drops everything it stored.
            self._page = None
            with contextlib.suppress(PlaywrightError):
                await context.close()

    def _note_navigation(self, response: Any) -> None:
        """Remember the main frame's latest document response (redirects by script included)."""
        from playwright.async_api import Error as PlaywrightError

        with contextlib.suppress(PlaywrightError):  # a response without a frame is no document of ours
            page = self._page
            if page is not None and response.request.is_navigation_request() and response.frame == page.main_frame:
                self._last_navigation = response

    def healthy(self) -> bool:
        return self._browser.is_connected()

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._browser.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        try:
            self._loop.run_until_complete(self._pw.stop())
        finally:
            self._loop.close()
