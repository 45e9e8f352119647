"""The Selenium engine: one headless Chromium per worker thread, driven through chromedriver."""

from __future__ import annotations

import contextlib
import warnings

from coa_envs.types import ErrorKind
from coa_envs.web.chromium import (
    CHROMIUM_FLAGS,
    DOM_HTML_JS,
    NAVIGATION_STATUS_JS,
    BrowserError,
    RenderedPage,
    raise_if_proxy_answered,
)
from coa_envs.web.fetch import DEFAULT_USER_AGENT
from coa_envs.web.proxy import BLOCKED_MARKER, UNREACHABLE_MARKER

__all__ = ["SeleniumSession"]


class SeleniumSession:
    def __init__(self, executable: str, driver_path: str, proxy_url: str, timeout_s: float,
                 settle_ms: int, max_chars: int) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = executable
        for flag in ("--headless=new", *CHROMIUM_FLAGS, f"--proxy-server={proxy_url}",
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
        self._html_js = DOM_HTML_JS.format(n=int(max_chars))

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
            status = self._driver.execute_script(NAVIGATION_STATUS_JS)
        except TimeoutException as exc:
            raise BrowserError(f"page load timed out: {url}", ErrorKind.TOOL_TIMEOUT) from exc
        except WebDriverException as exc:
            first = (exc.msg or str(exc)).splitlines()[0]
            raise BrowserError(f"browser could not load {url}: {first}") from exc
        finally:
            self._leave_page()
        # WebDriver shows no headers: the proxy's answer pages carry their marker in the body.
        raise_if_proxy_answered(final_url, BLOCKED_MARKER in html, UNREACHABLE_MARKER in html)
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
