"""The chat-completions request the gateway accepts and the response shapes it sends.

Every field of OpenAI's request is either implemented or refused with a 400 that names it
(``unsupported_parameter``; :func:`agents.openai_errors.refuse_unsupported`, the rule ``coa
serve`` keeps too), so a client never believes a setting took effect when it did not.
Unlike ``coa serve``, the gateway streams logprobs and tool calls. vLLM's extensions that matter
for training (``return_token_ids``, ``top_k``, ``add_generation_prompt``,
``continue_final_message``, ``include_stop_str_in_output``, ``return_tokens_as_token_ids``)
are accepted too. ``tool_choice`` ``required`` or a named function renders the tools like
``auto`` without constraining the sampler (the trained policy decides whether it calls one).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.engines import MAX_TOP_LOGPROBS
from agents.openai_errors import (
    HARMLESS_FIELDS,
    NEUTRAL_FIELDS,
    APIError,
    check_messages,
    check_streaming,
    check_tools,
    refuse_unpaired_surrogates,
    refuse_unsupported,
)
from agents.openai_wire import stop_list

__all__ = ["ChatRequest", "Chunker", "check_request"]

class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``: OpenAI's fields plus vLLM's sampling extensions."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # false: at most one call comes back
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int = 0
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=64)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0)
    # vLLM extensions
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False

    @property
    def stops(self) -> tuple[str, ...]:
        return stop_list(self.stop)

    @property
    def tools_active(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def check_request(request: ChatRequest, *, local: bool = True, top_logprobs: bool = False) -> None:
    """Refuse what the gateway does not implement (each with the field it concerns). A request
    passed through to an upstream (``local=False``) may carry the media parts and tools the
    upstream takes; it judges them itself. ``top_logprobs``: the backend computes them."""
    refuse_unpaired_surrogates(request.model_dump())
    check_messages(request.messages, text_only=local)
    supported = set(ChatRequest.model_fields) | set(HARMLESS_FIELDS)
    refuse_unsupported(request.model_extra or {}, harmless=HARMLESS_FIELDS, neutral=NEUTRAL_FIELDS,
                       supported=supported)
    if request.top_logprobs and not top_logprobs:
        raise APIError(400, f"top_logprobs={request.top_logprobs} asks for the most likely alternatives per token, "
                            "which this gateway's backend does not compute; logprobs=true with top_logprobs=0 "
                            "returns each sampled token's logprob", code="unsupported_value", param="top_logprobs")
    if request.top_logprobs and not request.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", code="invalid_value", param="top_logprobs")
    if (request.top_logprobs or 0) > MAX_TOP_LOGPROBS:
        raise APIError(400, f"top_logprobs={request.top_logprobs}; at most {MAX_TOP_LOGPROBS}", code="invalid_value",
                       param="top_logprobs")
    check_streaming(request.stream, request.n, request.stream_options, several_choices=True)
    if local:
        check_tools(request.tools, request.tool_choice)
    for name in ("temperature", "top_p"):
        value = getattr(request, name)
        if value is not None and (value < 0 or (name == "top_p" and not 0 < value <= 1)):
            raise APIError(400, f"{name}={value} is out of range", code="invalid_value", param=name)


class Chunker:
    """Chunks of one streamed chat completion: the role first, then deltas, then the finish."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.ident = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.started: set[int] = set()  # the choices whose first chunk went out

    def _wrap(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"id": self.ident, "object": "chat.completion.chunk", "created": self.created,
                                   "model": self.model, "system_fingerprint": None, "choices": choices}
        if self.include_usage:
            payload["usage"] = usage
        return payload

    def delta(self, delta: dict[str, Any], *, finish: str | None = None,
              logprobs: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None,
              choice: int = 0) -> dict[str, Any]:
        """A chunk of choice ``choice`` (its first carries the role)."""
        if choice not in self.started:
            delta = {"role": "assistant", **delta}
            delta.setdefault("content", "")
            self.started.add(choice)
        entry = {"index": choice, "delta": delta, "logprobs": {"content": logprobs} if logprobs is not None else None,
                 "finish_reason": finish, **(extra or {})}
        return self._wrap([entry])

    def usage(self, usage: dict[str, int]) -> dict[str, Any]:
        return self._wrap([], usage)
