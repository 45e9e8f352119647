"""A fetch resolves its host twice (the URL check, then the connection, which connects to the
address it checked): both DNS waits come out of the fetch's one ``timeout_s``."""

from __future__ import annotations

import re
import threading
import time

import pytest

from coa_envs.types import ErrorKind
from coa_envs.web.fetch import HttpFetcher
from coa_envs.web.ssrf import UrlGuard


@pytest.fixture
def answers_once_then_silent():
    """A resolver (as an attacker's DNS server can be) that answers the first question after
    ``first_wait`` seconds and never answers again (until the test ends, 10 s at most)."""
    release = threading.Event()

    def make(first_wait: float):
        calls: list[str] = []

        def resolver(host: str, port: int) -> list[str]:
            calls.append(host)
            if len(calls) == 1:
                time.sleep(first_wait)
                return ["8.8.8.8"]
            release.wait(10)
            raise OSError("the resolver gave up")

        return resolver, calls

    yield make
    release.set()


def test_the_connections_lookup_waits_only_for_what_is_left_of_the_fetch(answers_once_then_silent) -> None:
    resolver, calls = answers_once_then_silent(1.0)
    fetcher = HttpFetcher(UrlGuard(["slow.test"], resolver=resolver, dns_timeout_s=2), timeout_s=2)
    try:
        failure = fetcher.fetch("http://slow.test/page")
    finally:
        fetcher.close()
    assert calls == ["slow.test", "slow.test"]
    assert failure.kind in (ErrorKind.TOOL_ERROR, ErrorKind.TOOL_TIMEOUT) and failure.transient
    waited = re.search(r"no DNS answer within ([0-9.]+)s", failure.message)
    # The second lookup may wait what the first left of the 2 s (1 s at most), not 2 s more.
    assert waited is not None and float(waited.group(1)) <= 1.05, failure.message


def test_a_guard_without_dns_timeout_still_ends_with_the_fetch(answers_once_then_silent) -> None:
    resolver, _ = answers_once_then_silent(0.0)
    fetcher = HttpFetcher(UrlGuard(["slow.test"], resolver=resolver), timeout_s=1)
    started = time.monotonic()
    try:
        failure = fetcher.fetch("http://slow.test/page")
    finally:
        fetcher.close()
    # Before, the connection's lookup waited for the resolver itself (10 s here, tens of seconds live).
    assert time.monotonic() - started < 8
    assert "no DNS answer within" in failure.message and failure.transient


@pytest.mark.slow  # a browser launch (20-40 s under load) and 6 s of DNS waits
@pytest.mark.browser
@pytest.mark.parametrize("engine", ["playwright", "selenium"])
def test_a_browser_crawl_loads_within_what_the_check_left(monkeypatch, require_browser, site, engine) -> None:
    """The crawl checks the URL (DNS), then the browser's proxy resolves it again: the page load gets
    what the check left of timeout_s, not timeout_s more (a crawl took the check's wait plus its
    timeout_s plus the settle time)."""
    from coa_envs.tools.crawl_page import build
    from coa_envs.types import ToolContext
    from coa_envs.web import ssrf

    require_browser(engine)
    release = threading.Event()
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        if host != "slow.test":
            return ssrf.literal_only_resolver(host, port)
        asked.append(host)
        if len(asked) == 1:
            time.sleep(4)  # the check's answer, late
            return ["8.8.8.8"]
        release.wait(20)  # the proxy's lookup: never answered
        raise OSError("gave up")

    monkeypatch.setattr(ssrf, "_system_resolver", resolver)
    tool = build(engine, allow_hosts=["127.0.0.1", "slow.test"], timeout_s=6, settle_ms=0)
    try:
        assert tool.run(site.url("/article.html"), ToolContext()).ok  # the browser is up
        started = time.monotonic()
        result = tool.run("http://slow.test/page", ToolContext())
        elapsed = time.monotonic() - started
    finally:
        release.set()
        tool.close()
    assert not result.ok and result.details["transient"], result.text
    assert elapsed < 9, elapsed  # 4 s of DNS + at most the 2 s left; it was 4 s + 6 s + the margins
