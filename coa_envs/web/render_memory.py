"""A cap on the memory one page may make Chromium use while it is rendered.

The httpx backend stops a compression bomb at ``max_bytes``; Chromium inflates whatever it is
sent: a 200 kB gzip body of 200 MB of text took a renderer to 2 GB within one render, and a
script can fill the JavaScript heap or the DOM as fast. Several browser workers (several
episodes) at once exhausted the machine's memory. Each session's browser is started with a marker
switch; while a render runs, a thread reads the private resident size of the browser's renderer
processes from ``/proc`` and, when together they pass the cap, kills the largest (Chromium shows
the page as crashed, the render fails, the next render gets a fresh renderer). Where ``/proc`` is missing (not Linux)
nothing is watched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from coa_envs.process_pools import descendants

__all__ = ["RendererMemoryCap", "browser_marker"]

_MARKER_SWITCH = "--coa-envs-browser"
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def browser_marker() -> str:
    """A switch (ignored by Chromium) that tells this session's browser process from any other."""
    return f"{_MARKER_SWITCH}={uuid.uuid4().hex}"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _private_bytes(pid: int) -> int:
    """Resident memory of ``pid``'s own (anonymous) pages: resident minus what is file-backed or
    shared. A page's heap and DOM are anonymous; the Chromium binary and shared buffers every
    renderer maps would be counted once per renderer in a sum of resident sizes."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


class RendererMemoryCap:
    """Keep the renderers of the browser started with ``marker`` under ``limit_mb`` of private
    resident memory together while :meth:`watch` is open (the largest are killed first)."""

    def __init__(self, marker: str, limit_mb: int, interval_s: float = 0.1) -> None:
        self.marker = marker.encode()
        self.limit_bytes = int(limit_mb) << 20
        self.limit_mb = int(limit_mb)
        self.interval_s = interval_s
        self._browser_pid: int | None = None
        self._protected: set[int] = set()

    def _browser(self) -> int | None:
        """The marked browser process among this process's descendants (found once)."""
        if self._browser_pid is None or self.marker not in _cmdline(self._browser_pid):
            self._browser_pid = next((pid for pid in descendants(os.getpid())
                                      if self.marker in _cmdline(pid) and b"--type=" not in _cmdline(pid)), None)
        return self._browser_pid

    def protect_current(self) -> None:
        """Leave alone the renderers the session runs before any page (chromedriver's BiDi mapper
        tab, the idle first tab): pages render in contexts of their own, never in these, and
        killing the mapper would end the session."""
        self._protected = {pid for _, pid in self._renderers()}

    def _renderers(self) -> list[tuple[int, int]]:
        """``(private resident bytes, pid)`` of the browser's page renderers, largest first."""
        browser = self._browser()
        if browser is None:
            return []
        return sorted(((_private_bytes(pid), pid) for pid in descendants(browser)
                       if pid not in self._protected and b"--type=renderer" in _cmdline(pid)), reverse=True)

    def _clear_leftovers(self) -> None:
        """Before a render: renderers of earlier renders' closed contexts may still be exiting, and
        would count against this render. Wait for them a little, then kill what is still large."""
        threshold = min(100 << 20, self.limit_bytes // 2)
        for _ in range(20):
            large = [pid for size, pid in self._renderers() if size > threshold]
            if not large:
                return
            time.sleep(0.05)
        for pid in large:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def _kill_fat_renderers(self) -> bool:
        """Kill the largest renderers until what they hold together is back under the cap: the cap is
        on the browser's pages together, since a page's cross-site frames each get a renderer of
        their own (twenty frames of 900 MB each passed a cap of 1 GB per renderer)."""
        renderers = self._renderers()
        total = sum(size for size, _ in renderers)
        killed = False
        for size, pid in renderers:
            if total <= self.limit_bytes:
                break
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed = True
            total -= size
        return killed

    @contextlib.contextmanager
    def watch(self) -> Iterator[threading.Event]:
        """Watch the browser's renderers for as long as the block runs; the event yielded is set
        once a renderer was killed."""
        exceeded = threading.Event()
        done = threading.Event()
        if not os.path.isdir("/proc/self/task"):
            yield exceeded
            return

        self._clear_leftovers()

        def run() -> None:
            while not done.wait(self.interval_s):
                if self._kill_fat_renderers():
                    exceeded.set()

        thread = threading.Thread(target=run, name="coa-render-memory", daemon=True)
        thread.start()
        try:
            yield exceeded
        finally:
            done.set()
            thread.join(timeout=5)
