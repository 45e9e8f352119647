"""The Selenium engine: one headless Chromium per worker thread, driven through chromedriver."""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from typing import Any

from coa_envs.types import ErrorKind
from coa_envs.web.chromium import (
    CHROMIUM_FLAGS,
    DOM_HTML_JS,
    ERROR_PAGE_JS,
    NAVIGATION_STATUS_JS,
    BrowserError,
    RenderedPage,
    raise_if_error_page,
    raise_if_proxy_answered,
    render_under_cap,
)
from coa_envs.web.fetch import DEFAULT_USER_AGENT
from coa_envs.web.proxy import BLOCKED_MARKER, UNREACHABLE_MARKER
from coa_envs.web.render_memory import RendererMemoryCap, browser_marker
from coa_envs.web.ssrf import release_local_port, reserve_local_port

__all__ = ["SeleniumSession", "install_direct_bidi"]

_READ_ATTEMPTS = 5
_QUIET_DIALOGS_JS = ("() => { const answers = {alert: undefined, confirm: false, prompt: null, print: undefined};"
                     " for (const [name, answer] of Object.entries(answers)) window[name] = () => answer; }")


class SeleniumSession:
    def __init__(self, executable: str, driver_path: str, proxy_url: str, timeout_s: float,
                 settle_ms: int, max_chars: int, max_memory_mb: int) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        marker = browser_marker()
        self._memory = RendererMemoryCap(marker, max_memory_mb)
        options = webdriver.ChromeOptions()
        options.binary_location = executable
        for flag in ("--headless=new", *CHROMIUM_FLAGS, f"--proxy-server={proxy_url}",
                     f"--user-agent={DEFAULT_USER_AGENT}", marker):
            options.add_argument(flag)
        # Chromium would save every downloaded response in ~/Downloads: pages could write files to the host.
        options.add_experimental_option("prefs", {"download_restrictions": 3})  # 3: block all downloads
        # chromedriver turns Chromium's popup blocker off: a page opened hundreds of windows a second.
        options.add_experimental_option("excludeSwitches", ["disable-popup-blocking"])
        # Dialogs (alert, confirm, prompt, beforeunload) are dismissed as they open: left open, one
        # failed every later WebDriver command (the render, and a repeating one the next render too).
        options.unhandled_prompt_behavior = "dismiss"
        # WebDriver BiDi gives each render a user context of its own (see render).
        options.enable_bidi = True
        with warnings.catch_warnings():  # deprecated, yet the only switch webdriver.Chrome reads (4.51)
            warnings.simplefilter("ignore", DeprecationWarning)
            options.ignore_local_proxy_environment_variables()  # WebDriver commands stay local
        self._driver = webdriver.Chrome(service=Service(driver_path), options=options)
        self._control_ports: list[int] = []
        try:
            self._prepare(timeout_s, settle_ms, max_chars)
        except BaseException:  # a session that failed to start must not leave Chromium and its driver running
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _prepare(self, timeout_s: float, settle_ms: int, max_chars: int) -> None:
        # chromedriver's port (it starts browsers with any binary and arguments it is sent) and the
        # browser's DevTools port stay closed to pages and to the agent, even with 127.0.0.1 allowed.
        self._control_ports.append(int(self._driver.service.port))
        debugger = str(self._driver.capabilities.get("goog:chromeOptions", {}).get("debuggerAddress", ""))
        if debugger.rpartition(":")[2].isdigit():
            self._control_ports.append(int(debugger.rpartition(":")[2]))
        for port in self._control_ports:
            reserve_local_port(port)
        # BiDi's WebSocket (websocket-client) would take HTTP_PROXY from the environment too.
        install_direct_bidi(self._driver)
        self._driver.set_page_load_timeout(timeout_s)
        self._timeout_s = self._page_load_timeout_s = timeout_s
        self._driver.set_script_timeout(timeout_s)  # a page that never yields holds a read this long (30 s by default)
        # Every document of every user context starts with dialogs that return at once (Playwright
        # dismisses each as it opens); the prompt behaviour above handles a dialog opened otherwise.
        self._driver.script.add_preload_script(_QUIET_DIALOGS_JS)
        self._home = self._driver.current_window_handle  # the first tab: idle at about:blank between renders
        self._memory.protect_current()  # the BiDi mapper's and the first tab's renderers are no page's
        self._settle_s = settle_ms / 1000
        self._html_js = DOM_HTML_JS.format(n=int(max_chars))

    def render(self, url: str, timeout_s: float | None = None) -> RenderedPage:
        """Load ``url`` within ``timeout_s`` (the session's page-load timeout if None), its renderer
        kept under the memory cap."""
        return render_under_cap(self._memory, url, lambda: self._render_within(url, timeout_s))

    def _render_within(self, url: str, timeout_s: float | None) -> RenderedPage:
        from selenium.common.exceptions import TimeoutException, WebDriverException

        wanted = self._timeout_s if timeout_s is None else max(0.001, timeout_s)
        if abs(wanted - self._page_load_timeout_s) > 0.25:  # a WebDriver command; skipped for a few ms
            self._driver.set_page_load_timeout(wanted)
            self._page_load_timeout_s = wanted

        # A user context of its own per render (cookies, storage, cache, service workers), removed
        # with every window the page opened once it has been read: what one episode's page stored
        # or started must not be there for the next. A context costs far less than a browser launch.
        context = self._driver.browser.create_user_context()
        try:
            self._driver.switch_to.window(self._driver.browsing_context.create("tab", user_context=context))
            self._driver.get(url)
            if self._driver.current_url in ("about:blank", "data:,"):  # still blank: nothing committed
                # The response became a download (Playwright raises for it).
                raise BrowserError(f"browser could not load {url}: the response started a download")
            if self._settle_s > 0:  # let late XHR-driven rendering finish (a wait in the page would end
                time.sleep(self._settle_s)  # with the first dialog the page opens)
            html, final_url, content_type, status = self._read_page()
        except TimeoutException as exc:
            raise BrowserError(f"page load timed out: {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except WebDriverException as exc:
            first = (exc.msg or str(exc)).splitlines()[0]
            raise BrowserError(f"browser could not load {url}: {first}") from exc
        finally:
            self._leave(context)
        # WebDriver shows no headers: the proxy's answer pages carry their marker in the body.
        raise_if_proxy_answered(final_url, BLOCKED_MARKER in html, UNREACHABLE_MARKER in html)
        status = int(status) if isinstance(status, int | float) and status > 0 else None
        return RenderedPage(url, final_url, html, status, content_type)

    def _read_page(self) -> tuple[str, str, str, object]:
        """The DOM, URL, content type and status of the page shown. A dialog that opens while a
        read waits fails that read (the dialog is dismissed): a page that keeps opening them is
        read again, a few times at most."""
        from selenium.common.exceptions import UnexpectedAlertPresentException

        for attempt in range(_READ_ATTEMPTS):
            try:
                # page_source sometimes comes back empty right after a navigation; the DOM does not.
                html = self._driver.execute_script(self._html_js) or ""
                content_type = str(self._driver.execute_script("return document.contentType;") or "text/html")
                # WebDriver has no status codes; Chromium's Navigation Timing entry has (0 = none, e.g. an error page).
                status = self._driver.execute_script(NAVIGATION_STATUS_JS)
                raise_if_error_page(self._driver.current_url, self._driver.execute_script(ERROR_PAGE_JS))
                return html, self._driver.current_url, content_type, status
            except UnexpectedAlertPresentException:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _leave(self, context: str) -> None:
        """Back to the idle first tab; remove the render's user context, which closes its windows
        without running beforeunload (a broken driver is caught by ``healthy``)."""
        from selenium.common.exceptions import WebDriverException

        with contextlib.suppress(WebDriverException):
            self._driver.switch_to.window(self._home)
        with contextlib.suppress(WebDriverException):
            self._driver.browser.remove_user_context(context)

    def healthy(self) -> bool:
        try:
            return self._home in self._driver.window_handles
        except Exception:  # any driver failure means the session is gone
            return False

    def close(self) -> None:
        try:
            self._driver.quit()
        finally:  # released once chromedriver and Chromium have stopped listening
            for port in getattr(self, "_control_ports", ()):
                release_local_port(port)


_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY")


def _proxy_in_environment() -> bool:
    """Whether websocket-client would send the BiDi socket to a proxy (it reads these, and
    ``no_proxy``, which a ``*`` turns off)."""
    no_proxy = os.environ.get("no_proxy", os.environ.get("NO_PROXY", "")).replace(" ", "").split(",")
    return any(os.environ.get(name) for name in _PROXY_VARIABLES) and "*" not in no_proxy


def install_direct_bidi(driver: Any) -> None:
    """Open the driver's WebDriver BiDi connection without the environment's proxy settings (what
    ``ignore_local_proxy_environment_variables`` does for the HTTP commands): the socket goes to
    the local chromedriver and carries every URL to open.

    Selenium offers no setting for it, so this relies on two private names of selenium 4.51: the
    driver's ``_websocket_connection`` (None until BiDi is first used) and the ``_ws`` attribute
    :class:`WebSocketConnection` keeps its ``WebSocketApp`` in. Both are checked: where either is
    gone (another selenium), the session fails with a clear :class:`BrowserError` if a proxy
    variable is set, and keeps selenium's own connection (direct anyway) if none is.
    """
    from selenium import __version__ as selenium_version
    from selenium.webdriver.remote.websocket_connection import WebSocketConnection

    unsupported = (f"selenium {selenium_version} no longer keeps its BiDi connection where coa-envs pins it "
                   "(WebDriver._websocket_connection, WebSocketConnection._ws), so the socket to chromedriver "
                   "would go through HTTP_PROXY/HTTPS_PROXY; unset those variables (or set NO_PROXY=*), or "
                   "install selenium 4.51, or use the playwright backend")
    if vars(driver).get("_websocket_connection", False) is not None or not _pins_websocket_app(WebSocketConnection):
        if _proxy_in_environment():
            raise BrowserError(unsupported)
        warnings.warn(unsupported, RuntimeWarning, stacklevel=2)
        return
    connection = _direct_bidi_connection(driver)
    if not connection.pinned:  # the socket opened without our settings: with a proxy set, through it
        if _proxy_in_environment():
            with contextlib.suppress(Exception):
                connection.close()
            raise BrowserError(unsupported)
        warnings.warn(unsupported, RuntimeWarning, stacklevel=2)
    driver._websocket_connection = connection


def _pins_websocket_app(connection_class: type) -> bool:
    """Whether ``connection_class`` makes its ``WebSocketApp`` in ``_start_ws`` and keeps it in ``_ws``
    (read from the method's code, before any socket is opened)."""
    code = getattr(getattr(connection_class, "_start_ws", None), "__code__", None)
    return code is not None and {"_ws", "WebSocketApp"} <= set(code.co_names)


def _direct_bidi_connection(driver: Any) -> Any:
    """A :class:`WebSocketConnection` whose ``WebSocketApp.run_forever`` is pinned to no proxy;
    ``pinned`` says whether selenium handed its app over (see :func:`install_direct_bidi`)."""
    from selenium.webdriver.remote.websocket_connection import WebSocketConnection

    class DirectConnection(WebSocketConnection):
        pinned = False

        @property
        def _ws(self) -> Any:
            return self.__dict__.get("_direct_ws")

        @_ws.setter
        def _ws(self, app: Any) -> None:  # the app is made, then run on a thread: pin run_forever's proxy
            if app is not None:
                # websocket-client reads http_no_proxy only beside an explicit proxy, which it then
                # skips for every host ("*"): a direct connection, whatever the environment says.
                app.run_forever = functools.partial(app.run_forever, http_proxy_host="127.0.0.1",
                                                    http_proxy_port=9, http_no_proxy=["*"], proxy_type="http")
                self.pinned = True
            self.__dict__["_direct_ws"] = app

    config = driver.command_executor.client_config
    return DirectConnection(driver.caps["webSocketUrl"], config.websocket_timeout, config.websocket_interval)
