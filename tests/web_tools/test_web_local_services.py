"""This machine's services under allow-lists that open it wholesale: a bare ``127.0.0.1`` /
``localhost`` / ``127.0.0.0/8`` entry, ``allow_private``, or a network holding one of the machine's
own addresses opens the servers this process runs (the in-process mini-web, test sites) and no
port another program listens on (databases, the Ray dashboard, another user's notebook, a
``0.0.0.0`` service reached through the machine's own ``10.x`` address). ``host:port`` opens one."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.local_services import foreign_listener, is_machine_address
from coa_envs.web.ssrf import UrlGuard, literal_only_resolver

_SERVER = """
import http.server, socketserver, sys, threading
class Quiet(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        body = b"another program's secret"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
server = socketserver.TCPServer((sys.argv[1], 0), Quiet)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_address[1], flush=True)
sys.stdin.read()
"""


@contextmanager
def another_program_serving(host: str) -> Iterator[int]:
    """An HTTP server in a process of its own (another program on this machine): its port."""
    child = subprocess.Popen([sys.executable, "-c", _SERVER, host], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def _machine_non_loopback_address() -> str:
    """An address of this machine's own interfaces other than loopback (the source address a route
    out would use; no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.77", 9))
        except OSError:
            pytest.skip("no IPv4 route off loopback on this machine")
        address = probe.getsockname()[0]
    if ipaddress.ip_address(address).is_loopback:
        pytest.skip("no non-loopback IPv4 address on this machine")
    return address


BARE_ENTRIES = [["127.0.0.1"], ["localhost"], ["127.0.0.0/8"], ["::1", "127.0.0.1"]]


@pytest.mark.parametrize("entries", BARE_ENTRIES, ids=lambda e: "+".join(e))
def test_bare_loopback_entries_do_not_open_another_programs_service(entries, site) -> None:
    resolve = lambda host, port: ["127.0.0.1"] if host == "localhost" else literal_only_resolver(host, port)  # noqa: E731
    guard = UrlGuard(entries, resolver=resolve)
    opened = "localhost" if entries == ["localhost"] else "127.0.0.1"  # the host the entry opens
    with another_program_serving("127.0.0.1") as port:
        for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "0x7f.1"):
            assert guard.check(f"http://{host}:{port}/").status == "blocked", host
        refused = guard.check(f"http://{opened}:{port}/")
        assert "another program" in refused.reason and f"'{opened}:{port}' in allow_hosts" in refused.reason
        # The fix the message names opens it, and only it.
        assert UrlGuard([f"{opened}:{port}"], resolver=resolve).check(f"http://{opened}:{port}/").allowed
    # This process's own server (the test site, as the in-process mini-web) stays open, and so
    # does a port no one listens on (its connection is refused anyway).
    assert guard.check(site.url("/article.html").replace("127.0.0.1", opened)).allowed
    assert guard.check(f"http://{opened}:{port}/").allowed


def test_allow_private_does_not_open_another_programs_service() -> None:
    with another_program_serving("0.0.0.0") as port:
        for host in ("127.0.0.1", "0.0.0.0", "127.8.9.10", "[::ffff:127.0.0.1]"):
            verdict = UrlGuard(allow_private=True).check(f"http://{host}:{port}/")
            assert verdict.status == "blocked" and "another program" in verdict.reason, (host, verdict)


def test_the_machines_own_address_is_this_machine(site) -> None:
    """A network entry holding one of the machine's addresses (here its /32) opens the hosts of
    that network, not the machine's ``0.0.0.0`` services through its own address."""
    own = _machine_non_loopback_address()
    assert is_machine_address(ipaddress.ip_address(own))
    assert not is_machine_address(ipaddress.ip_address("8.8.8.8"))
    with another_program_serving("0.0.0.0") as port:
        for entries in ([f"{own}/32"], ["0.0.0.0/0"], [own]):
            verdict = UrlGuard(entries, resolver=literal_only_resolver).check(f"http://{own}:{port}/")
            assert verdict.status == "blocked" and "another program" in verdict.reason, (entries, verdict)
        assert UrlGuard([f"{own}:{port}"]).check(f"http://{own}:{port}/").allowed


def test_a_crawl_reads_this_processs_site_and_refuses_another_programs(site) -> None:
    tool = build("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=5)
    try:
        assert tool.run(site.url("/article.html"), ToolContext()).ok
        with another_program_serving("127.0.0.1") as port:
            refused = tool.run(f"http://127.0.0.1:{port}/", ToolContext())
            # A redirect from the allowed site to it is refused the same way.
            hop = tool.run(site.url(f"/to?u=http://127.0.0.1:{port}/"), ToolContext())
    finally:
        tool.close()
    assert refused.error_kind == ErrorKind.BLOCKED_URL and "secret" not in refused.text, refused.text
    assert hop.error_kind == ErrorKind.BLOCKED_URL and "secret" not in hop.text, hop.text


def test_listener_table_is_read_right() -> None:
    with socket.create_server(("127.0.0.1", 0)) as mine:
        port = mine.getsockname()[1]
        assert foreign_listener(ipaddress.ip_address("127.0.0.1"), port) is False  # this process's
        assert foreign_listener(ipaddress.ip_address("127.0.0.2"), port) is False  # bound elsewhere
    with another_program_serving("127.0.0.1") as port:
        assert foreign_listener(ipaddress.ip_address("127.0.0.1"), port) is True
        assert foreign_listener(ipaddress.ip_address("0.0.0.0"), port) is True
        assert foreign_listener(ipaddress.ip_address("127.0.0.2"), port) is False
    if socket.has_ipv6:
        with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as dual:
            port = dual.getsockname()[1]
            assert foreign_listener(ipaddress.ip_address("127.0.0.1"), port) is False
            assert foreign_listener(ipaddress.ip_address("::1"), port) is False
