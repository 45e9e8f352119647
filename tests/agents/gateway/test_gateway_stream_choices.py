"""``n`` > 1 streamed through the gateway, in front of a local engine and passed through to
``coa serve``: each choice's chunks carry its ``index`` and equal the JSON reply's choices (same
seeds), and each choice is recorded as its own call (token-exact). It was a 400."""

from __future__ import annotations

from collections import defaultdict

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from tests.agents.gateway.conftest import SpyEngine, assert_token_exact, served_gateway  # noqa: E402
from tests.agents.gateway.test_gateway_upstream import _through_upstream  # noqa: E402

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "tell"}], "max_tokens": 8, "seed": 21, "n": 3}


def _streamed(client) -> tuple[dict[int, str], dict[int, str], object]:
    texts: dict[int, str] = defaultdict(str)
    finishes: dict[int, str] = {}
    usage = None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **CHAT):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    return dict(texts), finishes, usage


def test_three_streamed_choices_from_the_local_engine(tiny_model, tiny_tokenizer):
    from agents.engines.hf import HFEngine

    spy = SpyEngine(HFEngine(tiny_model, tiny_tokenizer))
    with served_gateway(spy, tiny_tokenizer, "policy") as (url, gateway):
        whole = openai.OpenAI(base_url=f"{url}/sessions/json/v1", api_key="x", max_retries=0).chat.completions \
            .create(**CHAT)
        client = openai.OpenAI(base_url=f"{url}/sessions/n3/v1", api_key="x", max_retries=0)
        texts, finishes, usage = _streamed(client)
        assert texts == {c.index: c.message.content for c in whole.choices}
        assert finishes == {c.index: c.finish_reason for c in whole.choices}
        assert usage.completion_tokens == whole.usage.completion_tokens
        session = gateway.session("n3")
        assert session.wait_idle(30) and len(session.calls) == 3
        trajectories = gateway.finish(session)
    streamed = spy.records[3:]  # the JSON reply's three came first
    assert len(streamed) == 3
    assert_token_exact(trajectories, streamed, tiny_tokenizer)


def test_three_streamed_choices_passed_through_to_coa_serve(tiny_model, tiny_tokenizer):
    with _through_upstream(tiny_model, tiny_tokenizer, token_ids=True, tokenizer=tiny_tokenizer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/sessions/up-n3/v1", api_key="x", max_retries=0)
        whole = client.chat.completions.create(**CHAT)
        texts, finishes, _ = _streamed(client)
        assert texts == {c.index: c.message.content for c in whole.choices}
        assert finishes == {c.index: c.finish_reason for c in whole.choices}
        session = gateway.session("up-n3")
        assert session.wait_idle(30)
        calls = session.snapshot()
    assert len(calls) == 6
    json_calls, stream_calls = calls[:3], calls[3:]
    for one, other in zip(json_calls, stream_calls, strict=True):
        assert other.reply["content"] == one.reply["content"]
        assert other.completion_ids == one.completion_ids and other.completion_ids
        assert other.prompt_ids == one.prompt_ids
    assert [c.reply["content"] for c in stream_calls] == [texts[i] for i in range(3)]


def test_a_client_leaving_a_stream_of_two_choices_cancels_both(tiny_tokenizer, scripted_lm):
    """Both choices stop and are recorded as cut (one still queued, which sampled nothing, is
    not recorded at all); the session has no call left in flight."""
    from tests.agents.test_serve_disconnect import PATIENCE_S, _gated_engine, _gateway, _poll

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)  # one row per batch: choice 1 waits
    with _gateway(batcher, tiny_tokenizer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/sessions/two/v1", api_key="x", max_retries=0, timeout=PATIENCE_S)
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                max_tokens=2000, n=2, stream=True)
        chunks = iter(stream)
        next(chunks), next(chunks), next(chunks)
        stream.close()
        _poll(lambda: len(batcher.submitted) == 2 and all(r.cancel.is_set() for r, _ in batcher.submitted),
              "both choices are cancelled")
        gate.opened.set()
        session = gateway.store.get("two")
        _poll(lambda: session.wait_idle(0.0), "no call is left in flight")
        assert session.calls and {c.finish_reason for c in session.calls} == {"abort"}
        assert all(0 < len(c.completion_ids) < 2000 for c in session.calls)
    batcher.close()
