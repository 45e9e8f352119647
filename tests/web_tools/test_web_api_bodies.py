"""The search and chat clients read a bounded answer from the endpoints a user configures.

A broken or hostile endpoint (a proxy's error page of hundreds of MB, a compression bomb) must
cost a clear error in the observation, not the memory of the env process.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc

import pytest

from coa_envs.tools.web_search import build as build_search
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.llm import ChatEndpoint, ChatError, chat

CTX = ToolContext()
ONE_HIT = {"organic": [{"title": "Zephyr", "link": "https://zf.example/", "snippet": "Founded 1923."}]}


def _padded_json(payload: dict, size: int) -> bytes:
    return json.dumps({**payload, "padding": "x" * size}).encode()


def _gzip_bomb(size: int) -> bytes:
    return gzip.compress(b" " * size, compresslevel=9)


@pytest.mark.parametrize("backend", ["serper", "searxng"])
def test_a_search_answer_past_the_cap_is_a_clear_failure(api_server, backend) -> None:
    payload = ONE_HIT if backend == "serper" else {"results": [{"url": "https://zf.example/", "title": "Z"}]}
    api_server.behaviour = lambda _r: (200, "application/json", _padded_json(payload, 300_000))
    tool = build_search(backend, base_url=api_server.base_url, api_key="k", max_response_bytes=100_000, retries=2)
    result = tool.run("zephyr", CTX)
    assert not result.ok and result.error_kind == ErrorKind.TOOL_ERROR
    assert "larger than 100000 bytes" in result.text and "max_response_bytes" in result.text
    assert result.details["transient"] is True  # not frozen into a replay cache
    assert len(api_server.requests) == 1  # not asked again: it would send as much again
    api_server.behaviour = lambda _r: (200, "application/json", _padded_json(payload, 50_000))
    assert tool.run("zephyr", CTX).ok  # under the cap: read as before


def test_a_compressed_search_answer_is_capped_as_it_is_decoded(api_server) -> None:
    bomb = _gzip_bomb(200_000_000)  # about 200 kB on the wire
    api_server.behaviour = lambda _r: (200, "application/json", bomb, {"Content-Encoding": "gzip"})
    tool = build_search("serper", base_url=api_server.base_url, api_key="k")
    tracemalloc.start()
    try:
        result = tool.run("zephyr", CTX)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not result.ok and "larger than 2000000 bytes" in result.text
    assert peak < 30_000_000, peak  # before: the 200 MB answer, inflated whole


def test_a_chat_answer_past_the_cap_is_a_chat_error(api_server) -> None:
    reply = {"choices": [{"message": {"role": "assistant", "content": "y" * 300_000}}]}
    api_server.behaviour = lambda _r: (200, "application/json", json.dumps(reply).encode())
    endpoint = ChatEndpoint.from_config({"base_url": api_server.base_url, "model": "m", "max_response_bytes": 100_000})
    assert endpoint is not None and endpoint.max_response_bytes == 100_000
    with pytest.raises(ChatError, match="larger than 100000 bytes"):
        chat(endpoint, [{"role": "user", "content": "hi"}])
    assert len(api_server.requests) == 1
    small = {"choices": [{"message": {"role": "assistant", "content": "fine"}}]}
    api_server.behaviour = lambda _r: (200, "application/json", json.dumps(small).encode())
    assert chat(endpoint, [{"role": "user", "content": "hi"}]) == "fine"


def test_a_compressed_chat_answer_is_capped_as_it_is_decoded(api_server) -> None:
    bomb = _gzip_bomb(200_000_000)
    api_server.behaviour = lambda _r: (200, "application/json", bomb, {"Content-Encoding": "gzip"})
    endpoint = ChatEndpoint(base_url=api_server.base_url, model="m", max_retries=0)
    tracemalloc.start()
    try:
        with pytest.raises(ChatError, match="max_response_bytes"):
            chat(endpoint, [{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30_000_000, peak


def test_a_crawl_summary_past_the_cap_falls_back_to_the_page(site, api_server) -> None:
    from coa_envs.tools.crawl_page import build as build_crawl
    from coa_envs.web.testing import ARTICLE_FACT

    reply = {"choices": [{"message": {"role": "assistant", "content": "z" * 200_000}}]}
    api_server.behaviour = lambda _r: (200, "application/json", json.dumps(reply).encode())
    summary = {"base_url": api_server.base_url, "model": "summariser", "max_response_bytes": 50_000}
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"], summary=summary)
    try:
        result = tool.run(site.url("/article.html"), CTX)
    finally:
        tool.close()
    assert result.ok and ARTICLE_FACT in result.text and "zzzz" not in result.text
    assert "summary unavailable" in result.text and "max_response_bytes" in result.text


@pytest.mark.parametrize("backend", ["serper", "searxng"])
def test_a_search_hit_keeps_to_its_caps(api_server, backend) -> None:
    from coa_envs.tools.web_search import MAX_HIT_SNIPPET_CHARS, MAX_HIT_TITLE_CHARS

    long_url = "https://zf.example/" + "u" * 5_000
    if backend == "serper":
        rows = [{"title": "T" * 50_000, "link": "https://zf.example/a", "snippet": "S" * 500_000},
                {"title": "long url", "link": long_url, "snippet": "x"},
                {"title": "fine", "link": "https://zf.example/b", "snippet": "short"}]
        api_server.reply_json({"organic": rows})
    else:
        rows = [{"title": "T" * 50_000, "url": "https://zf.example/a", "content": "S" * 500_000},
                {"title": "long url", "url": long_url, "content": "x"},
                {"title": "fine", "url": "https://zf.example/b", "content": "short"}]
        api_server.reply_json({"results": rows})
    result = build_search(backend, base_url=api_server.base_url, api_key="k", top_k=5).run("zephyr", CTX)
    assert result.ok and result.details["urls"] == ["https://zf.example/a", "https://zf.example/b"]
    assert "T" * MAX_HIT_TITLE_CHARS not in result.text and "S" * MAX_HIT_SNIPPET_CHARS not in result.text
    assert len(result.text) < 2 * (MAX_HIT_TITLE_CHARS + MAX_HIT_SNIPPET_CHARS) + 500  # was 550 kB
    assert "2. fine\nURL: https://zf.example/b\nshort" in result.text


def test_a_crawl_summary_keeps_to_max_chars(site, api_server) -> None:
    from coa_envs.tools.crawl_page import build as build_crawl

    reply = {"choices": [{"message": {"role": "assistant", "content": "summary " * 5_000}}]}
    api_server.behaviour = lambda _r: (200, "application/json", json.dumps(reply).encode())
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"], max_chars=2_000,
                       summary={"base_url": api_server.base_url, "model": "summariser"})
    try:
        result = tool.run(site.url("/article.html"), CTX)
    finally:
        tool.close()
    assert result.ok and "Summary toward the goal:" in result.text and "[... summary cut ...]" in result.text
    assert len(result.text) < 2_000 + 500 and result.details["pages"][0]["cut"] is True
