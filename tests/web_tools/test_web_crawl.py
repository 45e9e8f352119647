"""crawl_page over httpx against the real test site: every awkward page becomes a clear observation."""

from __future__ import annotations

import pytest

from coa_envs.tools.crawl_page import build, parse_crawl_query
from coa_envs.types import ErrorKind, Task, ToolContext
from coa_envs.web.testing import ARTICLE_FACT, PDF_FACT

CTX = ToolContext()


@pytest.fixture(scope="module")
def crawl():
    tool = build("httpx", allow_hosts=["127.0.0.1"], timeout_s=1.5, max_bytes=500_000, max_chars=3000)
    yield tool
    tool.close()


def test_article_text_title_and_absolute_links(crawl, site) -> None:
    result = crawl.run(site.url("/article.html"), CTX)
    assert result.ok and result.error_kind is None
    assert ARTICLE_FACT in result.text
    assert "Title: Zephyr Falls Observatory" in result.text
    assert "Contact: observatory@example.org" not in result.text  # boilerplate footer dropped
    assert f"annual report: {site.url('/doc.pdf')}" in result.text  # links made absolute for the agent
    assert f"{site.url('/page/3')}" in result.text


def test_pdf_plain_text_and_encodings(crawl, site) -> None:
    assert PDF_FACT in crawl.run(site.url("/doc.pdf"), CTX).text
    assert "Second line with ünïcödé." in crawl.run(site.url("/plain.txt"), CTX).text
    assert "Café crème à Besançon, naïve façade" in crawl.run(site.url("/latin1.html"), CTX).text
    meta = crawl.run(site.url("/latin1-meta.html"), CTX)
    assert "naïve façade, prix 3 €" in meta.text  # charset only in <meta>, cp1252 euro sign


def test_redirect_chain_is_followed_and_reported(crawl, site) -> None:
    result = crawl.run(site.url("/redirect/1"), CTX)
    assert result.ok and ARTICLE_FACT in result.text
    assert f"URL: {site.url('/article.html')} (redirected from {site.url('/redirect/1')})" in result.text


@pytest.mark.parametrize(
    "path, kind, words",
    [
        ("/loop/a", ErrorKind.TOOL_ERROR, "redirect loop"),
        ("/chain/9", ErrorKind.TOOL_ERROR, "too many redirects"),
        ("/missing", ErrorKind.TOOL_ERROR, "HTTP 404"),
        ("/error", ErrorKind.TOOL_ERROR, "HTTP 500"),
        ("/slow?s=4", ErrorKind.TOOL_TIMEOUT, "timed out"),
        ("/binary", ErrorKind.TOOL_ERROR, "binary"),
        ("/image.png", ErrorKind.TOOL_ERROR, "PNG image"),
        ("/broken.pdf", ErrorKind.TOOL_ERROR, "PDF could not be read"),
        ("/empty", ErrorKind.TOOL_ERROR, "empty"),
    ],
)
def test_failures_are_observations_with_kinds(crawl, site, path, kind, words) -> None:
    result = crawl.run(site.url(path), CTX)
    assert not result.ok
    assert result.error_kind == kind
    assert words in result.text
    assert result.text.startswith(f"Could not crawl {site.url(path)}")


def test_transient_failures_are_flagged_for_the_cache(crawl, site) -> None:
    assert crawl.run(site.url("/error"), CTX).details["transient"] is True
    assert crawl.run(site.url("/missing"), CTX).details["transient"] is False


def test_huge_page_is_capped_and_cut_with_a_marker(crawl, site) -> None:
    result = crawl.run(site.url("/huge"), CTX)
    assert result.ok
    assert "[... page cut: showed 3000 of" in result.text
    assert len(result.text) < 5000
    assert result.details["pages"][0]["truncated_body"] is True  # download stopped at max_bytes


def test_unreachable_port_is_a_tool_error(crawl) -> None:
    result = crawl.run("http://127.0.0.1:9/nothing", CTX)
    assert result.error_kind == ErrorKind.TOOL_ERROR and "could not fetch" in result.text


def test_several_urls_and_a_goal(crawl, site) -> None:
    result = crawl.run(f"{site.url('/article.html')} | {site.url('/missing')} | who founded it?", CTX)
    assert result.ok  # one page worked
    assert "--- Page 1/2 ---" in result.text and "--- Page 2/2 ---" in result.text
    assert ARTICLE_FACT in result.text and "HTTP 404" in result.text
    assert [p["ok"] for p in result.details["pages"]] == [True, False]


def test_url_limit_per_call(site) -> None:
    tool = build("httpx", allow_hosts=["127.0.0.1"], max_urls=2)
    result = tool.run(" | ".join(site.url(f"/page/{n}") for n in range(4)), CTX)
    assert "magic number of this page is 7." in result.text
    assert "[ignored 2 more URL(s); at most 2 per call]" in result.text
    tool.close()


def test_query_parsing() -> None:
    assert parse_crawl_query("https://a.org/x | https://b.org/y") == (["https://a.org/x", "https://b.org/y"], "")
    assert parse_crawl_query("https://a.org/x | find the founding year") == (["https://a.org/x"],
                                                                             "find the founding year")
    assert parse_crawl_query("en.wikipedia.org/wiki/Mars") == (["https://en.wikipedia.org/wiki/Mars"], "")
    assert parse_crawl_query("just some words") == ([], "just some words")


@pytest.mark.parametrize("query", ["", "   ", "no url here at all"])
def test_queries_without_a_url_are_bad_actions(crawl, query) -> None:
    result = crawl.run(query, CTX)
    assert result.error_kind == ErrorKind.BAD_ACTION and "needs a URL" in result.text


def test_unknown_options_and_backends_fail_at_build_time() -> None:
    with pytest.raises(ValueError, match="unknown crawl_page option"):
        build("httpx", max_chrs=10)
    with pytest.raises(ValueError, match="unknown crawl_page backend"):
        build("curl")


def test_llm_summary_is_steered_by_the_goal(site, chat_api) -> None:
    api_server = chat_api
    tool = build("httpx", allow_hosts=["127.0.0.1"],
                 summary={"base_url": api_server.base_url + "/v1", "model": "summariser", "api_key": "k"})
    result = tool.run(f"{site.url('/article.html')} | who founded the observatory?", CTX)
    assert result.ok and result.details["pages"][0]["summarised"] is True
    assert "Summary toward the goal:\nMODEL SAW" in result.text
    request = api_server.requests[-1]
    assert request.path == "/v1/chat/completions" and request.headers["authorization"] == "Bearer k"
    prompt = request.json()["messages"][0]["content"]
    assert "Goal: who founded the observatory?" in prompt and ARTICLE_FACT in prompt

    # Without an explicit goal the task's question steers the summary.
    task_ctx = ToolContext(task=Task(task_id="t1", question="When was it founded?"))
    tool.run(site.url("/article.html"), task_ctx)
    assert "Goal: When was it founded?" in api_server.requests[-1].json()["messages"][0]["content"]
    tool.close()


def test_dead_summary_endpoint_falls_back_to_the_page_text(site, api_server) -> None:
    api_server.behaviour = lambda _r: (503, "text/plain", b"overloaded")
    tool = build("httpx", allow_hosts=["127.0.0.1"],
                 summary={"base_url": api_server.base_url, "model": "m", "max_retries": 1, "timeout_s": 2})
    result = tool.run(site.url("/article.html"), CTX)
    assert result.ok and ARTICLE_FACT in result.text
    assert "[summary unavailable (model endpoint answered HTTP 503)" in result.text
    assert len(api_server.requests) == 2  # one retry
    tool.close()


def test_missing_chromium_is_a_not_configured_observation(site) -> None:
    tool = build("playwright", allow_hosts=["127.0.0.1"], executable_path="/nonexistent/chromium")
    result = tool.run(site.url("/article.html"), CTX)
    assert result.error_kind == ErrorKind.NOT_CONFIGURED and "apt-get install" in result.text
    tool.close()


def test_replay_cache_keys_summaries_by_task_and_skips_failed_summaries(site, chat_api, tmp_path) -> None:
    """A summary toward task A's question must never be replayed to task B; plain pages are shared."""
    from coa_envs.tools.cache import CachedTool

    url = site.url("/article.html")
    task_a = ToolContext(task=Task(task_id="a", question="Who founded the observatory?"))
    task_b = ToolContext(task=Task(task_id="b", question="How tall is the telescope dome?"))
    summary = {"base_url": chat_api.base_url + "/v1", "model": "summariser", "max_retries": 0}
    cached = CachedTool(build("httpx", allow_hosts=["127.0.0.1"], summary=summary), backend="httpx",
                        mode="replay-or-record", path=tmp_path / "summaries.sqlite")
    first_a = cached.run(url, task_a)
    first_b = cached.run(url, task_b)
    goals = [r.json()["messages"][0]["content"].split("\n", 1)[0] for r in chat_api.requests]
    assert goals == ["You read web pages for a research agent. Goal: Who founded the observatory?",
                     "You read web pages for a research agent. Goal: How tall is the telescope dome?"]
    assert first_a.details.get("cache") is None and first_b.details.get("cache") is None  # both live
    replay_a, replay_b = cached.run(url, task_a), cached.run(url, task_b)
    assert replay_a.details["cache"] == "hit" and replay_a.text == first_a.text
    assert replay_b.details["cache"] == "hit" and replay_b.text == first_b.text
    assert len(chat_api.requests) == 2 and len(cached.store) == 2

    chat_api.behaviour = lambda _r: (503, "text/plain", b"overloaded")
    task_c = ToolContext(task=Task(task_id="c", question="Where is it?"))
    degraded = cached.run(url, task_c)
    assert degraded.ok and "summary unavailable" in degraded.text and degraded.details["transient"] is True
    assert len(cached.store) == 2  # the outage was not stored: a later run summarises again
    cached.close()

    plain = CachedTool(build("httpx", allow_hosts=["127.0.0.1"]), backend="httpx", mode="replay-or-record",
                       path=tmp_path / "plain.sqlite")
    plain.run(url, task_a)
    assert plain.run(url, task_b).details["cache"] == "hit" and len(plain.store) == 1
    plain.close()


UNDECLARED = {
    "shift_jis": ("東京の天気", "東京は今日晴れです。明日は雨が降るでしょう。気温は二十度です。"
                               "観測所の記録によれば、この季節の平均気温は十八度です。"),
    "gb18030": ("北京天气", "北京今天是晴天。明天会下雨。气温是二十度。根据观测站的记录，这个季节的平均气温是十八度。"),
    "koi8_r": ("Погода в Москве", "Сегодня в Москве солнечно. Завтра будет дождь. Температура двадцать градусов. "
               "По данным обсерватории средняя температура сезона восемнадцать градусов."),
    "utf-16": ("Zürich", "Der Zürichsee ist heute ruhig; die Fähre fährt um 9 Uhr. Laut Wetterdienst bleibt es "
               "trocken und mild bis zum späten Nachmittag."),
}


def test_pages_in_other_encodings_without_a_declared_charset(crawl) -> None:
    """Servers often send ``text/html`` with no charset: BOM sniffing and detection must recover the text."""
    from coa_envs.web.testing import serve_test_site

    pages = {
        f"/{name}.html": ("text/html", f"<html><head><title>{title}</title></head><body><article><p>{text}</p>"
                                       f"</article></body></html>".encode(name))
        for name, (title, text) in UNDECLARED.items()
    }
    with serve_test_site(extra_pages=pages) as host:
        for name, (title, text) in UNDECLARED.items():
            result = crawl.run(host.url(f"/{name}.html"), CTX)
            assert result.ok and f"Title: {title}" in result.text and text[:20] in result.text, (name, result.text)


def test_a_server_dribbling_its_headers_cannot_outlast_timeout_s() -> None:
    """httpx's timeouts bound each socket read: a server sending its response head a byte at a time,
    each byte well inside the read timeout, held the fetch until the head was complete (16 kB at one
    byte per 14 s would be 64 hours). timeout_s bounds the whole fetch, headers included."""
    import socket
    import time

    from tests.web_tools.listeners import serve_in_background

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Slow: " + b"z" * 150 + b"\r\nContent-Length: 2\r\n\r\nok"
    sent: list[int] = []

    def dribble(sock: socket.socket) -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(4096)
            count = 0
            try:
                for byte in head:  # 225 bytes, 0.05 s apart: 11 s in all
                    conn.sendall(bytes([byte]))
                    count += 1
                    time.sleep(0.05)
            except OSError:  # the client hung up
                pass
            sent.append(count)

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    tool = build("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=1)
    with serve_in_background(listener, dribble):
        result = tool.run(f"http://127.0.0.1:{listener.getsockname()[1]}/", CTX)
        deadline = time.monotonic() + 15
        while not sent and time.monotonic() < deadline:  # the server notices the hang-up on a later byte
            time.sleep(0.05)
    tool.close()
    assert result.error_kind == ErrorKind.TOOL_TIMEOUT and result.details["transient"] is True, result.text
    assert sent and sent[0] < len(head)  # the fetch gave up before the head was complete


def test_cookies_live_for_one_fetch_only() -> None:
    """The httpx client kept every cookie a site set, for every later fetch: a page could store the
    answer in one episode (a cookie) and have a site echo it back in the next. A cookie still
    follows its own fetch's redirects (sites that set one, then redirect to check it)."""
    from coa_envs.loopback import QuietHandler, Serving, loopback_server

    class CookieSite(QuietHandler):
        def do_GET(self) -> None:
            cookie = {"Set-Cookie": "stash=answer42; Max-Age=3600; Path=/"}
            if self.path == "/set":
                self.send_body(200, b"<html><body><p>stored</p></body></html>", "text/html", cookie)
            elif self.path == "/set-and-redirect":
                self.send_body(302, b"", "text/html", {**cookie, "Location": "/echo"})
            else:
                echo = f"<html><body><p>Cookie header: [{self.headers.get('Cookie')}]</p></body></html>"
                self.send_body(200, echo.encode(), "text/html")

    serving = Serving(loopback_server(CookieSite))
    tool = build("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False)
    with serving:
        assert tool.run(serving.base_url + "/set", CTX).ok
        later = tool.run(serving.base_url + "/echo", CTX)
        chained = tool.run(serving.base_url + "/set-and-redirect", CTX)
        after_chain = tool.run(serving.base_url + "/echo", CTX)
    tool.close()
    assert "Cookie header: [None]" in later.text, later.text
    assert "Cookie header: [stash=answer42]" in chained.text, chained.text
    assert "Cookie header: [None]" in after_chain.text, after_chain.text


@pytest.mark.parametrize("location", ["javascript:alert(1)", "http://[::1", "http://exa mple.org/"])
def test_a_redirect_to_an_unparseable_target_is_an_observation(site, location) -> None:
    """httpx parses a redirect's Location while it sends the request: HttpFetcher.fetch raised
    InvalidURL for 'javascript:alert(1)' (crawl_page showed 'crawler error: InvalidURL')."""
    from urllib.parse import quote

    from coa_envs.web.fetch import FetchFailure, HttpFetcher
    from coa_envs.web.ssrf import UrlGuard, literal_only_resolver

    fetcher = HttpFetcher(UrlGuard(["127.0.0.1"], resolver=literal_only_resolver), timeout_s=5)
    try:
        outcome = fetcher.fetch(site.url("/to?u=" + quote(location)))
    finally:
        fetcher.close()
    assert isinstance(outcome, FetchFailure) and outcome.kind in (ErrorKind.TOOL_ERROR, ErrorKind.BLOCKED_URL)
