"""Whatever a model writes, a web env answers with an observation: never an exception, and
never a connection off the machine (every socket connect in the test is checked).

Hypothesis writes arbitrary turns (tool tags around junk, URLs with odd schemes and hosts,
attachment names, control characters, unclosed and unknown tags) into ``coa/GAIA-v1`` (with
attachments) and ``coa/MiniWeb-v0`` (real search and crawl against the served mini-web).
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coa_envs  # noqa: F401
from coa_envs.miniweb import serve
from coa_envs.tasks.miniweb import make_kwargs
from coa_envs.types import ErrorKind

FIXTURES = Path(__file__).parent / "fixtures"
KINDS = {str(kind) for kind in ErrorKind}


@pytest.fixture
def loopback_only(monkeypatch):
    """Fail the test if anything connects to a non-loopback address."""
    original = socket.socket.connect
    seen: list[object] = []
    outside: list[object] = []

    def connect(sock, address):
        seen.append(address)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = str(address[0]).split("%", 1)[0]
            if not ipaddress.ip_address(host).is_loopback:
                outside.append(address)  # recorded, not raised: a tool would turn the error into text
                raise ConnectionRefusedError(f"test forbids connecting to {address}")
        return original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for name in ("SERPER_API_KEY", "COA_JUDGE_BASE_URL", "COA_JUDGE_MODEL", "COA_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COA_NO_HF_DOWNLOAD", "1")
    yield seen
    assert outside == [], f"connections off the machine: {outside}"


def _actions(web_url: str) -> st.SearchStrategy[str]:
    pieces = st.sampled_from([
        "http://", "https://", "file:///etc/passwd", "ftp://", "gopher://", "javascript:alert(1)", "//", "[",
        "]", ":", "@", "|", " ", "%00", "..", "/", "?", "#", "example.org", "localhost", "10.0.0.1",
        "169.254.169.254", "[::1]", "0x7f.1", "127.0.0.1:1", web_url, web_url + "/news/archive-2019.html",
        web_url + "/archive/full-log.html", "c0a1f1x7-0002.csv", "c0a1f1x7-0003.txt", "../../etc/passwd",
        "\x00", "\ufffd", "\u202e", "é", "\n", "<", ">", "</", "&amp;", "x" * 300,
    ])
    # Free text may not spell its own URLs: only the pieces above name hosts (all loopback/refused).
    free = st.text(max_size=80).filter(lambda s: "://" not in s)
    content = st.one_of(free, st.lists(pieces, max_size=10).map("".join))
    # Real pages of the site (awkward ones included), several per call, junk and goals mixed in.
    page = st.sampled_from(["/", "/news/archive-2019.html", "/archive/full-log.html", "/reports/ledger.html",
                            "/events/symposium-2023.php", "/files/annual-report-2022.pdf", "/live/buoy.html",
                            "/no/such/page", "/%00", "/people/../about.html"]).map(lambda p: web_url + p)
    urls = st.lists(st.one_of(page, st.lists(pieces, max_size=6).map("".join), free), min_size=1,
                    max_size=4).map(" | ".join)
    tag = st.sampled_from(["web_search", "crawl_page", "visual_inspector", "answer", "think", "code",
                           "wiki_search", "bogus", "observation"])

    @st.composite
    def tool_call(draw) -> str:
        """A well-formed turn whose tool call carries junk: the tools themselves must cope."""
        name = draw(st.sampled_from(["web_search", "crawl_page", "crawl_page", "visual_inspector"]))
        think = draw(st.sampled_from(["", "<think>\nlet me look\n</think>\n"]))
        body = draw(st.one_of(content, urls) if name == "crawl_page" else content)
        return f"{think}<{name}>{body}</{name}>"

    @st.composite
    def chaos(draw) -> str:
        parts = []
        for _ in range(draw(st.integers(1, 3))):
            name, body = draw(tag), draw(content)
            style = draw(st.sampled_from(["closed", "open", "bare", "nested"]))
            if style == "closed":
                parts.append(f"<{name}>{body}</{name}>")
            elif style == "open":
                parts.append(f"<{name}>{body}")
            elif style == "nested":
                parts.append(f"<{name}><{draw(tag)}>{body}</{name}>")
            else:
                parts.append(body)
        return draw(free) + "".join(parts)

    return st.one_of(tool_call(), chaos())


AWKWARD_PATHS = ["/", "/news/archive-2019.html", "/archive/full-log.html", "/reports/ledger.html",
                 "/events/symposium-2023.php", "/files/annual-report-2022.pdf", "/live/buoy.html", "/%00",
                 "/no/such/page | what is here?"]


def _fixed_turns(web_url: str) -> list[str]:
    """Awkward but well-formed turns every run covers (hypothesis rarely composes a live URL)."""
    crawls = [f"<crawl_page>{web_url}{path}</crawl_page>" for path in AWKWARD_PATHS]
    crawls += [f"<crawl_page>{web_url}/ | {web_url}/about.html | {web_url}/missing | http://10.0.0.1/</crawl_page>",
               "<crawl_page>file:///etc/passwd</crawl_page>", "<crawl_page>http://169.254.169.254/</crawl_page>",
               "<crawl_page>http://localhost:1/</crawl_page>", "<crawl_page>javascript:alert(1)</crawl_page>"]
    files = ["<visual_inspector>../../etc/passwd</visual_inspector>",
             "<visual_inspector>c0a1f1x7-0002.csv | sum</visual_inspector>",
             "<visual_inspector>\x00\ufffd</visual_inspector>"]
    return [*crawls, *files, "<web_search>" + "x" * 5000 + "</web_search>", "<web_search>\x00</web_search>"]


def _fuzz(env: gym.Env, actions: st.SearchStrategy[str], examples: int, fixed: list[str]) -> None:
    env.reset(seed=0)
    for action in fixed:
        observation, _, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str) and "<observation>" in observation, action
        assert info["error_kind"] is None or str(info["error_kind"]) in KINDS
        if terminated or truncated:
            env.reset()

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(actions)
    def step(action: str) -> None:
        observation, reward, terminated, truncated, info = env.step(action)
        assert isinstance(observation, str)
        assert 0.0 <= float(reward) <= 1.0
        assert info["error_kind"] is None or str(info["error_kind"]) in KINDS
        if terminated or truncated:
            env.reset()

    step()


def test_miniweb_env_survives_arbitrary_turns(loopback_only):
    with serve(0, slow_delay_s=0.05, huge_page_bytes=200_000) as web:
        options = make_kwargs(web)
        options["tools"]["crawl_page"].update(resolve_dns=False, timeout_s=2.0)
        env = gym.make("coa/MiniWeb-v0", max_turns=6, **options)
        try:
            _fuzz(env, _actions(web.base_url), examples=80, fixed=_fixed_turns(web.base_url))
        finally:
            env.close()
        assert web.hits["/archive/full-log.html"] and web.hits["/files/annual-report-2022.pdf"]
    assert loopback_only  # the mini-web was really crawled, so the connect check was live


def test_gaia_env_with_attachments_survives_arbitrary_turns(loopback_only):
    env = gym.make("coa/GAIA-v1", data_path=str(FIXTURES / "gaia"), max_turns=6,
                   tools={"crawl_page": {"resolve_dns": False, "timeout_s": 2.0}})
    try:
        _fuzz(env, _actions("http://127.0.0.1:9"), examples=60, fixed=_fixed_turns("http://127.0.0.1:9"))
    finally:
        env.close()
