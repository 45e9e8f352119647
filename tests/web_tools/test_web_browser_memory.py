"""A page may not make the browser use memory without bound: a gzip body Chromium inflates
(200 kB of it took the browser to 2.4 GB in one render) or a script filling the heap is stopped
at the crawl's browser_max_memory_mb, and the next render works."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coa_envs.loopback import QuietHandler, Serving, loopback_server
from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.render_memory import RendererMemoryCap, browser_marker

ENGINES = ["playwright", "selenium"]
CTX = ToolContext()
_HEAP_PAGE = (b"<html><body><p>filling</p><script>const kept = []; const end = Date.now() + 60000;"
              b"while (Date.now() < end) kept.push(new Array(1000000).fill(Math.random()));</script></body></html>")


def _gzip_bomb(megabytes: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as bomb:
        bomb.write(b"<html><body><p>")
        block = b"a" * (1 << 20)
        for _ in range(megabytes):
            bomb.write(block)
    return out.getvalue()


def _filler(megabytes: int) -> bytes:
    """A page whose script keeps ``megabytes`` of heap (doubles) alive."""
    return (f"<html><body><script>const kept = []; for (let i = 0; i < {megabytes}; i++)"
            f" kept.push(new Array(131072).fill(Math.random()));</script><p>full</p></body></html>").encode()


@pytest.fixture(scope="module")
def bomb_site():
    bomb = _gzip_bomb(200)  # 200 MB of text in about 1 MB

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/bomb.html":
                self.send_body(200, bomb, "text/html", {"Content-Encoding": "gzip"})
            elif self.path == "/heap.html":
                self.send_body(200, _HEAP_PAGE, "text/html")
            elif self.path == "/filler.html":
                self.send_body(200, _filler(150), "text/html")
            elif self.path.startswith("/frames.html?"):  # frames from other sites: a renderer each
                frames = "".join(f'<iframe src="http://{host}/filler.html"></iframe>'
                                 for host in self.path.partition("?")[2].split(","))
                self.send_body(200, f"<html><body><p>frames</p>{frames}</body></html>".encode(), "text/html")
            else:
                self.send_body(200, b"<html><body><article><h1>Plain</h1><p>An ordinary page.</p></article>"
                               b"</body></html>", "text/html")

    servings = [Serving(loopback_server(Handler, f"127.0.0.{n}")) for n in (1, 2, 3, 4)]
    for serving in servings:
        serving.__enter__()
    try:
        yield [serving.base_url for serving in servings]
    finally:
        for serving in servings:
            serving.__exit__(None, None, None)


@pytest.mark.browser
@pytest.mark.slow  # 40-60 s under load (two browser launches, a 200 MB inflate); about 10 s quiet
@pytest.mark.parametrize("engine", ENGINES)
def test_a_page_past_the_memory_cap_is_stopped(engine, bomb_site, require_browser) -> None:
    require_browser(engine)
    main, *others = bomb_site
    frames = main + "/frames.html?" + ",".join(url.removeprefix("http://") for url in others)
    tool = build(engine, allow_hosts=["127.0.0.0/29"], resolve_dns=False, timeout_s=30, settle_ms=0,
                 browser_max_memory_mb=300)
    try:
        # The last: three cross-site frames of 150 MB each, a renderer each, each under the cap.
        for url in (main + "/bomb.html", main + "/heap.html", frames):
            stopped = tool.run(url, CTX)
            assert stopped.error_kind == ErrorKind.TOOL_ERROR, stopped.text
            assert "used more than 300 MB of memory" in stopped.text, stopped.text
        assert tool.run(main + "/plain.html", CTX).ok  # the browser lives on
    finally:
        tool.close()


_FAKE_BROWSER = """
import subprocess, sys, time
renderer = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.readline();"
                             " kept = b'x' * (int(sys.argv[1]) << 20); time.sleep(60)", sys.argv[2],
                             "--ty" "pe=renderer"], stdin=subprocess.PIPE, text=True)
print(renderer.pid, flush=True)
renderer.stdin.write(sys.stdin.readline())  # grow when told
renderer.stdin.flush()
time.sleep(60)
"""


def _fake_browser(marker: str, megabytes: int) -> tuple[subprocess.Popen, int]:
    """A process started with ``marker`` whose child (a "--type=renderer") takes ``megabytes``
    once a line is written to the process's stdin."""
    browser = subprocess.Popen([sys.executable, "-c", _FAKE_BROWSER, marker, str(megabytes)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert browser.stdout is not None
    return browser, int(browser.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith(("Z", "X"))
    except OSError:
        return True


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("protected", [False, True])
def test_the_watch_kills_the_renderers_past_the_cap(protected: bool) -> None:
    marker = browser_marker()
    browser, renderer = _fake_browser(marker, 120)
    try:
        cap = RendererMemoryCap(marker, 64, interval_s=0.05)
        if protected:  # a renderer that was there before any page (chromedriver's BiDi mapper tab)
            cap.protect_current()
        with cap.watch() as exceeded:  # a render: its page grows past the cap
            assert browser.stdin is not None
            browser.stdin.write("grow\n")
            browser.stdin.flush()
            exceeded.wait(10)
        assert exceeded.is_set() is not protected
        for _ in range(100):  # SIGKILL is delivered, not awaited
            if _gone(renderer) or protected:
                break
            time.sleep(0.05)
        assert _gone(renderer) is not protected
    finally:
        browser.kill()
        browser.wait()
