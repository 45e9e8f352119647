"""The ``openai`` engine: any OpenAI-compatible endpoint (coa serve, vLLM, a hosted API).

Two modes. ``completions`` (default) sends the rendered prompt plus the episode so far
(as token ids when known and the server takes them, as text otherwise) to
``/v1/completions``: the model continues its own message exactly, the way CoA episodes
grow. ``chat`` sends the messages to ``/v1/chat/completions`` and, after the first turn,
the assistant's text so far as a final assistant message with vLLM's
``continue_final_message`` (servers without it restart the assistant turn).

With ``tools`` in a request (the ``tools`` protocol) ``chat`` mode sends them and returns
the ``tool_calls`` the server parsed; ``completions`` mode sends the rendered prompt and the
policy reads the calls from the sampled text itself (token-exact).

``server_extensions=True`` (the default; right for ``coa serve`` and vLLM, wrong for
api.openai.com) asks for the sampled token ids (``return_token_ids``,
``return_tokens_as_token_ids``), the stop string in the output
(``include_stop_str_in_output``) and ``top_k``. Without them the engine returns text and
logprobs only, and infers which closing tag stopped the text.

A request with ``GenerationRequest.cancel`` (its caller may leave: a gateway or server client)
is streamed (:mod:`agents.engines.openai_stream`), ``tools`` or not, and cut as soon as the
cancel is set (not at the next chunk), so the server stops decoding; it returns ``abort`` with
what had arrived.

Retries (exponential backoff on connection errors, 408/409/429/5xx) and timeouts are the
``openai`` client's; a concurrency cap bounds in-flight requests per engine. Failures come
back as error completions, never as exceptions. ``agenerate`` is the asyncio twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents.engines import (
    Completion,
    EngineErrorKind,
    GenerationRequest,
    SamplingParams,
    find_stop,
)
from agents.engines.openai_stream import choice_logprobs, gather_stream

__all__ = ["OpenAIEngine", "infer_stop"]


def infer_stop(text: str, stops: Sequence[str]) -> str | None:
    """Which closing tag a server cut off: the stop whose opening tag is still unclosed last."""
    best, best_at = None, -1
    for stop in stops:
        if not (stop.startswith("</") and stop.endswith(">")):
            continue
        opening = "<" + stop[2:]
        at = text.rfind(opening)
        if at > best_at and text.find(stop, at) < 0:
            best, best_at = stop, at
    return best


class OpenAIEngine:
    """``base_url`` like ``http://127.0.0.1:8000/v1``; ``model`` as the server names it.

    ``tokenizer`` (object or path) makes trajectories token-exact when the server returns
    token ids, and lets ``completions`` mode render the chat template locally.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "EMPTY",
        mode: str = "completions",
        tokenizer: Any | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        concurrency: int = 16,
        server_extensions: bool = True,
    ):
        import openai

        if mode not in ("completions", "chat"):
            raise ValueError(f"mode={mode!r}; use 'completions' or 'chat'")
        if isinstance(tokenizer, str):  # a path, hub id or catalogue name (agents.models)
            from transformers import AutoTokenizer

            from agents.models import find_model

            tokenizer = AutoTokenizer.from_pretrained(find_model(tokenizer))
        if mode == "completions" and tokenizer is None:
            mode = "chat"  # no way to render the chat template locally
        self.model, self.mode, self.tokenizer = model, mode, tokenizer
        self.server_extensions = server_extensions
        self.concurrency = concurrency
        options = {"base_url": base_url, "api_key": api_key, "timeout": timeout_s,
                   "max_retries": max_retries}
        self.client = openai.OpenAI(**options)
        self._async_options = options
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="coa-http")

    @property
    def supports_top_logprobs(self) -> bool:
        """``SamplingParams.top_logprobs`` is passed to the server; its alternatives come back
        as token ids only with the server extensions (``return_tokens_as_token_ids``)."""
        return self.server_extensions

    # -- sync -----------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        if len(requests) == 1:
            return [self._one(requests[0], requests[0].params or params)]
        return list(self._pool.map(lambda r: self._one(r, r.params or params), requests))

    def _one(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        with self._slots:
            if request.cancel is not None:  # its caller may leave: streamed
                return self._cancellable(request, params)
            try:
                if self.mode == "completions":
                    response = self.client.completions.create(**self._completion_args(request,
                                                                                       params))
                else:
                    response = self.client.chat.completions.create(**self._chat_args(request,
                                                                                      params))
            except Exception as exc:
                return _failure(exc)
        return self._parse(response, params)

    def _cancellable(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        """A request whose ``cancel`` may be set: streamed, and closed when it is, so the server
        stops decoding (a request cancelled before it starts is never sent)."""
        if request.cancelled:
            return Completion(text="", finish_reason="abort")
        chat = self.mode != "completions"
        try:
            if chat:
                stream = self.client.chat.completions.create(**self._chat_args(request, params), stream=True)
            else:
                stream = self.client.completions.create(**self._completion_args(request, params), stream=True)
            reply = gather_stream(stream, chat=chat, cancel=request.cancel)
        except Exception as exc:
            return _failure(exc)
        text, ids = "".join(reply.text), _sampled_ids(reply.ids, reply.tokens)
        if reply.cancelled:
            if ids and self.tokenizer is not None:
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
            elif ids:
                ids = []
            return Completion(text, tuple(ids), tuple(reply.logprobs[:len(ids)] if ids else reply.logprobs), "abort",
                              eos_text=getattr(self.tokenizer, "eos_token", "") or "")
        if reply.calls:  # as _parse reads a JSON reply's calls
            return Completion(text, (), (), "stop", tool_calls=tuple(reply.calls[k] for k in sorted(reply.calls)))
        return self._assembled(text, ids, reply.logprobs, reply.tops, reply.finish, reply.stop_reason, params)

    # -- async ----------------------------------------------------------------------------
    async def agenerate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        """Asyncio version for callers that live in an event loop."""
        import openai

        client = openai.AsyncOpenAI(**self._async_options)
        limit = asyncio.Semaphore(self.concurrency)

        async def one(request: GenerationRequest) -> Completion:
            p = request.params or params
            async with limit:
                try:
                    if self.mode == "completions":
                        response = await client.completions.create(
                            **self._completion_args(request, p))
                    else:
                        response = await client.chat.completions.create(
                            **self._chat_args(request, p))
                except Exception as exc:
                    return _failure(exc)
            return self._parse(response, p)

        try:
            return list(await asyncio.gather(*(one(r) for r in requests)))
        finally:
            await client.close()

    # -- request building -----------------------------------------------------------------
    def _sampling_args(self, params: SamplingParams) -> dict[str, Any]:
        args: dict[str, Any] = {"model": self.model, "max_tokens": params.max_new_tokens,
                                "temperature": params.temperature, "top_p": params.top_p}
        if params.stop:
            args["stop"] = list(params.stop)
        if params.seed is not None:
            args["seed"] = params.seed
        extra: dict[str, Any] = {}
        if self.server_extensions:
            extra = {"include_stop_str_in_output": True, "return_token_ids": True,
                     "return_tokens_as_token_ids": True}
            if params.top_k:
                extra["top_k"] = params.top_k
        if extra:
            args["extra_body"] = extra
        return args

    def _completion_args(self, request: GenerationRequest, params: SamplingParams) -> dict:
        args = self._sampling_args(params)
        if request.token_ids and self.server_extensions:
            args["prompt"] = list(request.token_ids)
        elif request.text:
            args["prompt"] = request.text
        else:
            rendered = self.tokenizer.apply_chat_template(
                list(request.messages), tokenize=False, add_generation_prompt=True)
            args["prompt"] = rendered + request.prefix
        args["logprobs"] = params.top_logprobs  # 0: the sampled token's logprob; N: N alternatives too
        return args

    def _chat_args(self, request: GenerationRequest, params: SamplingParams) -> dict:
        args = self._sampling_args(params)
        messages = [dict(m) for m in request.messages] or [{"role": "user",
                                                             "content": request.text}]
        if request.tools:  # native function calling: each reply is its own message
            args["tools"] = list(request.tools)
        if request.prefix and not request.tools:
            messages.append({"role": "assistant", "content": request.prefix})
            if self.server_extensions:
                args["extra_body"] = {**args.get("extra_body", {}),
                                      "continue_final_message": True,
                                      "add_generation_prompt": False}
        args["messages"] = messages
        args["logprobs"] = True
        if params.top_logprobs:
            args["top_logprobs"] = params.top_logprobs
        return args

    # -- response parsing -----------------------------------------------------------------
    def _parse(self, response: Any, params: SamplingParams) -> Completion:
        try:
            choice = response.choices[0]
            extra = choice.model_extra or {}
            if self.mode == "completions":
                text = choice.text or ""
            else:
                text = choice.message.content or ""
                calls = tuple({"id": c.id, "type": "function",
                               "function": {"name": c.function.name, "arguments": c.function.arguments}}
                              for c in choice.message.tool_calls or ())
                if calls:
                    return Completion(text, (), (), "stop", tool_calls=calls)
            logprobs, tokens, tops = choice_logprobs(choice, chat=self.mode != "completions")
            return self._assembled(text, _sampled_ids(extra.get("token_ids"), tokens), logprobs, tops,
                                   choice.finish_reason, extra.get("stop_reason"), params)
        except Exception as exc:
            return Completion.failure(EngineErrorKind.BAD_RESPONSE,
                                      f"{type(exc).__name__}: {exc}")

    def _assembled(self, text: str, ids: list[int], logprobs: list[float], tops: list[list[tuple[str, float]]],
                   finish: str | None, stop_reason: Any, params: SamplingParams) -> Completion:
        completion = self._completion(text, ids, logprobs, finish, stop_reason, params)
        if params.top_logprobs and completion.token_ids:
            completion = dataclasses.replace(completion, top_logprobs=_top_ids(tops, len(completion.token_ids),
                                                                             params.top_logprobs))
        return completion

    def _completion(self, text: str, ids: list[int], logprobs: list[float], finish: str | None,
                    stop_reason: Any, params: SamplingParams) -> Completion:
        eos_text = getattr(self.tokenizer, "eos_token", "") or ""
        if ids and self.tokenizer is not None:
            # The ids are the truth (the server's text is cut at the stop string).
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        else:
            ids = []  # without a tokenizer, ids could not be kept consistent with the text
        stop = stop_reason if isinstance(stop_reason, str) else None
        if finish == "length":
            return Completion(text, tuple(ids), tuple(logprobs), "length", eos_text=eos_text)
        hit = find_stop(text, params.stop)
        if hit is not None:
            stop = hit[1]
        elif not ids:
            # The server cut the stop string off (plain OpenAI semantics); the env needs it.
            stop = stop or infer_stop(text, params.stop)
            if stop is not None:
                text += stop
        reason = "stop" if stop is not None else "eos"
        return Completion(text, tuple(ids), tuple(logprobs), reason, stop, eos_text=eos_text)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.client.close()


def _sampled_ids(ids: Any, tokens: list[str]) -> list[int]:
    """The sampled ids: the server's ``token_ids``, or read from ``token_id:N`` logprob tokens."""
    if ids:
        return [int(t) for t in ids]
    if tokens and all(t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    return []


def _top_ids(tops: list[list[tuple[str, float]]], steps: int, k: int) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Each step's ``k`` most likely ``(token_id, logprob)``, most likely first (a completions
    server's map holds the sampled token too, as vLLM's does), from a server
    that names tokens ``token_id:N``; empty when it named them otherwise (as text, which maps
    to no id) or gave a different number of steps than it sampled."""
    if len(tops) != steps:
        return ()
    out = []
    for step in tops:
        if not all(isinstance(t, str) and t.startswith("token_id:") and t[9:].isdigit() for t, _ in step):
            return ()
        out.append(tuple(sorted(((int(t[9:]), float(lp)) for t, lp in step), key=lambda p: -p[1])[:k]))
    return tuple(out)


def _failure(exc: Exception) -> Completion:
    import openai

    message = f"{type(exc).__name__}: {exc}"
    response = getattr(exc, "response", None)
    if response is not None:
        with contextlib.suppress(Exception):  # a streamed response has no text to show
            message += f" {response.text[:500]}"
    if isinstance(exc, openai.APITimeoutError):
        return Completion.failure(EngineErrorKind.TIMEOUT, message)
    if isinstance(exc, openai.BadRequestError) and "context" in message.lower():
        return Completion.failure(EngineErrorKind.CONTEXT_OVERFLOW, message)
    if isinstance(exc, openai.APIError):
        return Completion.failure(EngineErrorKind.HTTP_ERROR, message)
    return Completion.failure(EngineErrorKind.INTERNAL, message)
