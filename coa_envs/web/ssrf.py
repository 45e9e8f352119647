"""SSRF guard: decide whether an agent-chosen URL may be fetched, before any connection.

An agent on the open web must not be able to reach the machine it runs on or its private
network (cloud metadata endpoints, admin panels, the sandbox host). The guard refuses
non-http(s) schemes and any host whose *resolved* addresses include a loopback, private,
link-local, CGNAT, multicast, reserved or metadata address, unless the host or address is
on the configured allow-list. Callers apply it to the first URL and to every redirect
target; :mod:`coa_envs.web.fetch` additionally resolves-and-checks inside its connection
backend so that the address it connects to is the address it checked (no DNS rebinding).

This module does no I/O besides DNS resolution and never opens a connection.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from coa_envs.web.control_ports import (
    WELL_KNOWN_CONTROL_PORTS,
    is_reserved_port,
    release_local_port,
    reserve_local_port,
    reserved_local_ports,
)
from coa_envs.web.local_services import foreign_listener, is_machine_address

__all__ = ["ALLOWED_SCHEMES", "METADATA_ADDRESSES", "WELL_KNOWN_CONTROL_PORTS", "UrlGuard", "UrlVerdict",
           "canonical_host", "literal_only_resolver", "release_local_port", "reserve_local_port",
           "reserved_local_ports"]

ALLOWED_SCHEMES = frozenset({"http", "https"})
METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),  # AWS/GCP/Azure/OpenStack metadata
        ipaddress.ip_address("169.254.170.2"),  # ECS task metadata
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud metadata
        ipaddress.ip_address("fd00:ec2::254"),  # AWS IMDS over IPv6
    }
)
# Ranges `is_global` does not already exclude (in every Python 3.11 patch release) but that
# must never be reached: IANA special-purpose blocks and deprecated local scopes.
_EXTRA_BLOCKED = (
    ipaddress.ip_network("192.0.0.0/24"),  # IETF protocol assignments (DS-Lite, NAT64 discovery, ...)
    ipaddress.ip_network("192.88.99.0/24"),  # 6to4 relay anycast (deprecated by RFC 7526)
    ipaddress.ip_network("224.0.0.0/4"),  # IPv4 multicast (some blocks count as global)
    ipaddress.ip_network("3fff::/20"),  # IPv6 documentation (RFC 9637)
    ipaddress.ip_network("fec0::/10"),  # IPv6 site-local (deprecated, still routed inside some networks)
    ipaddress.ip_network("ff00::/8"),  # IPv6 multicast
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: the provider's internal network
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")  # hex, octal, decimal ("08" is none)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True, slots=True)
class UrlVerdict:
    """The guard's answer for one URL.

    ``status`` is ``"ok"``, ``"blocked"`` (policy refusal), ``"bad_url"`` (unparseable)
    or ``"dns_error"`` (host does not resolve). ``addresses`` are the resolved, checked
    IPs in resolver order; a fetcher connects to one of these and nothing else.
    """

    status: str
    url: str
    reason: str = ""
    scheme: str = ""
    host: str = ""
    port: int = 0
    addresses: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.status == "ok"


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for info in infos:
        seen.setdefault(str(info[4][0]).split("%", 1)[0], None)
    return list(seen)


def literal_only_resolver(host: str, port: int) -> list[str]:
    """Resolve IP literals only; refuse names. For offline setups (the loopback mini-web), so
    that neither the agent nor a browser's background traffic ever triggers a DNS query."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        raise OSError(f"DNS is disabled (resolve_dns=false); use an IP address instead of {host!r}") from None


def _browser_ipv4(host: str) -> str | None:
    """``host`` read the way browsers (the WHATWG URL standard) read IPv4: one to four parts,
    each decimal, octal (``0177``) or hex (``0x7f``), the last filling the remaining bytes, one
    trailing dot allowed. ``127.1``, ``0x7f.1``, ``2130706433.`` are all 127.0.0.1. None for names."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        return None
    numbers = [int(p[2:] or "0", 16) if p[:2].lower() == "0x" else int(p, 8 if len(p) > 1 and p[0] == "0" else 10)
               for p in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(numbers[:-1]))
    return str(ipaddress.IPv4Address(value))


def canonical_host(host: str) -> str:
    """The host a browser would connect to, so that the guard judges that one: percent-escapes
    decoded, brackets, an IPv6 zone (``%eth0``) and one trailing dot dropped, any IPv4 spelling
    as dotted decimal, names lower-cased. A spelling the resolver would not understand
    (``%31%32%37.0.0.1``, ``127.0.0.1.``) is then refused for its address, not as a DNS error."""
    host = unquote(host).strip("[]").lower()
    if ":" in host:
        return host.split("%", 1)[0]
    if not host.isascii():  # fullwidth digits and ideographic full stops map to ASCII (IDNA)
        with contextlib.suppress(UnicodeError):
            host = host.encode("idna").decode("ascii")
    ipv4 = _browser_ipv4(host)
    if ipv4 is not None:
        return ipv4
    return host[:-1] if len(host) > 1 and host.endswith(".") else host


def _embedded_ipv4(ip: IPAddress) -> IPAddress:
    """IPv4 hidden in an IPv6 address is judged as that IPv4: mapped ``::ffff:a.b.c.d``,
    NAT64 ``64:ff9b::a.b.c.d`` and 6to4 ``2002:AABB:CCDD::`` (a 6to4 gateway delivers the
    packet to the embedded IPv4, so ``2002:7f00:1::`` is loopback, not a public address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def _local_address(ip_text: str) -> bool:
    """Whether ``ip_text`` leads to this machine: loopback, unspecified or one of its own addresses
    (a service bound to ``0.0.0.0`` answers on the machine's ``10.x`` or public address too)."""
    try:
        ip = _embedded_ipv4(ipaddress.ip_address(ip_text))
    except ValueError:
        return False
    return is_machine_address(ip)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _endpoint_text(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _foreign_service(host: str, ip_text: str, port: int) -> str:
    """Why ``ip_text:port`` (on this machine) is refused: another program listens there. Entries that
    open it by name, network or ``allow_private`` reach only this process's servers on this machine."""
    ip = _embedded_ipv4(ipaddress.ip_address(ip_text))
    if not foreign_listener(ip, port):
        return ""
    return (f"a service of another program on this machine (an allow_hosts host or network entry, or "
            f"allow_private, opens only the servers this process runs here; name it as "
            f"'{_endpoint_text(host, port)}' in allow_hosts to open it)")


def _blocked_reason(ip: IPAddress) -> str:
    ip = _embedded_ipv4(ip)
    if ip in METADATA_ADDRESSES:
        return "cloud metadata address"
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast:
        return "multicast address"
    if ip in _CGNAT:
        return "CGNAT address"
    if ip.is_private:
        return "private address"
    special = any(ip in net for net in _EXTRA_BLOCKED if net.version == ip.version)
    if special or ip.is_unspecified or ip.is_reserved or not ip.is_global:
        return "non-public address"
    return ""


def _split_endpoint(entry: str) -> tuple[str, int] | None:
    """``127.0.0.1:8080`` / ``[::1]:8080`` / ``host:8080`` -> (host, port); else None."""
    host, sep, port = entry.rpartition(":")
    if not sep or not port.isdigit() or not host or (":" in host and not host.startswith("[")):
        return None
    return host.strip("[]").rstrip("."), int(port)


class UrlGuard:
    """Policy for agent-chosen URLs.

    ``allow_hosts`` entries are host names (exact, case-insensitive; ``.example.org``
    also matches sub-domains), IP addresses, CIDR networks (``10.0.0.0/8``), or one service
    ``host:port`` / ``[v6]:port`` (that port only). A host name on the list is allowed
    whatever it resolves to; otherwise every resolved address
    must be public or inside an allowed network. ``allow_private=True`` turns the address
    check off (schemes are still enforced) — only for trusted, offline setups.

    On this machine (loopback, ``0.0.0.0``, its own interface addresses) names, networks and
    ``allow_private`` open only the servers this process runs and unused ports; a port another
    program listens on needs its ``host:port`` entry (see :mod:`coa_envs.web.local_services`).
    """

    def __init__(
        self,
        allow_hosts: Iterable[str] = (),
        *,
        allow_private: bool = False,
        resolver: Resolver | None = None,
        dns_timeout_s: float | None = None,
    ) -> None:
        if isinstance(allow_hosts, str | bytes):
            # Iterating one string gives its characters: "127.0.0.1:8000" would allow the hosts
            # "0", "1", ... and http://0:any-port/ is 0.0.0.0, i.e. every local service.
            raise TypeError(f"allow_hosts must be a list of entries, not one string: [{allow_hosts!r}]")
        self.allow_private = allow_private
        self._resolver = resolver or _system_resolver
        self.dns_timeout_s = dns_timeout_s
        self._allowed_names: set[str] = set()
        self._allowed_suffixes: list[str] = []
        self._allowed_nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        # ``host:port`` / ``[v6]:port`` entries open one service only (the mini-web's server).
        self._allowed_endpoints: set[tuple[str, int]] = set()
        for entry in allow_hosts:
            entry = str(entry).strip().lower()
            if not entry:
                continue
            endpoint = _split_endpoint(entry)
            if endpoint is not None:
                self._allowed_endpoints.add(endpoint)
                continue
            try:
                self._allowed_nets.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                if entry.startswith("."):
                    self._allowed_suffixes.append(entry)
                else:
                    self._allowed_names.add(entry.rstrip("."))

    def _name_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self._allowed_names or any(
            host.endswith(sfx) or host == sfx[1:] for sfx in self._allowed_suffixes
        )

    def _ip_allowed(self, ip: IPAddress) -> bool:
        candidates = {ip, _embedded_ipv4(ip)}
        return any(c in net for c in candidates for net in self._allowed_nets if c.version == net.version)

    def check_address(self, host: str, ip_text: str, port: int | None = None) -> str:
        """Return ``""`` if ``ip_text`` (resolved from ``host``) may be contacted, else why not."""
        local = port is not None and _local_address(ip_text)  # this machine: its services are judged by port
        if local and is_reserved_port(port):
            return "a control port of a crawler's own browser or proxy"
        named = port is not None and bool({(host.lower().rstrip("."), port), (ip_text, port)} & self._allowed_endpoints)
        if named:
            return ""
        if local and port in WELL_KNOWN_CONTROL_PORTS:
            return (f"the default port of {WELL_KNOWN_CONTROL_PORTS[port]} on this machine (name it as "
                    f"'host:{port}' in allow_hosts to open it)")
        reason = self._policy_reason(host, ip_text)
        if reason or not local or port is None:
            return reason
        return _foreign_service(host, ip_text, port)

    def _policy_reason(self, host: str, ip_text: str) -> str:
        """The allow-list's and the address ranges' answer, before this machine's own services are looked at."""
        if self.allow_private or self._name_allowed(host):
            return ""
        try:
            ip = ipaddress.ip_address(ip_text)
        except ValueError:
            return f"unparseable address {ip_text!r}"
        if self._ip_allowed(ip):
            return ""
        return _blocked_reason(ip)

    def _resolve_within(self, host: str, port: int, timeout_s: float | None) -> list[str]:
        """The resolver's answer, waited for ``dns_timeout_s`` (and the caller's ``timeout_s``) at most:
        ``getaddrinfo`` has no timeout of its own, and a name whose DNS server never answers held a
        fetch for the system resolver's retries (tens of seconds) whatever the crawl's ``timeout_s``.
        A thread per lookup, not a shared pool: a page naming many silent hosts would fill a pool
        and stall every other crawl."""
        waits = [w for w in (self.dns_timeout_s, timeout_s) if w is not None]
        if not waits or _is_ip_literal(host):  # an address needs no DNS: no thread to wait on
            return self._resolver(host, port)
        wait = max(0.0, min(waits))
        outcome: list[list[str] | BaseException] = []
        done = threading.Event()

        def lookup() -> None:
            try:
                outcome.append(self._resolver(host, port))
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=lookup, name="coa-dns", daemon=True).start()
        if not done.wait(wait):
            raise OSError(f"no DNS answer within {wait:.3g}s")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def resolve(self, host: str, port: int, *, timeout_s: float | None = None) -> UrlVerdict:
        """Resolve ``host`` and check every address; refuse if any one is forbidden. DNS is waited
        for ``timeout_s`` at most (what is left of a fetch), and ``dns_timeout_s`` at most.

        Refusing on *any* bad address (not just the first) stops a name that returns a
        public and a private record from being used to reach the private one.
        """
        host = canonical_host(host)
        try:
            addresses = self._resolve_within(host, port, timeout_s)
        except (OSError, UnicodeError, ValueError) as exc:  # ValueError: a NUL in the name
            return UrlVerdict("dns_error", "", f"cannot resolve host {host!r}: {exc}", host=host, port=port)
        if not addresses:
            return UrlVerdict("dns_error", "", f"host {host!r} has no addresses", host=host, port=port)
        for ip_text in addresses:
            reason = self.check_address(host, ip_text, port)
            if reason:
                return UrlVerdict(
                    "blocked", "", f"{host} resolves to {ip_text} ({reason})", host=host, port=port
                )
        return UrlVerdict("ok", "", host=host, port=port, addresses=tuple(addresses))

    def check(self, url: str, *, timeout_s: float | None = None) -> UrlVerdict:
        """Full check of one URL: scheme, host syntax, resolution (within ``timeout_s``, see
        :meth:`resolve`) and every address.

        A backslash is a path separator to browsers in http(s) URLs but not to urllib or httpx:
        ``http://127.0.0.1\\@example.org/`` is example.org to one and loopback to the other, so a
        URL with one must pass under both readings.
        """
        verdict = self._check_reading(url, timeout_s)
        if verdict.allowed and "\\" in url:
            browser_reading = self._check_reading(url.replace("\\", "/"), timeout_s)
            if not browser_reading.allowed:
                return UrlVerdict(browser_reading.status, url, f"{browser_reading.reason} (as a browser reads the URL)",
                                  browser_reading.scheme, browser_reading.host, browser_reading.port)
        return verdict

    def _check_reading(self, url: str, timeout_s: float | None) -> UrlVerdict:
        try:
            parts = urlsplit(url.strip())
            scheme = parts.scheme.lower()
            host = parts.hostname or ""
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as exc:
            return UrlVerdict("bad_url", url, f"malformed URL: {exc}")
        if scheme not in ALLOWED_SCHEMES:
            return UrlVerdict(
                "blocked", url, f"scheme {scheme or '(none)'!r} is not allowed (only http/https)",
                scheme=scheme,
            )
        if not host:
            return UrlVerdict("bad_url", url, "URL has no host", scheme=scheme)
        verdict = self.resolve(host, port, timeout_s=timeout_s)
        return UrlVerdict(
            verdict.status, url, verdict.reason, scheme, host, port, verdict.addresses
        )
