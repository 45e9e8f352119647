"""HTTPS through the pinned connection (certificate checked against the host name), and the
guarded proxy the browsers use (plain HTTP forwarding and CONNECT tunnels)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from coa_envs.loopback import QuietHandler, Serving, loopback_server
from coa_envs.types import ErrorKind
from coa_envs.web.fetch import FetchedPage, FetchFailure, HttpFetcher
from coa_envs.web.proxy import BLOCKED_MARKER, UNREACHABLE_MARKER, GuardedProxy
from coa_envs.web.ssrf import UrlGuard


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory) -> Iterator[tuple[int, str]]:
    trustme = pytest.importorskip("trustme", reason="pip install trustme (dev extra) for TLS tests")
    ca = trustme.CA()
    cert = ca.issue_cert("secure.test")
    ca_path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            body = f"<html><body><p>TLS page for {self.headers['Host']}</p></body></html>".encode()
            self.send_body(200, body, "text/html")

    server = loopback_server(Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with Serving(server):
        yield server.server_address[1], str(ca_path)


def test_https_uses_the_pinned_address_and_verifies_the_host_name(tls_site) -> None:
    port, ca_path = tls_site
    guard = UrlGuard(["secure.test", "impostor.test"], resolver=lambda host, p: ["127.0.0.1"])
    fetcher = HttpFetcher(guard, verify_tls=ca_path, timeout_s=5)
    page = fetcher.fetch(f"https://secure.test:{port}/")
    assert isinstance(page, FetchedPage), page
    assert f"TLS page for secure.test:{port}" in page.body.decode()
    # Same address, wrong name: the certificate (for secure.test) must not be accepted.
    impostor = fetcher.fetch(f"https://impostor.test:{port}/")
    assert isinstance(impostor, FetchFailure) and impostor.kind == ErrorKind.TOOL_ERROR
    assert "certificate" in impostor.message.lower() or "ssl" in impostor.message.lower()
    fetcher.close()


def test_untrusted_certificate_is_a_tool_error(tls_site) -> None:
    port, _ = tls_site
    fetcher = HttpFetcher(UrlGuard(["secure.test"], resolver=lambda host, p: ["127.0.0.1"]), timeout_s=5)
    outcome = fetcher.fetch(f"https://secure.test:{port}/")
    assert isinstance(outcome, FetchFailure) and outcome.kind == ErrorKind.TOOL_ERROR
    fetcher.close()


def _raw(proxy: GuardedProxy, request: bytes, then: bytes = b"") -> bytes:
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(request)
        chunks = []
        if then:
            chunks.append(conn.recv(4096))  # the CONNECT answer
            conn.sendall(then)
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_proxy_forwards_allowed_http_and_refuses_the_rest(site, other_site) -> None:
    proxy = GuardedProxy(UrlGuard(["127.0.0.1"])).start()
    try:
        ok = _raw(proxy, f"GET {site.url('/page/2')} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n".encode())
        assert ok.startswith(b"HTTP/1.1 200") and b"magic number of this page is 14." in ok
        before = other_site.hits["/beacon"]
        refused = _raw(proxy, f"GET {other_site.url('/beacon')} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403") and BLOCKED_MARKER.encode() in refused
        assert other_site.hits["/beacon"] == before
        assert any("127.0.0.2" in target for target, _ in proxy.refusals)
        relative = _raw(proxy, b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
        assert relative.startswith(b"HTTP/1.1 403")
    finally:
        proxy.stop()


def test_proxy_connect_tunnels_are_checked_too(site, other_site) -> None:
    proxy = GuardedProxy(UrlGuard(["127.0.0.1"])).start()
    site_hostport = site.base_url.removeprefix("http://")
    try:
        tunnelled = _raw(proxy, f"CONNECT {site_hostport} HTTP/1.1\r\nHost: {site_hostport}\r\n\r\n".encode(),
                         then=b"GET /page/3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"200 Connection Established" in tunnelled and b"magic number of this page is 21." in tunnelled
        other = other_site.base_url.removeprefix("http://")
        refused = _raw(proxy, f"CONNECT {other} HTTP/1.1\r\nHost: {other}\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403")
        metadata = _raw(proxy, b"CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert metadata.startswith(b"HTTP/1.1 403")
    finally:
        proxy.stop()


def test_an_allowed_host_that_is_down_is_unreachable_not_refused() -> None:
    """A permitted site that refuses connections is a transient 502, not the guard's 403: the
    browser backends report it like httpx does, and a replay cache does not freeze it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    proxy = GuardedProxy(UrlGuard(["127.0.0.1"])).start()
    try:
        for request, then in ((f"GET http://127.0.0.1:{closed_port}/ HTTP/1.1\r\nHost: x\r\n\r\n", b""),
                              (f"CONNECT 127.0.0.1:{closed_port} HTTP/1.1\r\nHost: x\r\n\r\n", b"")):
            answer = _raw(proxy, request.encode(), then)
            assert answer.startswith(b"HTTP/1.1 502") and UNREACHABLE_MARKER.encode() in answer
            assert BLOCKED_MARKER.encode() not in answer and b"X-Coa-Blocked" not in answer
        assert not proxy.refusals
    finally:
        proxy.stop()
