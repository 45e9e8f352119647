"""The Playwright engine: one headless Chromium per worker thread, driven over Playwright's pipe."""

from __future__ import annotations

import contextlib
from typing import Any

from coa_envs.types import ErrorKind
from coa_envs.web.chromium import CHROMIUM_FLAGS, DOM_HTML_JS, BrowserError, RenderedPage, raise_if_proxy_answered
from coa_envs.web.fetch import DEFAULT_USER_AGENT
from coa_envs.web.proxy import BLOCKED_HEADER, UNREACHABLE_HEADER

__all__ = ["PlaywrightSession"]


class PlaywrightSession:
    def __init__(self, executable: str, proxy_url: str, timeout_s: float, settle_ms: int, max_chars: int) -> None:
        from playwright.sync_api import sync_playwright

        self._timeout_ms = int(timeout_s * 1000)
        self._settle_ms = settle_ms
        self._html_js = "() => { " + DOM_HTML_JS.format(n=int(max_chars)) + " }"
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(
                executable_path=executable, args=[*CHROMIUM_FLAGS, f"--proxy-server={proxy_url}"],
                # Playwright turns Chromium's popup blocker off: a page could open windows without end.
                ignore_default_args=["--disable-popup-blocking"],
            )
            self._page: Any = None
            self._last_navigation: Any = None
        except Exception:
            self._pw.stop()
            raise

    def render(self, url: str) -> RenderedPage:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        # A fresh context (cookies, storage, cache, service workers) per render: what one episode's
        # page stored must not be there for the next. A context costs far less than a browser launch.
        context = self._browser.new_context(
            user_agent=DEFAULT_USER_AGENT, service_workers="block", accept_downloads=False
        )
        page = self._page = context.new_page()
        page.on("response", self._note_navigation)
        self._last_navigation = None
        try:
            response = page.goto(url, wait_until="load", timeout=self._timeout_ms)
            if self._settle_ms > 0:  # let late XHR-driven rendering finish, but never wait long
                with contextlib.suppress(PlaywrightTimeout):
                    page.wait_for_load_state("networkidle", timeout=self._settle_ms)
            html = str(page.evaluate(self._html_js))
            content_type = str(page.evaluate("document.contentType") or "text/html")
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
            # popup holding ``opener``) and drops everything it stored; no beforeunload runs.
            with contextlib.suppress(PlaywrightError):
                context.close()
            self._page = None

    def _note_navigation(self, response: Any) -> None:
        """Remember the main frame's latest document response (redirects by script included)."""
        from playwright.sync_api import Error as PlaywrightError

        with contextlib.suppress(PlaywrightError):  # a response without a frame is no document of ours
            page = self._page
            if page is not None and response.request.is_navigation_request() and response.frame == page.main_frame:
                self._last_navigation = response

    def healthy(self) -> bool:
        return self._browser.is_connected()

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._pw.stop()
