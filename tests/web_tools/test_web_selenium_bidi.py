"""The Selenium engine keeps its WebDriver BiDi socket off HTTP(S)_PROXY through two private
selenium names; where a selenium release moves them, the session fails clearly instead of
sending the socket (every URL to open) to the proxy, and leaves no browser running."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coa_envs.web import selenium_session
from coa_envs.web.chromium import BrowserError

pytest.importorskip("selenium")
from selenium.webdriver.remote.websocket_connection import WebSocketConnection

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _driver_without_bidi_slot() -> SimpleNamespace:
    return SimpleNamespace(caps={"webSocketUrl": "ws://127.0.0.1:9/session/x"})


def test_the_installed_selenium_has_the_names_the_engine_pins() -> None:
    assert selenium_session._pins_websocket_app(WebSocketConnection)


def test_a_driver_without_the_bidi_slot_fails_clearly_with_a_proxy_set(proxy_env) -> None:
    with pytest.raises(BrowserError, match=r"unset those variables.*playwright backend"):
        selenium_session.install_direct_bidi(_driver_without_bidi_slot())


def test_without_a_proxy_the_engine_keeps_seleniums_own_connection(no_proxy_env) -> None:
    driver = _driver_without_bidi_slot()
    with pytest.warns(RuntimeWarning, match="no longer keeps its BiDi connection"):
        selenium_session.install_direct_bidi(driver)
    assert not hasattr(driver, "_websocket_connection")
    for value in ("*", " * "):  # NO_PROXY=* turns websocket-client's proxy off too
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
            patch.setenv("NO_PROXY", value)
            assert not selenium_session._proxy_in_environment()


def test_a_connection_class_that_moved_its_app_is_refused_before_any_socket(proxy_env, monkeypatch) -> None:
    opened: list[str] = []

    def start_elsewhere(self: WebSocketConnection) -> None:  # a later selenium: the app under another name
        opened.append(self.url)
        self._app = object()
        self._started = True

    monkeypatch.setattr(WebSocketConnection, "_start_ws", start_elsewhere)
    driver = SimpleNamespace(_websocket_connection=None, caps={"webSocketUrl": "ws://127.0.0.1:9/s"},
                             command_executor=SimpleNamespace(client_config=SimpleNamespace(
                                 websocket_timeout=1, websocket_interval=0.1)))
    with pytest.raises(BrowserError, match="BiDi"):
        selenium_session.install_direct_bidi(driver)
    assert opened == [] and driver._websocket_connection is None


def test_an_app_that_was_never_pinned_is_closed_and_refused(proxy_env, monkeypatch) -> None:
    def start_elsewhere(self: WebSocketConnection) -> None:  # passes the code check, never sets _ws
        self._app = object()
        self._started = True

    monkeypatch.setattr(WebSocketConnection, "_start_ws", start_elsewhere)
    monkeypatch.setattr(selenium_session, "_pins_websocket_app", lambda _cls: True)
    driver = SimpleNamespace(_websocket_connection=None, caps={"webSocketUrl": "ws://127.0.0.1:9/s"},
                             command_executor=SimpleNamespace(client_config=SimpleNamespace(
                                 websocket_timeout=1, websocket_interval=0.1)))
    with pytest.raises(BrowserError, match="BiDi"):
        selenium_session.install_direct_bidi(driver)
    assert driver._websocket_connection is None


def test_a_session_that_fails_to_start_quits_its_browser(require_browser, no_proxy_env, monkeypatch) -> None:
    """A failure after chromedriver started (the BiDi check, a driver command) left Chromium and
    chromedriver running, one more pair for every render the worker retried."""
    require_browser("selenium")
    import subprocess

    from selenium import webdriver

    from coa_envs.web.chromium import find_chromedriver, find_chromium

    started: list[object] = []
    real_chrome = webdriver.Chrome

    def refuse(*_args: object) -> None:
        raise BrowserError("refused for the test")

    def chrome(*args: object, **kwargs: object) -> object:
        driver = real_chrome(*args, **kwargs)
        started.append(driver)
        driver.set_page_load_timeout = refuse  # the first command after the BiDi set-up fails
        return driver

    monkeypatch.setattr(webdriver, "Chrome", chrome)
    try:
        with pytest.raises(BrowserError, match="refused for the test"):
            selenium_session.SeleniumSession(find_chromium(), find_chromedriver(), "http://127.0.0.1:9",
                                             5, 0, 1000, 1024)
        assert len(started) == 1
        process = started[0].service.process
        try:
            assert process is None or process.wait(timeout=30) is not None  # chromedriver (and its browser) gone
        except subprocess.TimeoutExpired:
            pytest.fail("chromedriver still runs after the session failed to start")
    finally:
        for driver in started:
            driver.quit()
