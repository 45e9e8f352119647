"""Guarded HTTP fetching with httpx: timeouts, a size cap and manually followed redirects.

Why manual redirects: every hop must pass the SSRF guard *before* we connect to it, and a
loop must be reported as a loop rather than as an opaque "too many redirects".
Why a custom connection backend: httpx resolves host names itself; we replace its TCP
connect with one that resolves, checks every address with :class:`UrlGuard` and then
connects to exactly the checked address. The IP that was checked is the IP used, so a
DNS answer that changes between check and connect (rebinding) cannot reach a private host.
TLS still verifies the certificate against the original host name (SNI is unchanged).

Nothing here raises for network trouble: :meth:`HttpFetcher.fetch` returns either a
:class:`FetchedPage` or a :class:`FetchFailure` carrying an :class:`ErrorKind`.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urljoin

import httpcore
import httpx

from coa_envs.types import ErrorKind
from coa_envs.web.decoding import accepted_encodings, decode_body
from coa_envs.web.ssrf import UrlGuard

__all__ = ["DEFAULT_USER_AGENT", "FetchFailure", "FetchedPage", "HttpFetcher", "api_client", "deadline"]

DEFAULT_USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) coa-envs/0.1 (+research agent crawler)"
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})


class _BlockedConnectionError(Exception):
    """Raised inside the connection backend when a resolved address is forbidden."""


@dataclass(frozen=True, slots=True)
class FetchedPage:
    """A successful response body (possibly cut at the size cap) and where it came from."""

    url: str
    final_url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool = False
    redirects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchFailure:
    """Why a fetch produced no usable body. ``transient`` failures are worth retrying later
    (and are not stored by the record/replay cache)."""

    url: str
    kind: ErrorKind
    message: str
    status: int | None = None
    transient: bool = False


class _NoCookies(DefaultCookiePolicy):
    """Store nothing, send nothing."""

    def set_ok(self, cookie: Any, request: Any) -> bool:
        return False

    def return_ok(self, cookie: Any, request: Any) -> bool:
        return False


_TIMEOUTS = {"connect": httpcore.ConnectTimeout, "read": httpcore.ReadTimeout, "write": httpcore.WriteTimeout}
# The end of the fetch under way in this thread (time.monotonic()), or None outside a fetch.
_fetch_deadline = threading.local()


def _time_left(timeout: float | None, operation: str) -> float | None:
    """``timeout`` shortened to what is left of this thread's fetch; none left is a timeout."""
    deadline = getattr(_fetch_deadline, "at", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise _TIMEOUTS[operation]("the fetch ran out of time")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write ends by the fetch's deadline. httpx's timeouts
    bound each socket operation, not a response: a server sending its headers a byte at a time,
    each byte inside the read timeout, held a fetch for hours (16 kB of headers, 15 s a byte)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, "write"))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _time_left(timeout, "read")))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    """httpcore's own connections, each read and write ended by this thread's deadline (if set)."""

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(super().connect_tcp(host, port, _time_left(timeout, "connect"), local_address,
                                                   socket_options))


def api_client(timeout_s: float, **kwargs: Any) -> httpx.Client:
    """An httpx client for the APIs a user configures (search, chat): no environment proxy, and
    within :func:`deadline` no request lasts past it, however slowly the server sends its head."""
    transport = httpx.HTTPTransport(trust_env=False)
    transport._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), max_connections=100,
                                              max_keepalive_connections=20, keepalive_expiry=5.0,
                                              network_backend=_DeadlineBackend())
    return httpx.Client(transport=transport, timeout=timeout_s, trust_env=False, **kwargs)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """This thread's requests through :func:`api_client` (and fetches) end within ``seconds``."""
    previous = getattr(_fetch_deadline, "at", None)
    _fetch_deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _fetch_deadline.at = previous


class _GuardedBackend(httpcore.SyncBackend):
    def __init__(self, guard: UrlGuard) -> None:
        self._guard = guard

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        # DNS shares the fetch's deadline: the first check already waited for it (a resolver that
        # answered it slowly and then went silent made a fetch last twice its timeout_s).
        verdict = self._guard.resolve(host, port, timeout_s=_time_left(timeout, "connect"))
        if verdict.status == "blocked":
            raise _BlockedConnectionError(verdict.reason)
        if not verdict.allowed:
            raise httpcore.ConnectError(verdict.reason)
        error: Exception = httpcore.ConnectError(f"no address of {host} accepted a connection")
        for address in verdict.addresses:
            try:
                return _DeadlineStream(super().connect_tcp(address, port, _time_left(timeout, "connect"),
                                                           local_address, socket_options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error


class _GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport, with its connection pool rebuilt on the guarded backend."""

    def __init__(self, guard: UrlGuard, *, verify: bool | str, limits: httpx.Limits) -> None:
        super().__init__(verify=bool(verify), trust_env=False, limits=limits)
        if isinstance(verify, str):  # a CA bundle file (private CA, corporate TLS inspection)
            ssl_context = ssl.create_default_context(cafile=verify)
        elif verify:
            import certifi

            ssl_context = ssl.create_default_context(cafile=certifi.where())
        else:
            ssl_context = ssl.create_default_context()
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(guard),
        )


class HttpFetcher:
    """Fetch one URL under the guard. Thread-safe (one shared httpx client).

    ``timeout_s`` bounds the whole fetch including redirects and the body download;
    ``max_bytes`` caps the decoded body (a larger page is cut and marked truncated);
    ``verify_tls`` is True (certifi's CAs), False, or the path of a CA bundle file.
    """

    def __init__(
        self,
        guard: UrlGuard | None = None,
        *,
        timeout_s: float = 15.0,
        connect_timeout_s: float = 5.0,
        max_bytes: int = 5_000_000,
        max_redirects: int = 5,
        user_agent: str = DEFAULT_USER_AGENT,
        verify_tls: bool | str = True,
        max_connections: int = 64,
    ) -> None:
        self.guard = guard or UrlGuard()
        self.timeout_s = float(timeout_s)
        self.max_bytes = int(max_bytes)
        self.max_redirects = int(max_redirects)
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections // 2
        )
        self._client = httpx.Client(
            transport=_GuardedTransport(self.guard, verify=verify_tls, limits=limits),
            timeout=httpx.Timeout(self.timeout_s, connect=min(connect_timeout_s, self.timeout_s)),
            follow_redirects=False,
            # The client keeps no cookies: a fetch's cookies live in its own jar (see fetch), or a
            # site could hand one episode's data to the next (set a cookie now, echo it later).
            cookies=CookieJar(policy=_NoCookies()),
            trust_env=False,
            headers={"User-Agent": user_agent, "Accept": "text/html,application/pdf,text/*;q=0.9,*/*;q=0.5",
                     "Accept-Encoding": accepted_encodings()},
        )
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._client.close()

    def fetch(self, url: str) -> FetchedPage | FetchFailure:
        deadline = time.monotonic() + self.timeout_s
        _fetch_deadline.at = deadline
        try:
            return self._fetch_within(url, deadline)
        finally:
            _fetch_deadline.at = None

    def _fetch_within(self, url: str, deadline: float) -> FetchedPage | FetchFailure:
        cookies = httpx.Cookies()  # this fetch's redirect chain only (sites that set one, then redirect)
        current = url.strip()
        seen = {current}
        redirects: list[str] = []
        for _ in range(self.max_redirects + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                return FetchFailure(current, ErrorKind.TOOL_TIMEOUT, f"timed out after {self.timeout_s:g}s fetching "
                                    f"{url}", transient=True)
            verdict = self.guard.check(current, timeout_s=left)  # DNS within what is left of the fetch
            if verdict.status == "blocked":
                return FetchFailure(current, ErrorKind.BLOCKED_URL, f"refused to fetch {current}: {verdict.reason}")
            if not verdict.allowed:
                return FetchFailure(
                    current, ErrorKind.TOOL_ERROR, verdict.reason, transient=verdict.status == "dns_error"
                )
            outcome = self._fetch_one(url, current, deadline, tuple(redirects), cookies)
            if isinstance(outcome, str):  # a redirect target
                if outcome in seen:
                    chain = " -> ".join([url, *redirects, outcome])
                    return FetchFailure(url, ErrorKind.TOOL_ERROR, f"redirect loop: {chain}")
                seen.add(outcome)
                redirects.append(outcome)
                current = outcome
                continue
            return outcome
        return FetchFailure(
            url, ErrorKind.TOOL_ERROR, f"too many redirects (more than {self.max_redirects}) starting at {url}"
        )

    def _fetch_one(
        self, original: str, url: str, deadline: float, redirects: tuple[str, ...], cookies: httpx.Cookies
    ) -> FetchedPage | FetchFailure | str:
        try:
            request = self._client.build_request("GET", url)
            cookies.set_cookie_header(request)
            with contextlib.closing(self._client.send(request, stream=True)) as response:
                cookies.extract_cookies(response)
                status = response.status_code
                if status in _REDIRECT_CODES and response.headers.get("location"):
                    return urljoin(str(response.url), response.headers["location"].strip())
                if status >= 400:
                    return FetchFailure(
                        url, ErrorKind.TOOL_ERROR,
                        f"HTTP {status} {response.reason_phrase} for {url}",
                        status=status, transient=status >= 500 or status == 429,
                    )
                chunks: list[bytes] = []
                size = 0
                truncated = False
                # Decoded here, a bounded step at a time: httpx would inflate a compression bomb whole.
                for chunk in decode_body(response.iter_raw(), response.headers.get("content-encoding", "")):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.max_bytes:
                        truncated = True
                        break
                    if time.monotonic() > deadline:
                        return FetchFailure(
                            url, ErrorKind.TOOL_TIMEOUT,
                            f"timed out after {self.timeout_s:g}s while downloading {url}", transient=True,
                        )
                body = b"".join(chunks)[: self.max_bytes]
                content_type = response.headers.get("content-type", "")
                return FetchedPage(
                    url=original,
                    final_url=str(response.url),
                    status=status,
                    content_type=content_type.split(";", 1)[0].strip().lower(),
                    charset=response.charset_encoding,
                    body=body,
                    truncated=truncated,
                    redirects=redirects,
                )
        except _BlockedConnectionError as exc:
            return FetchFailure(url, ErrorKind.BLOCKED_URL, f"refused to fetch {url}: {exc}")
        except httpx.TimeoutException:
            return FetchFailure(
                url, ErrorKind.TOOL_TIMEOUT, f"timed out after {self.timeout_s:g}s fetching {url}", transient=True
            )
        except httpx.HTTPError as exc:
            message = f"could not fetch {url}: {type(exc).__name__}: {exc}"
            return FetchFailure(url, ErrorKind.TOOL_ERROR, message, transient=True)
        except httpx.InvalidURL as exc:  # httpx parses a redirect's Location before returning the response
            message = f"could not fetch {url}: invalid URL or redirect target ({exc})"
            return FetchFailure(url, ErrorKind.TOOL_ERROR, message)
        except (ValueError, UnicodeError) as exc:  # malformed URLs that slipped past urlsplit
            return FetchFailure(url, ErrorKind.TOOL_ERROR, f"could not fetch {url}: {exc}")
        except RuntimeError as exc:  # client closed while a thread was still using it
            return FetchFailure(url, ErrorKind.TOOL_ERROR, f"fetcher unavailable: {exc}", transient=True)
