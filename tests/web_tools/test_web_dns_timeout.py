"""A name whose DNS server never answers costs a crawl its timeout_s, not the system resolver's
retries: getaddrinfo has no timeout of its own."""

from __future__ import annotations

import threading

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web import ssrf
from coa_envs.web.ssrf import UrlGuard


@pytest.fixture
def silent_dns(monkeypatch: pytest.MonkeyPatch):
    """The system resolver, made to wait as for a DNS server that never answers (20 s at most)."""
    release = threading.Event()
    asked: list[str] = []

    def never_answers(host: str, port: int) -> list[str]:
        asked.append(host)
        release.wait(20)
        raise OSError("the resolver gave up after its retries")

    monkeypatch.setattr(ssrf, "_system_resolver", never_answers)
    yield asked
    release.set()


def test_a_guard_waits_for_dns_no_longer_than_its_timeout(silent_dns) -> None:
    verdict = UrlGuard(dns_timeout_s=0.5).check("http://slow-dns.example/")
    assert verdict.status == "dns_error" and "no DNS answer within 0.5s" in verdict.reason
    assert silent_dns == ["slow-dns.example"]


@pytest.mark.parametrize("backend", ["httpx"])
def test_a_crawl_of_a_name_without_dns_answer_ends_by_its_timeout(silent_dns, backend: str) -> None:
    tool = build(backend, timeout_s=1)
    try:
        result = tool.run("http://slow-dns.example/page", ToolContext())
    finally:
        tool.close()
    assert result.error_kind == ErrorKind.TOOL_ERROR and "no DNS answer within 1s" in result.text, result.text
    assert result.details["transient"] is True


def test_without_a_timeout_the_resolver_is_called_directly() -> None:
    calls: list[str] = []
    guard = UrlGuard(resolver=lambda host, port: calls.append(threading.current_thread().name) or ["8.8.8.8"])
    assert guard.check("http://public.example/").allowed and calls == [threading.current_thread().name]


def test_silent_names_do_not_stall_other_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page naming many hosts whose DNS never answers must not use up what other crawls
    (other episodes) resolve with: the lookups it left waiting hold nothing shared."""
    release = threading.Event()

    def resolver(host: str, port: int) -> list[str]:
        if host.startswith("silent"):
            release.wait(20)
            raise OSError("gave up")
        return ["8.8.8.8"]

    monkeypatch.setattr(ssrf, "_system_resolver", resolver)
    guard = UrlGuard(dns_timeout_s=0.5)
    try:
        waiting = [threading.Thread(target=guard.check, args=(f"http://silent{i}.example/",)) for i in range(40)]
        for thread in waiting:
            thread.start()
        for thread in waiting:
            thread.join()
        assert guard.check("http://fast.example/").allowed
    finally:
        release.set()
