"""The one loopback server helper: loopback only, a free port, a clean and idempotent stop."""

from __future__ import annotations

import urllib.request

import pytest

from coa_envs.loopback import QuietHandler, Serving, loopback_server


class _Hello(QuietHandler):
    def do_GET(self) -> None:
        self.send_body(200, f"hello {self.path}".encode())


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
