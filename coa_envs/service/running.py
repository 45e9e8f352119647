"""Run an ASGI app with uvicorn: in the foreground (``coa serve-env``) or in a thread (tests).

One implementation for every server in the project (``coa serve-env``, ``coa serve``, the
retrieval server). The socket is bound and listening before uvicorn starts, so ``port=0``
can report the real port and early connections wait in the backlog instead of being
refused. An app whose ``state.max_request_bytes`` is set (``coa serve-env``) gets WebSocket
frames up to twice that size delivered to its handler, which answers TOO_LARGE; beyond,
uvicorn closes the connection (1009) without reading the frame.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["run_server", "serve_in_thread"]


def _server(app: Any, log_level: str) -> Any:
    import uvicorn

    options: dict[str, Any] = {}
    limit = getattr(getattr(app, "state", None), "max_request_bytes", None)
    if isinstance(limit, int):
        options["ws_max_size"] = 2 * limit + 1024
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", **options)
    return uvicorn.Server(config)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def _url(host: str, sock: socket.socket) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{sock.getsockname()[1]}"


def run_server(app: Any, host: str = "127.0.0.1", port: int = 8000,
               on_ready: Callable[[str], None] | None = None, log_level: str = "warning") -> None:
    """Serve until interrupted; ``on_ready(base_url)`` is called once the port is known."""
    sock = _bind(host, port)
    server = _server(app, log_level)
    if on_ready is not None:
        on_ready(_url(host, sock))
    server.run(sockets=[sock])


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` in a background thread; yields its base URL (``http://host:port``).

    ``port=0`` picks a free port; the server is stopped and joined when the block exits.
    """
    sock = _bind(host, port)
    server = _server(app, "warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="coa-uvicorn", daemon=True)
    thread.start()
    try:
        for _ in range(3000):
            if server.started:
                break
            if not thread.is_alive():
                raise RuntimeError("the server thread exited during startup")
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the server did not start within 30 s")
        yield _url(host, sock)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
