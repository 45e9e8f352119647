"""crawl_page with the Playwright and Selenium backends (Debian chromium): JS pages and the guard."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.browsers import BrowserRenderer
from coa_envs.web.ssrf import UrlGuard, literal_only_resolver
from coa_envs.web.testing import ARTICLE_FACT, JS_SECRET, PDF_FACT, serve_test_site
from tests.web_tools.conftest import loopback_browser_crawl
from tests.web_tools.listeners import serve_in_background

pytestmark = pytest.mark.browser
CTX = ToolContext()
ENGINES = ("playwright", "selenium")


@pytest.fixture(scope="module", params=ENGINES)
def browser_crawl(request):
    with loopback_browser_crawl(request.param, timeout_s=4, settle_ms=200) as tool:
        yield tool


def test_javascript_page_is_rendered_only_by_browsers(browser_crawl, site) -> None:
    static = build("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False).run(site.url("/js.html"), CTX)
    assert JS_SECRET not in static.text  # the secret exists only after the script ran

    rendered = browser_crawl.run(site.url("/js.html"), CTX)
    assert rendered.ok, rendered.text
    assert f"The secret code is {JS_SECRET}" in rendered.text
    assert rendered.details["backend"] == browser_crawl.backend


def test_redirects_and_pdfs(browser_crawl, site) -> None:
    redirected = browser_crawl.run(site.url("/redirect/1"), CTX)
    assert ARTICLE_FACT in redirected.text and f"URL: {site.url('/article.html')}" in redirected.text
    pdf = browser_crawl.run(site.url("/doc.pdf"), CTX)  # Chromium shows a viewer; the tool reads the file
    assert pdf.ok and PDF_FACT in pdf.text


def test_non_html_bodies_are_read_like_httpx_reads_them(browser_crawl, site) -> None:
    assert "Second line with ünïcödé." in browser_crawl.run(site.url("/plain.txt"), CTX).text
    for path, words in (("/image.png", "PNG image"), ("/binary", "binary")):
        result = browser_crawl.run(site.url(path), CTX)
        assert result.error_kind == ErrorKind.TOOL_ERROR and words in result.text


def test_top_level_private_url_is_refused_before_the_browser_starts(browser_crawl) -> None:
    result = browser_crawl.run("http://169.254.169.254/latest/meta-data/", CTX)
    assert result.error_kind == ErrorKind.BLOCKED_URL


def test_redirect_to_metadata_address_is_refused_inside_the_browser(browser_crawl, site) -> None:
    result = browser_crawl.run(site.url("/to-metadata"), CTX)
    assert result.error_kind == ErrorKind.BLOCKED_URL


def test_subrequests_and_redirects_to_unlisted_private_hosts_never_arrive(browser_crawl, other_site) -> None:
    beacon = other_site.url("/beacon")
    page = (f'<html><head><title>Sub</title></head><body><article><h1>Visible page</h1><p>The page itself '
            f'loads fine and says hello to the reader at some length, enough for an extractor.</p>'
            f'<img src="{beacon}?img"><script>fetch("{beacon}?fetch").catch(() => null);</script>'
            f'</article></body></html>')
    before = other_site.hits["/beacon"]
    with serve_test_site(extra_pages={"/sub.html": ("text/html", page.encode())}) as host:
        result = browser_crawl.run(host.url("/sub.html"), CTX)
        assert result.ok and "Visible page" in result.text
        redirected = browser_crawl.run(host.url(f"/to?u={beacon}"), CTX)
        assert redirected.error_kind == ErrorKind.BLOCKED_URL
    assert other_site.hits["/beacon"] == before  # 127.0.0.2 is not on the allow-list


def test_timeouts_and_http_errors(browser_crawl, site) -> None:
    slow = browser_crawl.run(site.url("/slow?s=8"), CTX)
    assert slow.error_kind == ErrorKind.TOOL_TIMEOUT
    # Playwright reads the status from the response; Selenium from Chromium's navigation timing entry.
    missing = browser_crawl.run(site.url("/missing"), CTX)
    assert missing.error_kind == ErrorKind.TOOL_ERROR and "HTTP 404" in missing.text
    assert missing.details["transient"] is False
    failing = browser_crawl.run(site.url("/error"), CTX)
    assert failing.error_kind == ErrorKind.TOOL_ERROR and "HTTP 500" in failing.text
    assert failing.details["transient"] is True  # a server error is not frozen into a replay cache


@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_callers_share_a_pool_of_browsers(engine, site, require_browser) -> None:
    from concurrent.futures import ThreadPoolExecutor

    require_browser(engine)
    tool = build(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, browser_workers=2, settle_ms=0)
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda n: tool.run(site.url(f"/page/{n}"), CTX), range(12)))
    finally:
        tool.close()
    assert [r.ok for r in results] == [True] * 12
    assert all(f"magic number of this page is {n * 7}." in r.text for n, r in enumerate(results))
    after_close = tool.run(site.url("/page/1"), CTX)
    assert after_close.error_kind == ErrorKind.TOOL_ERROR and "closed" in after_close.text


@pytest.fixture
def udp_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A UDP socket on 127.0.0.2 (not on the allow-list) that records every datagram it gets."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.2", 0))
    received: list[bytes] = []
    with serve_in_background(sock, lambda s: received.append(s.recvfrom(4096)[0])):
        yield sock.getsockname()[1], received


def test_webrtc_cannot_send_udp_around_the_proxy(browser_crawl, udp_listener) -> None:
    """WebRTC's ICE sends STUN over UDP straight from the browser, not through the guarded proxy:
    a page naming a private STUN server made Chromium send it packets (and read its answer back as a
    candidate). Only proxied transports are allowed, so nothing reaches the unlisted address."""
    port, received = udp_listener
    page = (f'<html><head><title>RTC</title></head><body><article><h1>Peer page</h1><p>This page opens a '
            f'peer connection whose ICE servers point at a private address, and says so at length.</p>'
            f'<script>const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:127.0.0.2:{port}"}}]}});'
            f'pc.createDataChannel("x"); pc.createOffer().then(offer => pc.setLocalDescription(offer));'
            f'</script></article></body></html>')
    with serve_test_site(extra_pages={"/rtc.html": ("text/html", page.encode())}) as host:
        result = browser_crawl.run(host.url("/rtc.html"), CTX)
        assert result.ok and "Peer page" in result.text
        deadline = time.monotonic() + 2.0  # ICE starts at setLocalDescription; give it time to send
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
    assert received == []


@pytest.mark.parametrize("how", ["meta-refresh", "script"])
def test_a_page_that_navigates_on_to_a_private_host_is_refused(browser_crawl, other_site, how) -> None:
    """A meta refresh or ``location = ...`` after the first page loaded is refused like a 30x hop:
    Playwright judged only the first response and showed the proxy's refusal page as page text."""
    beacon = other_site.url("/beacon")
    onward = (f'<meta http-equiv="refresh" content="0;url={beacon}">' if how == "meta-refresh"
              else f'<script>location.href = "{beacon}";</script>')
    page = (f'<html><head><title>Onward</title>{onward}</head><body><article><h1>Moving on</h1><p>This page '
            f'sends the browser to another address as soon as it has loaded, which is refused.</p>'
            f'</article></body></html>')
    before = other_site.hits["/beacon"]
    with serve_test_site(extra_pages={"/onward.html": ("text/html", page.encode())}) as host:
        result = browser_crawl.run(host.url("/onward.html"), CTX)
    assert result.error_kind == ErrorKind.BLOCKED_URL and "127.0.0.2" in result.text
    assert other_site.hits["/beacon"] == before


def test_an_allowed_site_that_is_down_is_a_transient_error_not_a_refusal(browser_crawl) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    result = browser_crawl.run(f"http://127.0.0.1:{closed_port}/", CTX)
    assert result.error_kind == ErrorKind.TOOL_ERROR and result.details["transient"] is True
    assert "refused to fetch" not in result.text


def test_nothing_a_page_started_runs_on_after_its_render(browser_crawl) -> None:
    """The tab is shared by every render (every episode): a page's timers and the popups it opened
    kept running after the tool returned, and a popup could steer the tab through ``opener`` while a
    later render read it. After a render the page's windows are closed and the tab is blank."""
    ticker = 'setInterval(() => fetch("/tick").catch(() => null), 100);'
    pages = {
        "/opener.html": (f'<html><head><title>Opener</title></head><body><article><h1>Opener</h1><p>This page '
                         f'opens a window and keeps calling home from both, for as long as they live.</p>'
                         f'</article><script>{ticker} window.open("/popup.html", "_blank");</script></body></html>'),
        "/popup.html": f'<html><body>popup<script>{ticker}</script></body></html>',
    }
    with serve_test_site(extra_pages={k: ("text/html", v.encode()) for k, v in pages.items()}) as host:
        browser_crawl.run(host.url("/opener.html"), CTX)
        time.sleep(1.0)  # requests already on their way when the render returned may still land
        settled = host.hits["/tick"]
        time.sleep(1.5)
        assert host.hits["/tick"] == settled
        assert browser_crawl.run(host.url("/article.html"), CTX).ok  # the session still renders


def test_a_download_never_shows_the_previous_page(browser_crawl, site) -> None:
    """A response Chromium downloads leaves the tab where it was: Selenium returned the previous
    render's page (another episode's, possibly) under the new URL."""
    assert ARTICLE_FACT in browser_crawl.run(site.url("/article.html"), CTX).text
    result = browser_crawl.run(site.url("/binary"), CTX)
    assert result.error_kind == ErrorKind.TOOL_ERROR and "binary" in result.text
    assert ARTICLE_FACT not in result.text and "Zephyr" not in result.text


@pytest.mark.parametrize("engine", ENGINES)
def test_only_max_chars_of_a_huge_dom_leave_the_browser(engine, require_browser) -> None:
    """A script can build a DOM of hundreds of MB for free; all of it crossed into this process
    (about 4 bytes of memory per character) before crawl_page cut it at max_bytes."""
    require_browser(engine)
    page = ('<html><head><title>Huge</title></head><body><p>Start of a page that grows.</p><div id="d"></div>'
            '<script>document.getElementById("d").textContent = "x".repeat(5000000);</script></body></html>')
    renderer = BrowserRenderer(engine, UrlGuard(["127.0.0.1"], resolver=literal_only_resolver), timeout_s=20,
                               settle_ms=0, max_chars=50_000)
    try:
        with serve_test_site(extra_pages={"/huge.html": ("text/html", page.encode())}) as host:
            rendered = renderer.render(host.url("/huge.html"))
    finally:
        renderer.close()
    assert len(rendered.html) == 50_000 and "Start of a page that grows." in rendered.html


@pytest.mark.parametrize("engine", ENGINES)
def test_proxy_environment_variables_carry_no_browser_traffic(engine, site, require_browser, monkeypatch) -> None:
    """With HTTP(S)_PROXY set, Selenium sent its WebDriver commands (the session's Chrome flags,
    every URL to open) to that proxy instead of the local chromedriver, and every crawl failed."""
    require_browser(engine)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    heard: list[bytes] = []

    def record(sock: socket.socket) -> None:
        conn, _ = sock.accept()
        with conn:
            conn.settimeout(2)
            heard.append(conn.recv(200))

    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with serve_in_background(listener, record):
        tool = build(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=8, settle_ms=0)
        try:
            result = tool.run(site.url("/article.html"), CTX)
        finally:
            tool.close()  # Selenium's service still asks chromedriver to shut down through urllib's proxy
    assert result.ok and ARTICLE_FACT in result.text
    assert [request for request in heard if b"/shutdown" not in request] == []


@pytest.mark.parametrize("engine", ENGINES)
def test_downloads_never_reach_the_disk(engine, site, require_browser, monkeypatch, tmp_path) -> None:
    """Selenium's Chromium saved every response it downloads in ~/Downloads: any page could write
    files of any size to the host. A fresh session's first download is read through httpx too."""
    require_browser(engine)
    monkeypatch.setenv("HOME", str(tmp_path))
    tool = build(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=8, settle_ms=0)
    try:
        result = tool.run(site.url("/binary"), CTX)  # the session's first page
    finally:
        tool.close()
    assert result.error_kind == ErrorKind.TOOL_ERROR and "binary" in result.text, result.text
    assert [p for p in tmp_path.rglob("*") if p.is_file() and "binary" in p.name] == []


def test_an_https_hop_to_a_private_host_is_a_refusal_not_a_load_error(browser_crawl, site, other_site) -> None:
    """The proxy refuses the hop's CONNECT, which Chromium reports only as a failed tunnel: that was a
    transient load error, where httpx (and a plain-http hop) say blocked_url."""
    port = other_site.base_url.rsplit(":", 1)[1]
    for target in (f"https://127.0.0.2:{port}/beacon", "https://169.254.169.254/latest/meta-data/"):
        result = browser_crawl.run(site.url(f"/to?u={target}"), CTX)
        assert result.error_kind == ErrorKind.BLOCKED_URL and result.details["transient"] is False, result.text
        assert target.split("/")[2].split(":")[0] in result.text
