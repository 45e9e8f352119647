"""Fixtures for the web-tool tests: real HTTP servers on loopback, nothing off the machine.

- ``site`` / ``other_site``: the crawler test site (coa_envs.web.testing) on 127.0.0.1 and on
  127.0.0.2 (a second loopback address that the allow-list does *not* open).
- ``api_server``: a real HTTP server speaking the JSON of third-party APIs (Serper,
  SearXNG, OpenAI chat completions). Tests script its behaviour (failures, delays) and
  read back the requests the real clients sent. It is a test double of the remote
  service, not of our code: the tools' HTTP clients run unchanged against it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from coa_envs.loopback import QuietHandler, Serving, loopback_server
from coa_envs.web.browsers import find_chromedriver, find_chromium
from coa_envs.web.testing import TestSite, serve_test_site


@pytest.fixture(scope="session")
def site() -> Iterator[TestSite]:
    with serve_test_site("127.0.0.1") as running:
        yield running


@pytest.fixture(scope="session")
def other_site() -> Iterator[TestSite]:
    with serve_test_site("127.0.0.2") as running:
        yield running


def _require_browser(engine: str) -> None:
    """Skip (with the reason) when the apt packages a browser backend needs are missing."""
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    if engine == "selenium" and find_chromedriver() is None:
        pytest.skip("chromedriver is not installed (apt-get install -y chromium-driver)")
    if engine == "playwright":
        pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    else:
        pytest.importorskip("selenium", reason="pip install selenium")


@pytest.fixture(scope="session")
def require_browser() -> Callable[[str], None]:
    return _require_browser


@contextmanager
def loopback_browser_crawl(engine: str, **options: Any) -> Iterator[Any]:
    """A browser-backed crawl_page tool opened to 127.0.0.1 (skips when the engine is missing)."""
    from coa_envs.tools.crawl_page import build

    _require_browser(engine)
    tool = build(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, **options)
    try:
        yield tool
    finally:
        tool.close()


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Reply = tuple[int, str, bytes] | tuple[int, str, bytes, dict[str, str]]  # status, content type, body[, headers]
Behaviour = Callable[[Recorded], Reply]


@dataclass
class ApiServer:
    """Loopback HTTP server; set ``behaviour`` per test; ``requests`` lists what arrived."""

    base_url: str
    behaviour: Behaviour
    requests: list[Recorded] = field(default_factory=list)
    delay_s: float = 0.0

    def reply_json(self, payload: Any, status: int = 200) -> None:
        self.behaviour = lambda _req: (status, "application/json", json.dumps(payload).encode())


def openai_echo(request: Recorded) -> Reply:
    """Chat-completions behaviour: the answer names what the model was shown."""
    body = request.json()
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        seen = "text:" + content
    else:
        seen = " ".join(
            "text:" + p["text"] if p["type"] == "text"
            else "image:" + p["image_url"]["url"][:30] if p["type"] == "image_url"
            else "audio:" + p["input_audio"]["format"]
            for p in content
        )
    reply = {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": f"MODEL SAW {seen[-400:]}"}}]}
    return 200, "application/json", json.dumps(reply).encode()


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    state = ApiServer(base_url="", behaviour=lambda _r: (500, "text/plain", b"no behaviour set"))

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            recorded = Recorded(self.command, parts.path, parse_qs(parts.query),
                                {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
            state.requests.append(recorded)
            if state.delay_s:
                time.sleep(state.delay_s)
            status, content_type, body, *headers = state.behaviour(recorded)
            self.send_body(status, body, content_type, *headers)

        do_GET = do_POST = _handle

    serving = Serving(loopback_server(Handler))
    state.base_url = serving.base_url
    with serving:
        yield state


@pytest.fixture
def no_serper_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERPER_API_KEY", raising=False)


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tools ignore proxy variables by design (trust_env=False); keep the tests independent of them too.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        if name in os.environ:
            monkeypatch.delenv(name)


@pytest.fixture
def chat_api(api_server: ApiServer) -> ApiServer:
    """``api_server`` answering as an OpenAI-compatible chat endpoint (see :func:`openai_echo`)."""
    api_server.behaviour = openai_echo
    return api_server
