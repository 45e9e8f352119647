"""Ports no agent-chosen URL may reach on this machine: the control ports of the crawlers' own
browsers and proxies (in this process and in every other coa-envs process of this user), and the
default ports of browser-control services.

The SSRF guard (:mod:`coa_envs.web.ssrf`) refuses these on every local address. A port is
reserved while its service runs (:func:`reserve_local_port`) and released when it stops.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from coa_envs.process_pools import process_alive

__all__ = ["WELL_KNOWN_CONTROL_PORTS", "is_reserved_port", "release_local_port", "reserve_local_port",
           "reserved_local_ports"]

# Control ports of the crawlers' own machinery (the guarded proxy, chromedriver, Chromium's
# DevTools): whoever reaches one drives a browser (chromedriver starts any binary it is sent), so no
# allow-list entry opens them. This process's are kept here; every coa-envs process on the machine
# also lists its own in a shared directory (see _PortRegistry), so that a page one process renders
# cannot reach the browser another process (a rollout worker, an env server) drives for another episode.
_RESERVED_LOCAL_PORTS: set[int] = set()
# Default ports of browser-control services that are not ours (a developer's Chrome started with
# --remote-debugging-port, a chromedriver or Selenium server on its default port): refused on local
# addresses unless an allow_hosts entry names that host:port.
WELL_KNOWN_CONTROL_PORTS = {9222: "Chrome DevTools", 9515: "chromedriver", 4444: "Selenium / geckodriver"}


class _PortRegistry:
    """Control ports of every live coa-envs process of this user: one file per port, named by the
    port and holding the owner's pid; an entry whose owner is gone is removed when it is read."""

    def __init__(self) -> None:
        user = os.getuid() if hasattr(os, "getuid") else 0
        self.root = Path(tempfile.gettempdir()) / f"coa-envs-control-ports-{user}"

    def _trusted(self) -> bool:
        """Whether the directory is this user's own and only theirs. Its name is predictable in a
        shared temp dir: another user who made it first (or a link in its place) could delete
        our entries, reopening other processes' control ports, so then it is not used at all."""
        try:
            state = os.lstat(self.root)
        except OSError:
            return False
        owner = os.getuid() if hasattr(os, "getuid") else state.st_uid
        return stat.S_ISDIR(state.st_mode) and state.st_uid == owner and not state.st_mode & 0o077

    def add(self, port: int) -> None:
        with contextlib.suppress(OSError):  # an unwritable temp dir leaves this process's own set
            self.root.mkdir(mode=0o700, exist_ok=True)
            if not self._trusted():
                return
            for entry in self.root.iterdir():  # drop what killed processes left (a few files at most)
                self._held(entry)
            (self.root / str(port)).write_text(str(os.getpid()))

    def remove(self, port: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            entry = self.root / str(port)
            if int(entry.read_text() or 0) == os.getpid():
                entry.unlink()

    def __contains__(self, port: int) -> bool:
        return self._trusted() and self._held(self.root / str(port))

    @staticmethod
    def _held(entry: Path) -> bool:
        """Whether ``entry``'s owner still runs; the entry is removed if it does not."""
        try:
            owner = int(entry.read_text() or 0)
        except (OSError, ValueError):
            return False
        if owner == os.getpid() or process_alive(owner):
            return True
        with contextlib.suppress(OSError):
            entry.unlink()
        return False


_REGISTRY = _PortRegistry()


def reserve_local_port(port: int) -> None:
    """Refuse ``port`` on every local address (loopback, ``0.0.0.0``, ``::``), for every guard of
    every coa-envs process on this machine, whatever its allow-list or ``allow_private`` say."""
    _RESERVED_LOCAL_PORTS.add(int(port))
    _REGISTRY.add(int(port))


def release_local_port(port: int) -> None:
    """Undo :func:`reserve_local_port` once the service on ``port`` has stopped."""
    _RESERVED_LOCAL_PORTS.discard(int(port))
    _REGISTRY.remove(int(port))


def reserved_local_ports() -> frozenset[int]:
    """This process's reserved ports (other processes' are looked up port by port)."""
    return frozenset(_RESERVED_LOCAL_PORTS)


def is_reserved_port(port: int) -> bool:
    """Whether ``port`` is a control port of this or another live coa-envs process."""
    return port in _RESERVED_LOCAL_PORTS or port in _REGISTRY
