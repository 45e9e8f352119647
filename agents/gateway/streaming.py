"""Streamed replies of the gateway's local backend: one choice's chunks as the engine samples
them (``n`` choices are interleaved by :func:`agents.http_streams.interleaved`).

A choice's text is held back while a stop string, the eos text or (with tools) a tool call
might still be forming, so a client never sees text the JSON reply would not hold. Each
choice is recorded as its own call when it ends; a choice whose client left is cancelled
(the engine stops at its next step) and recorded when the engine hands back what it sampled.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.engines import Completion, GenerationRequest, SamplingParams
from agents.openai_errors import error_body
from agents.openai_wire import Sampled, TextReleaser, chat_logprobs, sse
from agents.toolcalls import calls_delta

if TYPE_CHECKING:
    from agents.gateway.local import LocalBackend
    from agents.gateway.prompts import PromptPlan
    from agents.gateway.sessions import GatewaySession
    from agents.gateway.wire import ChatRequest, Chunker

__all__ = ["ChoiceStream"]


class ChoiceStream:
    """Choice ``number`` of a streamed call: call ``index`` of ``session``, sampled with
    ``params`` from ``plan``; ``completion`` is set once it ended well."""

    def __init__(self, backend: LocalBackend, session: GatewaySession, request: ChatRequest, chunker: Chunker,
                 plan: PromptPlan, index: int, params: SamplingParams, number: int) -> None:
        self.backend, self.session, self.request, self.chunker = backend, session, request, chunker
        self.plan, self.index, self.params, self.number = plan, index, params, number
        self.completion: Completion | None = None

    def _logprobs(self, items: list[Sampled]) -> list[dict[str, Any]] | None:
        if not self.request.logprobs:
            return None
        return chat_logprobs(self.backend.tokenizer, [t for t, _, _ in items], [lp for _, lp, _ in items],
                             self.request.return_tokens_as_token_ids, [top for *_, top in items])

    def _chunk(self, delta: dict[str, Any], items: list[Sampled] | None = None, **kwargs: Any) -> str:
        logprobs = self._logprobs(items) if items is not None else None
        return sse(self.chunker.delta(delta, logprobs=logprobs, choice=self.number, **kwargs))

    async def events(self) -> AsyncIterator[str]:
        backend, request, plan, params = self.backend, self.request, self.plan, self.params
        started = time.time()
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[Sampled | None] = asyncio.Queue()
        cancel = threading.Event()  # set when the client hangs up: the engine stops at its next step
        future = backend.batcher.submit(GenerationRequest(
            token_ids=tuple(plan.ids), params=params, cancel=cancel,
            on_token=lambda t, lp, top=(): loop.call_soon_threadsafe(tokens.put_nowait, (t, lp, top))))
        job = asyncio.wrap_future(future)
        job.add_done_callback(lambda _: tokens.put_nowait(None))
        releaser = TextReleaser(backend.tokenizer, params.stop, backend.eos_text,
                                hold_from=backend.opener if request.tools_active else None)
        pending: list[Sampled] = []
        recorded = False
        try:
            yield self._chunk({})
            done = False
            while not done:
                # Everything sampled since the last chunk goes out as one: a slow reader (or a
                # busy event loop) gets fewer, longer chunks instead of falling further behind.
                batch = [await tokens.get()]
                while not tokens.empty():
                    batch.append(tokens.get_nowait())
                done = batch[-1] is None
                delta = ""
                for item in batch[:-1] if done else batch:
                    pending.append(item)
                    delta += releaser.push(item[0])
                if delta:
                    yield self._chunk({"content": delta}, pending)
                    pending = []
            completion = await job
            if not completion.ok:
                from agents.gateway.local import engine_error

                error = engine_error(completion)
                yield sse(error_body(error.status, error.message, code=error.code, param=error.param))
                return
            reply, finish = backend._reply(completion, plan, request)
            backend._record(self.session, self.index, request, plan, completion, reply, finish, started, params)
            recorded = True
            self.completion = completion
            if finish == "tool_calls":
                before = completion.text.split(backend.opener, 1)[0].rstrip() if backend.opener else ""
                yield self._chunk(calls_delta(reply["tool_calls"], releaser.rest(before)), pending)
                pending = []
            else:
                rest = releaser.rest(reply["content"] or "")
                if rest or pending:
                    yield self._chunk({"content": rest} if rest else {}, pending)
            extra: dict[str, Any] = {"stop_reason": completion.stop_string}
            if request.return_token_ids:
                extra.update(token_ids=list(completion.token_ids), prompt_token_ids=list(plan.ids))
            yield self._chunk({}, finish=finish, extra=extra)
        finally:
            if not recorded:  # the client left (or the stream failed): keep what was sampled
                cancel.set()
                future.add_done_callback(
                    lambda f: backend._record_late(f, self.session, self.index, request, plan, started, params))
