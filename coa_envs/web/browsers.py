"""Headless Chromium renderers (Playwright and Selenium) for pages that need JavaScript.

Both drive the Debian ``chromium`` package (browsers cannot be downloaded here, so
``playwright install`` is never needed). All browser traffic goes through a
:class:`~coa_envs.web.proxy.GuardedProxy`, which applies the SSRF guard to every request,
redirect and sub-resource; ``--proxy-bypass-list=<-loopback>`` stops Chromium from
sending loopback requests around the proxy, and WebRTC may not use UDP (which no HTTP proxy
carries). Service workers are blocked (they could fetch outside the page's request stream).

Browser APIs are not thread-safe (Playwright's sync API is bound to the thread that
started it), so each renderer owns ``workers`` threads, each with its own browser, and
callers submit URLs to them. Browsers start lazily on the first render.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from coa_envs.types import ErrorKind
from coa_envs.web.chromium import (
    CHROMEDRIVER_CANDIDATES,
    CHROMIUM_CANDIDATES,
    CHROMIUM_FLAGS,
    BrowserError,
    BrowserSession,
    RenderedPage,
    close_quietly,
    find_chromedriver,
    find_chromium,
)
from coa_envs.web.playwright_session import PlaywrightSession
from coa_envs.web.proxy import GuardedProxy
from coa_envs.web.selenium_session import SeleniumSession
from coa_envs.web.ssrf import UrlGuard

__all__ = ["CHROMEDRIVER_CANDIDATES", "CHROMIUM_CANDIDATES", "BrowserError", "BrowserRenderer", "RenderedPage",
           "find_chromedriver", "find_chromium"]

_CHROMIUM_FLAGS = CHROMIUM_FLAGS  # the name benchmarks and older callers import


class BrowserRenderer:
    """Render URLs to HTML with ``engine`` = ``"playwright"`` or ``"selenium"``.

    ``render`` is thread-safe and blocks until one of the ``workers`` browser threads
    has loaded the page. It raises :class:`BrowserError` (never anything else). The HTML
    returned is at most ``max_chars`` characters of the DOM; a page whose renderers together pass
    ``max_memory_mb`` of resident memory is stopped (see :mod:`coa_envs.web.render_memory`).
    """

    def __init__(
        self,
        engine: str,
        guard: UrlGuard,
        *,
        timeout_s: float = 20.0,
        settle_ms: int = 300,
        workers: int = 1,
        max_chars: int = 10_000_000,
        max_memory_mb: int = 1024,
        executable_path: str | None = None,
        chromedriver_path: str | None = None,
    ) -> None:
        if engine not in ("playwright", "selenium"):
            raise ValueError(f"unknown browser engine {engine!r}; use 'playwright' or 'selenium'")
        self.engine = engine
        self.guard = guard
        self.timeout_s = float(timeout_s)
        self._executable = executable_path
        self._driver_path = chromedriver_path
        self._settle_ms = int(settle_ms)
        self._max_chars = int(max_chars)
        self._max_memory_mb = int(max_memory_mb)
        self._workers = max(1, int(workers))
        self._jobs: queue.Queue[tuple[Future, str, float | None] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._proxy: GuardedProxy | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def refusals(self) -> list[tuple[str, str]]:
        """Requests the proxy refused so far (target, reason)."""
        return list(self._proxy.refusals) if self._proxy else []

    def _session_factory(self) -> Callable[[], BrowserSession]:
        executable = find_chromium(self._executable)
        if executable is None:
            raise BrowserError(
                "no Chromium binary found (install the Debian packages: apt-get install -y chromium "
                "chromium-driver)", ErrorKind.NOT_CONFIGURED)
        driver = find_chromedriver(self._driver_path)
        if self.engine == "selenium" and driver is None:
            raise BrowserError("chromedriver not found (apt-get install -y chromium-driver)",
                               ErrorKind.NOT_CONFIGURED)
        timeout_s, settle_ms, max_chars = self.timeout_s, self._settle_ms, self._max_chars
        memory_mb = self._max_memory_mb

        def make() -> BrowserSession:
            assert self._proxy is not None
            if self.engine == "playwright":
                return PlaywrightSession(executable, self._proxy.url, timeout_s, settle_ms, max_chars, memory_mb)
            assert driver is not None
            return SeleniumSession(executable, driver, self._proxy.url, timeout_s, settle_ms, max_chars, memory_mb)

        return make

    def _start(self) -> None:
        if self._threads:
            return
        factory = self._session_factory()  # raises before anything starts if Chromium is missing
        self._proxy = GuardedProxy(self.guard).start()
        for index in range(self._workers):
            thread = threading.Thread(target=self._work, args=(factory,), name=f"{self.engine}-{index}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self, factory: Callable[[], BrowserSession]) -> None:
        session: BrowserSession | None = None
        try:
            while (job := self._jobs.get()) is not None:
                future, url, timeout_s = job
                try:
                    if session is None:
                        session = factory()
                    future.set_result(session.render(url, timeout_s))
                except BrowserError as exc:
                    future.set_exception(exc)
                except Exception as exc:  # launch failures and driver crashes of any type
                    future.set_exception(BrowserError(f"{self.engine} failed: {type(exc).__name__}: {exc}"))
                if session is not None and not session.healthy():
                    close_quietly(session)
                    session = None
        finally:
            if session is not None:
                close_quietly(session)

    def render(self, url: str, timeout_s: float | None = None) -> RenderedPage:
        """Load ``url`` within ``timeout_s`` (what is left of a crawl's; the renderer's own if None)."""
        future: Future[RenderedPage] = Future()
        with self._lock:
            if self._closed:
                raise BrowserError("the browser renderer is closed")
            self._start()
            assert self._proxy is not None
            mark = self._proxy.refused_total
            self._jobs.put((future, url, timeout_s))
        try:
            # The session enforces its own page timeout; this outer bound also covers launch.
            return future.result(timeout=self.timeout_s + 60)
        except TimeoutError as exc:
            raise BrowserError(f"browser did not answer for {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except BrowserError as exc:  # Chromium shows a refused CONNECT (an https hop) as a failed tunnel
            tunnels = [r for r in self._proxy.refusals_since(mark) if r[0].startswith("https://")]
            if "ERR_TUNNEL_CONNECTION_FAILED" not in str(exc) or not tunnels:
                raise
            raise BrowserError(f"refused to fetch {tunnels[-1][0]}: {tunnels[-1][1]}", ErrorKind.BLOCKED_URL) from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in self._threads:
                self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        if self._proxy is not None:
            self._proxy.stop()
