"""Hostile request bodies against ``coa serve`` and the gateway (real ``openai`` client and raw
httpx): each is a 400 in OpenAI's error shape, and the server keeps answering afterwards.

Before: a seed past 64 bits killed the engine's worker thread (every later request hung), a
NaN temperature sampled garbage, a lone surrogate was a 500, and 100,000 stop strings held the
shared decode loop."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai", reason="needs the [llm] extra")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi", reason="needs the [serve] extra")

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def servers(tiny_dir):
    """(name, chat completions URL, openai client) for coa serve and a gateway session."""
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as serve_url, \
            served_gateway(HFEngine(str(tiny_dir)), engine.tokenizer, "tiny") as (gateway_url, _):
        session = f"{gateway_url}/sessions/s1/v1"
        yield [(name, url, openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60))
               for name, url in (("serve", serve_url), ("gateway", session))]


def _raw(url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", content=body, headers={"content-type": "application/json"},
                      timeout=60)


def _still_answers(client) -> None:
    reply = client.chat.completions.create(model="tiny", messages=HI, max_tokens=2)
    assert reply.choices[0].finish_reason in ("stop", "length")


def _refused_then_answers(servers, match: str, **args) -> None:
    for _name, _url, client in servers:
        with pytest.raises(openai.BadRequestError, match=match):
            client.chat.completions.create(model="tiny", messages=HI, max_tokens=2, **args)
        _still_answers(client)


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_a_seed_past_64_bits_is_a_400_and_the_engine_lives(servers, seed):
    _refused_then_answers(servers, "seed", seed=seed)


def test_the_largest_seed_with_n_choices(servers):
    for name, _url, client in servers:
        if name == "serve":  # choice i samples with seed + i: the second is past 64 bits
            with pytest.raises(openai.BadRequestError, match="seed"):
                client.chat.completions.create(model="tiny", messages=HI, max_tokens=2, seed=2**64 - 1, n=2)
        _still_answers(client)


@pytest.mark.parametrize("value", [b"NaN", b"Infinity"])
def test_a_non_finite_temperature_is_a_400(servers, value):
    for _name, url, client in servers:
        body = b'{"model": "tiny", "max_tokens": 2, "temperature": ' + value + b', "messages": [{"role": "user", ' \
               b'"content": "hi"}]}'
        reply = _raw(url, body)
        assert reply.status_code == 400 and "temperature" in reply.json()["error"]["message"]
        _still_answers(client)


@pytest.mark.parametrize("where", ["content", "tool", "stop"])
def test_a_lone_surrogate_is_a_400_naming_the_field(servers, where):
    body = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    if where == "content":
        body["messages"][0]["content"] = "a\ud800b"
        param = "messages[0].content"
    elif where == "tool":
        body["tools"] = [{"type": "function", "function": {"name": "f\udfff", "parameters": {}}}]
        param = "tools[0].function.name"
    else:
        body["stop"] = ["x\ud800"]
        param = "stop[0]"
    for _name, url, client in servers:
        for stream in (False, True):
            reply = _raw(url, json.dumps({**body, "stream": stream}).encode())  # json escapes it as \ud800
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["param"] == param
        _still_answers(client)


def test_a_surrogate_pair_is_one_character(servers):
    body = b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "a\\ud83d\\ude00b"}]}'
    for _name, url, _client in servers:
        assert _raw(url, body).status_code == 200


@pytest.mark.parametrize("stop", [["x"] * 100_000, ["x" * 100_000]])
def test_stop_strings_are_bounded(servers, stop):
    _refused_then_answers(servers, "stop", stop=stop)


def test_a_request_the_engine_cannot_start_fails_alone(tiny_dir):
    """A setting torch refuses inside the engine fails its own request; the worker goes on."""
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.batching import BatchingEngine
    from agents.engines.hf import HFEngine

    engine = BatchingEngine(HFEngine(str(tiny_dir)))
    try:
        bad = SamplingParams(max_new_tokens=2)
        object.__setattr__(bad, "seed", 2**70)  # past the checks, as a caller's own object could be
        failed = engine.submit(GenerationRequest(token_ids=(5, 6), params=bad)).result(timeout=60)
        assert failed.finish_reason == "error" and "Overflow" in failed.error
        fine = engine.submit(GenerationRequest(token_ids=(5, 6), params=SamplingParams(max_new_tokens=2)))
        assert fine.result(timeout=60).finish_reason in ("length", "eos", "stop")
    finally:
        engine.close()


def test_a_body_over_the_limit_is_a_413_before_it_is_read(tiny_dir):
    """Both servers refuse a body past ``max_body_bytes`` (64 MiB by default) in OpenAI's shape,
    declared or sent chunked; a 200 MB body was read, parsed and answered."""
    from agents.engines.hf import HFEngine
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.local import LocalBackend
    from agents.server import create_app, serve_in_thread
    from coa_envs.service.running import serve_in_thread as serve_app

    engine = HFEngine(str(tiny_dir))
    gateway = Gateway(LocalBackend(HFEngine(str(tiny_dir))), "tiny")
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny", max_body_bytes=4096)) as serve_url, \
            serve_app(create_gateway_app(gateway, max_body_bytes=4096)) as gateway_url:
        for url in (serve_url, f"{gateway_url}/v1"):
            client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(model="tiny", messages=HI, max_tokens=2, user="u" * 5000)
            assert raised.value.status_code == 413 and "limit of 4096 bytes" in raised.value.message
            chunked = httpx.post(f"{url}/chat/completions", content=iter([b'{"messages": "', b"x" * 5000, b'"}']),
                                 headers={"content-type": "application/json"}, timeout=60)
            assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
            _still_answers(client)


def test_gateway_session_bodies_with_a_lone_surrogate_are_refused(tiny_dir, tmp_path):
    """Metadata, a finish's answer or error, a tool's arguments: each is a 400 naming the field.
    Kept, they failed the session's finish and its trajectories with 500s."""
    from agents.engines.hf import HFEngine
    from tests.agents.gateway.conftest import served_gateway

    engine = HFEngine(str(tiny_dir))
    with served_gateway(engine, engine.tokenizer, "tiny", out=tmp_path / "t.jsonl",
                        allow_client_reward=True) as (url, _gateway), httpx.Client(base_url=url, timeout=60) as http:
        def post(path: str, body: bytes) -> httpx.Response:
            return http.post(path, content=body, headers={"content-type": "application/json"})

        refused = post("/sessions", b'{"session_id": "a", "metadata": {"k": "\\ud800"}}')
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "metadata.k"
        assert post("/sessions", b'{"session_id": "a"}').status_code == 201
        for body, param in ((b'{"answer": "\\ud800", "reward": 1}', "answer"), (b'{"error": "x\\udc00"}', "error")):
            reply = post("/sessions/a/finish", body)
            assert reply.status_code == 400 and reply.json()["error"]["param"] == param
        tool = post("/sessions/a/tools/code", b'{"arguments": {"code": "\\ud800"}}')
        assert tool.status_code == 400 and tool.json()["error"]["param"] == "arguments.code"
        finished = post("/sessions/a/finish", b'{"answer": "ok \\ud83d\\ude00", "reward": 1}')
        assert finished.status_code == 200 and finished.json()["reward"] == 1.0
        assert http.get("/sessions/a/trajectories").status_code == 200
    assert "ok \U0001f600" in (tmp_path / "t.jsonl").read_text(encoding="utf-8")
