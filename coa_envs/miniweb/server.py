"""Serve a mini-web site over real HTTP on 127.0.0.1 (ephemeral port, threaded stdlib server).

``serve()`` is a context manager for tests and demos; ``start()`` returns a running
server to close yourself. ``acquire_shared``/``release_shared`` give envs one reference-
counted server per (seed, options) in a process, so many envs of ``coa/MiniWeb-v0`` share
one server and the last ``env.close()`` stops it. The server binds loopback only.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from coa_envs.loopback import QuietHandler, Serving, loopback_server
from coa_envs.miniweb.site import Site, build_site
from coa_envs.miniweb.world import make_world

__all__ = ["MiniWebServer", "acquire_shared", "release_shared", "serve", "start"]

_NOT_FOUND = (b"<!doctype html><html><head><title>404 Not Found</title></head><body><h1>Not "
              b"Found</h1><p>The requested page does not exist on this server.</p></body></html>")


class _Handler(QuietHandler):
    protocol_version = "HTTP/1.1"
    server: _SiteHTTPServer
    # One write per response and no Nagle delay: headers and body written separately
    # otherwise cost a ~40 ms delayed-ACK stall per keep-alive request.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path = urlsplit(self.path).path or "/"
        if path.endswith("/") and path != "/":
            path += "index.html"
        self.server.hits[path] += 1
        page = self.server.site.pages.get(path)
        if page is None:
            self.send_body(404, _NOT_FOUND, "text/html; charset=utf-8")
            return
        if page.delay_s:
            time.sleep(page.delay_s)
        self.send_body(page.status, page.body, page.content_type,
                       {"Location": page.location} if page.location else None)

    do_HEAD = do_GET


class _SiteHTTPServer(ThreadingHTTPServer):
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], site: Site):
        self.site = site
        self.hits: Counter[str] = Counter()
        super().__init__(address, handler)


class MiniWebServer:
    """A running site. ``pages_jsonl`` is the search export (``{"url","title","text"}``)."""

    def __init__(self, site: Site, host: str = "127.0.0.1", port: int = 0):
        self.site = site
        self._http = loopback_server(_Handler, host, port, quiet=False, server_class=_SiteHTTPServer, site=site)
        self.host, self.port = self._http.server_address[:2]
        self.base_url = f"http://{self.host}:{self.port}"
        self._workdir = tempfile.TemporaryDirectory(prefix="coa-miniweb-")
        self.pages_jsonl = site.export_jsonl(Path(self._workdir.name) / "pages.jsonl", self.base_url)
        self._serving = Serving(self._http, poll_interval=0.1, name="coa-miniweb")

    @property
    def hits(self) -> Counter[str]:
        """Requests per path since start (tests use it to prove a tool really fetched)."""
        return self._http.hits

    def url(self, path: str = "/") -> str:
        return self.base_url + (path if path.startswith("/") else "/" + path)

    @property
    def closed(self) -> bool:
        return self._serving.stopped

    def close(self) -> None:
        """Stop serving and delete the search export (a second call does nothing)."""
        self._serving.stop()
        self._workdir.cleanup()

    def __enter__(self) -> MiniWebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start(seed: int = 0, *, site: Site | None = None, port: int = 0, slow_delay_s: float = 1.0,
          huge_page_bytes: int = 1_200_000, world: str = "small") -> MiniWebServer:
    """Start serving the ``world``-sized world of ``seed`` (or a given ``site``); the caller
    closes it."""
    if site is None:
        site = build_site(make_world(seed, size=world), slow_delay_s=slow_delay_s,
                          huge_page_bytes=huge_page_bytes)
    return MiniWebServer(site, port=port)


@contextmanager
def serve(seed: int = 0, **options: object) -> Iterator[MiniWebServer]:
    """``with serve(seed) as web: web.base_url`` — the server stops when the block ends."""
    server = start(seed, **options)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.close()


_shared: dict[tuple, list] = {}  # key -> [server, refcount]
_shared_lock = threading.Lock()


def acquire_shared(seed: int = 0, *, slow_delay_s: float = 1.0,
                   huge_page_bytes: int = 1_200_000, port: int = 0,
                   world: str = "small") -> MiniWebServer:
    """The process's server for these options, started on first use; pair with release.

    ``port=0`` lets the OS pick; a fixed port keeps URLs (and so record/replay cache keys)
    the same from one process to the next."""
    key = (seed, slow_delay_s, huge_page_bytes, port, world)
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None or entry[0].closed:
            entry = [start(seed, slow_delay_s=slow_delay_s, huge_page_bytes=huge_page_bytes,
                           port=port, world=world), 0]
            _shared[key] = entry
        entry[1] += 1
        return entry[0]


def release_shared(server: MiniWebServer) -> None:
    """Drop one reference; the last one stops the server."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is server:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _shared[key]
                    server.close()
                return
