"""Chat completions from a local engine (``hf``, ``vllm``), recorded token by token.

The prompt ids come from :func:`agents.gateway.prompts.build_prompt` (the session's earlier
ids reused, never re-tokenised); the engine samples from exactly those ids, and the call is
recorded with them, the sampled ids and their logprobs. Concurrent requests of all sessions
share the engine's batches through :class:`~agents.engines.batching.BatchingEngine`, awaited
as futures, so a hundred open streams hold no threads. A streamed reply is recorded even
when its client hangs up half-way: the model sampled those tokens in the session (the engine
stops decoding it at its next step); its finish reason is ``abort``, and the trajectory
says which calls were cut (:mod:`agents.gateway.assembly`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from agents.engines import Completion, GenerationRequest, SamplingParams
from agents.gateway.prompts import PromptPlan, build_prompt, raw_reply_text
from agents.gateway.sessions import GatewayCall, GatewaySession
from agents.gateway.streaming import ChoiceStream
from agents.gateway.wire import ChatRequest, Chunker
from agents.http_streams import interleaved
from agents.openai_errors import APIError, check_prompt_fits
from agents.openai_wire import (
    SSE_DONE,
    chat_logprobs,
    finish_reason,
    sse,
    usage,
    visible_text,
)
from agents.toolcalls import parse_reply, tool_call_opener, wire_message

__all__ = ["LocalBackend", "call_seed", "engine_error"]


def call_seed(seed: int, call_index: int) -> int:
    """The seed of call ``call_index`` of a session seeded with ``seed`` (as the RL worker
    derives a turn's seed from an episode's)."""
    return (seed * 1_000_003 + call_index * 7919) % (2**62)


def engine_error(completion: Completion) -> APIError:
    if completion.error_kind == "context_overflow":
        return APIError(400, completion.error, code="context_length_exceeded", param="messages")
    return APIError(500, f"{completion.error_kind}: {completion.error}", code=str(completion.error_kind))


class LocalBackend:
    """``engine`` (any :class:`~agents.engines.Engine`, batched here unless it is already a
    ``BatchingEngine``) and the ``tokenizer`` whose chat template renders requests;
    ``chat_template`` replaces the tokenizer's (like vLLM's ``--chat-template``)."""

    source = "engine"

    def __init__(self, engine: Any, tokenizer: Any = None, *, chat_template: str | None = None,
                 default_max_tokens: int = 512, keep_sampled_replies: bool = True, max_batch_size: int = 32) -> None:
        from agents.engines.batching import BatchingEngine

        tokenizer = tokenizer if tokenizer is not None else engine.tokenizer
        if chat_template:
            tokenizer.chat_template = chat_template
        self.tokenizer = tokenizer
        self.batcher = engine if isinstance(engine, BatchingEngine) else BatchingEngine(engine, max_batch_size)
        self._owns_batcher = self.batcher is not engine
        self.default_max_tokens = default_max_tokens
        self.keep_sampled_replies = keep_sampled_replies
        self.eos_text = tokenizer.eos_token or ""
        self.opener = tool_call_opener(tokenizer)

    @property
    def supports_top_logprobs(self) -> bool:
        return bool(getattr(self.batcher, "supports_top_logprobs", False))

    def close(self) -> None:
        if self._owns_batcher:
            self.batcher.close()

    # -- pieces ------------------------------------------------------------------------------
    def _params(self, session: GatewaySession, request: ChatRequest, call_index: int, choice: int) -> SamplingParams:
        forced = session.forced
        limit = request.max_completion_tokens or request.max_tokens or self.default_max_tokens
        if forced.max_tokens:
            limit = min(limit, forced.max_tokens)
        if forced.max_generated_tokens is not None:  # shared by the n choices and concurrent calls
            limit = session.reserve_tokens(call_index, forced.max_generated_tokens, limit, share=request.n - choice)
            if limit <= 0:
                raise APIError(400, f"session {session.session_id!r} has used its budget of "
                                       f"{forced.max_generated_tokens} generated tokens",
                                  code="session_budget_exhausted")
        temperature = forced.temperature if forced.temperature is not None else request.temperature
        top_p = forced.top_p if forced.top_p is not None else request.top_p
        if forced.seed is not None:
            seed = call_seed(forced.seed, call_index)
        else:
            seed = None if request.seed is None else request.seed + choice
        try:
            return SamplingParams(max_new_tokens=limit, temperature=1.0 if temperature is None else temperature,
                                  top_p=1.0 if top_p is None else top_p, top_k=request.top_k, stop=request.stops,
                                  seed=seed, top_logprobs=request.top_logprobs or 0)
        except ValueError as exc:  # NaN temperature, a seed past 64 bits...: the client's to fix
            raise APIError(400, str(exc), code="invalid_value") from None

    def _plan(self, session: GatewaySession, request: ChatRequest) -> PromptPlan:
        return build_prompt(self.tokenizer, session, request.messages, request.tools if request.tools_active else None,
                            add_generation_prompt=request.add_generation_prompt,
                            continue_final_message=request.continue_final_message,
                            keep_sampled_replies=self.keep_sampled_replies)

    def _reply(self, completion: Completion, plan: PromptPlan, request: ChatRequest) -> tuple[dict[str, Any], str]:
        """The assistant message for ``completion`` and its finish reason."""
        content = visible_text(completion.action_text, completion.stop_string, request.include_stop_str_in_output)
        if request.tools_active:
            parsed = wire_message(parse_reply(self.tokenizer, completion.text, plan.text, request.tools),
                                  request.parallel_tool_calls)
            calls = parsed.get("tool_calls") or []
            if calls and all(call["function"]["name"] for call in calls):
                return parsed, "tool_calls"
        return {"role": "assistant", "content": content}, finish_reason(completion)

    def _record(self, session: GatewaySession, index: int, request: ChatRequest, plan: PromptPlan,
                completion: Completion, reply: dict[str, Any], finish: str, started: float,
                params: SamplingParams) -> None:
        session.record(GatewayCall(
            index=index, source="engine", messages=list(request.messages),
            tools=request.tools if request.tools_active else None, prompt_text=plan.text, prompt_ids=list(plan.ids),
            completion_text=completion.text, completion_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs), reply=reply, finish_reason=finish,
            reused_prompt_tokens=plan.reused, started_at=started, seconds=time.time() - started,
            sampling={"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                      "max_tokens": params.max_new_tokens, "seed": params.seed, "stop": list(params.stop)}),
            raw_reply_text(completion.text, completion.finish_reason, self.eos_text))

    # -- non-streamed ------------------------------------------------------------------------
    async def complete(self, session: GatewaySession, request: ChatRequest, model: str) -> dict[str, Any]:
        started = time.time()
        plan = self._plan(session, request)
        indices = [session.next_index() for _ in range(request.n)]
        cancel = threading.Event()  # set when this call is cancelled: its client hung up
        try:
            requests = [GenerationRequest(token_ids=tuple(plan.ids), cancel=cancel,
                                          params=self._params(session, request, index, choice))
                        for choice, index in enumerate(indices)]
            completions = await asyncio.gather(*(asyncio.wrap_future(self.batcher.submit(r)) for r in requests))
            failed = next((c for c in completions if not c.ok), None)
            if failed is not None:
                raise engine_error(failed)
        except BaseException:
            cancel.set()
            for index in indices:
                session.abandon(index)
            raise
        choices = []
        for choice, (index, completion) in enumerate(zip(indices, completions, strict=True)):
            reply, finish = self._reply(completion, plan, request)
            self._record(session, index, request, plan, completion, reply, finish, started, requests[choice].params)
            entry: dict[str, Any] = {"index": choice, "message": {**reply, "refusal": None},
                                     "logprobs": None, "finish_reason": finish, "stop_reason": completion.stop_string}
            if request.logprobs:
                entry["logprobs"] = {"content": chat_logprobs(self.tokenizer, completion.token_ids,
                                                              completion.logprobs, request.return_tokens_as_token_ids,
                                                              completion.top_logprobs)}
            if request.return_token_ids:
                entry["token_ids"] = list(completion.token_ids)
                entry["prompt_token_ids"] = list(plan.ids)
            choices.append(entry)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{indices[0]}-{session.session_id[-12:]}", "object": "chat.completion",
            "created": int(started), "model": model, "system_fingerprint": None, "choices": choices,
            "usage": usage(len(plan.ids), sum(len(c.token_ids) for c in completions))}
        if request.return_token_ids:
            body["prompt_token_ids"] = list(plan.ids)
        return body

    # -- streamed ----------------------------------------------------------------------------
    async def prepare_stream(self, session: GatewaySession, request: ChatRequest
                             ) -> tuple[PromptPlan, list[int], list[SamplingParams]]:
        """Everything that can fail before the first byte (so it fails as a plain HTTP error):
        the prompt, and each of the ``n`` choices' call index and sampling."""
        plan = self._plan(session, request)
        check_prompt_fits(len(plan.ids), self.batcher)
        indices: list[int] = []
        try:
            for _ in range(request.n):
                indices.append(session.next_index())
            return plan, indices, [self._params(session, request, index, choice)
                                   for choice, index in enumerate(indices)]
        except BaseException:
            for index in indices:
                session.abandon(index)
            raise

    async def discard_stream(self, session: GatewaySession, plan: PromptPlan, indices: list[int],
                             params: list[SamplingParams]) -> None:
        """The client left before the stream started: the prepared calls are not in flight."""
        for index in indices:
            session.abandon(index)

    async def stream(self, session: GatewaySession, request: ChatRequest, model: str, plan: PromptPlan,
                     indices: list[int], params: list[SamplingParams]) -> AsyncIterator[str]:
        """The ``n`` choices' chunks as they are sampled (each with its ``index``), then one
        usage chunk for all and ``[DONE]``. Each choice is recorded as its own call."""
        chunker = Chunker(model, request.include_usage)
        choices = [ChoiceStream(self, session, request, chunker, plan, index, choice_params, number)
                   for number, (index, choice_params) in enumerate(zip(indices, params, strict=True))]
        events = choices[0].events() if len(choices) == 1 else interleaved([c.events() for c in choices])
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()
        completions = [choice.completion for choice in choices]
        if request.include_usage and all(c is not None for c in completions):
            yield sse(chunker.usage(usage(len(plan.ids), sum(len(c.token_ids) for c in completions))))
        yield SSE_DONE

    def _record_late(self, future: Any, session: GatewaySession, index: int, request: ChatRequest,
                     plan: PromptPlan, started: float, params: SamplingParams) -> None:
        completion = future.result()
        if not completion.ok or (completion.finish_reason == "abort" and not completion.token_ids):
            session.abandon(index)  # failed, or cancelled before it sampled anything: nothing to keep
            return
        reply, finish = self._reply(completion, plan, request)
        if completion.finish_reason == "abort":  # cut when its client left: never a finished reply
            finish = "abort"
        self._record(session, index, request, plan, completion, reply, finish, started, params)
