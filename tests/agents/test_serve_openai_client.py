"""``coa serve`` driven by the official ``openai`` client where a client's request could be
answered wrongly without an error: limits of zero, messages OpenAI's API refuses, and the
streamed replies (logprobs, tool calls) that the JSON replies carry too."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from agents.engines.hf import HFEngine  # noqa: E402
from agents.server import create_app, serve_in_thread  # noqa: E402

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "seed": 3}


@pytest.fixture(scope="module")
def client(tiny_dir):
    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as url:
        yield openai.OpenAI(base_url=url, api_key="x", max_retries=0)


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
