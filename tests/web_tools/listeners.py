"""Test helper: keep a listening socket answering in the background while a test runs."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def serve_in_background(sock: socket.socket, handle: Callable[[socket.socket], None]) -> Iterator[None]:
    """Call ``handle(sock)`` over and over in a daemon thread until the block ends, then close
    ``sock``. Each call waits at most 0.1 s (the socket's timeout), so the loop stops promptly."""
    sock.settimeout(0.1)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                handle(sock)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
        sock.close()
