"""This machine's own services, as the SSRF guard sees them.

An allow-list entry such as ``127.0.0.1`` (or ``localhost``, ``127.0.0.0/8``, ``allow_private``)
is written to open *a* local site: the mini-web, a test site, a local mirror. It used to open
every port on the machine as well: databases, the Ray dashboard (which runs any job it is sent),
another engineer's notebook, an env server's admin routes. And a network entry such as
``10.0.0.0/8`` opened the same services through the machine's own ``10.x`` address, since a
service bound to ``0.0.0.0`` answers on every address the machine has.

The rule kept here: an address of this machine (loopback, unspecified, or one of its interfaces')
opened by such an entry reaches the servers *this process* runs (the in-process mini-web, a test
server) and ports no one listens on (the connection is refused anyway), never a port another
program listens on. That one needs an ``allow_hosts`` entry naming its ``host:port``.

Listeners are read from ``/proc/net/tcp`` and ``/proc/net/tcp6`` (Linux); this process's own
sockets from ``/proc/self/fd``. Where ``/proc`` is missing the rule cannot be applied and bare
entries open every port, as before (docs/security.md says so).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from pathlib import Path

__all__ = ["foreign_listener", "is_machine_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column
_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))


def _nonlocal_bind_allowed() -> bool:
    """Whether the kernel lets a socket bind any address (then a bind says nothing about the address)."""
    for name in ("/proc/sys/net/ipv4/ip_nonlocal_bind", "/proc/sys/net/ipv6/ip_nonlocal_bind"):
        with contextlib.suppress(OSError):
            if Path(name).read_text().strip() != "0":
                return True
    return False


def is_machine_address(ip: IPAddress) -> bool:
    """Whether connecting to ``ip`` reaches this machine: loopback, unspecified, or an address of
    one of its interfaces (a socket can bind only those: the kernel's own answer, aliases and
    IPv6 included, at the cost of two system calls)."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    if ip.is_multicast or (isinstance(ip, ipaddress.IPv6Address) and ip.is_link_local):
        return False  # never bound this way (a link-local address needs its interface)
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return not _nonlocal_bind_allowed()


def _address(hex_text: str, family: int) -> IPAddress:
    """An address as /proc/net/tcp* prints it: 32-bit words in the host's byte order."""
    words = [int(hex_text[i:i + 8], 16) for i in range(0, len(hex_text), 8)]
    packed = b"".join(struct.pack("=I", word) for word in words)
    return ipaddress.ip_address(socket.inet_ntop(family, packed))


def _listeners(port: int) -> list[tuple[IPAddress, int]] | None:
    """``(address, socket inode)`` of every TCP listener on ``port`` in this network namespace,
    or None where the kernel does not list them (no /proc)."""
    found: list[tuple[IPAddress, int]] = []
    readable = False
    for table, family in _TABLES:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, _, port_hex = fields[1].partition(":")
            if int(port_hex, 16) == port:
                with contextlib.suppress(ValueError, OSError):
                    found.append((_address(address, family), int(fields[9])))
    return found if readable else None


def _own_socket_inodes() -> set[int]:
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _unmapped(ip: IPAddress) -> IPAddress:
    return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip


def _answers_at(listener: IPAddress, target: IPAddress) -> bool:
    """Whether a listener bound to ``listener`` may accept a connection to ``target``: the same
    address, or either one unspecified (a ``0.0.0.0``/``::`` listener answers on every address;
    a connection to ``0.0.0.0`` goes to this machine)."""
    listener, target = _unmapped(listener), _unmapped(target)
    return listener.is_unspecified or target.is_unspecified or listener == target


def foreign_listener(ip: IPAddress, port: int) -> bool | None:
    """Whether a program other than this process listens where ``ip:port`` leads (True), no one
    or only this process does (False), or this cannot be told here (None: no /proc)."""
    listeners = _listeners(port)
    if listeners is None:
        return None
    relevant = [inode for address, inode in listeners if _answers_at(address, ip)]
    if not relevant:
        return False
    own = _own_socket_inodes()
    return any(inode not in own for inode in relevant)
