"""Extraction costs what the page's size allows and its output keeps to the observation's budget.

A hostile page needs no network tricks to hold a crawl: markup that an extractor handles in
superlinear time, or a title and links that bypass ``max_chars``, are enough.
"""

from __future__ import annotations

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ToolContext
from coa_envs.web import extract as extract_module
from coa_envs.web.extract import (
    MAX_LINK_CHARS,
    MAX_MAIN_CONTENT_ELEMENTS,
    MAX_TITLE_CHARS,
    extract,
)


@pytest.mark.timeout(120)
def test_unclosed_titles_are_read_in_linear_time() -> None:
    # The title regex took time quadratic in such a page: 8,000 tags 5 s, these 128,000 about 20 min.
    page = extract(b"<html><head>" + b"<title>" * 128_000, "text/html", "utf-8", "http://site.test/")
    assert len(page.title) <= MAX_TITLE_CHARS


def test_title_and_links_are_cut_so_the_header_keeps_to_max_chars(api_server) -> None:
    long_title = "T" * 500_000
    links = "".join(f"<a href='/{i}{'x' * 100_000}'>link {i}</a>" for i in range(20))
    html = (f"<html><head><title>{long_title}</title></head><body><p>short text</p>"
            f"<a href='/ok'>ok</a>{links}</body></html>").encode()
    api_server.behaviour = lambda _request: (200, "text/html", html)
    tool = build("httpx", allow_hosts=[api_server.base_url.removeprefix("http://")], max_chars=2000,
                 max_bytes=5_000_000)
    try:
        result = tool.run(f"{api_server.base_url}/page", ToolContext())
    finally:
        tool.close()
    assert result.ok, result.text
    assert f"{api_server.base_url}/ok" in result.text
    assert len(result.text) < 2000 + MAX_TITLE_CHARS + 25 * (MAX_LINK_CHARS + 200)
    assert len(result.text) < 10_000  # before: the 500 kB title and 2 MB of link URLs, whole


def test_a_page_past_the_element_budget_is_shown_as_plain_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import trafilatura

    def refuse(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("main-content extraction ran on a page past the element budget")

    monkeypatch.setattr(trafilatura, "extract", refuse)
    html = "<html><head><title>Big</title><script>var hidden = 1;</script></head><body>"
    html += "".join(f"<p>para {i}</p>" for i in range(MAX_MAIN_CONTENT_ELEMENTS))
    html += "<a href='/n'>next</a></body></html>"
    page = extract(html.encode(), "text/html", "utf-8", "http://site.test/")
    assert page.title == "Big" and ("next", "http://site.test/n") in page.links
    assert "para 0" in page.text and f"para {MAX_MAIN_CONTENT_ELEMENTS - 1}" in page.text
    assert "hidden" not in page.text
    assert "main-content extraction skipped" in page.note and f"{MAX_MAIN_CONTENT_ELEMENTS:,}" in page.note


def test_the_plain_text_note_reaches_the_observation(api_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_module, "MAX_MAIN_CONTENT_ELEMENTS", 50)
    html = ("<html><body>" + "<p>row</p>" * 60 + "<p>the fact is 42</p></body></html>").encode()
    api_server.behaviour = lambda _request: (200, "text/html", html)
    tool = build("httpx", allow_hosts=[api_server.base_url.removeprefix("http://")])
    try:
        result = tool.run(f"{api_server.base_url}/big", ToolContext())
    finally:
        tool.close()
    assert result.ok and "the fact is 42" in result.text
    assert "[main-content extraction skipped: the page has" in result.text
    assert result.details["pages"][0]["extraction_note"].startswith("main-content extraction skipped")


def test_a_small_page_still_gets_main_content_extraction() -> None:
    html = ("<html><head><title>A &amp; B</title></head><body><nav><a href='/'>Home</a></nav><article>"
            + "<p>The observatory opened in 1911 and still measures rain every day.</p>" * 5
            + "</article><footer>Contact us</footer></body></html>")
    page = extract(html.encode(), "text/html", "utf-8", "http://site.test/")
    assert page.title == "A & B" and page.note == ""
    assert "opened in 1911" in page.text and "Contact us" not in page.text


def test_the_link_list_keeps_to_max_chars(api_server) -> None:
    links = "".join(f"<a href='/{i}/{'y' * 1_900}'>link {i}</a>" for i in range(25))
    html = f"<html><head><title>Many</title></head><body><p>short text</p>{links}</body></html>".encode()
    api_server.behaviour = lambda _request: (200, "text/html", html)
    tool = build("httpx", allow_hosts=[api_server.base_url.removeprefix("http://")], max_chars=3000)
    try:
        result = tool.run(f"{api_server.base_url}/links", ToolContext())
    finally:
        tool.close()
    assert result.ok and "- link 0: " in result.text and "more links not shown ...]" in result.text
    assert len(result.text) < 3000 + 3000 + 500  # was 48 kB: the links sat outside max_chars
