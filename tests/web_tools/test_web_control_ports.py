"""Browser-control ports stay closed to agent-chosen URLs when loopback is allowed: those of the
crawlers of *other* coa-envs processes (rollout workers, env servers: each drives the browser of
other episodes) and the default ports of browser-control services (DevTools 9222, chromedriver
9515, Selenium 4444), unless an allow_hosts entry names that host:port."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from coa_envs.tools.crawl_page import build
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.control_ports import is_reserved_port
from coa_envs.web.ssrf import UrlGuard, literal_only_resolver, release_local_port, reserve_local_port

_OTHER_PROCESS = """
import sys
from coa_envs.web.proxy import GuardedProxy
from coa_envs.web.ssrf import UrlGuard
proxy = GuardedProxy(UrlGuard()).start()
print(proxy.url, flush=True)
sys.stdin.read()
{stop}
"""


def _other_process_proxy(stop: bool) -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS.format(stop="proxy.stop()" if stop else "")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


@pytest.mark.parametrize("stops_cleanly", [True, False])
def test_another_processs_proxy_is_refused_while_it_runs(stops_cleanly: bool) -> None:
    child, proxy_url = _other_process_proxy(stops_cleanly)
    port = int(proxy_url.rpartition(":")[2])
    tool = build("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False, timeout_s=5)
    try:
        result = tool.run(f"http://127.0.0.1:{port}/", ToolContext())
        assert result.error_kind == ErrorKind.BLOCKED_URL and "control port" in result.text, result.text
        assert not UrlGuard(allow_private=True).check(f"http://[::ffff:127.0.0.1]:{port}/").allowed
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        tool.close()
    # Its port is free again once it stopped, or once it died without stopping.
    assert not is_reserved_port(port)
    assert UrlGuard(["127.0.0.1"], resolver=literal_only_resolver).check(f"http://127.0.0.1:{port}/").allowed


def test_a_released_port_opens_again() -> None:
    guard = UrlGuard(["127.0.0.1"], resolver=literal_only_resolver)
    port = 40_000 + int(time.time() * 1000) % 20_000
    reserve_local_port(port)
    assert not guard.check(f"http://127.0.0.1:{port}/").allowed
    release_local_port(port)
    assert guard.check(f"http://127.0.0.1:{port}/").allowed


@pytest.mark.parametrize("port", [9222, 9515, 4444])
def test_default_browser_control_ports_need_a_named_entry(port: int) -> None:
    def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == "localhost" else literal_only_resolver(host, port)

    refused = [UrlGuard(["127.0.0.1"], resolver=resolve), UrlGuard(allow_private=True, resolver=resolve),
               UrlGuard(["localhost"], resolver=resolve), UrlGuard(["0.0.0.0/0", "::/0"], resolver=resolve)]
    for guard in refused:
        for host in ("127.0.0.1", "localhost", "0.0.0.0", "[::1]", "0x7f.1"):
            verdict = guard.check(f"http://{host}:{port}/json/version")
            assert verdict.status == "blocked" and "default port" in verdict.reason, (host, verdict)
    named = UrlGuard([f"127.0.0.1:{port}"], resolver=literal_only_resolver)
    assert named.check(f"http://127.0.0.1:{port}/json/version").allowed
    assert not named.check(f"http://127.0.0.2:{port}/json/version").allowed
    assert UrlGuard(resolver=literal_only_resolver).check(f"http://8.8.8.8:{port}/").allowed  # a public site's port


@pytest.mark.parametrize("foreign", ["open-to-all", "symlink"])
def test_a_registry_directory_others_could_write_is_not_used(tmp_path, monkeypatch, foreign: str) -> None:
    """The registry's name is predictable in a shared /tmp: one made by someone else first, open to
    others or a link, is not written to nor read (this process's own ports stay refused)."""
    from coa_envs.web import control_ports

    root = tmp_path / "coa-envs-control-ports"
    if foreign == "open-to-all":
        root.mkdir()
        root.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(control_ports._REGISTRY, "root", root)
    port = 40_000 + int(time.time() * 1000) % 20_000
    reserve_local_port(port)
    try:
        assert list(root.iterdir()) == []  # nothing written where others could delete it
        assert is_reserved_port(port)  # still refused in this process
        (root / str(port + 1)).write_text("1")  # an entry planted there is not believed either
        assert not is_reserved_port(port + 1)
    finally:
        release_local_port(port)


def test_the_registry_directory_is_private_to_its_user(tmp_path, monkeypatch) -> None:
    from coa_envs.web import control_ports

    root = tmp_path / "coa-envs-control-ports"
    monkeypatch.setattr(control_ports._REGISTRY, "root", root)
    port = 40_000 + int(time.time() * 1000) % 20_000
    reserve_local_port(port)
    try:
        assert (root.stat().st_mode & 0o777) == 0o700 and (root / str(port)).exists()
        assert port in control_ports._REGISTRY
    finally:
        release_local_port(port)
    assert not (root / str(port)).exists()
