"""The one loopback server helper: loopback only, a free port, a clean and idempotent stop."""

from __future__ import annotations

import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from coa_envs.loopback import Serving, loopback_server


class _Hello(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.org"])
def test_only_loopback_addresses_are_bound(host):
    with pytest.raises(ValueError, match="loopback"):
        loopback_server(_Hello, host)


def test_serves_on_a_free_port_and_stops_once():
    serving = Serving(loopback_server(_Hello))
    assert serving.server.server_address[1] > 0
    with urllib.request.urlopen(serving.base_url + "/x", timeout=5) as reply:
        assert reply.read() == b"hello /x"
    with serving as server:
        assert server is serving.server
    assert serving.stopped
    serving.stop()  # a second stop is a no-op
    with pytest.raises(OSError):
        urllib.request.urlopen(serving.base_url + "/x", timeout=2)
