"""LangChain's ``ChatOpenAI`` (a real third-party client) against ``coa serve`` and ``coa gateway``:
a tool-calling turn, streamed and not, read back as LangChain tool calls, and the follow-up
turn with the tool's result. Skipped when ``langchain-openai`` is not installed."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
pytest.importorskip("langchain_openai", reason="needs langchain-openai (the [clients] extra)")

from agents.engines.hf import HFEngine
from agents.server import create_app, serve_in_thread
from tests.agents.gateway.conftest import served_gateway

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>'
ANSWER = "1 + 2 = 3<|im_end|>"


def _add_tool():
    from langchain_core.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return add


def _play(base_url: str) -> None:
    """Two calls (one plain, one streamed), then the answer to the tool's result."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    add = _add_tool()
    model = ChatOpenAI(base_url=base_url, api_key="x", model="tiny", max_tokens=64, max_retries=0,
                       stream_usage=True).bind_tools([add])
    question = [HumanMessage("What is 1 + 2?")]
    asked = model.invoke(question)
    assert [(c["name"], c["args"]) for c in asked.tool_calls] == [("add", {"a": 1, "b": 2})]
    assert asked.response_metadata["finish_reason"] == "tool_calls"

    chunks = list(model.stream(question))
    streamed = chunks[0]
    for chunk in chunks[1:]:
        streamed = streamed + chunk
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [("add", {"a": 1, "b": 2})]
    assert not streamed.invalid_tool_calls and streamed.usage_metadata["output_tokens"] > 0

    result = add.invoke(streamed.tool_calls[0]["args"])
    answer = model.invoke([*question, asked, ToolMessage(str(result), tool_call_id=asked.tool_calls[0]["id"])])
    assert answer.content == "1 + 2 = 3" and not answer.tool_calls


def test_langchain_calls_tools_through_coa_serve(tiny_tokenizer, scripted_lm):
    engine = HFEngine(scripted_lm([CALL, CALL, ANSWER]), tiny_tokenizer)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "tiny")) as url:
        _play(url)


def test_langchain_calls_tools_through_the_gateway(tiny_tokenizer, scripted_lm):
    engine = HFEngine(scripted_lm([CALL, CALL, ANSWER]), tiny_tokenizer)
    with served_gateway(engine, tiny_tokenizer, "tiny") as (url, gateway):
        _play(f"{url}/sessions/lc-1/v1")
        (trajectory, *_) = gateway.finish(gateway.session("lc-1"))
    assert trajectory.has_token_ids
