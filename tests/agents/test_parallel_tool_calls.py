"""``parallel_tool_calls: false`` is honoured by ``coa serve`` and the gateway (local engine):
at most one tool call comes back, JSON or streamed, as vLLM does. It was accepted and
ignored, so a client that asked for one call got every call the model wrote."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}}}}]
REPLY = ('<tool_call>\n{"name": "lookup", "arguments": {"word": "otter"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "lookup", "arguments": {"word": "heron"}}\n</tool_call>')


def _calls(client, stream: bool, **extra) -> list[str]:
    ask = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS, "max_tokens": 200,
           "seed": 0, **extra}
    if not stream:
        message = client.chat.completions.create(**ask).choices[0].message
        return [call.function.arguments for call in message.tool_calls or ()]
    with client.chat.completions.stream(**ask) as events:
        message = events.get_final_completion().choices[0].message
    return [call.function.arguments for call in message.tool_calls or ()]


@pytest.mark.parametrize("server", ["serve", "gateway"])
def test_parallel_tool_calls_false_returns_one_call(tiny_tokenizer, scripted_lm, server):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(scripted_lm([REPLY] * 4), tiny_tokenizer)
    if server == "serve":
        context = serve_in_thread(create_app(engine, tiny_tokenizer, "m"))
    else:
        context = served_gateway(engine, tiny_tokenizer, "m")
    with context as served:
        url = served if server == "serve" else f"{served[0]}/v1"
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        assert len(_calls(client, False)) == 2  # the model wrote two
        assert _calls(client, False, parallel_tool_calls=False) == ['{"word": "otter"}']
        assert _calls(client, True, parallel_tool_calls=False) == ['{"word": "otter"}']
        assert len(_calls(client, True, parallel_tool_calls=True)) == 2
