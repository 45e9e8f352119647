"""What one render leaves behind must not reach the next (another episode's), and no page can stop
a render: storage, service workers, the driver's own ports, modal dialogs. Both engines."""

from __future__ import annotations

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.testing import ARTICLE_FACT, serve_test_site
from tests.web_tools.conftest import loopback_browser_crawl

pytestmark = pytest.mark.browser
CTX = ToolContext()
ENGINES = ("playwright", "selenium")

# Reads what an earlier render stored (cookie, localStorage, IndexedDB, Cache Storage), then stores
# its own. The iframe holds the load event back while the asynchronous stores answer.
_STASH_PAGE = """<html><head><title>Stash</title></head><body><article><h1>Stash page</h1>
<p>This page reports what an earlier visit left in the browser and then leaves something itself.</p>
<p id="out">pending</p></article><iframe src="/slow?s=1"></iframe><script>
const found = [];
if (document.cookie.includes("stash=")) found.push("cookie");
if (localStorage.getItem("stash")) found.push("localStorage");
document.cookie = "stash=answer42; max-age=3600; path=/";
localStorage.setItem("stash", "answer42");
const idb = new Promise(done => {
  const open = indexedDB.open("stash", 1);
  open.onupgradeneeded = () => open.result.createObjectStore("kv");
  open.onerror = () => done();
  open.onsuccess = () => {
    const tx = open.result.transaction("kv", "readwrite");
    const get = tx.objectStore("kv").get("k");
    get.onsuccess = () => { if (get.result) found.push("indexedDB"); tx.objectStore("kv").put("answer42", "k"); };
    tx.oncomplete = () => done(); tx.onerror = () => done();
  };
});
const cache = caches.open("stash").then(c => c.match("/stash-key").then(hit => {
  if (hit) found.push("cacheStorage");
  return c.put("/stash-key", new Response("answer42"));
})).catch(() => null);
Promise.all([idb, cache]).then(() => {
  document.getElementById("out").textContent = "Left by earlier visits: [" + found.join(",") + "] end.";
});
</script></body></html>"""


@pytest.fixture(scope="module", params=ENGINES)
def crawl(request):
    with loopback_browser_crawl(request.param, timeout_s=10, settle_ms=300) as tool:
        yield tool


def test_nothing_one_render_stores_is_there_for_the_next(crawl) -> None:
    """Every render shared one profile: a page could store the answer (cookie, localStorage,
    IndexedDB, Cache Storage) in one episode and read it back in another."""
    with serve_test_site(extra_pages={"/stash.html": ("text/html", _STASH_PAGE.encode())}) as host:
        first = crawl.run(host.url("/stash.html"), CTX)
        second = crawl.run(host.url("/stash.html"), CTX)
    assert first.ok and "Left by earlier visits: [] end." in first.text, first.text
    assert second.ok and "Left by earlier visits: [] end." in second.text, second.text


_DIALOGS = {
    "alert": "alert('hello');",
    "confirm": "if (!confirm('go on?')) document.title = 'Declined';",
    "prompt": "prompt('your name?', 'x');",
    "repeated": "setInterval(() => alert('again'), 20);",
    "fresh-frame": "setInterval(() => document.body.appendChild(document.createElement('iframe'))"
                   ".contentWindow.alert('framed'), 20);",
    "beforeunload": "window.onbeforeunload = e => { e.preventDefault(); e.returnValue = 'stay'; return 'stay'; };",
}


@pytest.mark.parametrize("dialog", sorted(_DIALOGS))
def test_modal_dialogs_neither_hang_nor_break_a_render(crawl, site, dialog) -> None:
    """Selenium failed every render of a page that called alert() (an unexpected alert open);
    the next render must work too."""
    page = (f'<html><head><title>Dialogs</title></head><body><article><h1>Dialog page</h1><p>This page '
            f'opens a modal dialog while it loads and still has readable text for the agent.</p></article>'
            f'<script>{_DIALOGS[dialog]}</script></body></html>')
    with serve_test_site(extra_pages={"/dialog.html": ("text/html", page.encode())}) as host:
        result = crawl.run(host.url("/dialog.html"), CTX)
    assert result.ok and "readable text for the agent" in result.text, result.text
    after = crawl.run(site.url("/article.html"), CTX)
    assert after.ok and ARTICLE_FACT in after.text, after.text


def test_a_failed_render_leaves_the_next_one_clean(crawl, site) -> None:
    """An error page (HTTP 404 here) goes through the same clean-up as a page that loaded."""
    assert crawl.run(site.url("/missing"), CTX).error_kind == ErrorKind.TOOL_ERROR
    assert ARTICLE_FACT in crawl.run(site.url("/article.html"), CTX).text


@pytest.mark.parametrize("engine", ENGINES)
def test_clean_renders_reuse_one_browser(engine, site, require_browser, monkeypatch) -> None:
    """Isolation comes from a fresh context per render, not from a browser launched per render."""
    import coa_envs.web.browsers as browsers

    require_browser(engine)
    name = {"playwright": "PlaywrightSession", "selenium": "SeleniumSession"}[engine]
    launches: list[str] = []

    class Counted(getattr(browsers, name)):  # type: ignore[misc]
        def __init__(self, *args, **kwargs) -> None:
            launches.append(engine)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(browsers, name, Counted)
    tool = build(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=10, settle_ms=0)
    try:
        with serve_test_site(extra_pages={"/stash.html": ("text/html", _STASH_PAGE.encode())}) as host:
            results = [tool.run(host.url("/stash.html"), CTX) for _ in range(3)]
    finally:
        tool.close()
    assert all(r.ok and "Left by earlier visits: [] end." in r.text for r in results), [r.text for r in results]
    assert launches == [engine]


def test_driver_devtools_and_proxy_ports_stay_closed_with_loopback_allowed(site, require_browser, monkeypatch) -> None:
    """With 127.0.0.1 opened (as fixtures and the mini-web do), the agent could crawl chromedriver's
    port (GET /status; a POST /session starts any binary with any arguments), Chromium's DevTools
    port (/json/list names every open tab and its debugger socket) and the guarded proxy itself."""
    import coa_envs.web.browsers as browsers

    require_browser("selenium")
    sessions: list = []

    class Seen(browsers.SeleniumSession):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            sessions.append(self)

    monkeypatch.setattr(browsers, "SeleniumSession", Seen)
    tool = build("selenium", allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=10, settle_ms=0)
    static = build("httpx", allow_private=True, resolve_dns=False)
    try:
        assert tool.run(site.url("/article.html"), CTX).ok  # the browser is up
        driver = sessions[0]._driver
        devtools = driver.capabilities["goog:chromeOptions"]["debuggerAddress"].rpartition(":")[2]
        proxy = tool._renderer._proxy.url.rpartition(":")[2]
        urls = [f"http://127.0.0.1:{driver.service.port}/status", f"http://127.0.0.1:{devtools}/json/list",
                f"http://127.0.0.1:{proxy}/", f"http://0.0.0.0:{driver.service.port}/status",
                f"http://[::ffff:127.0.0.1]:{devtools}/json/version"]
        for url in urls:
            for crawler in (tool, static):
                result = crawler.run(url, CTX)
                assert result.error_kind == ErrorKind.BLOCKED_URL, (crawler.backend, url, result.text)
        assert tool.run(site.url("/article.html"), CTX).ok  # other loopback ports stay open
    finally:
        tool.close()
        static.close()


def test_a_page_cannot_open_windows(crawl) -> None:
    """Both drivers turn Chromium's popup blocker off: a page opening windows in a loop had hundreds
    loading at once (379 in one Selenium render, which took 63 s under a 10 s timeout)."""
    page = ('<html><head><title>Windows</title></head><body><article><h1>Windows</h1><p>This page tries to '
            'open a great many windows while the agent reads it.</p><p id="granted"></p></article><script>'
            'let n = 0, granted = 0; setInterval(() => { for (let i = 0; i < 10; i++) {'
            ' if (window.open("/page/" + (n++), "_blank")) granted++; }'
            ' document.getElementById("granted").textContent = "Windows granted: " + granted + " of " + n; }, 20);'
            '</script></body></html>')
    with serve_test_site(extra_pages={"/windows.html": ("text/html", page.encode())}) as host:
        result = crawl.run(host.url("/windows.html"), CTX)
    assert result.ok and "Windows granted: 0 of " in result.text, result.text


@pytest.mark.slow  # 12-17 s: a browser launch, a page that uses up its budget, a second render
@pytest.mark.parametrize("engine", ENGINES)
def test_a_page_that_never_yields_times_out_and_the_next_render_works(engine, site) -> None:
    """page.evaluate has no timeout: with Playwright, a page spinning in a loop after load held the
    worker's read forever, and every later render on that worker failed ("browser did not answer",
    65 s each). The render now has a budget after which its context is closed."""
    page = ('<html><head><title>Busy</title></head><body><article><h1>Busy</h1><p>This page spins forever '
            'once it has loaded.</p></article><script>window.addEventListener("load",'
            ' () => setTimeout(() => { while (true) {} }, 50));</script></body></html>')
    with loopback_browser_crawl(engine, timeout_s=3, settle_ms=300) as tool:
        with serve_test_site(extra_pages={"/busy.html": ("text/html", page.encode())}) as host:
            busy = tool.run(host.url("/busy.html"), CTX)
        after = tool.run(site.url("/article.html"), CTX)
    assert busy.error_kind == ErrorKind.TOOL_TIMEOUT and busy.details["transient"] is True, busy.text
    assert after.ok and ARTICLE_FACT in after.text, after.text


_SW_SCRIPT = b"""self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", event => event.waitUntil(self.clients.claim()));
self.addEventListener("fetch", event => {
  if (new URL(event.request.url).pathname === "/page/7")
    event.respondWith(new Response("<html><body><p>INTERCEPTED by an earlier render's worker</p></body></html>",
                                   {headers: {"Content-Type": "text/html"}}));
});"""
_SW_PAGE = b"""<html><head><title>Worker</title></head><body><article><h1>Worker page</h1><p id="state">This page
installs a service worker that answers for another page of the site.</p></article>
<iframe src="/slow?s=1.5"></iframe><script>
if (navigator.serviceWorker) navigator.serviceWorker.register("/sw.js", {scope: "/"}).then(() =>
  navigator.serviceWorker.ready).then(() => document.getElementById("state").textContent = "Worker active.")
  .catch(e => document.getElementById("state").textContent = "Worker refused: " + e);
</script></body></html>"""


def test_a_service_worker_does_not_outlive_its_render(crawl) -> None:
    """Selenium let a page's service worker stay registered in the shared profile, answering later
    renders' requests for its scope (another episode's page showed what the worker chose)."""
    pages = {"/sw.html": ("text/html", _SW_PAGE), "/sw.js": ("text/javascript", _SW_SCRIPT)}
    with serve_test_site(extra_pages=pages) as host:
        crawl.run(host.url("/sw.html"), CTX)
        later = crawl.run(host.url("/page/7"), CTX)
    assert later.ok and "magic number of this page is 49." in later.text, later.text
    assert "INTERCEPTED" not in later.text


@pytest.mark.parametrize("how", ["redirect", "script"])
def test_chromiums_own_error_page_is_a_failed_render_not_the_page(crawl, site, how) -> None:
    """A navigation Chromium refuses (here a redirect to a data: URL) ends on its own error page at
    chrome-error://chromewebdata/; Selenium (and Playwright, after a navigation by script) returned that
    page as the site's text ("This site can't be reached")."""
    unsafe = "/to?u=data%3Atext/html%2C%3Cp%3Einline%3C/p%3E"
    page = ('<html><head><title>Mover</title></head><body><article><h1>Mover</h1><p>This page moves on by '
            f'script to an address the browser refuses to open.</p></article><script>setTimeout(() => '
            f'location.href = "{unsafe}", 30);</script></body></html>')
    with serve_test_site(extra_pages={"/mover.html": ("text/html", page.encode())}) as host:
        result = crawl.run(host.url(unsafe if how == "redirect" else "/mover.html"), CTX)
    assert result.error_kind == ErrorKind.TOOL_ERROR, result.text
    assert "ERR_UNSAFE_REDIRECT" in result.text and "can’t be reached" not in result.text, result.text
