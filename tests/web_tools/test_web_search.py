"""web_search: Serper and SearXNG clients against a loopback server speaking their JSON; local BM25."""

from __future__ import annotations

import json

import pytest

from coa_envs.tools.web_search import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.testing import ARTICLE_FACT

CTX = ToolContext()
SERPER_REPLY = {
    "searchParameters": {"q": "zephyr falls observatory", "type": "search"},
    "answerBox": {"title": "Zephyr Falls Observatory", "answer": "Founded 1923"},
    "organic": [
        {"title": "Zephyr Falls Observatory - History", "link": "https://zf.example/history",
         "snippet": "Founded in 1923 by Margaret Ellison.", "position": 1},
        {"title": "Visiting the observatory", "link": "https://zf.example/visit",
         "snippet": "Public evenings   every\nFriday.", "date": "Mar 3, 2024", "position": 2},
        {"title": "No link entry"},
        {"title": "Third", "link": "https://zf.example/3", "snippet": "third"},
    ],
}


def test_serper_request_and_numbered_rendering(api_server) -> None:
    api_server.reply_json(SERPER_REPLY)
    tool = build("serper", base_url=api_server.base_url, api_key="secret-key", top_k=3, gl="us")
    result = tool.run("  zephyr falls   observatory ", CTX)
    assert result.ok
    request = api_server.requests[-1]
    assert request.method == "POST" and request.path == "/search"
    assert request.headers["x-api-key"] == "secret-key"
    assert request.json() == {"q": "zephyr falls observatory", "num": 3, "gl": "us"}
    assert result.text == (
        "Search results for 'zephyr falls observatory':\n\n"
        "1. Zephyr Falls Observatory\nFounded 1923\n\n"
        "2. Zephyr Falls Observatory - History\nURL: https://zf.example/history\n"
        "Founded in 1923 by Margaret Ellison.\n\n"
        "3. Visiting the observatory\nURL: https://zf.example/visit\nMar 3, 2024 — Public evenings every Friday."
    )
    assert result.details["urls"][1:] == ["https://zf.example/history", "https://zf.example/visit"]
    tool.close()


def test_serper_key_from_environment(api_server, monkeypatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", "env-key")
    api_server.reply_json({"organic": []})
    result = build("serper", base_url=api_server.base_url).run("nothing", CTX)
    assert api_server.requests[-1].headers["x-api-key"] == "env-key"
    assert result.ok and result.text.startswith("No results found for 'nothing'")


def test_serper_without_a_key_is_not_configured_and_sends_nothing(api_server, no_serper_key) -> None:
    result = build("serper", base_url=api_server.base_url).run("anything", CTX)
    assert result.error_kind == ErrorKind.NOT_CONFIGURED
    assert "SERPER_API_KEY" in result.text
    assert api_server.requests == []


@pytest.mark.parametrize(
    "status, kind, words, transient, calls",
    [
        (401, ErrorKind.NOT_CONFIGURED, "rejected the credentials", None, 1),
        (400, ErrorKind.TOOL_ERROR, "refused the query (HTTP 400", None, 1),
        (503, ErrorKind.TOOL_ERROR, "unavailable (HTTP 503)", True, 3),  # retried twice
        (429, ErrorKind.TOOL_ERROR, "unavailable (HTTP 429)", True, 3),
    ],
)
def test_serper_api_errors(api_server, status, kind, words, transient, calls) -> None:
    api_server.behaviour = lambda _r: (status, "application/json", b'{"message": "nope"}')
    result = build("serper", base_url=api_server.base_url, api_key="k", retries=2).run("q", CTX)
    assert not result.ok and result.error_kind == kind and words in result.text
    assert result.details.get("transient") == transient
    assert len(api_server.requests) == calls


def test_serper_recovers_after_one_server_error(api_server) -> None:
    replies = iter([(500, "text/plain", b"boom"), (200, "application/json", json.dumps(SERPER_REPLY).encode())])
    api_server.behaviour = lambda _r: next(replies)
    result = build("serper", base_url=api_server.base_url, api_key="k").run("q", CTX)
    assert result.ok and "Margaret Ellison" in result.text


def test_serper_timeout_and_junk(api_server) -> None:
    api_server.delay_s = 1.0
    api_server.reply_json(SERPER_REPLY)
    slow = build("serper", base_url=api_server.base_url, api_key="k", timeout_s=0.2, retries=0).run("q", CTX)
    assert slow.error_kind == ErrorKind.TOOL_TIMEOUT and slow.details["transient"] is True
    api_server.delay_s = 0.0
    api_server.behaviour = lambda _r: (200, "text/html", b"<html>captcha</html>")
    junk = build("serper", base_url=api_server.base_url, api_key="k", retries=0).run("q", CTX)
    assert junk.error_kind == ErrorKind.TOOL_ERROR and "not JSON" in junk.text
    api_server.reply_json(["a", "list"])
    shape = build("serper", base_url=api_server.base_url, api_key="k").run("q", CTX)
    assert shape.error_kind == ErrorKind.TOOL_ERROR and "unexpected JSON shape" in shape.text


def test_unreachable_search_api() -> None:
    result = build("searxng", base_url="http://127.0.0.1:9", retries=0).run("q", CTX)
    assert result.error_kind == ErrorKind.TOOL_ERROR and "unreachable" in result.text


def test_searxng_request_and_rendering(api_server) -> None:
    api_server.reply_json({"query": "q", "results": [
        {"url": "https://a.example/", "title": "A page", "content": "About A."},
        {"title": "no url"},
        {"url": "https://b.example/", "title": "B page", "content": "About B."},
    ]})
    tool = build("searxng", base_url=api_server.base_url + "/", top_k=5, language="en")
    result = tool.run("a b", CTX)
    request = api_server.requests[-1]
    assert request.method == "GET" and request.path == "/search"
    assert request.query == {"q": ["a b"], "format": ["json"], "language": ["en"]}
    assert "1. A page\nURL: https://a.example/\nAbout A." in result.text
    assert "2. B page\nURL: https://b.example/\nAbout B." in result.text


@pytest.fixture
def pages_jsonl(tmp_path):
    pages = [
        {"url": "http://127.0.0.1/zephyr", "title": "Zephyr Falls Observatory",
         "text": f"Intro line. {ARTICLE_FACT}. It has a refractor telescope."},
        {"url": "http://127.0.0.1/mars", "title": "Mars", "text": "Mars is the fourth planet. It is red."},
        {"url": "http://127.0.0.1/venus", "title": "Venus", "text": "Venus is the second planet. It is hot."},
    ]
    path = tmp_path / "pages.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in pages) + "\n", encoding="utf-8")
    return path


def test_local_bm25_ranks_and_snippets(pages_jsonl) -> None:
    tool = build("local", path=str(pages_jsonl), top_k=2)
    result = tool.run("who founded the Zephyr observatory", CTX)
    assert result.ok
    assert result.text.startswith("Search results for 'who founded the Zephyr observatory':\n\n"
                                  "1. Zephyr Falls Observatory\nURL: http://127.0.0.1/zephyr\n"
                                  f"{ARTICLE_FACT}.")
    assert result.details["urls"] == ["http://127.0.0.1/zephyr"]  # zero-score pages are not results
    planets = tool.run("planet", CTX)
    assert len(planets.details["urls"]) == 2  # top_k
    assert tool.run("xylophone", CTX).text.startswith("No results found")


def test_local_directory_of_jsonl_and_of_html(tmp_path, pages_jsonl) -> None:
    assert build("local", path=str(pages_jsonl.parent)).run("Mars", CTX).details["urls"][0] == "http://127.0.0.1/mars"
    site_dir = tmp_path / "site"
    (site_dir / "wiki").mkdir(parents=True)
    (site_dir / "wiki" / "comet.html").write_text(
        "<html><head><title>Comet Hale</title></head><body><article><p>The comet Hale returns every 2533 years."
        "</p></article></body></html>", encoding="utf-8")
    tool = build("local", path=str(site_dir), page_base_url="http://127.0.0.1:8000")
    result = tool.run("comet returns", CTX)
    assert "1. Comet Hale\nURL: http://127.0.0.1:8000/wiki/comet.html" in result.text


def test_local_bad_collections_are_clear(tmp_path) -> None:
    missing = build("local", path=str(tmp_path / "nope.jsonl")).run("q", CTX)
    assert missing.error_kind == ErrorKind.NOT_CONFIGURED and "does not exist" in missing.text
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"title": "no url"}\n', encoding="utf-8")
    result = build("local", path=str(broken)).run("q", CTX)
    assert result.error_kind == ErrorKind.NOT_CONFIGURED and "broken.jsonl:1" in result.text


def test_empty_query_and_bad_config(pages_jsonl) -> None:
    assert build("local", path=str(pages_jsonl)).run("   ", CTX).error_kind == ErrorKind.BAD_ACTION
    with pytest.raises(ValueError, match="needs base_url"):
        build("searxng")
    with pytest.raises(ValueError, match="needs path"):
        build("local")
    with pytest.raises(ValueError, match="unknown web_search backend"):
        build("bing")


@pytest.fixture
def elsewhere():
    """A second API host (127.0.0.2) that records the headers of whatever reaches it."""
    from coa_envs.loopback import QuietHandler, Serving, loopback_server

    arrived: list[dict[str, str]] = []

    class Handler(QuietHandler):
        def _handle(self) -> None:
            arrived.append({k.lower(): v for k, v in self.headers.items()})
            self.send_body(200, json.dumps({"organic": [], "results": []}).encode(), "application/json")

        do_GET = do_POST = _handle

    serving = Serving(loopback_server(Handler, "127.0.0.2"))
    with serving:
        yield serving.base_url, arrived


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_host_never_carries_the_api_key(api_server, elsewhere, status) -> None:
    """httpx followed the API's redirects and kept X-API-KEY (it strips only Authorization), so a
    redirect handed the key to the host it named."""
    base, arrived = elsewhere
    api_server.behaviour = lambda _req: (status, "text/plain", b"moved", {"Location": f"{base}/search"})
    tool = build("serper", base_url=api_server.base_url, api_key="secret-key", retries=0)
    result = tool.run("where is the key", CTX)
    tool.close()
    assert [h for h in arrived if h.get("x-api-key")] == []
    assert result.error_kind == ErrorKind.TOOL_ERROR and "redirected to another site" in result.text
    assert "secret-key" not in result.text


@pytest.mark.parametrize("backend", ["serper", "searxng"])
def test_a_redirect_within_the_api_host_is_followed(api_server, backend) -> None:
    def behaviour(request):
        if request.path == "/search":
            return 308, "text/plain", b"", {"Location": "/v2/search" + ("?" + "&".join(
                f"{k}={v[0]}" for k, v in request.query.items()) if request.query else "")}
        return 200, "application/json", json.dumps(
            {"organic": [{"title": "T", "link": "https://t.example/", "snippet": "s"}],
             "results": [{"title": "T", "url": "https://t.example/", "content": "s"}]}).encode()

    api_server.behaviour = behaviour
    tool = build(backend, base_url=api_server.base_url, api_key="secret-key", retries=0)
    result = tool.run("moved api", CTX)
    tool.close()
    assert result.ok and "https://t.example/" in result.text, result.text
    assert api_server.requests[-1].path == "/v2/search"
    if backend == "serper":
        assert api_server.requests[-1].headers["x-api-key"] == "secret-key"
        assert api_server.requests[-1].json()["q"] == "moved api"
