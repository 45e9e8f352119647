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

import contextlib
import os
import queue
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from coa_envs.types import ErrorKind
from coa_envs.web.fetch import DEFAULT_USER_AGENT
from coa_envs.web.proxy import BLOCKED_HEADER, BLOCKED_MARKER, UNREACHABLE_HEADER, UNREACHABLE_MARKER, GuardedProxy
from coa_envs.web.ssrf import UrlGuard

__all__ = ["CHROMEDRIVER_CANDIDATES", "CHROMIUM_CANDIDATES", "BrowserError", "BrowserRenderer", "RenderedPage",
           "find_chromedriver", "find_chromium"]

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser",
                       "/usr/bin/google-chrome")
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
_CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-gpu",
    "--disable-extensions", "--disable-default-apps", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--disable-breakpad", "--no-default-browser-check",
    "--no-pings", "--metrics-recording-only", "--safebrowsing-disable-auto-update",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
    "--proxy-bypass-list=<-loopback>",
    # WebRTC (STUN/TURN, peer connections) would otherwise send UDP straight from the browser,
    # around the proxy, to any address a page names; only proxied transports remain.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)

# The DOM as HTML, cut in the page: a script can build a DOM of hundreds of MB for free, and the
# whole of it crossed into this process (and the driver) before the size cap applied.
_DOM_HTML_JS = "const root = document.documentElement; return root ? root.outerHTML.slice(0, {n}) : '';"
_NAVIGATION_STATUS_JS = (
    "const entry = performance.getEntriesByType('navigation')[0];"
    "return entry && entry.responseStatus ? entry.responseStatus : 0;"
)


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium binary to drive: ``explicit`` if given and present, else the first found."""
    for path in ((explicit,) if explicit else CHROMIUM_CANDIDATES):
        if path and os.path.exists(path):
            return path
    return None


def find_chromedriver(explicit: str | None = None) -> str | None:
    for path in ((explicit,) if explicit else CHROMEDRIVER_CANDIDATES):
        if path and os.path.exists(path):
            return path
    return None


@dataclass(frozen=True, slots=True)
class RenderedPage:
    """The DOM after scripts ran, serialised to HTML, and the URL the browser ended on."""

    url: str
    final_url: str
    html: str
    status: int | None = None
    content_type: str = "text/html"


class BrowserError(Exception):
    """A render failed; ``kind`` is the :class:`ErrorKind` to report."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


class _Session(Protocol):
    def render(self, url: str) -> RenderedPage: ...
    def healthy(self) -> bool: ...
    def close(self) -> None: ...


class _PlaywrightSession:
    def __init__(self, executable: str, proxy_url: str, timeout_s: float, settle_ms: int, max_chars: int) -> None:
        from playwright.sync_api import sync_playwright

        self._timeout_ms = int(timeout_s * 1000)
        self._settle_ms = settle_ms
        self._html_js = "() => { " + _DOM_HTML_JS.format(n=int(max_chars)) + " }"
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(
                executable_path=executable, args=[*_CHROMIUM_FLAGS, f"--proxy-server={proxy_url}"]
            )
            self._context = self._browser.new_context(
                user_agent=DEFAULT_USER_AGENT, service_workers="block", accept_downloads=False
            )
            self._page: Any = None
            self._last_navigation: Any = None
        except Exception:
            self._pw.stop()
            raise

    def render(self, url: str) -> RenderedPage:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        # One tab per session, reused: opening and closing a tab costs more than a local page load.
        if self._page is None or self._page.is_closed():
            self._page = self._context.new_page()
            self._page.on("response", self._note_navigation)
        page = self._page
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
                _raise_if_proxy_answered(page.url or url, final.headers.get(BLOCKED_HEADER.lower()),
                                         final.headers.get(UNREACHABLE_HEADER.lower()))
            return RenderedPage(url, page.url, html, final.status if final else None, content_type)
        except PlaywrightTimeout as exc:
            raise BrowserError(f"page load timed out: {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except PlaywrightError as exc:
            raise BrowserError(f"browser could not load {url}: {exc.message.splitlines()[0]}") from exc
        finally:
            self._leave_page()

    def _leave_page(self) -> None:
        """Stop what the page started once it has been read: close the windows it opened and blank
        the tab. Otherwise its scripts run on between renders, and a popup holding ``opener`` can
        steer the shared tab while a later render (another episode's) is reading it."""
        from playwright.sync_api import Error as PlaywrightError

        page = self._page
        try:
            for other in self._context.pages:
                if other is not page:
                    other.close()
            page.goto("about:blank", timeout=self._timeout_ms)
        except PlaywrightError:  # a page that will not leave is closed; the next render opens a fresh tab
            with contextlib.suppress(PlaywrightError):
                page.close()

    def _note_navigation(self, response: Any) -> None:
        """Remember the main frame's latest document response (redirects by script included)."""
        from playwright.sync_api import Error as PlaywrightError

        with contextlib.suppress(PlaywrightError):  # a response without a frame is no document of ours
            if response.request.is_navigation_request() and response.frame == self._page.main_frame:
                self._last_navigation = response

    def healthy(self) -> bool:
        return self._browser.is_connected()

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._pw.stop()


class _SeleniumSession:
    def __init__(self, executable: str, driver_path: str, proxy_url: str, timeout_s: float,
                 settle_ms: int, max_chars: int) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = executable
        for flag in ("--headless=new", *_CHROMIUM_FLAGS, f"--proxy-server={proxy_url}",
                     f"--user-agent={DEFAULT_USER_AGENT}"):
            options.add_argument(flag)
        # Chromium would save every downloaded response in ~/Downloads: pages could write files to the host.
        options.add_experimental_option("prefs", {"download_restrictions": 3})  # 3: block all downloads
        with warnings.catch_warnings():  # deprecated, yet the only switch webdriver.Chrome reads (4.51)
            warnings.simplefilter("ignore", DeprecationWarning)
            options.ignore_local_proxy_environment_variables()  # WebDriver commands stay local
        self._driver = webdriver.Chrome(service=Service(driver_path), options=options)
        self._driver.set_page_load_timeout(timeout_s)
        self._settle_s = settle_ms / 1000
        self._html_js = _DOM_HTML_JS.format(n=int(max_chars))

    def render(self, url: str) -> RenderedPage:
        from selenium.common.exceptions import TimeoutException, WebDriverException

        try:
            self._driver.get(url)
            if self._driver.current_url in ("about:blank", "data:,"):  # still blank (data:, when new)
                # Nothing was committed: the response became a download (Playwright raises for it).
                raise BrowserError(f"browser could not load {url}: the response started a download")
            if self._settle_s > 0:
                self._driver.execute_async_script(
                    "const done = arguments[arguments.length - 1]; setTimeout(done, arguments[0]);",
                    int(self._settle_s * 1000),
                )
            # page_source sometimes comes back empty right after a navigation; the DOM does not.
            html = self._driver.execute_script(self._html_js) or ""
            final_url = self._driver.current_url
            content_type = str(self._driver.execute_script("return document.contentType;") or "text/html")
            # WebDriver has no status codes; Chromium's Navigation Timing entry has (0 = none, e.g. an error page).
            status = self._driver.execute_script(_NAVIGATION_STATUS_JS)
        except TimeoutException as exc:
            raise BrowserError(f"page load timed out: {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except WebDriverException as exc:
            first = (exc.msg or str(exc)).splitlines()[0]
            raise BrowserError(f"browser could not load {url}: {first}") from exc
        finally:
            self._leave_page()
        # WebDriver shows no headers: the proxy's answer pages carry their marker in the body.
        _raise_if_proxy_answered(final_url, BLOCKED_MARKER in html, UNREACHABLE_MARKER in html)
        status = int(status) if isinstance(status, int | float) and status > 0 else None
        return RenderedPage(url, final_url, html, status, content_type)

    def _leave_page(self) -> None:
        """Close the windows the page opened and blank the tab (see the Playwright session)."""
        from selenium.common.exceptions import WebDriverException

        with contextlib.suppress(WebDriverException):  # a broken driver is caught by healthy()
            main = self._driver.current_window_handle
            for handle in self._driver.window_handles:
                if handle != main:
                    self._driver.switch_to.window(handle)
                    self._driver.close()
            self._driver.switch_to.window(main)
            self._driver.get("about:blank")

    def healthy(self) -> bool:
        try:
            _ = self._driver.window_handles
            return True
        except Exception:  # any driver failure means the session is gone
            return False

    def close(self) -> None:
        self._driver.quit()


class BrowserRenderer:
    """Render URLs to HTML with ``engine`` = ``"playwright"`` or ``"selenium"``.

    ``render`` is thread-safe and blocks until one of the ``workers`` browser threads
    has loaded the page. It raises :class:`BrowserError` (never anything else). The HTML
    returned is at most ``max_chars`` characters of the DOM.
    """

    def __init__(
        self,
        engine: str,
        guard: UrlGuard,
        *,
        executable_path: str | None = None,
        chromedriver_path: str | None = None,
        timeout_s: float = 20.0,
        settle_ms: int = 300,
        workers: int = 1,
        max_chars: int = 10_000_000,
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
        self._workers = max(1, int(workers))
        self._jobs: queue.Queue[tuple[Future, str] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._proxy: GuardedProxy | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def refusals(self) -> list[tuple[str, str]]:
        """Requests the proxy refused so far (target, reason)."""
        return list(self._proxy.refusals) if self._proxy else []

    def _session_factory(self) -> Callable[[], _Session]:
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

        def make() -> _Session:
            assert self._proxy is not None
            if self.engine == "playwright":
                return _PlaywrightSession(executable, self._proxy.url, timeout_s, settle_ms, max_chars)
            assert driver is not None
            return _SeleniumSession(executable, driver, self._proxy.url, timeout_s, settle_ms, max_chars)

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

    def _work(self, factory: Callable[[], _Session]) -> None:
        session: _Session | None = None
        try:
            while (job := self._jobs.get()) is not None:
                future, url = job
                try:
                    if session is None:
                        session = factory()
                    future.set_result(session.render(url))
                except BrowserError as exc:
                    future.set_exception(exc)
                except Exception as exc:  # launch failures and driver crashes of any type
                    future.set_exception(BrowserError(f"{self.engine} failed: {type(exc).__name__}: {exc}"))
                if session is not None and not session.healthy():
                    _close_quietly(session)
                    session = None
        finally:
            if session is not None:
                _close_quietly(session)

    def render(self, url: str) -> RenderedPage:
        future: Future[RenderedPage] = Future()
        with self._lock:
            if self._closed:
                raise BrowserError("the browser renderer is closed")
            self._start()
            assert self._proxy is not None
            mark = self._proxy.refused_total
            self._jobs.put((future, url))
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


def _raise_if_proxy_answered(url: str, blocked: object, unreachable: object) -> None:
    """The guarded proxy answered instead of the site: a policy refusal, or a site it could not
    reach (transient, like httpx's connection errors)."""
    if blocked:
        raise BrowserError(f"refused to fetch {url}: {BLOCKED_MARKER}", ErrorKind.BLOCKED_URL)
    if unreachable:
        raise BrowserError(f"could not fetch {url}: {UNREACHABLE_MARKER}", ErrorKind.TOOL_ERROR)


def _close_quietly(session: Any) -> None:
    with contextlib.suppress(Exception):  # a dead browser may fail to close; nothing more to do
        session.close()
