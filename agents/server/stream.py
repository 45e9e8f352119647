"""Streamed replies of ``coa serve``: server-sent events as the engine samples.

Text deltas are held back while a stop string (or the eos text) might still be forming
(:class:`agents.openai_wire.TextReleaser`), so a streamed stop string never leaks.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.engines import GenerationRequest, SamplingParams
from agents.openai_errors import APIError, error_body
from agents.openai_wire import SSE_DONE, TextReleaser, finish_reason, sse, visible_text

if TYPE_CHECKING:
    from agents.server.model import ServedModel

__all__ = ["streamed"]


def streamed(served: ServedModel, ids: list[int], body: Any, kind: str, echo: str = "") -> Any:
    """The streamed answer; its parameters are checked first, while an error can still be a 400."""
    from fastapi.responses import StreamingResponse

    if body.logprobs:
        raise APIError(400, "logprobs are not sent in streamed replies by this server; send stream=false "
                            "to get them", code="unsupported_value", param="logprobs")
    params = served.params_for(body, 0, 16 if kind == "text_completion" else 512)
    return StreamingResponse(_stream(served, ids, body, kind, params, echo), media_type="text/event-stream")

async def _stream(served: ServedModel, ids: list[int], body: Any, kind: str, params: SamplingParams,
                  echo: str) -> AsyncIterator[str]:
    """Server-sent events: one chunk per released text delta (the echoed prompt first), the
    last with the finish reason, a usage chunk if ``stream_options.include_usage``, ``[DONE]``."""
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    with_usage = bool((body.stream_options or {}).get("include_usage"))
    request = GenerationRequest(
        token_ids=tuple(ids), params=params,
        on_token=lambda t, lp: loop.call_soon_threadsafe(tokens.put_nowait, (t, lp)))
    job = asyncio.ensure_future(asyncio.to_thread(served.batcher.generate, [request], params))
    job.add_done_callback(lambda _: tokens.put_nowait(None))
    created, ident = int(time.time()), f"cmpl-{uuid.uuid4().hex}"
    releaser = TextReleaser(served.tokenizer, params.stop, served.eos_text)

    first = True

    def chunk(delta: str, finish: str | None, stop_reason: str | None = None) -> str:
        nonlocal first
        if kind == "text_completion":
            choice = {"index": 0, "text": delta, "finish_reason": finish,
                      "stop_reason": stop_reason, "logprobs": None}
        else:
            content: dict[str, str] = {"role": "assistant"} if first else {}
            if delta:
                content["content"] = delta
            choice = {"index": 0, "delta": content, "finish_reason": finish,
                      "stop_reason": stop_reason, "logprobs": None}
        first = False
        payload: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": served.model_name,
                                   "choices": [choice]}
        if with_usage:  # OpenAI: null on every chunk but the final usage chunk
            payload["usage"] = None
        return sse(payload)

    if echo:
        yield chunk(echo, None)

    while (item := await tokens.get()) is not None:
        delta = releaser.push(item[0])
        if delta:
            yield chunk(delta, None)
    (completion,) = await job
    if not completion.ok:
        error = error_body(500, f"{completion.error_kind}: {completion.error}", code=str(completion.error_kind))
        yield sse(error)
    else:
        final = visible_text(completion.action_text, completion.stop_string,
                         body.include_stop_str_in_output)
        yield chunk(releaser.rest(final), finish_reason(completion), completion.stop_string)
        if with_usage:
            payload = {"id": ident, "object": kind, "created": created, "model": served.model_name,
                       "choices": [], "usage": served.counts([ids], [completion])}
            yield sse(payload)
    yield SSE_DONE
