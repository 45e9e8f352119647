"""Streamed replies of ``coa serve``: server-sent events as the engine samples.

Text deltas are held back while a stop string (or the eos text) might still be forming
(:class:`agents.openai_wire.TextReleaser`), so a streamed stop string never leaks. Each chunk
carries the logprobs of the tokens it releases when they were asked for. With ``tools``, the
text from the model's tool-call opener on is held back too and, read as calls when the reply
ends, goes out as ``tool_calls`` (finish reason ``tool_calls``), as the JSON reply has them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.engines import Completion, GenerationRequest, SamplingParams
from agents.openai_errors import check_prompt_fits, error_body
from agents.openai_wire import SSE_DONE, Sampled, TextReleaser, chat_logprobs, finish_reason, sampled, sse, visible_text
from agents.toolcalls import calls_delta, parse_reply, tool_call_opener, wire_message

if TYPE_CHECKING:
    from agents.server.model import ServedModel

__all__ = ["streamed"]


def streamed(served: ServedModel, ids: list[int], body: Any, kind: str, echo: str = "", prompt_text: str = "") -> Any:
    """The streamed answer; its parameters are checked first, while an error can still be a 400.
    ``prompt_text`` is the rendered chat prompt tool calls are read after."""
    from agents.http_streams import event_stream

    params = [served.params_for(body, index, 16 if kind == "text_completion" else 512) for index in range(body.n)]
    check_prompt_fits(len(ids), served.batcher, "prompt" if kind == "text_completion" else "messages")
    if body.n == 1:
        return event_stream(_Stream(served, body, kind, prompt_text).events(ids, params[0], echo))
    first = _Stream(served, body, kind, prompt_text, index=0, trailer=False)
    streams = [first] + [_Stream(served, body, kind, prompt_text, index=i, trailer=False, like=first)
                         for i in range(1, body.n)]
    return event_stream(_interleaved(streams, ids, params, echo))


async def _interleaved(streams: list[_Stream], ids: list[int], params: list[SamplingParams],
                       echo: str) -> AsyncIterator[str]:
    """``n`` choices of one stream: each choice's chunks (its ``index`` in them) as they come,
    then one usage chunk for them all and ``[DONE]``. Closed early, every choice is cancelled."""
    from agents.http_streams import interleaved

    events = interleaved([s.events(ids, p, echo) for s, p in zip(streams, params, strict=True)])
    try:
        async for event in events:
            yield event
    finally:
        await events.aclose()
    head = streams[0]
    if head.with_usage and all(s.completion is not None for s in streams):
        yield sse({"id": head.ident, "object": head.kind, "created": head.created,
                   "model": head.served.model_name, "choices": [],
                   "usage": head.served.counts([ids], [s.completion for s in streams])})
    yield SSE_DONE


class _Stream:
    """The chunks of one streamed completion (``kind``: ``text_completion`` or
    ``chat.completion.chunk``)."""

    def __init__(self, served: ServedModel, body: Any, kind: str, prompt_text: str, *, index: int = 0,
                 trailer: bool = True, like: _Stream | None = None) -> None:
        """``index``: the choice's; ``trailer``: end with the usage chunk and ``[DONE]`` (one
        choice; :func:`_interleaved` sends them for several); ``like``: share its id."""
        self.served, self.body, self.kind, self.prompt_text = served, body, kind, prompt_text
        self.index, self.trailer = index, trailer
        self.completion: Completion | None = None
        self.chat = kind != "text_completion"
        self.tools = body.tools if self.chat and body.tools and body.tool_choice != "none" else None
        self.opener = tool_call_opener(served.tokenizer) if self.tools else ""
        self.with_logprobs = bool(body.logprobs) if self.chat else body.logprobs is not None
        self.with_usage = bool((body.stream_options or {}).get("include_usage"))
        self.ident = like.ident if like else f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = like.created if like else int(time.time())
        self.first = True
        self.offset = 0  # text_completion logprobs: where the next token starts
        self.sent_tokens = 0  # sampled tokens whose ids and logprobs went out
        self.prompt_ids: list[int] = []

    def _logprobs(self, items: list[Sampled]) -> dict[str, Any] | None:
        if not self.with_logprobs:
            return None
        token_ids, logprobs, tops = [t for t, _, _ in items], [lp for _, lp, _ in items], [top for *_, top in items]
        as_ids = self.body.return_tokens_as_token_ids
        if self.chat:
            return {"content": chat_logprobs(self.served.tokenizer, token_ids, logprobs, as_ids, tops)}
        entries = self.served.completion_logprobs(token_ids, logprobs, as_ids, self.offset, tops)
        self.offset += sum(len(t) for t in entries["tokens"])
        return entries

    def chunk(self, delta: dict[str, Any], finish: str | None = None, stop_reason: str | None = None,
              items: list[Sampled] | None = None) -> str:
        items = items or []
        self.sent_tokens += len(items)
        logprobs = self._logprobs(items) if items else None
        if self.chat:
            if self.first:
                delta = {"role": "assistant", **delta}
            choice = {"index": self.index, "delta": delta, "finish_reason": finish, "stop_reason": stop_reason,
                      "logprobs": logprobs}
        else:
            choice = {"index": self.index, "text": delta.get("content", ""), "finish_reason": finish,
                      "stop_reason": stop_reason, "logprobs": logprobs}
        if self.body.return_token_ids:  # vLLM's extension: each chunk's sampled ids, the prompt's first
            choice["token_ids"] = [t for t, *_ in items]
            if self.first:
                choice["prompt_token_ids"] = self.prompt_ids
        self.first = False
        payload: dict[str, Any] = {"id": self.ident, "object": self.kind, "created": self.created,
                                   "model": self.served.model_name, "choices": [choice]}
        if self.with_usage:  # OpenAI: null on every chunk but the final usage chunk
            payload["usage"] = None
        return sse(payload)

    async def events(self, ids: list[int], params: SamplingParams, echo: str) -> AsyncIterator[str]:
        """Server-sent events: one chunk per released text delta (the echoed prompt first), the
        last with the finish reason, a usage chunk if ``stream_options.include_usage``, ``[DONE]``."""
        served = self.served
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[Sampled | None] = asyncio.Queue()
        cancel = threading.Event()  # set when the stream ends early: the client hung up
        request = GenerationRequest(
            token_ids=tuple(ids), params=params, cancel=cancel,
            on_token=lambda t, lp, top=(): loop.call_soon_threadsafe(tokens.put_nowait, (t, lp, top)))
        job = asyncio.wrap_future(served.batcher.submit(request))
        job.add_done_callback(lambda _: tokens.put_nowait(None))
        try:
            async for event in self._events(job, tokens, ids, params, echo):
                yield event
        finally:
            cancel.set()  # a no-op once the reply is complete

    async def _events(self, job: Any, tokens: asyncio.Queue[Sampled | None], ids: list[int],
                      params: SamplingParams, echo: str) -> AsyncIterator[str]:
        served = self.served
        releaser = TextReleaser(served.tokenizer, params.stop, served.eos_text, hold_from=self.opener or None)
        self.prompt_ids = list(ids)
        if echo:
            yield self.chunk({"content": echo})
        pending: list[Sampled] = []
        while (item := await tokens.get()) is not None:
            pending.append(item)
            delta = releaser.push(item[0])
            if delta:
                yield self.chunk({"content": delta}, items=pending)
                pending = []
        completion = await job
        if not completion.ok:
            yield sse(error_body(500, f"{completion.error_kind}: {completion.error}", code=str(completion.error_kind)))
            if self.trailer:
                yield SSE_DONE
            return
        self.completion = completion
        yield self._last_chunk(completion, releaser)
        if not self.trailer:
            return
        if self.with_usage:
            yield sse({"id": self.ident, "object": self.kind, "created": self.created, "model": served.model_name,
                       "choices": [], "usage": served.counts([ids], [completion])})
        yield SSE_DONE

    def _last_chunk(self, completion: Completion, releaser: TextReleaser) -> str:
        """The rest of the reply with its finish reason: the tool calls the model wrote, or the
        text still held back, with the ids and logprobs of every sampled token not sent yet."""
        pending = sampled(completion)[self.sent_tokens:]
        if self.tools:
            reply = wire_message(parse_reply(self.served.tokenizer, completion.text, self.prompt_text, self.tools),
                                 self.body.parallel_tool_calls)
            if reply.get("tool_calls"):
                before = completion.text.split(self.opener, 1)[0].rstrip() if self.opener else ""
                return self.chunk(calls_delta(reply["tool_calls"], releaser.rest(before)), "tool_calls",
                                  completion.stop_string, pending)
        final = visible_text(completion.action_text, completion.stop_string, self.body.include_stop_str_in_output)
        rest = releaser.rest(final)
        return self.chunk({"content": rest} if rest else {}, finish_reason(completion), completion.stop_string,
                          pending)
