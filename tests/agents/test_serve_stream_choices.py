"""``n`` > 1 streamed by ``coa serve``: each choice's chunks carry its ``index``, the choices equal
the JSON reply's (same seeds), one usage chunk counts them all. Driven by the ``openai`` client."""

from __future__ import annotations

from collections import defaultdict

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "tell"}], "max_tokens": 10, "seed": 21, "n": 3}


def test_chat_stream_of_three_choices(served_tiny):
    whole = served_tiny.chat.completions.create(**CHAT)
    texts: dict[int, str] = defaultdict(str)
    roles: dict[int, int] = defaultdict(int)
    finishes: dict[int, str] = {}
    usage = None
    ids = set()
    for chunk in served_tiny.chat.completions.create(stream=True, stream_options={"include_usage": True}, **CHAT):
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            roles[choice.index] += choice.delta.role == "assistant"
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert len(ids) == 1 and dict(roles) == {0: 1, 1: 1, 2: 1}
    assert {i: texts[i] for i in range(3)} == {c.index: c.message.content for c in whole.choices}
    assert finishes == {c.index: c.finish_reason for c in whole.choices}
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_completion_stream_of_two_choices(served_tiny):
    args = {"model": "tiny", "prompt": "abc", "max_tokens": 6, "seed": 4, "n": 2, "logprobs": 0}
    whole = served_tiny.completions.create(**args)
    texts: dict[int, str] = defaultdict(str)
    tokens: dict[int, list[str]] = defaultdict(list)
    for chunk in served_tiny.completions.create(stream=True, **args):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.logprobs:
                tokens[choice.index] += choice.logprobs.tokens
    assert dict(texts) == {c.index: c.text for c in whole.choices}
    assert dict(tokens) == {c.index: c.logprobs.tokens for c in whole.choices}
