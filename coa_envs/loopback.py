"""One loopback HTTP server helper for the offline worlds: test sites, the mini-web, fake APIs.

Everything the tests and demos serve over HTTP (the awkward test site of
:mod:`coa_envs.web.testing`, the mini-web of :mod:`coa_envs.miniweb.server`, the fake judges,
search APIs and TLS sites of the tests) is a standard-library ``http.server`` answering from a
daemon thread on 127.0.0.1 at a port the OS picks, stopped with shutdown, close and join.
:func:`loopback_server` builds one (loopback only: nothing here may listen on a reachable
address), :class:`Serving` runs it and :class:`QuietHandler` is the request handler they
build on (no access log, one call per reply); stdlib only.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Any

__all__ = ["LOOPBACK_HOSTS", "QuietHandler", "Serving", "loopback_server"]

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def _ignore_error(request: object, client_address: object) -> None:
    """Clients that stop reading (size caps, timeouts) reset the connection; that is expected."""


def loopback_server(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, *,
                    quiet: bool = True, server_class: type[HTTPServer] = ThreadingHTTPServer,
                    **server_args: Any) -> HTTPServer:
    """A threaded HTTP server bound to ``host`` (a loopback address, else ValueError) and
    ``port`` (0: a free one); ``quiet`` drops the tracebacks of clients that hang up."""
    if host not in LOOPBACK_HOSTS and not host.startswith("127."):
        raise ValueError(f"{host}: a loopback server only binds loopback addresses (127.0.0.1)")
    server = server_class((host, port), handler, **server_args)
    server.daemon_threads = True  # type: ignore[attr-defined]
    if quiet:
        server.handle_error = _ignore_error  # type: ignore[method-assign]
    return server


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps test output clean (no access log) and answers in one call."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def send_body(self, status: int, body: bytes, content_type: str = "text/plain",
                  headers: dict[str, str] | None = None) -> None:
        """Status, ``Content-Type``, ``Content-Length`` and ``headers``, then ``body``
        (left out for HEAD, whose length still announces it)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class Serving:
    """``server`` answering from a daemon thread until :meth:`stop` or the end of a ``with``
    block (which gives the server)."""

    def __init__(self, server: HTTPServer, *, poll_interval: float = 0.05, name: str | None = None) -> None:
        self.server = server
        self.stopped = False
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval},
                                        name=name, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop answering, close the socket and join the thread (once; later calls do nothing)."""
        if self.stopped:
            return
        self.stopped = True
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Any:
        return self.server

    def __exit__(self, *exc: object) -> None:
        self.stop()
