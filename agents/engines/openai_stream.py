"""A cancellable request of the ``openai`` engine: streamed, so a caller that no longer wants
the reply (``GenerationRequest.cancel``, a gateway or ``coa serve`` client that hung up) stops
it by closing the stream, which the server sees as a disconnect and stops decoding.

The chunks are gathered into what the non-streamed reply holds (text, sampled ids, logprobs,
each step's alternatives, tool calls, finish reason and stop string). A cancelled request ends
``abort`` with what had arrived.

A cancel is acted on when it is set, not at the next chunk: a watcher thread shuts the
stream's socket down, which wakes the read waiting for a server that sends nothing (a request
queued behind others, a long prefill) and tells the server at once. It only ever touches a
socket still carrying this stream, never one returned to the client's pool.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.toolcalls import merge_call_deltas

__all__ = ["StreamedReply", "choice_logprobs", "gather_stream"]


@dataclass
class StreamedReply:
    """What a streamed completion's chunks added up to."""

    text: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    tops: list[list[tuple[str, float]]] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    stop_reason: Any = None
    cancelled: bool = False


def choice_logprobs(choice: Any, chat: bool) -> tuple[list[float], list[str], list[list[tuple[str, float]]]]:
    """A choice's (or a streamed chunk's) sampled-token logprobs, token names and each step's
    alternatives ``(token, logprob)``, in the chat or the completions shape."""
    if chat:
        content = (choice.logprobs.content if choice.logprobs else None) or ()
        return ([float(entry.logprob) for entry in content], [entry.token for entry in content],
                [[(t.token, t.logprob) for t in entry.top_logprobs or ()] for entry in content])
    lp = choice.logprobs
    if lp is None:
        return [], [], []
    return ([float(x) for x in lp.token_logprobs or ()], list(lp.tokens or ()),
            [list((step or {}).items()) for step in lp.top_logprobs or ()])


def _add_chunk(reply: StreamedReply, choice: Any, chat: bool) -> None:
    """Fold one chunk's choice into ``reply``."""
    extra = choice.model_extra or {}
    reply.text.append(((choice.delta.content if choice.delta else None) if chat else choice.text) or "")
    if chat and choice.delta is not None and choice.delta.tool_calls:
        merge_call_deltas(reply.calls, [call.model_dump() for call in choice.delta.tool_calls])
    logprobs, tokens, tops = choice_logprobs(choice, chat)
    reply.logprobs.extend(logprobs)
    reply.tokens.extend(tokens)
    reply.tops.extend(tops)
    reply.ids.extend(int(t) for t in extra.get("token_ids") or ())
    reply.finish = choice.finish_reason or reply.finish
    reply.stop_reason = extra.get("stop_reason") or reply.stop_reason


def gather_stream(stream: Any, *, chat: bool, cancel: threading.Event | None = None) -> StreamedReply:
    """Read ``stream`` (an ``openai`` ``Stream`` of chunks) to its end, or until ``cancel`` is
    set: then the stream is cut (the server stops) and the reply is ``cancelled``."""
    reply = StreamedReply()
    try:
        with _cut_when_cancelled(stream, cancel):
            try:
                for chunk in stream:
                    for choice in chunk.choices or ():
                        if choice.index == 0:
                            _add_chunk(reply, choice, chat)
                    if cancel is not None and cancel.is_set() and reply.finish is None:
                        break
            except Exception:
                if cancel is None or not cancel.is_set():
                    raise  # the read failed by itself, not because the watcher cut it
        reply.cancelled = cancel is not None and cancel.is_set() and reply.finish is None
    finally:
        stream.close()
    return reply


@contextlib.contextmanager
def _cut_when_cancelled(stream: Any, cancel: threading.Event | None) -> Iterator[None]:
    """While the block reads ``stream``, a thread that shuts its socket down once ``cancel``
    is set. Leaving the block stops the thread first, so a socket handed back to the pool
    (the stream closed after its end) is never touched."""
    if cancel is None:
        yield
        return
    done, lock = threading.Event(), threading.Lock()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.05):
                with lock:
                    if not done.is_set():
                        _shut_down(stream)
                return

    watcher = threading.Thread(target=watch, name="coa-http-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            done.set()


def _shut_down(stream: Any) -> None:
    """Shut down the socket under ``stream`` (its blocked read returns at once); a stream whose
    socket cannot be reached is left to the chunk loop's check."""
    with contextlib.suppress(Exception):
        network = stream.response.extensions["network_stream"]
        network.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
