"""Structured output through real clients: ``response_format`` json_schema / json_object is a 400
that names the way that works here (tools), and LangChain surfaces it as the openai error."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")

SCHEMA = {"type": "json_schema", "json_schema": {"name": "city", "schema": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}


@pytest.mark.parametrize("response_format", [SCHEMA, {"type": "json_object"}])
def test_response_format_is_refused_with_the_way_that_works(served_tiny, response_format):
    with pytest.raises(openai.BadRequestError) as raised:
        served_tiny.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            response_format=response_format, max_tokens=4)
    assert raised.value.body["param"] == "response_format"
    assert "function_calling" in raised.value.body["message"]
    assert "properties" not in raised.value.body["message"]  # the schema is not echoed back


def test_langchain_with_structured_output_surfaces_the_400(served_tiny):
    pytest.importorskip("langchain_openai", reason="needs langchain-openai (the [clients] extra)")
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    llm = ChatOpenAI(base_url=str(served_tiny.base_url), api_key="x", model="tiny", max_retries=0, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="method='function_calling'"):
        llm.with_structured_output(City).invoke("Name a city.")
