"""What both Chromium engines share: where the binaries are, how Chromium is started, what a
render returns and how it fails.

Every flag here exists to keep the browser inside the guarded proxy (see
:mod:`coa_envs.web.browsers`) or to stop background traffic nobody asked for.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from coa_envs.types import ErrorKind
from coa_envs.web.proxy import BLOCKED_MARKER, UNREACHABLE_MARKER
from coa_envs.web.render_memory import RendererMemoryCap

__all__ = ["CHROMEDRIVER_CANDIDATES", "CHROMIUM_CANDIDATES", "CHROMIUM_FLAGS", "DOM_HTML_JS", "ERROR_PAGE_JS",
           "NAVIGATION_STATUS_JS",
           "BrowserError", "BrowserSession", "RenderedPage", "close_quietly", "find_chromedriver", "find_chromium",
           "raise_if_error_page", "raise_if_proxy_answered", "render_under_cap"]

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser",
                       "/usr/bin/google-chrome")
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-gpu",
    "--disable-extensions", "--disable-default-apps", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--disable-breakpad", "--no-default-browser-check",
    "--no-pings", "--metrics-recording-only", "--safebrowsing-disable-auto-update",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
    "--proxy-bypass-list=<-loopback>",
    # WebRTC (STUN/TURN, peer connections) would otherwise send UDP straight from the browser,
    # around the proxy, to any address a page names; only proxied transports remain.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)

# The DOM as HTML, cut in the page: a script can build a DOM of hundreds of MB for free, and the
# whole of it crossed into this process (and the driver) before the size cap applied.
DOM_HTML_JS = "const root = document.documentElement; return root ? root.outerHTML.slice(0, {n}) : '';"
# Chromium shows a failed navigation (an unsafe redirect, a certificate error) as a page of its own
# at chrome-error://chromewebdata/; it is no page of the site. The error code, or "" for a real page.
ERROR_PAGE_JS = ("if (!document.URL.startsWith('chrome-error:')) return '';"
                 "const code = document.querySelector('.error-code');"
                 "return (code && code.textContent.trim()) || 'the browser showed an error page';")
NAVIGATION_STATUS_JS = (
    "const entry = performance.getEntriesByType('navigation')[0];"
    "return entry && entry.responseStatus ? entry.responseStatus : 0;"
)


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium binary to drive: ``explicit`` if given and present, else the first found."""
    for path in ((explicit,) if explicit else CHROMIUM_CANDIDATES):
        if path and os.path.exists(path):
            return path
    return None


def find_chromedriver(explicit: str | None = None) -> str | None:
    for path in ((explicit,) if explicit else CHROMEDRIVER_CANDIDATES):
        if path and os.path.exists(path):
            return path
    return None


@dataclass(frozen=True, slots=True)
class RenderedPage:
    """The DOM after scripts ran, serialised to HTML, and the URL the browser ended on."""

    url: str
    final_url: str
    html: str
    status: int | None = None
    content_type: str = "text/html"


class BrowserError(Exception):
    """A render failed; ``kind`` is the :class:`ErrorKind` to report."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


class BrowserSession(Protocol):
    """One browser driven by one worker thread: load a URL, report health, shut down."""

    def render(self, url: str, timeout_s: float | None = None) -> RenderedPage: ...
    def healthy(self) -> bool: ...
    def close(self) -> None: ...


def raise_if_error_page(url: str, error_code: object) -> None:
    """The render ended on Chromium's own error page (see :data:`ERROR_PAGE_JS`)."""
    if error_code:
        code = str(error_code).strip()
        raise BrowserError(f"browser could not load {url}: {'net::' if code.startswith('ERR_') else ''}{code}")


def raise_if_proxy_answered(url: str, blocked: object, unreachable: object) -> None:
    """The guarded proxy answered instead of the site: a policy refusal, or a site it could not
    reach (transient, like httpx's connection errors)."""
    if blocked:
        raise BrowserError(f"refused to fetch {url}: {BLOCKED_MARKER}", ErrorKind.BLOCKED_URL)
    if unreachable:
        raise BrowserError(f"could not fetch {url}: {UNREACHABLE_MARKER}", ErrorKind.TOOL_ERROR)


def render_under_cap(memory: RendererMemoryCap, url: str, render: Callable[[], RenderedPage]) -> RenderedPage:
    """``render()`` with ``memory`` watching the browser's renderers: a page that passed the cap
    (its renderer was killed, so the render failed or read a crashed page) is an error saying so."""
    stopped = BrowserError(f"browser stopped {url}: the page used more than {memory.limit_mb} MB of memory "
                           "(browser_max_memory_mb)")
    with memory.watch() as exceeded:
        try:
            page = render()
        except BrowserError as exc:
            if exceeded.is_set():
                raise stopped from exc
            raise
    if exceeded.is_set():
        raise stopped
    return page


def close_quietly(session: Any) -> None:
    with contextlib.suppress(Exception):  # a dead browser may fail to close; nothing more to do
        session.close()
