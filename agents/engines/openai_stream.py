"""A cancellable request of the ``openai`` engine: streamed, so a caller that no longer wants
the reply (``GenerationRequest.cancel``, a gateway or ``coa serve`` client that hung up) stops
it by closing the stream, which the server sees as a disconnect and stops decoding.

The chunks are gathered into what the non-streamed reply holds (text, sampled ids, logprobs,
each step's alternatives, finish reason and stop string). A cancelled request ends ``abort``
with what had arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamedReply", "choice_logprobs", "gather_stream"]


@dataclass
class StreamedReply:
    """What a streamed completion's chunks added up to."""

    text: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    tops: list[list[tuple[str, float]]] = field(default_factory=list)
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
    logprobs, tokens, tops = choice_logprobs(choice, chat)
    reply.logprobs.extend(logprobs)
    reply.tokens.extend(tokens)
    reply.tops.extend(tops)
    reply.ids.extend(int(t) for t in extra.get("token_ids") or ())
    reply.finish = choice.finish_reason or reply.finish
    reply.stop_reason = extra.get("stop_reason") or reply.stop_reason


def gather_stream(stream: Any, *, chat: bool, cancel: Any = None) -> StreamedReply:
    """Read ``stream`` (an ``openai`` ``Stream`` of chunks) to its end, or until ``cancel`` is
    set: then the stream is closed (the server stops) and the reply is ``cancelled``."""
    reply = StreamedReply()
    try:
        for chunk in stream:
            for choice in chunk.choices or ():
                if choice.index != 0:
                    continue
                _add_chunk(reply, choice, chat)
            if cancel is not None and cancel.is_set() and reply.finish is None:
                reply.cancelled = True
                break
    finally:
        stream.close()
    return reply
