"""The model ``coa serve`` serves, and what every route asks of it: request checks, sampling
parameters, prompts (raw, token ids or a rendered chat), generation and its usage counts."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from agents.engines import Completion, GenerationRequest, SamplingParams
from agents.openai_errors import (
    HARMLESS_FIELDS,
    NEUTRAL_FIELDS,
    APIError,
    check_streaming,
    refuse_unpaired_surrogates,
    refuse_unsupported,
)
from agents.openai_wire import flat_message, stop_list, usage
from agents.toolcalls import render_prompt, supports_tools

if TYPE_CHECKING:
    from agents.engines.batching import BatchingEngine
    from agents.server.bodies import ChatBody, CommonBody

__all__ = ["ServedModel"]


class ServedModel:
    """``batcher`` serving ``model_name`` (also under ``aliases``); ``tokenizer`` renders chat
    templates and tokens."""

    def __init__(self, batcher: BatchingEngine, tokenizer: Any, model_name: str, aliases: tuple[str, ...] = ()):
        self.batcher, self.tokenizer, self.model_name = batcher, tokenizer, model_name
        self.served_names = (model_name, *(a for a in aliases if a != model_name))
        self.eos_text = tokenizer.eos_token or ""

    def checked(self, body: CommonBody, declared: type) -> None:
        """The request names a model we serve and asks only for what we implement."""
        if body.model is not None and body.model not in self.served_names:
            raise APIError(404, f"The model `{body.model}` does not exist. This server serves "
                                f"{', '.join(f'`{n}`' for n in self.served_names)} (GET /v1/models).",
                           code="model_not_found", param="model")
        refuse_unpaired_surrogates(body.model_dump())
        supported = set(declared.model_fields) | set(HARMLESS_FIELDS)
        refuse_unsupported(body.model_extra or {}, harmless=HARMLESS_FIELDS, neutral=NEUTRAL_FIELDS,
                           supported=supported)
        check_streaming(body.stream, body.n, body.stream_options, several_choices=True)

    def token_str(self, token: int, as_ids: bool) -> str:
        return f"token_id:{token}" if as_ids else self.tokenizer.decode([token])

    def completion_logprobs(self, token_ids: list[int], logprobs: list[float], as_ids: bool,
                            offset: int = 0, tops: Any = ()) -> dict[str, Any]:
        """``/v1/completions`` logprobs of sampled tokens: ``top_logprobs`` maps, per token, the
        sampled token and its step's most likely ones (``tops``, ``logprobs=k``) to their logprobs,
        as vLLM does (``logprobs=0``: the sampled token only); text offsets start at ``offset``."""
        tokens = [self.token_str(t, as_ids) for t in token_ids]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        top_maps = []
        for position, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
            alternatives = tops[position] if position < len(tops) else ()
            top_maps.append({**{self.token_str(t, as_ids): lp for t, lp in alternatives}, token: logprob})
        return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top_maps, "text_offset": offsets}

    def check_top_logprobs(self, wanted: int | None, param: str) -> int:
        """How many alternatives per token to compute: 400 when the engine cannot, or past 20."""
        from agents.engines import MAX_TOP_LOGPROBS

        if not wanted:
            return 0
        if wanted > MAX_TOP_LOGPROBS:
            raise APIError(400, f"{param}={wanted}; at most {MAX_TOP_LOGPROBS}", code="invalid_value", param=param)
        if not getattr(self.batcher, "supports_top_logprobs", False):
            raise APIError(400, f"{param}={wanted} asks for the most likely alternatives per token, which the "
                                f"{self.batcher.name} engine does not compute; {param}=0 returns each sampled token's "
                                "logprob", code="unsupported_value", param=param)
        return wanted

    def params_for(self, body: CommonBody, index: int, default_max: int) -> SamplingParams:
        limit = body.max_completion_tokens or body.max_tokens or default_max
        seed = None if body.seed is None else body.seed + index
        # chat: top_logprobs (logprobs is a flag); completions: logprobs is the count
        wanted = body.top_logprobs if hasattr(body, "top_logprobs") else body.logprobs
        try:
            return SamplingParams(max_new_tokens=limit, temperature=body.temperature,
                                  top_p=body.top_p, top_k=body.top_k,
                                  stop=stop_list(body.stop), seed=seed, top_logprobs=wanted or 0)
        except ValueError as exc:
            raise APIError(400, str(exc), code="invalid_value") from None

    def prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        return list(prompt)

    def chat_prompt(self, body: ChatBody) -> tuple[str, list[int]]:
        tools = body.tools if body.tools and body.tool_choice != "none" else None
        if tools is not None:
            if body.continue_final_message:
                raise APIError(400, "tools work with replies that start a new message (continue_final_message "
                                    "is off)", code="unsupported_value", param="tools")
            if not supports_tools(self.tokenizer):
                raise APIError(400, f"the chat template of {self.model_name} does not render tools, so this "
                                    "model cannot call functions; send the request without tools",
                               code="unsupported_parameter", param="tools")
        try:
            if tools is not None:
                text = render_prompt(self.tokenizer, [flat_message(m) for m in body.messages], tools)
            else:
                text = self.tokenizer.apply_chat_template(
                    [flat_message(m) for m in body.messages], tokenize=False,
                    add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                    continue_final_message=body.continue_final_message)
        except Exception as exc:
            raise APIError(400, f"cannot render the chat template: {exc}", param="messages") from None
        return text, self.tokenizer.encode(text, add_special_tokens=False)

    async def run(self, prompts: list[list[int]], body: CommonBody, default_max: int) -> list[Completion]:
        """``body.n`` completions of each prompt, awaited as futures of the shared batches: a
        request parks no thread, so any number of them merge (a thread each capped them at the
        default executor's size, 6 on two cores). Cancelled (the client hung up), the requests
        are cancelled too: the engine stops decoding them at its next step."""
        cancel = threading.Event()
        requests = [GenerationRequest(token_ids=tuple(ids), params=self.params_for(body, i, default_max),
                                      cancel=cancel)
                    for ids in prompts for i in range(body.n)]
        try:
            return list(await asyncio.gather(*(asyncio.wrap_future(self.batcher.submit(r)) for r in requests)))
        except BaseException:
            cancel.set()
            raise

    @staticmethod
    def check(completion: Completion) -> None:
        if not completion.ok:
            if completion.error_kind == "context_overflow":
                raise APIError(400, f"{completion.error_kind}: {completion.error}", code="context_length_exceeded",
                               param="messages")
            raise APIError(500, f"{completion.error_kind}: {completion.error}", code=str(completion.error_kind))

    @staticmethod
    def counts(prompts: list[list[int]], completions: list[Completion]) -> dict[str, int]:
        return usage(sum(len(x) for x in prompts), sum(len(x.token_ids) for x in completions))

    def model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": int(time.time()), "owned_by": "coa"}
