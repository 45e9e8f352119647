"""Pass-through: answer from any OpenAI-compatible upstream (a vLLM server, ``coa serve``, a
hosted API) and record what comes back.

The request goes upstream as the client sent it (the session's forced sampling applied, the
model renamed when the upstream calls it something else); the response comes back as the
upstream sent it. Recorded per call: the messages, the reply (content and tool calls) and,
when the upstream returns them, the prompt and completion token ids and the logprobs. With
``token_ids=True`` (right for vLLM and ``coa serve``, wrong for api.openai.com, which refuses
unknown fields) the gateway asks for them (``return_token_ids`` and ``logprobs``, streamed
or not) and removes them again from what the client gets unless it asked itself. Sessions whose calls all carry
ids become token-exact trajectories; the others text trajectories
(:mod:`agents.gateway.assembly`). The upstream's errors reach the client with their status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from agents.gateway.sessions import GatewayCall, GatewaySession
from agents.gateway.wire import ChatRequest
from agents.openai_errors import APIError
from agents.openai_wire import sse, sse_lines
from agents.toolcalls import merge_call_deltas

__all__ = ["UpstreamBackend"]


def _upstream_error(status: int, text: str) -> APIError:
    try:
        error = json.loads(text).get("error") or {}
    except (json.JSONDecodeError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    return APIError(status, f"upstream: {error.get('message') or text[:500]}", code=error.get("code"),
                    param=error.get("param"))


class UpstreamBackend:
    """``base_url`` like ``http://127.0.0.1:8000/v1``; ``model`` the upstream's name for the model
    (None: the client's); ``tokenizer`` (object, path or catalogue name) decodes recorded ids."""

    source = "upstream"
    supports_top_logprobs = True  # passed through: the upstream computes them (or refuses them itself)

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None,
                 token_ids: bool = True, tokenizer: Any = None, timeout_s: float = 600.0) -> None:
        import httpx

        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            from agents.models import resolve_model

            tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer))
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.token_ids = token_ids
        self.tokenizer = tokenizer
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        try:
            asyncio.get_running_loop().create_task(self.client.aclose())
        except RuntimeError:
            asyncio.run(self.client.aclose())

    # -- request and response ----------------------------------------------------------------
    def _body(self, session: GatewaySession, request: ChatRequest, index: int) -> dict[str, Any]:
        body = request.model_dump(exclude_unset=True)
        if self.model:
            body["model"] = self.model
        forced = session.forced
        if forced.temperature is not None:
            body["temperature"] = forced.temperature
        if forced.top_p is not None:
            body["top_p"] = forced.top_p
        if forced.seed is not None:
            from agents.gateway.local import call_seed

            body["seed"] = call_seed(forced.seed, index)
        if forced.max_tokens:
            asked = body.pop("max_completion_tokens", None) or body.get("max_tokens") or forced.max_tokens
            body["max_tokens"] = min(asked, forced.max_tokens)
        if self.token_ids:
            body["return_token_ids"] = True
            body["logprobs"] = True
        return body

    def _strip(self, request: ChatRequest, payload: dict[str, Any], model: str) -> dict[str, Any]:
        """What the client gets: without the fields the gateway asked for on its own behalf."""
        payload["model"] = model
        if not request.return_token_ids:
            payload.pop("prompt_token_ids", None)
        for choice in payload.get("choices") or ():
            if not request.logprobs:
                choice["logprobs"] = None
            if not request.return_token_ids:
                choice.pop("token_ids", None)
                choice.pop("prompt_token_ids", None)
        return payload

    def _call(self, index: int, request: ChatRequest, reply: dict[str, Any], finish: str, prompt_ids: list[int],
              ids: list[int], logprobs: list[float], started: float) -> GatewayCall:
        decode = self.tokenizer.decode if self.tokenizer is not None else None
        if len(logprobs) != len(ids):
            logprobs = [] if ids else logprobs
        return GatewayCall(
            index=index, source="upstream", messages=list(request.messages), tools=request.tools,
            prompt_text=decode(prompt_ids, skip_special_tokens=False) if decode and prompt_ids else "",
            prompt_ids=list(prompt_ids) if ids else [],
            completion_text=(decode(ids, skip_special_tokens=False) if decode and ids
                             else str(reply.get("content") or "")),
            completion_ids=list(ids) if prompt_ids else [], logprobs=list(logprobs), reply=reply, finish_reason=finish,
            started_at=started, seconds=time.time() - started)

    # -- non-streamed ------------------------------------------------------------------------
    async def complete(self, session: GatewaySession, request: ChatRequest, model: str) -> dict[str, Any]:
        import httpx

        started = time.time()
        index = session.next_index()
        try:
            response = await self.client.post(f"{self.base_url}/chat/completions",
                                              json=self._body(session, request, index))
        except httpx.HTTPError as exc:
            session.abandon()
            raise APIError(502, f"upstream {self.base_url} unreachable: {type(exc).__name__}: {exc}",
                              code="upstream_unreachable") from None
        if response.status_code != 200:
            session.abandon()
            raise _upstream_error(response.status_code, response.text)
        payload = response.json()
        for number, choice in enumerate(payload.get("choices") or ()):
            message = choice.get("message") or {}
            reply = {"role": "assistant", "content": message.get("content")}
            if message.get("tool_calls"):
                reply["tool_calls"] = message["tool_calls"]
            entries = (choice.get("logprobs") or {}).get("content") or []
            ids = choice.get("token_ids") or [int(e["token"][9:]) for e in entries
                                              if str(e.get("token", "")).startswith("token_id:")]
            prompt_ids = choice.get("prompt_token_ids") or payload.get("prompt_token_ids") or []
            call_index = index if number == 0 else session.next_index()
            session.record(self._call(call_index, request, reply, choice.get("finish_reason") or "stop", prompt_ids,
                                      ids, [float(e["logprob"]) for e in entries], started))
        if not payload.get("choices"):
            session.abandon()
        return self._strip(request, payload, model)

    # -- streamed ----------------------------------------------------------------------------
    async def prepare_stream(self, session: GatewaySession, request: ChatRequest) -> tuple[Any, list[int]]:
        import httpx

        indices = [session.next_index() for _ in range(request.n)]
        try:
            upstream = self.client.build_request("POST", f"{self.base_url}/chat/completions",
                                                 json=self._body(session, request, indices[0]))
            response = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            _abandon(session, indices)
            raise APIError(502, f"upstream {self.base_url} unreachable: {type(exc).__name__}: {exc}",
                              code="upstream_unreachable") from None
        except BaseException:
            _abandon(session, indices)
            raise
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            await response.aclose()
            _abandon(session, indices)
            raise _upstream_error(response.status_code, text)
        return response, indices

    async def discard_stream(self, session: GatewaySession, response: Any, indices: list[int]) -> None:
        """The client left before the stream started: the upstream reply is closed unread and
        the calls are no longer in flight."""
        _abandon(session, indices)
        with contextlib.suppress(Exception):
            await response.aclose()

    async def stream(self, session: GatewaySession, request: ChatRequest, model: str, response: Any,
                     indices: list[int]) -> AsyncIterator[str]:
        """The upstream's events as they come; each choice (by its ``index``) is gathered and
        recorded as its own call when the upstream ends the stream."""
        started = time.time()
        choices = [_StreamedChoice() for _ in indices]
        prompt_ids: list[int] = []
        recorded = False

        def record() -> None:
            nonlocal recorded
            for index, choice in zip(indices, choices, strict=True):
                reply, ids = choice.reply(), choice.token_ids()
                session.record(self._call(index, request, reply, choice.finish or "stop", prompt_ids, ids,
                                          [float(e["logprob"]) for e in choice.entries], started))
            recorded = True

        try:
            async for line in sse_lines(response):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    if not recorded:  # before the client hears the end: it may hang up at once
                        record()
                    yield "data: [DONE]\n\n"
                    continue
                payload = json.loads(data)
                if "error" in payload:
                    yield sse(payload)
                    continue
                prompt_ids = prompt_ids or list(payload.get("prompt_token_ids") or [])
                for entry in payload.get("choices") or ():
                    number = entry.get("index", 0)
                    if isinstance(number, int) and 0 <= number < len(choices):
                        choices[number].add(entry)
                    prompt_ids = prompt_ids or list(entry.get("prompt_token_ids") or [])
                yield sse(self._strip(request, payload, model))
            if not recorded and all(choice.finish is not None for choice in choices):
                record()
        finally:
            if not recorded:
                _abandon(session, indices)
            with contextlib.suppress(Exception):
                await response.aclose()


def _abandon(session: GatewaySession, indices: list[int]) -> None:
    for _ in indices:
        session.abandon()


class _StreamedChoice:
    """One choice of an upstream stream, gathered from its deltas."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.entries: list[dict[str, Any]] = []
        self.ids: list[int] = []
        self.finish: str | None = None

    def add(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        self.content.append(delta.get("content") or "")
        merge_call_deltas(self.calls, delta.get("tool_calls"))
        self.entries.extend((choice.get("logprobs") or {}).get("content") or [])
        self.ids.extend(choice.get("token_ids") or [])
        self.finish = choice.get("finish_reason") or self.finish

    def reply(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            reply["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        return reply

    def token_ids(self) -> list[int]:
        """The sampled ids: sent as ``token_ids``, or read from ``token_id:N`` logprob tokens."""
        if not self.ids and self.entries and all(str(e.get("token", "")).startswith("token_id:")
                                                 for e in self.entries):
            return [int(e["token"][9:]) for e in self.entries]
        return self.ids
