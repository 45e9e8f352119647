"""The ``openai`` engine acts on a cancel when it is set, and for ``tools`` requests too.

Before, a cancellable request was closed only when its next chunk arrived: a server that sent
nothing more (the request queued behind others, a long prefill, a stalled upstream) held the
engine's thread and the server's work until ``timeout_s``. And requests with ``tools`` were
not streamed at all, so a client leaving could not stop them."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")

from agents.engines import GenerationRequest, SamplingParams  # noqa: E402
from agents.engines.openai_compat import OpenAIEngine  # noqa: E402
from tests.agents.test_serve_disconnect import GATE_AT, PATIENCE_S, _gated_engine, _poll  # noqa: E402

TOOLS = ({"type": "function", "function": {"name": "lookup", "description": "look a word up",
                                           "parameters": {"type": "object",
                                                          "properties": {"word": {"type": "string"}}}}},)


class SilentStream:
    """A server that answers one request with an event-stream head and then says nothing; it
    records the request and notes when the client hangs up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.request = b""
        self.received, self.hung_up = threading.Event(), threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.settimeout(PATIENCE_S)
            while b"\r\n\r\n" not in self.request:
                self.request += connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                               b"transfer-encoding: chunked\r\n\r\n")
            self.received.set()
            try:
                while connection.recv(65536):
                    pass
                self.hung_up.set()
            except OSError:
                self.hung_up.set()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_a_cancel_cuts_a_stream_that_sends_nothing(tiny_tokenizer, mode):
    server = SilentStream()
    engine = OpenAIEngine(server.url, "m", tokenizer=tiny_tokenizer, mode=mode, timeout_s=PATIENCE_S * 4,
                          max_retries=0)
    cancel = threading.Event()
    request = GenerationRequest(token_ids=(5, 6), messages=({"role": "user", "content": "go"},), cancel=cancel)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(engine.generate, [request], SamplingParams(max_new_tokens=50, stop=()))
        assert server.received.wait(PATIENCE_S)
        cancel.set()
        assert server.hung_up.wait(PATIENCE_S), "the engine kept the connection open after the cancel"
        (completion,) = future.result(timeout=PATIENCE_S)
    assert completion.finish_reason == "abort" and completion.token_ids == () and completion.error_kind is None
    engine.close()
    server.close()


def test_a_tools_request_is_streamed_and_stops_the_server(tiny_tokenizer, scripted_lm):
    from agents.server import create_app, serve_in_thread

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with serve_in_thread(create_app(batcher, tiny_tokenizer, "scripted")) as url, ThreadPoolExecutor(1) as pool:
        engine = OpenAIEngine(url, "scripted", tokenizer=tiny_tokenizer, mode="chat", timeout_s=PATIENCE_S,
                              max_retries=0)
        cancel = threading.Event()
        request = GenerationRequest(messages=({"role": "user", "content": "go"},), tools=TOOLS, cancel=cancel)
        future = pool.submit(engine.generate, [request], SamplingParams(max_new_tokens=2000, seed=0, stop=()))
        _poll(lambda: len(batcher.submitted) == 1, "the server has the request")
        cancel.set()
        gate.opened.set()
        (completion,) = future.result(timeout=PATIENCE_S)
        assert completion.finish_reason == "abort"
        served = batcher.submitted[0][1].result(timeout=PATIENCE_S)
        assert served.finish_reason == "abort" and len(served.token_ids) <= GATE_AT + 50
        engine.close()
    batcher.close()


def test_a_streamed_tools_request_returns_the_calls_a_json_reply_has(tiny_tokenizer, scripted_lm):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    reply = '<tool_call>\n{"name": "lookup", "arguments": {"word": "otter"}}\n</tool_call>'
    engine = HFEngine(scripted_lm([reply]), tiny_tokenizer)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "scripted")) as url:
        client = OpenAIEngine(url, "scripted", tokenizer=tiny_tokenizer, mode="chat", max_retries=0)
        params = SamplingParams(max_new_tokens=200, seed=0, stop=())
        ask = {"messages": ({"role": "user", "content": "go"},), "tools": TOOLS}
        (plain,) = client.generate([GenerationRequest(**ask)], params)
        (streamed,) = client.generate([GenerationRequest(**ask, cancel=threading.Event())], params)
        client.close()
    assert plain.tool_calls and plain.tool_calls[0]["function"]["name"] == "lookup"
    assert [c["function"] for c in streamed.tool_calls] == [c["function"] for c in plain.tool_calls]
    assert streamed.finish_reason == plain.finish_reason == "stop"
