"""The SSRF guard refuses private destinations before any connection, and the allow-list opens them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from coa_envs.tools.crawl_page import build as build_crawl
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.fetch import FetchedPage, FetchFailure, HttpFetcher
from coa_envs.web.ssrf import UrlGuard, literal_only_resolver

CTX = ToolContext()


@pytest.mark.parametrize(
    "url, reason_part",
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://localhost:8080/admin", "loopback"),
        ("http://0x7f.1/", "loopback"),  # odd IPv4 spellings resolve to loopback too
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped IPv6
        ("http://10.1.2.3/", "private"),
        ("http://192.168.0.10/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://100.64.1.1/", "CGNAT"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://169.254.10.10/", "link-local"),
        ("http://224.0.0.1/", "multicast"),
        ("http://0.0.0.0/", "address"),
        # 6to4 delivers to the embedded IPv4: judged as that address, like mapped and NAT64 forms.
        ("http://[2002:7f00:1::]/", "loopback"),
        ("http://[2002:a9fe:a9fe::1]/", "metadata"),
        ("http://[2002:a00:1::1]/", "private"),
        ("http://[2002:c0a8:101::]/", "private"),
        ("http://[fec0::1]/", "non-public"),  # deprecated IPv6 site-local
        ("http://[3fff::1]/", "non-public"),  # IPv6 documentation block
        ("http://192.0.0.8/", "non-public"),  # IETF protocol assignments
        ("http://192.88.99.1/", "non-public"),  # 6to4 relay anycast
        ("file:///etc/passwd", "scheme"),
        ("ftp://8.8.8.8/x", "scheme"),
        ("gopher://8.8.8.8/", "scheme"),
    ],
)
def test_guard_refuses_private_and_odd_destinations(url: str, reason_part: str) -> None:
    verdict = UrlGuard().check(url)
    assert verdict.status == "blocked"
    assert reason_part.lower() in verdict.reason.lower()


def test_guard_allows_public_addresses_and_allow_listed_hosts() -> None:
    assert UrlGuard().check("https://8.8.8.8/search?q=x").allowed
    assert UrlGuard().check("http://[2002:808:808::1]/").allowed  # 6to4 of a public IPv4
    assert UrlGuard(["127.0.0.1"]).check("http://[2002:7f00:1::]/").allowed  # allow-list sees the IPv4 too
    assert UrlGuard(["127.0.0.1"]).check("http://127.0.0.1:9/").allowed
    assert UrlGuard(["10.0.0.0/8"]).check("http://10.20.30.40/").allowed
    assert not UrlGuard(["10.0.0.0/8"]).check("http://192.168.1.1/").allowed
    fake_dns = {"intranet.example": ["10.0.0.5"], "mixed.example": ["8.8.8.8", "10.0.0.5"]}
    guard = UrlGuard(["intranet.example"], resolver=lambda host, port: fake_dns[host])
    assert guard.check("http://intranet.example/").allowed
    # A name with one public and one private record is refused: the private one could be picked.
    assert guard.check("http://mixed.example/").status == "blocked"


ODD_LOOPBACK_SPELLINGS = ["http://127.0.0.1./", "http://%31%32%37.0.0.1/", "http://0x7f.1/", "http://0x7F.0.0.1/",
                          "http://2130706433/", "http://2130706433./", "http://0177.0.0.1/", "http://127.1/",
                          "http://0x7f000001/", "http://017700000001/", "http://127.000.000.001/",
                          "http://[::ffff:127.0.0.1]/", "http://[fe80::1%25eth0]/", "http://0/", "http://0x/",
                          "http://\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11/"]  # fullwidth 127。0。0。1


@pytest.mark.parametrize("url", ODD_LOOPBACK_SPELLINGS)
@pytest.mark.parametrize("offline", [False, True])
def test_every_spelling_a_browser_reads_as_a_local_address_is_refused_as_such(url: str, offline: bool) -> None:
    """Judged as browsers read the host (WHATWG): a trailing dot, percent-escapes and octal/hex/short
    IPv4 were DNS errors (and, offline, every odd spelling was), not refusals of the address."""
    guard = UrlGuard(resolver=literal_only_resolver if offline else None)
    verdict = guard.check(url)
    assert verdict.status == "blocked", verdict
    assert "resolves to" in verdict.reason


def test_a_backslash_url_must_pass_as_urllib_and_as_a_browser_read_it() -> None:
    """urllib/httpx read ``http://127.0.0.1\\@8.8.8.8/`` as host 8.8.8.8, Chromium as 127.0.0.1."""
    for url in ("http://127.0.0.1\\@8.8.8.8/", "http://169.254.169.254\\@8.8.8.8/latest", "http://8.8.8.8\\@10.0.0.1/"):
        assert UrlGuard().check(url).status == "blocked", url
    assert UrlGuard().check("http://8.8.8.8\\@1.1.1.1/a\\b").allowed  # public either way


def test_canonical_host_reads_hosts_like_a_browser() -> None:
    from coa_envs.web.ssrf import canonical_host

    assert canonical_host("0x7f.1") == canonical_host("127.1") == canonical_host("%31%32%37.0.0.1.") == "127.0.0.1"
    assert canonical_host("3232235777") == "192.168.1.1"
    assert canonical_host("[FE80::1%25eth0]") == "fe80::1"
    assert canonical_host("Example.COM.") == "example.com"
    for name in ("1.2.3.256", "1.2.3.4.5", "08.1.1.1", "1e3", "0x1g", "example.com"):
        assert canonical_host(name) == name  # not IPv4 to a browser either: left to the resolver
    assert UrlGuard(["127.0.0.1"], resolver=literal_only_resolver).check("http://0x7f.1:8000/").allowed


def test_an_allow_list_given_as_one_string_is_refused_not_split_into_characters() -> None:
    # tuple("127.0.0.1:8000") allowed the host names "0", "1", "2", "7": http://0:PORT/ is 0.0.0.0.
    with pytest.raises(TypeError, match="not one string"):
        UrlGuard("127.0.0.1:8000")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one string"):
        build_crawl("httpx", allow_hosts="127.0.0.1:8000")
    assert UrlGuard(["127.0.0.1:8000"]).check("http://0:8000/").status == "blocked"


def test_guard_reports_unresolvable_hosts_and_malformed_urls() -> None:
    def no_dns(host: str, port: int) -> list[str]:
        raise socket.gaierror(-2, "Name or service not known")

    assert UrlGuard(resolver=no_dns).check("http://nowhere.invalid/").status == "dns_error"
    assert UrlGuard().check("http://[::1/").status == "bad_url"
    assert UrlGuard().check("http:///nohost").status == "bad_url"


@pytest.fixture
def accept_recorder() -> Iterator[tuple[int, list[int]]]:
    """A listening socket on 127.0.0.1 that counts accepted connections (and answers HTTP)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    accepts: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepts.append(1)
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
                                 b"Connection: close\r\n\r\nhello agent")
                except OSError:
                    pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepts
    stop.set()
    thread.join(timeout=2)
    listener.close()


def test_refused_fetch_makes_no_connection_and_allow_list_opens_it(accept_recorder) -> None:
    port, accepts = accept_recorder
    url = f"http://127.0.0.1:{port}/secret"
    for query in (url, url.replace("127.0.0.1", "localhost")):
        result = build_crawl("httpx").run(query, CTX)
        assert not result.ok and result.error_kind == ErrorKind.BLOCKED_URL
        assert "refused" in result.text
    assert accepts == []  # refused before any TCP connection was attempted

    allowed = build_crawl("httpx", allow_hosts=["127.0.0.1"]).run(url, CTX)
    assert allowed.ok, allowed.text
    assert "hello agent" in allowed.text
    assert len(accepts) == 1


def test_every_redirect_hop_is_checked(site) -> None:
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"])
    to_metadata = tool.run(site.url("/to-metadata"), CTX)
    assert to_metadata.error_kind == ErrorKind.BLOCKED_URL and "169.254.169.254" in to_metadata.text
    to_file = tool.run(site.url("/to-file"), CTX)
    assert to_file.error_kind == ErrorKind.BLOCKED_URL and "scheme" in to_file.text


def test_redirect_to_a_loopback_address_not_on_the_allow_list_never_reaches_it(site, other_site) -> None:
    before = other_site.hits["/beacon"]
    result = build_crawl("httpx", allow_hosts=["127.0.0.1"]).run(site.url(f"/to?u={other_site.url('/beacon')}"), CTX)
    assert result.error_kind == ErrorKind.BLOCKED_URL
    assert other_site.hits["/beacon"] == before


def test_connection_uses_the_checked_address_not_a_second_dns_answer(site, other_site) -> None:
    """DNS rebinding: the first answer is public, the next one private. The connect-time check
    resolves again and refuses, so the private server is never contacted."""
    answers = iter([["8.8.8.8"], ["127.0.0.2"], ["127.0.0.2"]])
    guard = UrlGuard(resolver=lambda host, port: next(answers))
    fetcher = HttpFetcher(guard, timeout_s=3)
    before = sum(other_site.hits.values())
    outcome = fetcher.fetch(f"http://rebind.example:{other_site.base_url.rsplit(':', 1)[1]}/beacon")
    assert isinstance(outcome, FetchFailure) and outcome.kind == ErrorKind.BLOCKED_URL
    assert sum(other_site.hits.values()) == before
    fetcher.close()


def test_fetcher_connects_to_the_resolved_address_with_the_original_host_name(site) -> None:
    # "pinned.example" exists only in our resolver: the request can only succeed if the
    # fetcher connects to the address the guard resolved and checked.
    guard = UrlGuard(["127.0.0.1"], resolver=lambda host, port: ["127.0.0.1"])
    fetcher = HttpFetcher(guard, timeout_s=3)
    port = site.base_url.rsplit(":", 1)[1]
    outcome = fetcher.fetch(f"http://pinned.example:{port}/article.html")
    assert isinstance(outcome, FetchedPage), outcome
    assert outcome.final_url == f"http://pinned.example:{port}/article.html"
    fetcher.close()


def test_offline_mode_resolves_ip_literals_only(site) -> None:
    guard = UrlGuard(["127.0.0.1"], resolver=literal_only_resolver)
    assert guard.check("http://127.0.0.1:8000/").allowed
    assert guard.check("http://[::1]/").status == "blocked"
    refused = guard.check("http://localhost/")
    assert refused.status == "dns_error" and "DNS is disabled" in refused.reason
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False)
    assert tool.run(site.url("/article.html"), CTX).ok
    named = tool.run(site.url("/article.html").replace("127.0.0.1", "localhost"), CTX)
    assert named.error_kind == ErrorKind.TOOL_ERROR and "DNS is disabled" in named.text


def test_host_port_entries_open_one_service_only(accept_recorder, site) -> None:
    port, accepts = accept_recorder
    site_port = int(site.base_url.rsplit(":", 1)[1])
    tool = build_crawl("httpx", allow_hosts=[f"127.0.0.1:{site_port}"])
    assert tool.run(site.url("/article.html"), CTX).ok
    other = tool.run(f"http://127.0.0.1:{port}/", CTX)
    assert other.error_kind == ErrorKind.BLOCKED_URL and accepts == []
    assert UrlGuard([f"[::1]:{port}"]).check(f"http://[::1]:{port}/").allowed
    assert not UrlGuard([f"[::1]:{port}"]).check(f"http://[::1]:{port + 1}/").allowed


def test_arbitrary_crawl_queries_never_raise_and_never_connect() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from coa_envs.tools.crawl_page import parse_crawl_query

    # Every name "resolves" to loopback, which is refused: nothing can leave the machine.
    fetcher = HttpFetcher(UrlGuard(resolver=lambda host, port: ["127.0.0.1"]), timeout_s=1)
    pieces = st.sampled_from(["http://", "https://", "file://", "ftp://", "//", "[", "]", ":", "@", "|", " ",
                              "%00", "..", "/", "?", "#", "example.org", "0x7f.1", "::1", "\u00e9", "\n", "80"])
    queries = st.one_of(st.text(max_size=60), st.lists(pieces, max_size=12).map("".join))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(queries)
    def check(query: str) -> None:
        urls, _goal = parse_crawl_query(query)
        for url in urls or [query]:
            outcome = fetcher.fetch(url)
            assert isinstance(outcome, FetchFailure)
            assert outcome.kind in (ErrorKind.BLOCKED_URL, ErrorKind.TOOL_ERROR)

    check()
    fetcher.close()


def test_reserved_control_ports_are_refused_whatever_the_allow_list_says() -> None:
    """A port reserved for the crawler's own machinery (proxy, chromedriver, DevTools) is closed on
    every local address, under allow-lists, host:port entries and allow_private alike."""
    from coa_envs.web.ssrf import reserve_local_port

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    reserve_local_port(port)
    guards = [UrlGuard(["127.0.0.1"], resolver=literal_only_resolver), UrlGuard([f"127.0.0.1:{port}"]),
              UrlGuard(["0.0.0.0/0", "::/0"], resolver=literal_only_resolver), UrlGuard(allow_private=True)]
    for guard in guards:
        for host in ("127.0.0.1", "127.9.9.9", "0.0.0.0", "[::1]", "[::]", "[::ffff:127.0.0.1]", "0x7f.1"):
            verdict = guard.check(f"http://{host}:{port}/status")
            assert verdict.status == "blocked" and "control port" in verdict.reason, (host, verdict)
    other = port + 1 if port < 65535 else port - 1
    assert guards[0].check(f"http://127.0.0.1:{other}/").allowed and guards[3].check(f"http://[::1]:{other}/").allowed
