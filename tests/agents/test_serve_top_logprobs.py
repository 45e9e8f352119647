"""``top_logprobs`` from the ``hf`` engine's own distribution, through ``coa serve`` to the
``openai`` client: chat (JSON and streamed) and completions (``logprobs=k``)."""

from __future__ import annotations

import math

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "count"}], "max_tokens": 8, "logprobs": True}


def _check_entry(entry, k: int, greedy: bool) -> None:
    tops = entry.top_logprobs
    assert len(tops) == k
    values = [t.logprob for t in tops]
    assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
    assert math.fsum(math.exp(v) for v in values) <= 1 + 1e-5
    if greedy:  # the argmax is the sampled token, with the same logprob
        assert tops[0].token == entry.token and tops[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
    else:  # a sampled token among the alternatives has their logprob (tokens named by id)
        for top in tops:
            if top.token == entry.token:
                assert top.logprob == pytest.approx(entry.logprob, abs=1e-5)


def test_chat_top_logprobs(served_tiny):
    reply = served_tiny.chat.completions.create(top_logprobs=3, temperature=0, **CHAT).choices[0]
    content = reply.logprobs.content
    assert content
    for entry in content:
        _check_entry(entry, 3, greedy=True)
        assert all(bytes(t.bytes).decode(errors="replace") is not None for t in entry.top_logprobs)


def test_streamed_top_logprobs_equal_the_json_reply(served_tiny):
    args = {**CHAT, "top_logprobs": 4, "seed": 11, "extra_body": {"return_tokens_as_token_ids": True}}
    whole = served_tiny.chat.completions.create(**args).choices[0].logprobs.content
    streamed = [entry for chunk in served_tiny.chat.completions.create(stream=True, **args)
                for choice in chunk.choices if choice.logprobs for entry in choice.logprobs.content]
    assert [(e.token, [(t.token, round(t.logprob, 4)) for t in e.top_logprobs]) for e in streamed] == \
        [(e.token, [(t.token, round(t.logprob, 4)) for t in e.top_logprobs]) for e in whole]
    for entry in streamed:
        _check_entry(entry, 4, greedy=False)


def test_completion_logprobs_k(served_tiny):
    logprobs = served_tiny.completions.create(model="tiny", prompt="abc", max_tokens=6, logprobs=2,
                                              temperature=0).choices[0].logprobs
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True):
        assert len(top) in (2, 3) and top[token] == pytest.approx(logprob, abs=1e-5)
        assert max(top.values()) == pytest.approx(logprob, abs=1e-5)  # greedy: the sampled one is the best


def test_top_logprobs_limits(served_tiny):
    with pytest.raises(openai.BadRequestError) as raised:
        served_tiny.chat.completions.create(top_logprobs=21, **CHAT)
    assert raised.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError):
        served_tiny.chat.completions.create(**{**CHAT, "logprobs": False}, top_logprobs=2)


def test_gateway_top_logprobs(tiny_dir):
    """The gateway over a local ``hf`` engine answers them too, JSON and streamed."""
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from agents.engines.hf import HFEngine
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(str(tiny_dir))
    with served_gateway(engine, engine.tokenizer, "tiny") as (url, _gateway):
        client = openai.OpenAI(base_url=f"{url}/sessions/s1/v1", api_key="x", max_retries=0)
        args = {**CHAT, "top_logprobs": 2, "seed": 3, "extra_body": {"return_tokens_as_token_ids": True}}
        whole = client.chat.completions.create(**args).choices[0].logprobs.content
        for entry in whole:
            _check_entry(entry, 2, greedy=False)
        client = openai.OpenAI(base_url=f"{url}/sessions/s2/v1", api_key="x", max_retries=0)
        streamed = [entry for chunk in client.chat.completions.create(stream=True, **args)
                    for choice in chunk.choices if choice.logprobs for entry in choice.logprobs.content]
        assert [[t.token for t in e.top_logprobs] for e in streamed] == [[t.token for t in e.top_logprobs]
                                                                          for e in whole]
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(top_logprobs=21, **CHAT)
