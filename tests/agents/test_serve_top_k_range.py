"""``top_k`` below -1 is a 400 naming it on ``coa serve`` and the gateway, as vLLM refuses it (it
was taken as "no limit", a value the client did not ask for). 0 and -1 still mean no limit."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")


def test_top_k_below_minus_one_is_refused(tiny_dir):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as serve_url, \
            served_gateway(engine, engine.tokenizer, "tiny") as (gateway_url, _):
        for url in (serve_url, f"{gateway_url}/sessions/k/v1"):
            client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
            with pytest.raises(openai.BadRequestError, match="top_k"):
                client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=2, extra_body={"top_k": -5})
            for top_k in (0, -1, 3):
                reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                       max_tokens=2, extra_body={"top_k": top_k})
                assert reply.choices[0].finish_reason in ("length", "stop")
