"""Content-Encoding is undone a bounded step at a time: a compression bomb cannot blow up a fetch."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Iterator

import httpx
import pytest

from coa_envs.loopback import QuietHandler, Serving, loopback_server
from coa_envs.web.decoding import accepted_encodings, decode_body
from coa_envs.web.fetch import FetchedPage, FetchFailure, HttpFetcher
from coa_envs.web.ssrf import UrlGuard

try:  # optional: httpx decodes br and zstd only when these are installed, and so do we
    import brotli
except ImportError:
    brotli = None
try:
    import zstandard
except ImportError:
    zstandard = None
BOMBS = [name for name, module in (("br", brotli), ("zstd", zstandard)) if module is not None]

TEXT = ("<html><body><p>" + " ".join(f"word{i}" for i in range(3000)) + "</p></body></html>").encode()


def _deflate(data: bytes, wbits: int) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return compressor.compress(data) + compressor.flush()


ENCODED = {
    "identity": TEXT,
    "gzip": gzip.compress(TEXT),
    "x-gzip": gzip.compress(TEXT),
    "deflate": zlib.compress(TEXT),  # zlib-wrapped, as the RFC says
    "deflate-raw": _deflate(TEXT, -zlib.MAX_WBITS),  # what some servers send as "deflate"
}
if brotli is not None:
    ENCODED["br"] = brotli.compress(TEXT)
if zstandard is not None:
    ENCODED["zstd"] = zstandard.ZstdCompressor().compress(TEXT)
CORRUPT = [("gzip", b"not gzip at all"), ("deflate", b"\xff\xfe junk"), ("gzip, deflate", b"\xff\xfe junk"),
           *[(name, b"\x28\xb5\x2f\xfd junk") for name in BOMBS]]


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("name", sorted(ENCODED))
@pytest.mark.parametrize("chunk_size", [1, 7, 4096, 1 << 20])
def test_every_encoding_round_trips_whatever_the_network_chunking(name: str, chunk_size: int) -> None:
    encoding = name.removesuffix("-raw")
    pieces = list(decode_body(_pieces(ENCODED[name], chunk_size), encoding, step=1000))
    assert b"".join(pieces) == TEXT
    assert max(len(p) for p in pieces) <= 1000


def _bomb(encoding: str, megabytes: int) -> bytes:
    zeros = b"\0" * (1 << 20)
    if encoding == "br":
        compressor = brotli.Compressor(quality=1)
        return b"".join(compressor.process(zeros) for _ in range(megabytes)) + compressor.finish()
    if encoding == "zstd":
        zcompressor = zstandard.ZstdCompressor(level=1).compressobj()
        return b"".join(zcompressor.compress(zeros) for _ in range(megabytes)) + zcompressor.flush()
    gcompressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(gcompressor.compress(zeros) for _ in range(megabytes)) + gcompressor.flush()


def _read_a_megabyte_in_steps(bomb: bytes, encoding: str) -> None:
    """A reader that stops after 1 MB gets pieces of at most a step and holds no more than that."""
    taken = 0
    for piece in decode_body([bomb], encoding, step=65536):
        assert len(piece) <= 65536
        taken += len(piece)
        if taken > 1_000_000:
            break
    assert taken <= 1_000_000 + 65536


@pytest.mark.parametrize("encoding", [*BOMBS, "gzip"])
def test_a_bomb_yields_bounded_pieces_and_stops_when_the_reader_stops(encoding: str) -> None:
    bomb = _bomb(encoding, 64)
    assert len(bomb) < 200_000  # 64 MB of zeros
    _read_a_megabyte_in_steps(bomb, encoding)


def test_an_unknown_encoding_passes_through_as_httpx_and_browsers_pass_it() -> None:
    assert b"".join(decode_body([b"<p>plain", b" text</p>"], "UTF-8")) == b"<p>plain text</p>"
    assert b"".join(decode_body([b"abc"], "identity, compress")) == b"abc"


@pytest.mark.parametrize("encoding, body", CORRUPT)
def test_corrupt_bodies_are_decoding_errors(encoding: str, body: bytes) -> None:
    with pytest.raises(httpx.DecodingError):
        list(decode_body([body], encoding))


def test_a_body_encoded_twice_is_undone_stage_by_stage_and_stays_bounded() -> None:
    """``Content-Encoding: deflate, gzip`` means deflate applied first: gzip is undone first."""
    twice = gzip.compress(zlib.compress(TEXT))
    assert b"".join(decode_body(_pieces(twice, 100), "deflate, gzip")) == TEXT
    assert b"".join(decode_body([gzip.compress(gzip.compress(TEXT))], "gzip, x-gzip")) == TEXT
    # a bomb inside a second layer is still read a step at a time
    bomb = gzip.compress(zlib.compress(bytes(200_000_000), 9))
    _read_a_megabyte_in_steps(bomb, "deflate, gzip")


def test_the_fetcher_advertises_only_what_it_decodes() -> None:
    assert accepted_encodings().split(", ") == ["gzip", "deflate", *BOMBS]


@pytest.fixture(scope="module")
def bomb_server() -> Iterator[str]:
    bombs = {encoding: _bomb(encoding, 150) for encoding in BOMBS}

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            encoding = self.path.strip("/")
            if encoding == "plain":
                self.send_body(200, gzip.compress(TEXT), "text/html", {"Content-Encoding": "gzip"})
            else:
                self.send_body(200, bombs[encoding], "text/html", {"Content-Encoding": encoding})

    serving = Serving(loopback_server(Handler))
    with serving:
        yield serving.base_url


@pytest.mark.parametrize("encoding", BOMBS)
def test_fetching_a_compression_bomb_allocates_about_the_size_cap(bomb_server: str, encoding: str) -> None:
    """150 MB of zeros in a few kilobytes: httpx inflated every network chunk whole (150 to
    300 MB traced for this body), long before the 1 MB cap was compared."""
    fetcher = HttpFetcher(UrlGuard(["127.0.0.1"]), max_bytes=1_000_000, timeout_s=30)
    tracemalloc.start()
    try:
        page = fetcher.fetch(f"{bomb_server}/{encoding}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        fetcher.close()
    assert isinstance(page, FetchedPage) and page.truncated and len(page.body) == 1_000_000
    assert peak < 20_000_000


def test_an_ordinary_compressed_page_is_fetched_whole(bomb_server: str) -> None:
    fetcher = HttpFetcher(UrlGuard(["127.0.0.1"]), timeout_s=30)
    try:
        page = fetcher.fetch(f"{bomb_server}/plain")
    finally:
        fetcher.close()
    assert not isinstance(page, FetchFailure) and page.body == TEXT and not page.truncated
