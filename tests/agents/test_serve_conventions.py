"""``coa serve`` keeps OpenAI's conventions, checked with the official ``openai`` client: errors in
OpenAI's schema (the client's exception carries the message), a 404 for a model it does not
serve, and every request field either implemented or refused with a 400 that names it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
openai = pytest.importorskip("openai", reason="needs the [llm] extra")


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "seed": 3}


@pytest.fixture(scope="module")
def client(served_tiny):
    return served_tiny


def _raw(client, path: str, body: dict) -> tuple[int, dict]:
    import httpx

    response = httpx.post(f"{client.base_url}{path}".replace("//chat", "/chat").replace("//comp", "/comp"),
                          json=body, timeout=60)
    return response.status_code, response.json()


def test_an_unknown_model_is_a_404_in_openais_error_schema(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(**{**CHAT, "model": "gpt-4o"})
    assert "`gpt-4o` does not exist" in caught.value.message and "tiny" in caught.value.message
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    assert client.models.retrieve("tiny").id == "tiny"
    # an alias is served too, and the reply names the served model
    assert client.chat.completions.create(**{**CHAT, "model": "tiny-alias"}).model == "tiny"


@pytest.mark.parametrize("field, value", [
    ("top_logprobs", 21), ("response_format", {"type": "json_object"}), ("logit_bias", {"5": 10}),
    ("frequency_penalty", 0.5), ("presence_penalty", 1.0), ("reasoning_effort", "high"),
    ("functions", [{"name": "f", "parameters": {}}]), ("audio", {"voice": "x"}), ("prediction", {"type": "content"}),
])
def test_a_chat_field_that_is_not_implemented_is_refused_by_name(client, field, value):
    extra = {"logprobs": True} if field == "top_logprobs" else {}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**CHAT, **extra, extra_body={field: value})
    assert caught.value.param == field and field in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize("field, value", [("logprobs", 21), ("best_of", 4), ("suffix", "end"),
                                          ("logit_bias", {"1": 1})])
def test_a_completions_field_that_is_not_implemented_is_refused_by_name(client, field, value):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny", prompt="q", max_tokens=3, extra_body={field: value})
    assert caught.value.param == field


def test_neutral_values_and_harmless_fields_are_accepted(client):
    reply = client.chat.completions.create(
        **CHAT, frequency_penalty=0, presence_penalty=0, response_format={"type": "text"}, user="u1",
        metadata={"run": "a"}, store=False, logprobs=True, top_logprobs=0)
    assert reply.choices[0].logprobs.content  # the sampled tokens' logprobs
    assert client.completions.create(model="tiny", prompt="q", max_tokens=3, logprobs=0).choices[0].logprobs.tokens


def test_stream_options_include_usage_sends_the_usage_chunk(client):
    chunks = list(client.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
    assert all(c.usage is None for c in chunks[:-1])
    whole = client.chat.completions.create(**CHAT)
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        client.chat.completions.create(**CHAT, stream_options={"include_usage": True})


def test_n_is_implemented_streamed_or_not(client):
    reply = client.chat.completions.create(**CHAT, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    streamed = client.chat.completions.create(**CHAT, n=2, stream=True)
    assert {choice.index for chunk in streamed for choice in chunk.choices} == {0, 1}


def test_echo_returns_the_prompt_before_the_completion(client):
    plain = client.completions.create(model="tiny", prompt="abc def", max_tokens=4, seed=1).choices[0].text
    echoed = client.completions.create(model="tiny", prompt="abc def", max_tokens=4, seed=1, echo=True).choices[0].text
    assert echoed.endswith(plain) and echoed.startswith("abc")
    streamed = client.completions.create(model="tiny", prompt="abc def", max_tokens=4, seed=1, echo=True, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == echoed


def test_a_malformed_body_is_a_400_naming_the_field(client):
    status, body = _raw(client, "/chat/completions", {"model": "tiny", "messages": "not a list"})
    assert status == 400 and body["error"]["param"] == "messages" and body["error"]["type"] == "invalid_request_error"
    status, body = _raw(client, "/chat/completions", {"model": "tiny", "messages": [], "n": 0})
    assert status == 400 and body["error"]["param"] == "n"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**{**CHAT, "temperature": -1})
    assert "temperature" in caught.value.message


def test_an_unknown_route_is_an_openai_error(client):
    import httpx

    response = httpx.get(f"{client.base_url}embeddings_nothing", timeout=10)
    assert response.status_code == 404 and set(response.json()["error"]) == {"message", "type", "code", "param"}
    assert json.loads(response.text)["error"]["message"]
