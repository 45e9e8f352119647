"""OpenAI's chat/completions wire format, shared by the servers that speak it.

``coa serve`` (:mod:`agents.server`) and ``coa gateway`` (:mod:`agents.gateway`) answer the
same clients (the ``openai`` package, smolagents, LangChain, plain ``httpx``), so the pieces
of the format live here once: server-sent events ending in ``data: [DONE]``, ``usage``, chat
``logprobs`` entries, stop-string semantics, OpenAI content parts, and :class:`TextReleaser`,
which decides how much sampled text a stream may send without leaking a stop string or
splitting a character. Errors are :mod:`agents.openai_errors`'. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

__all__ = ["SSE_DONE", "Sampled", "TextReleaser", "chat_logprobs", "finish_reason", "flat_message", "sampled", "sse",
           "sse_lines", "stop_list", "token_bytes", "usage", "visible_text"]

SSE_DONE = "data: [DONE]\n\n"


# Characters Python's str.splitlines() (and so httpx's iter_lines) breaks lines at that JSON
# leaves raw: sent escaped, a sampled U+2028 cannot cut an event's JSON in two for such clients.
_LINE_BREAKING = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def sse(payload: Mapping[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as JSON on one line for every line splitter."""
    return f"data: {json.dumps(payload, ensure_ascii=False).translate(_LINE_BREAKING)}\n\n"


async def sse_lines(response: Any) -> AsyncIterator[str]:
    """The lines of an ``httpx`` streamed response, split where SSE splits them (CR, LF, CRLF)
    only: ``aiter_lines`` also splits at U+2028 and U+0085, which a server may leave raw
    inside an event's JSON (vLLM does)."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        *lines, buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


MAX_STOPS, MAX_STOP_CHARS = 64, 1024  # each decode step searches every stop in a tail as long as the longest


def stop_list(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """A request's ``stop`` as a tuple; ValueError past ``MAX_STOPS`` strings or ``MAX_STOP_CHARS``
    characters in one. The engine checks every stop string against the decoded tail after each
    token, so 100,000 stop strings (or one of 100,000 characters) made one request hold the
    shared decode loop for minutes."""
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ValueError(f"stop: at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters each")
    return stops


def visible_text(completion_text: str, stop: str | None, include_stop: bool) -> str:
    """OpenAI semantics: the text ends before the stop string (or after it, if asked)."""
    if stop is None:
        return completion_text
    at = completion_text.find(stop)
    if at < 0:
        return completion_text
    return completion_text[: at + len(stop)] if include_stop else completion_text[:at]


def finish_reason(completion: Any) -> str:
    """``length`` when the token limit ended the text, else ``stop`` (eos or a stop string)."""
    return "length" if completion.finish_reason == "length" else "stop"


def flat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message with OpenAI content parts (``[{"type": "text", "text": ...}]``) or ``None``
    content turned into the plain text chat templates expect."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return {**message, "content": text}
    if content is None:
        return {**message, "content": ""}
    return dict(message)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in character for each byte (GPT-2's scheme, used by
    Llama 3, Qwen, SmolLM2...): printable Latin-1 bytes stand for themselves, the others are
    shifted past 255 in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    alphabet, shifted = {}, 0
    for byte in range(256):
        if byte in kept:
            alphabet[chr(byte)] = byte
        else:
            alphabet[chr(256 + shifted)] = byte
            shifted += 1
    return alphabet


_BYTE_LEVEL = _byte_level_alphabet()


def _decoder_kind(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    described = repr(getattr(backend, "decoder", None))
    if "ByteLevel" in described:
        return "byte_level"
    if "ByteFallback" in described:
        return "byte_fallback"
    return "text"


def token_bytes(tokenizer: Any, token_id: int, kind: str | None = None) -> bytes:
    """The bytes token ``token_id`` stands for, as OpenAI's ``logprobs.content[].bytes`` gives
    them: a byte-level piece may be part of a character (``tokenizer.decode`` of it alone is
    U+FFFD), and a client rebuilds the text by joining every token's bytes. Special tokens and
    tokenizers of no known byte scheme give their decoded text's UTF-8."""
    kind = kind or _decoder_kind(tokenizer)
    if kind != "text" and token_id not in getattr(tokenizer, "all_special_ids", ()):
        piece = tokenizer.convert_ids_to_tokens(token_id)
        if isinstance(piece, str) and piece not in getattr(tokenizer, "added_tokens_encoder", {}):
            if kind == "byte_level" and all(ch in _BYTE_LEVEL for ch in piece):
                return bytes(_BYTE_LEVEL[ch] for ch in piece)
            if kind == "byte_fallback":
                if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                    return bytes([int(piece[3:5], 16)])
                return piece.replace("\u2581", " ").encode()
    return tokenizer.decode([token_id], skip_special_tokens=False).encode()


#: One sampled token as a stream hears it: id, logprob, its step's most likely (id, logprob) pairs.
Sampled = tuple[int, float, tuple[tuple[int, float], ...]]


def sampled(completion: Any) -> list[Sampled]:
    """Each sampled token of a :class:`~agents.engines.Completion` with its logprob and its
    step's most likely alternatives (empty unless asked for)."""
    tops = completion.top_logprobs or ((),) * len(completion.token_ids)
    return list(zip(completion.token_ids, completion.logprobs, tops, strict=True))


def chat_logprobs(tokenizer: Any, token_ids: Sequence[int], logprobs: Sequence[float],
                  as_ids: bool = False, tops: Sequence[Sequence[tuple[int, float]]] = ()) -> list[dict[str, Any]]:
    """Chat ``logprobs.content`` entries: ``{token, logprob, bytes, top_logprobs}`` per token
    (``token_id:N`` as the token with vLLM's ``return_tokens_as_token_ids``). ``bytes`` are
    the token's own (:func:`token_bytes`), so joined they are the completion's UTF-8 even
    where a token holds part of a character; ``token`` is its decoded text, as vLLM sends.
    ``tops`` (per token, its step's most likely ``(id, logprob)`` pairs) fill ``top_logprobs``."""
    kind = _decoder_kind(tokenizer)

    def entry(token: int, logprob: float) -> dict[str, Any]:
        text = tokenizer.decode([token], skip_special_tokens=False)
        return {"token": f"token_id:{token}" if as_ids else text, "logprob": float(logprob),
                "bytes": list(token_bytes(tokenizer, token, kind))}

    entries = []
    for position, (token, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        top = tops[position] if position < len(tops) else ()
        entries.append({**entry(token, logprob), "top_logprobs": [entry(t, lp) for t, lp in top]})
    return entries


class TextReleaser:
    """How much of a growing completion a stream may send so far.

    Held back: a tail that could still become a stop string or the eos text, anything from a
    completed stop string on, anything from ``hold_from`` on (a tool-call opener, whose text
    becomes ``tool_calls`` instead of content), and a half-decoded character.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str], eos_text: str = "",
                 hold_from: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.hold_from = hold_from
        self.hold = max((len(s) for s in (*self.stops, hold_from or "")), default=0) + len(eos_text)
        self.token_ids: list[int] = []
        self.sent = 0
        self.text = ""

    def push(self, token: int) -> str:
        """Take one sampled token; returns the text that may be sent now (may be empty)."""
        self.token_ids.append(token)
        self.text = self.tokenizer.decode(self.token_ids, skip_special_tokens=False)
        safe = len(self.text) - self.hold
        for marker in (*self.stops, *((self.hold_from,) if self.hold_from else ())):
            at = self.text.find(marker)
            if at >= 0:
                safe = min(safe, at)
        while safe > self.sent and self.text[safe - 1] == "\ufffd":
            safe -= 1
        if safe <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent:safe], safe
        return delta

    def rest(self, final_text: str) -> str:
        """What is left to send once the completion's visible text is known."""
        return final_text[self.sent:] if len(final_text) > self.sent else ""
