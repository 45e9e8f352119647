"""A client that hangs up stops its generation: the engine's cancel path, ``coa serve`` and the
gateway, driven by the real ``openai`` client and raw sockets.

The model is a scripted LM whose forward pass blocks at a chosen step until the test opens a
gate, so what happens after the disconnect is counted in tokens, never timed.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
openai = pytest.importorskip("openai", reason="needs the [llm] extra")

from agents.engines import GenerationRequest, SamplingParams  # noqa: E402
from agents.engines.batching import BatchingEngine  # noqa: E402
from agents.engines.hf import HFEngine  # noqa: E402

SCRIPT = "one two three four five six seven eight nine ten " * 40
GATE_AT = 24  # the forward pass that waits for the gate: the first chunks go out before it
PATIENCE_S = 60.0  # how long a poll waits for the server to notice (never reached when it works)


class Gate:
    """Blocks the model's ``GATE_AT``-th forward pass of every generation until opened."""

    def __init__(self, model) -> None:
        self.opened = threading.Event()
        self.calls = 0
        forward = model.forward

        def gated(*args, **kwargs):
            self.calls += 1
            if self.calls == GATE_AT:
                self.opened.wait(PATIENCE_S)
            return forward(*args, **kwargs)

        model.forward = gated


class Recording(BatchingEngine):
    """A batcher that keeps each submitted request and its future."""

    def __init__(self, engine) -> None:
        super().__init__(engine)
        self.submitted: list[tuple[GenerationRequest, object]] = []

    def submit(self, request, params=None):
        future = super().submit(request, params)
        self.submitted.append((request, future))
        return future


def _gated_engine(scripted_lm, tokenizer) -> tuple[Recording, Gate]:
    model = scripted_lm([SCRIPT])
    gate = Gate(model)
    return Recording(HFEngine(model, tokenizer, max_batch_size=1)), gate


def _poll(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {PATIENCE_S:.0f} s: {what}")
        time.sleep(0.02)


def _cancelled(batcher: Recording) -> bool:
    return bool(batcher.submitted) and bool(getattr(batcher.submitted[0][0], "cancel", None)) and \
        batcher.submitted[0][0].cancel.is_set()


def _first_tokens(batcher: Recording) -> int:
    completion = batcher.submitted[0][1].result(timeout=PATIENCE_S)
    assert completion.finish_reason == "abort"
    return len(completion.token_ids)


def _stream_started(base_url: str, model: str = "m") -> tuple[openai.OpenAI, openai.Stream]:
    """The openai client streaming a 2000-token chat reply, its first two chunks read (so the
    server is decoding it); the caller hangs up with ``stream.close()``."""
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=PATIENCE_S)
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "go"}],
                                            max_tokens=2000, stream=True)
    chunks = iter(stream)
    next(chunks), next(chunks)
    return client, stream


# -- the engine ---------------------------------------------------------------------------------
def test_a_cancelled_request_stops_at_the_next_step(tiny_dir):
    """Continuous batching (a real transformers model): the row leaves at the token after the
    cancel; a request cancelled while queued samples nothing."""
    engine = BatchingEngine(HFEngine(str(tiny_dir)))
    try:
        cancel = threading.Event()
        seen: list[int] = []

        def on_token(token: int, _logprob: float) -> None:
            seen.append(token)
            if len(seen) == 3:
                cancel.set()

        params = SamplingParams(max_new_tokens=400, temperature=1.0, seed=5, stop=())
        first = engine.submit(GenerationRequest(token_ids=(5, 6, 7), params=params, cancel=cancel,
                                                on_token=on_token)).result(timeout=PATIENCE_S)
        if first.finish_reason == "eos":
            pytest.skip("the tiny model ended its reply within three tokens")
        assert first.finish_reason == "abort" and len(first.token_ids) == 3
        early = threading.Event()
        early.set()
        never = engine.submit(GenerationRequest(token_ids=(5, 6, 7), params=params, cancel=early))
        assert never.result(timeout=PATIENCE_S).finish_reason == "abort"
        assert never.result().token_ids == ()
    finally:
        engine.close()


def test_a_future_cancelled_while_queued_keeps_the_worker(tiny_tokenizer, scripted_lm):
    """``asyncio.wrap_future`` cancels the batcher's future when its awaiting task is cancelled;
    the worker then met a cancelled future (InvalidStateError) and stopped answering anyone."""
    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    try:
        def request(limit: int) -> GenerationRequest:
            return GenerationRequest(token_ids=(5, 6, 7), params=SamplingParams(max_new_tokens=limit, stop=()))

        first = batcher.submit(request(GATE_AT + 5))
        queued = batcher.submit(request(10))
        assert queued.cancel()
        gate.opened.set()
        assert first.result(timeout=PATIENCE_S).finish_reason == "length"
        assert batcher.submit(request(3)).result(timeout=PATIENCE_S).finish_reason == "length"
    finally:
        batcher.close()


# -- coa serve ------------------------------------------------------------------------------------
def test_serve_stream_disconnect_frees_the_slot(tiny_tokenizer, scripted_lm):
    """A one-row engine: the openai client reads two chunks of a 2000-token stream and closes it;
    the row stops at the step after the server noticed, and the next request is answered."""
    from agents.server import create_app, serve_in_thread

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with serve_in_thread(create_app(batcher, tiny_tokenizer, "scripted")) as url:
        client, stream = _stream_started(url, model="scripted")
        stream.close()
        _poll(lambda: _cancelled(batcher), "the hung-up stream's request is cancelled")
        gate.opened.set()
        assert _first_tokens(batcher) <= GATE_AT + 1  # of 2000 asked for
        reply = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "again"}],
                                               max_tokens=3)
        assert reply.choices[0].finish_reason == "length"
    batcher.close()


def test_serve_non_streamed_client_timeout_cancels(tiny_tokenizer, scripted_lm):
    """A client that gives up on a JSON reply (its timeout) cancels the generation too."""
    from agents.server import create_app, serve_in_thread

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with serve_in_thread(create_app(batcher, tiny_tokenizer, "scripted")) as url:
        impatient = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=1.0)
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model="scripted", prompt="go", max_tokens=2000)
        _poll(lambda: _cancelled(batcher), "the abandoned request is cancelled")
        gate.opened.set()
        assert _first_tokens(batcher) <= GATE_AT + 1
    batcher.close()


# -- the gateway ----------------------------------------------------------------------------------
def _gateway(batcher, tokenizer):
    from tests.agents.gateway.conftest import served_gateway

    return served_gateway(batcher, tokenizer, "m")


def _post_and_hang_up(url: str, path: str, body: bytes, read: threading.Event) -> None:
    """Send a whole request, and close the socket once the server has read it, before any reply."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert read.wait(PATIENCE_S)


@pytest.mark.parametrize("one_call", [False, True])
def test_gateway_hang_up_before_the_stream_starts(tiny_tokenizer, scripted_lm, one_call):
    """The client is gone before the first byte (the stream is prepared slowly, so the server has
    seen the close when its response starts): the call is not left in flight, and a one-call
    session is finished. The stream never started before: its cleanup never ran."""
    import asyncio

    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    gate.opened.set()
    with _gateway(batcher, tiny_tokenizer) as (url, gateway):
        prepare, read = gateway.backend.prepare_stream, threading.Event()

        async def slow_prepare(session, request):
            prepared = await prepare(session, request)
            read.set()
            await asyncio.sleep(1.0)  # the server hears the close meanwhile
            return prepared

        gateway.backend.prepare_stream = slow_prepare
        body = b'{"model": "m", "stream": true, "max_tokens": 50, "messages": [{"role": "user", "content": "go"}]}'
        path = "/v1/chat/completions" if one_call else "/sessions/s1/v1/chat/completions"
        _post_and_hang_up(url, path, body, read)
        if one_call:
            _poll(lambda: not gateway.store.live(), "the one-call session is finished")
        else:
            _poll(lambda: gateway.store.get("s1").wait_idle(0.0), "the call is not in flight")
    batcher.close()


def test_gateway_one_call_stream_hang_up_finishes_the_session(tiny_tokenizer, scripted_lm):
    """A one-call session whose client leaves mid-stream is finished (it stayed live until the idle
    timeout), with the tokens sampled before the engine stopped recorded."""
    batcher, gate = _gated_engine(scripted_lm, tiny_tokenizer)
    with _gateway(batcher, tiny_tokenizer) as (url, gateway):
        _, stream = _stream_started(f"{url}/v1")
        (session,) = gateway.store.live()
        stream.close()
        _poll(lambda: _cancelled(batcher), "the hung-up stream's request is cancelled")
        gate.opened.set()
        assert _first_tokens(batcher) <= GATE_AT + 1
        _poll(lambda: session.finished, "the one-call session is finished")
        assert len(session.calls) == 1 and len(session.calls[0].completion_ids) <= GATE_AT + 1
    batcher.close()
