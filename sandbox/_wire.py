"""Length-prefixed JSON frames over pipes: how the pool, its workers and jailed children talk.

JSON, not pickle: a frame coming *from* a jail must never be able to run code in the reader.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

__all__ = ["FrameError", "read_exact", "read_frame", "write_frame"]

_HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30


class FrameError(EOFError):
    """The other side closed the pipe, sent garbage, or did not answer in time."""


def write_frame(fd: int, message: dict[str, Any]) -> None:
    payload = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    """Exactly ``size`` bytes (blocking until ``deadline``, a ``time.monotonic()`` value)."""
    chunks: list[bytes] = []
    while size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise FrameError("timed out waiting for a frame")
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise FrameError("pipe closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None, max_size: int = MAX_FRAME) -> dict[str, Any]:
    """Read one frame (blocking; ``deadline`` is a ``time.monotonic()`` value). A frame over
    ``max_size`` bytes is refused before any of it is read."""
    (size,) = _HEADER.unpack(read_exact(fd, _HEADER.size, deadline))
    if size > max_size:
        raise FrameError(f"frame of {size} bytes is too large (at most {max_size})")
    try:
        message = json.loads(read_exact(fd, size, deadline))
    except ValueError as exc:
        raise FrameError(f"bad frame: {exc}") from exc
    if not isinstance(message, dict):
        raise FrameError("frame is not an object")
    return message
