"""An OpenAI-compatible HTTP server over any local :class:`~agents.engines.Engine`.

``coa serve`` runs it; tests start it on 127.0.0.1 with the tiny model and drive it with
the ``openai`` engine, so the HTTP engine is exercised against a real server offline.
Endpoints: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(both with ``stream``, ``logprobs``, ``stop``, ``seed``, ``n``). It also accepts the vLLM
server's extensions, so clients written for vLLM work unchanged: ``top_k``,
``include_stop_str_in_output``, ``return_tokens_as_token_ids``, ``return_token_ids``
(adds ``token_ids``/``prompt_token_ids`` to each choice), token-id prompts, and
``add_generation_prompt``/``continue_final_message`` for chat. ``stop_reason`` names the
stop string that ended a choice, as vLLM does. Chat requests may carry ``tools`` (``tool_choice: none``
turns them off; ``required`` or a named function is best effort: the model is not
constrained) for a model whose chat template renders them: the
template gets the definitions, and the calls the model writes come back as ``tool_calls``
(``finish_reason: tool_calls``); assistant ``tool_calls`` and ``tool`` messages in the
history are rendered by the template.

Conventions kept (as OpenAI's API and vLLM's server do): every error is
``{"error": {"message", "type", "code", "param"}}`` (:mod:`agents.openai_errors`); a request
naming a model this server does not serve is a 404 (``model_not_found``; ``model`` left out
means the served one); a request field that is not implemented is refused with a 400 naming
it, never silently ignored (``top_logprobs`` > 0, ``response_format`` other than text,
``logit_bias``, penalties, ``n`` with ``stream``...), while ``stream_options.include_usage``,
``echo`` and ``n`` are implemented.

Concurrent requests are merged into shared batches by :class:`BatchingEngine`. Streaming is
real: tokens go out as the engine samples them (text deltas are held back while a stop
string might still be forming, so a streamed stop string never leaks).
"""

# No ``from __future__ import annotations``: FastAPI must see the request-body classes
# defined inside create_app as real types, not as strings it cannot resolve.
import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from agents.engines import Completion, Engine, GenerationRequest, SamplingParams
from agents.openai_errors import (
    HARMLESS_FIELDS,
    NEUTRAL_FIELDS,
    APIError,
    error_body,
    install_error_handlers,
    refuse_unsupported,
)
from agents.openai_wire import (
    SSE_DONE,
    TextReleaser,
    chat_logprobs,
    finish_reason,
    flat_message,
    sse,
    stop_list,
    usage,
    visible_text,
)
from agents.toolcalls import parse_reply, render_prompt, supports_tools, wire_message

__all__ = ["create_app", "serve_in_thread"]


def create_app(engine: Engine, tokenizer: Any, model_name: str, aliases: tuple[str, ...] = ()) -> Any:
    """A FastAPI app serving ``engine`` as ``model_name`` (requests may also name it by one of
    ``aliases``); ``tokenizer`` renders chat templates and tokens."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field

    from agents.engines.batching import BatchingEngine

    batcher = engine if isinstance(engine, BatchingEngine) else BatchingEngine(engine)
    eos_text = tokenizer.eos_token or ""

    class _Common(BaseModel):
        model_config = ConfigDict(extra="allow")  # undeclared fields are checked by refuse_unsupported
        model: str | None = None
        max_tokens: int | None = None
        max_completion_tokens: int | None = None
        temperature: float = 1.0
        top_p: float = 1.0
        top_k: int = 0
        n: int = Field(1, ge=1, le=64)
        stop: str | list[str] | None = None
        seed: int | None = None
        stream: bool = False
        stream_options: dict[str, Any] | None = None
        include_stop_str_in_output: bool = False
        return_tokens_as_token_ids: bool = False
        return_token_ids: bool = False

    class CompletionBody(_Common):
        prompt: str | list[int] | list[str] | list[list[int]]
        logprobs: int | None = Field(None, ge=0)
        echo: bool = False
        best_of: int | None = None

    class ChatBody(_Common):
        messages: list[dict[str, Any]]
        logprobs: bool = False
        top_logprobs: int | None = Field(None, ge=0)
        add_generation_prompt: bool = True
        continue_final_message: bool = False
        tools: list[dict[str, Any]] | None = None
        tool_choice: str | dict[str, Any] | None = None

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        yield
        if batcher is not engine:  # we made it, we stop its worker
            batcher.close()

    app = FastAPI(title="coa serve", version="1", lifespan=lifespan)
    app.state.engine = batcher
    install_error_handlers(app)
    served_names = (model_name, *(a for a in aliases if a != model_name))

    def checked(body: _Common, declared: type) -> None:
        """The request names a model we serve and asks only for what we implement."""
        if body.model is not None and body.model not in served_names:
            raise APIError(404, f"The model `{body.model}` does not exist. This server serves "
                                f"{', '.join(f'`{n}`' for n in served_names)} (GET /v1/models).",
                           code="model_not_found", param="model")
        supported = set(declared.model_fields) | set(HARMLESS_FIELDS)
        refuse_unsupported(body.model_extra or {}, harmless=HARMLESS_FIELDS, neutral=NEUTRAL_FIELDS,
                           supported=supported)
        unknown = sorted(set(body.stream_options or {}) - {"include_usage"})
        if unknown:
            raise APIError(400, f"stream_options {unknown} are not supported; supported: include_usage",
                           code="unsupported_parameter", param=f"stream_options.{unknown[0]}")
        if body.stream_options and not body.stream:
            raise APIError(400, "stream_options is only allowed with stream=true", code="invalid_value",
                           param="stream_options")
        if body.stream and body.n != 1:
            raise APIError(400, "stream supports n=1 only; send n=1 or stream=false", code="unsupported_value",
                           param="n")

    def token_str(token: int, as_ids: bool) -> str:
        return f"token_id:{token}" if as_ids else tokenizer.decode([token])

    def params_for(body: _Common, index: int, default_max: int) -> SamplingParams:
        limit = body.max_completion_tokens or body.max_tokens or default_max
        seed = None if body.seed is None else body.seed + index
        try:
            return SamplingParams(max_new_tokens=limit, temperature=body.temperature,
                                  top_p=body.top_p, top_k=body.top_k,
                                  stop=stop_list(body.stop), seed=seed)
        except ValueError as exc:
            raise APIError(400, str(exc), code="invalid_value") from None

    def prompt_ids(prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return tokenizer.encode(prompt, add_special_tokens=False)
        return list(prompt)

    def chat_prompt(body: ChatBody) -> tuple[str, list[int]]:
        tools = body.tools if body.tools and body.tool_choice != "none" else None
        if tools is not None:
            if body.stream or body.continue_final_message:
                raise APIError(400, "tools work with non-streamed replies that start a new message "
                                    "(stream and continue_final_message are off)", code="unsupported_value",
                               param="tools")
            if not supports_tools(tokenizer):
                raise APIError(400, f"the chat template of {model_name} does not render tools, so this "
                                    "model cannot call functions; send the request without tools",
                               code="unsupported_parameter", param="tools")
        try:
            if tools is not None:
                text = render_prompt(tokenizer, [flat_message(m) for m in body.messages], tools)
            else:
                text = tokenizer.apply_chat_template(
                    [flat_message(m) for m in body.messages], tokenize=False,
                    add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                    continue_final_message=body.continue_final_message)
        except Exception as exc:
            raise APIError(400, f"cannot render the chat template: {exc}", param="messages") from None
        return text, tokenizer.encode(text, add_special_tokens=False)

    def run(prompts: list[list[int]], body: _Common, default_max: int) -> list[Completion]:
        requests = [GenerationRequest(token_ids=tuple(ids), params=params_for(body, i, default_max))
                    for ids in prompts for i in range(body.n)]
        return batcher.generate(requests, SamplingParams())

    def check(completion: Completion) -> None:
        if not completion.ok:
            if completion.error_kind == "context_overflow":
                raise APIError(400, f"{completion.error_kind}: {completion.error}", code="context_length_exceeded",
                               param="messages")
            raise APIError(500, f"{completion.error_kind}: {completion.error}", code=str(completion.error_kind))

    def counts(prompts: list[list[int]], completions: list[Completion]) -> dict[str, int]:
        return usage(sum(len(x) for x in prompts), sum(len(x.token_ids) for x in completions))

    def model_card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "coa"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(model_name)]}

    @app.get("/v1/models/{name:path}")
    def one_model(name: str) -> dict[str, Any]:
        if name not in served_names:
            raise APIError(404, f"The model `{name}` does not exist.", code="model_not_found", param="model")
        return model_card(model_name)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    async def completions(body: CompletionBody) -> Any:
        checked(body, CompletionBody)
        if body.logprobs:
            raise APIError(400, f"logprobs={body.logprobs} asks for the {body.logprobs} most likely alternatives "
                                "per token, which this server does not compute; logprobs=0 returns each sampled "
                                "token's logprob", code="unsupported_value", param="logprobs")
        if body.best_of not in (None, body.n):
            raise APIError(400, "best_of is not supported (every sampled choice is returned); use n",
                           code="unsupported_parameter", param="best_of")
        if body.echo and body.logprobs is not None:
            raise APIError(400, "echo with logprobs would need the prompt's logprobs, which this server does "
                                "not compute; send one of them", code="unsupported_value", param="echo")
        raw = body.prompt
        if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
            prompts = [prompt_ids(raw)]  # type: ignore[arg-type]
        else:
            prompts = [prompt_ids(p) for p in raw]  # type: ignore[union-attr]
        if body.stream:
            if len(prompts) != 1:
                raise APIError(400, "stream supports one prompt; send a single prompt or stream=false",
                               code="unsupported_value", param="prompt")
            echo = tokenizer.decode(prompts[0], skip_special_tokens=False) if body.echo else ""
            return streamed(prompts[0], body, "text_completion", echo)
        done = await asyncio.to_thread(run, prompts, body, 16)
        choices = []
        for index, completion in enumerate(done):
            check(completion)
            text = visible_text(completion.action_text, completion.stop_string,
                                body.include_stop_str_in_output)
            if body.echo:
                text = tokenizer.decode(prompts[index // body.n], skip_special_tokens=False) + text
            choice: dict[str, Any] = {"index": index, "text": text,
                                      "finish_reason": finish_reason(completion),
                                      "stop_reason": completion.stop_string, "logprobs": None}
            if body.logprobs is not None:
                tokens = [token_str(t, body.return_tokens_as_token_ids)
                          for t in completion.token_ids]
                offsets, at = [], 0
                for t in tokens:
                    offsets.append(at)
                    at += len(t)
                # logprobs=0: the sampled token only, which vLLM also lists in top_logprobs
                choice["logprobs"] = {"tokens": tokens,
                                      "token_logprobs": list(completion.logprobs),
                                      "top_logprobs": [{t: lp} for t, lp in zip(tokens, completion.logprobs,
                                                                                  strict=True)],
                                      "text_offset": offsets}
            if body.return_token_ids:
                choice["token_ids"] = list(completion.token_ids)
                choice["prompt_token_ids"] = prompts[index // body.n]
            choices.append(choice)
        return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                             "created": int(time.time()), "model": model_name,
                             "choices": choices, "usage": counts(prompts, done)})

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody) -> Any:
        checked(body, ChatBody)
        if body.top_logprobs:
            raise APIError(400, f"top_logprobs={body.top_logprobs} asks for the most likely alternatives per "
                                "token, which this server does not compute; logprobs=true with top_logprobs=0 "
                                "returns each sampled token's logprob", code="unsupported_value",
                           param="top_logprobs")
        if body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs=true", code="invalid_value", param="top_logprobs")
        prompt_text, ids = chat_prompt(body)
        use_tools = bool(body.tools) and body.tool_choice != "none"
        if body.stream:
            return streamed(ids, body, "chat.completion.chunk")
        done = await asyncio.to_thread(run, [ids], body, 512)
        choices = []
        for index, completion in enumerate(done):
            check(completion)
            text = visible_text(completion.action_text, completion.stop_string,
                                body.include_stop_str_in_output)
            message: dict[str, Any] = {"role": "assistant", "content": text}
            finish = finish_reason(completion)
            if use_tools:  # read the calls the model wrote in its template's format
                reply = wire_message(parse_reply(tokenizer, completion.text, prompt_text, body.tools))
                message = reply
                if reply.get("tool_calls"):
                    finish = "tool_calls"
            choice: dict[str, Any] = {
                "index": index, "message": message,
                "finish_reason": finish, "stop_reason": completion.stop_string,
                "logprobs": None}
            if body.logprobs:
                choice["logprobs"] = {"content": chat_logprobs(
                    tokenizer, completion.token_ids, completion.logprobs, body.return_tokens_as_token_ids)}
            if body.return_token_ids:
                choice["token_ids"] = list(completion.token_ids)
                choice["prompt_token_ids"] = ids
            choices.append(choice)
        return JSONResponse({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                             "created": int(time.time()), "model": model_name,
                             "choices": choices, "usage": counts([ids], done)})

    def streamed(ids: list[int], body: Any, kind: str, echo: str = "") -> Any:
        """The streamed answer; its parameters are checked first, while an error can still be a 400."""
        if body.logprobs:
            raise APIError(400, "logprobs are not sent in streamed replies by this server; send stream=false "
                                "to get them", code="unsupported_value", param="logprobs")
        params = params_for(body, 0, 16 if kind == "text_completion" else 512)
        return StreamingResponse(_stream(ids, body, kind, params, echo), media_type="text/event-stream")

    async def _stream(ids: list[int], body: Any, kind: str, params: SamplingParams, echo: str) -> AsyncIterator[str]:
        """Server-sent events: one chunk per released text delta (the echoed prompt first), the
        last with the finish reason, a usage chunk if ``stream_options.include_usage``, ``[DONE]``."""
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
        with_usage = bool((body.stream_options or {}).get("include_usage"))
        request = GenerationRequest(
            token_ids=tuple(ids), params=params,
            on_token=lambda t, lp: loop.call_soon_threadsafe(tokens.put_nowait, (t, lp)))
        job = asyncio.ensure_future(asyncio.to_thread(batcher.generate, [request], params))
        job.add_done_callback(lambda _: tokens.put_nowait(None))
        created, ident = int(time.time()), f"cmpl-{uuid.uuid4().hex}"
        releaser = TextReleaser(tokenizer, params.stop, eos_text)

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
            payload: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": model_name,
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
                payload = {"id": ident, "object": kind, "created": created, "model": model_name,
                           "choices": [], "usage": counts([ids], [completion])}
                yield sse(payload)
        yield SSE_DONE

    return app


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields the base URL (``…/v1``).

    ``port=0`` picks a free port. The server stops when the block exits.
    """
    from coa_envs.service.running import serve_in_thread as serve_app

    with serve_app(app, host, port) as url:
        yield f"{url}/v1"
