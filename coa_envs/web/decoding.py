"""Undo a response's ``Content-Encoding`` a bounded step at a time.

Why not httpx's own decoding: it inflates each network chunk in one call, and compression
formats reach enormous ratios (657 bytes of brotli or 13 kB of zstd are 400 MB of zeros), so a
hostile page made one fetch allocate gigabytes before the fetcher's size cap was looked at.
:func:`decode_body` yields the decoded body in pieces of at most ``step`` bytes whatever the
ratio, so a caller that stops iterating at its cap never holds more than cap + step.

Encodings: ``identity``, ``gzip``/``x-gzip``, ``deflate`` (zlib-wrapped or raw), ``br`` (the
``brotli`` package, 1.1 or later) and ``zstd`` (``zstandard``) when installed. An encoding we do
not know is passed through as it is (as httpx and browsers do: servers send ``Content-Encoding:
UTF-8``). A body encoded twice over (``gzip, br``: gzip applied first) is undone stage by
stage, each stage bounded the same way.
"""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

__all__ = ["BodyTooLarge", "accepted_encodings", "decode_body", "read_capped"]

_STEP = 64 * 1024


@functools.cache
def _brotli() -> Any:
    """The ``brotli`` module if it can bound its output (``output_buffer_limit``, brotli >= 1.1)."""
    try:
        import brotli

        brotli.Decompressor().process(b"", output_buffer_limit=1)
    except (ImportError, TypeError, AttributeError):
        return None
    return brotli


@functools.cache
def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def accepted_encodings() -> str:
    """The ``Accept-Encoding`` value: only what :func:`decode_body` can decode here."""
    names = ["gzip", "deflate"]
    if _brotli() is not None:
        names.append("br")
    if _zstandard() is not None:
        names.append("zstd")
    return ", ".join(names)


def _inflate(chunks: Iterator[bytes], wbits: int | None, step: int) -> Iterator[bytes]:
    """zlib formats; ``wbits=None`` (``deflate``) picks zlib-wrapped or raw from the first bytes."""
    decompressor = None
    head = b""
    for chunk in chunks:
        if decompressor is None:
            if wbits is None:  # a zlib header is two bytes: CMF (method 8) and FLG, a multiple of 31 together
                head += chunk
                if len(head) < 2:
                    continue
                wrapped = head[0] & 0x0F == 8 and ((head[0] << 8) | head[1]) % 31 == 0
                wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
                chunk, head = head, b""
            decompressor = zlib.decompressobj(wbits)
        data = chunk
        while data and not decompressor.eof:
            yield decompressor.decompress(data, step)
            data = decompressor.unconsumed_tail
        if decompressor.eof:  # trailing bytes after the stream are ignored, as browsers do
            return
    if decompressor is not None:
        while piece := decompressor.decompress(b"", step):
            yield piece


def _unbrotli(chunks: Iterator[bytes], step: int) -> Iterator[bytes]:
    decompressor = _brotli().Decompressor()
    for chunk in chunks:
        yield decompressor.process(chunk, output_buffer_limit=step)
        while not decompressor.can_accept_more_data():  # output held back by the limit
            yield decompressor.process(b"", output_buffer_limit=step)
    while not decompressor.is_finished() and (piece := decompressor.process(b"", output_buffer_limit=step)):
        yield piece


class _ChunkReader:
    """A ``read(size)`` view of an iterator of byte chunks (what zstandard's stream reader wants)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while not self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._buffer = chunk
        size = len(self._buffer) if size is None or size < 0 else size
        piece, self._buffer = self._buffer[:size], self._buffer[size:]
        return piece


def _unzstd(chunks: Iterator[bytes], step: int) -> Iterator[bytes]:
    reader = _zstandard().ZstdDecompressor().stream_reader(_ChunkReader(chunks), read_across_frames=True)
    while piece := reader.read(step):
        yield piece


def _decoder(encoding: str, chunks: Iterator[bytes], step: int) -> Iterator[bytes]:
    if encoding == "identity":
        return chunks
    if encoding in ("gzip", "x-gzip"):
        return _inflate(chunks, zlib.MAX_WBITS | 16, step)
    if encoding == "deflate":
        return _inflate(chunks, None, step)
    if encoding == "br" and _brotli() is not None:
        return _unbrotli(chunks, step)
    if encoding == "zstd" and _zstandard() is not None:
        return _unzstd(chunks, step)
    raise httpx.DecodingError(f"Content-Encoding {encoding!r} cannot be decoded here")


def decode_body(raw_chunks: Iterable[bytes], content_encoding: str = "", step: int = _STEP) -> Iterator[bytes]:
    """Decoded pieces of a body, none longer than ``step``; decoding errors are ``httpx.DecodingError``."""
    known = {"gzip", "x-gzip", "deflate", "br", "zstd"}
    encodings = [e for e in (e.strip().lower() for e in content_encoding.split(",")) if e in known] or ["identity"]
    decoded: Iterator[bytes] = iter(raw_chunks)
    for encoding in reversed(encodings):  # listed in the order applied: undo the last first
        decoded = _decoder(encoding, decoded, step)
    errors: list[type[BaseException]] = [zlib.error]
    if (brotli := _brotli()) is not None:
        errors.append(brotli.error)
    if (zstandard := _zstandard()) is not None:
        errors.append(zstandard.ZstdError)
    try:
        for piece in decoded:
            # brotli's limit is where its buffer stops growing, not a hard length: cut to ``step``.
            for start in range(0, len(piece), step):
                yield piece[start:start + step]
    except tuple(errors) as exc:
        raise httpx.DecodingError(f"the {', '.join(encodings)} body is corrupt: {exc}") from exc


class BodyTooLarge(Exception):
    """A response body (decoded) ran past the reader's cap; ``str(exc)`` says by how much."""


def read_capped(response: httpx.Response, max_bytes: int, deadline: float | None = None) -> bytes:
    """The decoded body of a streamed ``response``, read a bounded step at a time.

    For the JSON APIs a user configures (search, chat): their answers are small, so a larger body
    is refused (:class:`BodyTooLarge`) rather than cut, and reading stops at ``max_bytes`` + one step
    whatever the server sends. ``deadline`` (``time.monotonic()``) bounds the whole body, which the
    client's per-read timeout does not: a body sent a byte at a time is an ``httpx.ReadTimeout``.
    """
    chunks: list[bytes] = []
    size = 0
    for chunk in decode_body(response.iter_raw(), response.headers.get("content-encoding", "")):
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"the response body is larger than {max_bytes} bytes")
        if deadline is not None and time.monotonic() > deadline:
            raise httpx.ReadTimeout("the response body did not arrive in time", request=response.request)
        chunks.append(chunk)
    return b"".join(chunks)
