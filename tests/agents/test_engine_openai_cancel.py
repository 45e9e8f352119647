"""The ``openai`` engine forwards a cancel: a request with ``GenerationRequest.cancel`` is
streamed, and closed when the cancel is set, so the server (here ``coa serve`` over a one-row
gated engine) stops decoding; the engine returns ``abort`` with what had arrived. It ran the
request to its end (2000 tokens) whatever the caller wanted."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")

from tests.agents.test_serve_disconnect import GATE_AT, PATIENCE_S, _gated_engine, _poll  # noqa: E402


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_a_cancelled_request_stops_the_server(tiny_tokenizer, scripted_lm, mode):
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.openai_compat import OpenAIEngine
    from agents.server import create_app, serve_in_thread

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with serve_in_thread(create_app(batcher, tiny_tokenizer, "scripted")) as url, ThreadPoolExecutor(1) as pool:
        engine = OpenAIEngine(url, "scripted", tokenizer=tiny_tokenizer, mode=mode, timeout_s=PATIENCE_S,
                              max_retries=0)
        cancel = threading.Event()
        ids = tuple(tiny_tokenizer.encode("go", add_special_tokens=False))
        request = GenerationRequest(token_ids=ids, messages=({"role": "user", "content": "go"},), cancel=cancel)
        params = SamplingParams(max_new_tokens=2000, temperature=1.0, seed=0, stop=())
        future = pool.submit(engine.generate, [request], params)
        _poll(lambda: len(batcher.submitted) == 1, "the server has the request")
        cancel.set()
        gate.opened.set()
        (completion,) = future.result(timeout=PATIENCE_S)
        assert completion.finish_reason == "abort" and len(completion.token_ids) < 2000
        served = batcher.submitted[0][1].result(timeout=PATIENCE_S)
        assert served.finish_reason == "abort" and len(served.token_ids) < 2000
        assert len(served.token_ids) <= GATE_AT + 50  # stopped a few steps after the gate, not at 2000
        engine.close()
    batcher.close()


def test_a_request_cancelled_before_it_starts_is_never_sent(tiny_tokenizer):
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.openai_compat import OpenAIEngine

    cancel = threading.Event()
    cancel.set()
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", tokenizer=tiny_tokenizer, max_retries=0)
    (completion,) = engine.generate([GenerationRequest(token_ids=(1, 2), cancel=cancel)], SamplingParams(stop=()))
    assert completion.finish_reason == "abort" and completion.token_ids == ()
    engine.close()
