"""``coa serve`` driven by the official ``openai`` client where a client's request could be
answered wrongly without an error: limits of zero, messages OpenAI's API refuses, and the
streamed replies (logprobs, tool calls) that the JSON replies carry too."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from agents.engines.hf import HFEngine  # noqa: E402
from agents.server import create_app, serve_in_thread  # noqa: E402
from tests.agents.test_serve_conventions import CHAT  # noqa: E402


@pytest.fixture(scope="module")
def client(served_tiny):
    return served_tiny


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_token_limit_below_one_is_refused_not_replaced_by_the_default(client, field):
    for value in (0, -3):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(**{**CHAT, "max_tokens": None, field: value})
        assert caught.value.param == field
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny", prompt="q", max_tokens=0)
    assert caught.value.param == "max_tokens"


@pytest.mark.parametrize("messages, param", [
    ([{"role": "bogus", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": None}], "messages[0].content"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": 5}], "messages[1].content"),
])
def test_a_message_openai_refuses_is_a_400_naming_it(client, messages, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{**CHAT, "messages": messages})
    assert caught.value.param == param


def test_a_stream_carries_the_logprobs_the_json_reply_has(client):
    whole = client.chat.completions.create(**CHAT, logprobs=True).choices[0]
    chunks = list(client.chat.completions.create(**CHAT, logprobs=True, stream=True))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.bytes) for e in entries] == [(e.token, e.bytes) for e in whole.logprobs.content]
    assert [e.logprob for e in entries] == pytest.approx([e.logprob for e in whole.logprobs.content], abs=1e-4)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.message.content

    plain = client.completions.create(model="tiny", prompt="abc", max_tokens=6, seed=2, logprobs=0).choices[0]
    streamed = list(client.completions.create(model="tiny", prompt="abc", max_tokens=6, seed=2, logprobs=0,
                                              stream=True))
    parts = [c.choices[0].logprobs for c in streamed if c.choices[0].logprobs]
    assert [t for p in parts for t in p.tokens] == plain.logprobs.tokens
    assert [lp for p in parts for lp in p.token_logprobs] == pytest.approx(plain.logprobs.token_logprobs, abs=1e-4)
    assert [o for p in parts for o in p.text_offset] == plain.logprobs.text_offset


def test_a_stream_carries_the_token_ids_it_was_asked_for(client):
    """vLLM's ``return_token_ids``: every sampled id in the chunks, the prompt's in the first
    (the gateway in front of ``coa serve`` records a streamed call token-exact from them)."""
    ids = {"return_token_ids": True}
    whole = client.chat.completions.create(**CHAT, extra_body=ids).choices[0].model_extra
    chunks = [c.choices[0].model_extra for c in client.chat.completions.create(**CHAT, stream=True, extra_body=ids)]
    assert [t for c in chunks for t in c["token_ids"]] == whole["token_ids"]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    plain = client.completions.create(model="tiny", prompt="abc", max_tokens=5, seed=2, extra_body=ids).choices[0]
    parts = [c.choices[0].model_extra for c in client.completions.create(model="tiny", prompt="abc", max_tokens=5,
                                                                           seed=2, stream=True, extra_body=ids)]
    assert [t for c in parts for t in c["token_ids"]] == plain.model_extra["token_ids"]


def test_tool_calls_stream_as_the_openai_client_accumulates_them(tiny_tokenizer, scripted_lm):
    call = '<tool_call>\n{"name": "code", "arguments": {"code": "print(6 * 7)"}}\n</tool_call><|im_end|>'
    tools = [{"type": "function", "function": {"name": "code", "description": "run Python",
                                               "parameters": {"type": "object", "properties": {
                                                   "code": {"type": "string"}}}}}]
    engine = HFEngine(scripted_lm([call, "Checking. " + call, "It is 42.<|im_end|>"]), tiny_tokenizer)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "tiny")) as url:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "compute 6 * 7"}]
        with client.chat.completions.stream(model="tiny", messages=messages, tools=tools, max_tokens=64) as events:
            for _ in events:
                pass
            final = events.get_final_completion().choices[0]
        assert final.finish_reason == "tool_calls"
        (made,) = final.message.tool_calls
        assert (made.function.name, made.function.arguments) == ("code", '{"code": "print(6 * 7)"}')
        assert made.id.startswith("call_") and not final.message.content

        chunks = list(client.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=64,
                                                     stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text.rstrip() == "Checking."  # the call's text is never content
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        history = [*messages, final.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
                   {"role": "tool", "tool_call_id": made.id, "content": "42"}]
        answer = list(client.chat.completions.create(model="tiny", messages=history, tools=tools, max_tokens=64,
                                                     stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in answer) == "It is 42."
        assert answer[-1].choices[0].finish_reason == "stop"
        assert not any(c.choices[0].delta.tool_calls for c in answer)


ADD = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
REFUSED_REQUESTS = [  # (what the request carries, the param the 400 names)
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, IMAGE]}]},
     "messages[0].content[1]"),
    ({"messages": [{"role": "user", "content": [AUDIO]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": ["bare string"]}]}, "messages[0].content[0]"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "multiply"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [ADD], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0].function.name"),
]


def refused_param(client, request: dict) -> str | None:
    """The ``param`` of the 400 the server answers ``request`` (merged into a small chat) with."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{**CHAT, **request})
    return caught.value.param


@pytest.mark.parametrize("request_fields, param", REFUSED_REQUESTS)
def test_what_a_text_model_cannot_honour_is_refused_not_dropped(client, request_fields, param):
    """An image dropped on the way to the template, or a named tool that is not there, would
    get an answer that looks right and is not."""
    assert refused_param(client, request_fields) == param


def test_a_prompt_over_the_context_is_a_400_streamed_or_not(tiny_tokenizer, tiny_model):
    """A stream checks the prompt before its 200: after it, the refusal could only be an error
    event, which the client raises as a bare ``APIError`` without status or code."""
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(tiny_model, tiny_tokenizer, max_context=32)
    long_chat = {**CHAT, "messages": [{"role": "user", "content": "many words " * 40}]}
    with serve_in_thread(create_app(engine, tiny_tokenizer, "tiny")) as url, \
            served_gateway(engine, tiny_tokenizer, "tiny") as (gateway_url, _):
        served = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        through_gateway = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0)
        for client in (served, through_gateway):
            for stream in (False, True):
                with pytest.raises(openai.BadRequestError) as caught:
                    list(client.chat.completions.create(**long_chat, stream=stream))
                assert caught.value.code == "context_length_exceeded"
        with pytest.raises(openai.BadRequestError) as caught:
            list(served.completions.create(model="tiny", prompt="many words " * 40, max_tokens=3, stream=True))
        assert caught.value.code == "context_length_exceeded" and caught.value.param == "prompt"


class GatedEngine:
    """Answers every request with one token, but holds its first batch until ``gate`` opens."""

    name = "gated"

    def __init__(self, tokenizer) -> None:
        import threading

        self.tokenizer = tokenizer
        self.gate = threading.Event()

    def generate(self, requests, params):
        from agents.engines import Completion

        self.gate.wait(120)
        return [Completion(text="x", token_ids=(5,), logprobs=(-0.5,), finish_reason="length") for _ in requests]


def test_concurrent_requests_all_reach_the_batcher_without_a_thread_each(tiny_tokenizer):
    """Forty clients at once, the engine busy with the first: the other 39 wait in the batch
    queue, to be merged into the next batch, instead of parking a thread each (the default
    executor's 6 threads on two cores let 5 of them in)."""
    import asyncio
    import time

    from agents.engines.batching import BatchingEngine

    engine = GatedEngine(tiny_tokenizer)
    batcher = BatchingEngine(engine, max_batch_size=64)
    clients = 40

    async def ask_all(url: str) -> list[str]:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)
        first = asyncio.create_task(client.completions.create(model="tiny", prompt=[1, 2], max_tokens=1))
        while not batcher.batch_sizes:  # the first request holds the engine
            await asyncio.sleep(0.01)
        rest = [asyncio.create_task(client.completions.create(model="tiny", prompt=[1, 2], max_tokens=1,
                                                               stream=number % 2 == 0))
                for number in range(clients - 1)]
        deadline = time.monotonic() + 60
        while batcher._intake.queue.qsize() < clients - 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        queued = batcher._intake.queue.qsize()
        engine.gate.set()
        replies = await asyncio.gather(first, *rest)
        assert queued == clients - 1
        return [r.choices[0].text if hasattr(r, "choices") else "".join([c.choices[0].text async for c in r])
                for r in replies]

    with serve_in_thread(create_app(batcher, tiny_tokenizer, "tiny")) as url:
        texts = asyncio.run(ask_all(url))
    assert texts == ["x"] * clients
    assert batcher.batch_sizes[:2] == [1, clients - 1]
    batcher.close()
