"""A guarded forward proxy on 127.0.0.1 that browser backends route *all* traffic through.

Why: request interception in Playwright does not see redirect hops, and Selenium has no
interception at all, so a page could redirect (or load a sub-resource) to a private
address. Sending every browser connection through this proxy applies the SSRF guard at
the network layer, to every request, redirect, sub-resource and WebSocket alike. The
proxy resolves and checks each host itself and connects to exactly the checked address,
so Chromium's own DNS is never used for the web (no rebinding window).

Plain-HTTP requests are handled one per client connection (``Connection: close`` both
ways) so a reused keep-alive connection can never carry a request to a different host.
HTTPS goes through ``CONNECT`` and is tunnelled unmodified after the host is checked.
A refused request gets ``403`` with a recognisable body (:data:`BLOCKED_MARKER`) and an
``X-Coa-Blocked`` header; a permitted host that cannot be reached (no DNS answer, connection
refused) gets ``502`` with :data:`UNREACHABLE_MARKER` and ``X-Coa-Unreachable`` instead, so a
site that is down is reported as a transient failure, not as a policy refusal.
"""

from __future__ import annotations

import contextlib
import html
import select
import socket
import socketserver
import threading
from collections import deque
from urllib.parse import urlsplit

from coa_envs.web.ssrf import UrlGuard, release_local_port, reserve_local_port

__all__ = ["BLOCKED_HEADER", "BLOCKED_MARKER", "UNREACHABLE_HEADER", "UNREACHABLE_MARKER", "GuardedProxy"]

BLOCKED_MARKER = "coa-envs SSRF guard refused this request"
BLOCKED_HEADER = "X-Coa-Blocked"
UNREACHABLE_MARKER = "coa-envs proxy could not reach this site"
UNREACHABLE_HEADER = "X-Coa-Unreachable"
_MAX_HEADER_BYTES = 64 * 1024
_IDLE_TIMEOUT_S = 30.0


def _read_head(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """Read up to the end of the request head; return (head, bytes already read past it)."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = conn.recv(8192)
        if not chunk:
            return None
        buffer += chunk
        if len(buffer) > _MAX_HEADER_BYTES:
            return None
    head, rest = buffer.split(b"\r\n\r\n", 1)
    return head, rest


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes or the link idles out."""
    sockets = [a, b]
    while True:
        readable, _, errored = select.select(sockets, [], sockets, _IDLE_TIMEOUT_S)
        if errored or not readable:
            return
        for sock in readable:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            (b if sock is a else a).sendall(data)


class _Handler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def _refuse(self, reason: str, *, blocked: bool = True) -> None:
        """Answer instead of the upstream: 403 for a policy refusal, 502 for an unreachable host."""
        status, marker, header = (("403 Forbidden", BLOCKED_MARKER, BLOCKED_HEADER) if blocked
                                  else ("502 Bad Gateway", UNREACHABLE_MARKER, UNREACHABLE_HEADER))
        text = html.escape(f"{marker}: {reason}")
        body = f"<html><body><h1>{status}</h1><p>{text}</p></body></html>".encode()
        head = (f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n"
                f"{header}: 1\r\nConnection: close\r\n\r\n").encode()
        with contextlib.suppress(OSError):
            self.request.sendall(head + body)

    def _connect(self, host: str, port: int, what: str) -> socket.socket | None:
        verdict = self.server.guard.resolve(host, port)
        if verdict.status == "blocked":
            self.server.record_refusal(what, verdict.reason)
            self._refuse(verdict.reason)
            return None
        if not verdict.allowed:  # no DNS answer: the site may be back later
            self._refuse(verdict.reason, blocked=False)
            return None
        for address in verdict.addresses:
            try:
                upstream = socket.create_connection((address, port), timeout=self.server.connect_timeout_s)
            except OSError:
                continue
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return upstream
        self._refuse(f"cannot connect to {host}:{port}", blocked=False)
        return None

    def handle(self) -> None:
        self.request.settimeout(_IDLE_TIMEOUT_S)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            read = _read_head(self.request)
            if read is None:
                return
            head, rest = read
            request_line, _, header_block = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            if method.upper() == "CONNECT":
                host, _, port_text = target.rpartition(":")
                upstream = self._connect(host.strip("[]"), int(port_text or 443), f"https://{target}")
                if upstream is None:
                    return
                with upstream:
                    self.request.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    if rest:
                        upstream.sendall(rest)
                    _pipe(self.request, upstream)
                return
            self._forward_http(method, target, version, header_block, rest)
        except (OSError, ValueError, UnicodeError):
            return

    def _forward_http(self, method: str, target: str, version: str, header_block: bytes, rest: bytes) -> None:
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            self.server.record_refusal(target, "only absolute http:// URLs are proxied")
            self._refuse(f"unsupported proxy target {target!r}")
            return
        upstream = self._connect(parts.hostname, parts.port or 80, target)
        if upstream is None:
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [
            line for line in header_block.split(b"\r\n")
            if line and not line.lower().startswith((b"connection:", b"proxy-connection:", b"keep-alive:"))
        ]
        head = f"{method} {path} {version}\r\n".encode("latin-1") + b"\r\n".join(
            [*headers, b"Connection: close"]) + b"\r\n\r\n"
        with upstream:
            upstream.sendall(head + rest)
            _pipe(self.request, upstream)


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, guard: UrlGuard, connect_timeout_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.guard = guard
        self.connect_timeout_s = connect_timeout_s
        self.refusals: deque[tuple[str, str]] = deque(maxlen=1000)
        self.refused_total = 0
        self._refusal_lock = threading.Lock()

    def record_refusal(self, what: str, reason: str) -> None:
        with self._refusal_lock:
            self.refusals.append((what, reason))
            self.refused_total += 1

    def refusals_since(self, mark: int) -> list[tuple[str, str]]:
        with self._refusal_lock:
            fresh = self.refused_total - mark
            return list(self.refusals)[-fresh:] if fresh > 0 else []

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a browser dropping a connection mid-transfer is routine


class GuardedProxy:
    """Start with :meth:`start`, point the browser at :attr:`url`, :meth:`stop` when done.

    ``refusals`` lists ``(target, reason)`` for every request the guard refused, so a
    backend can tell the model that a page tried to reach a forbidden address.
    """

    def __init__(self, guard: UrlGuard, *, connect_timeout_s: float = 10.0) -> None:
        self._server = _ProxyServer(guard, connect_timeout_s)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def refusals(self) -> deque[tuple[str, str]]:
        return self._server.refusals

    @property
    def refused_total(self) -> int:
        """How many requests were refused so far: a mark for :meth:`refusals_since`."""
        return self._server.refused_total

    def refusals_since(self, mark: int) -> list[tuple[str, str]]:
        """The refusals recorded since ``refused_total`` was ``mark`` (the latest 1000 at most)."""
        return self._server.refusals_since(mark)

    def start(self) -> GuardedProxy:
        reserve_local_port(self._server.server_address[1])  # no page reaches the proxy as a site
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        release_local_port(self._server.server_address[1])
