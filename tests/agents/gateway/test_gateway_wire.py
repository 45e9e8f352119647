"""The gateway speaks OpenAI's wire format as the official client and raw HTTP see it: errors,
streamed chunks ending in ``[DONE]``, usage, logprobs, sessions by URL path or header."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.agents.gateway.conftest import served_gateway


@pytest.fixture(scope="module")
def gateway(tiny_model, tiny_tokenizer, tmp_path_factory):
    from agents.engines.hf import HFEngine

    out = tmp_path_factory.mktemp("gw") / "trajectories.jsonl"
    with served_gateway(HFEngine(tiny_model, tiny_tokenizer), tiny_tokenizer, "tiny", out=out) as (url, gw):
        yield url, gw, out


def _client(url, sid="wire"):
    import openai

    return openai.OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="x", max_retries=0)


HELLO = [{"role": "user", "content": "hello"}]


def test_errors_use_openais_schema_and_statuses(gateway):
    import openai

    url, _, _ = gateway
    client = _client(url)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert missing.value.body["code"] == "model_not_found" and "gpt-4o" in missing.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", messages=HELLO, frequency_penalty=0.5)
    assert refused.value.body["param"] == "frequency_penalty"
    with pytest.raises(openai.BadRequestError) as alternatives:
        client.chat.completions.create(model="tiny", messages=HELLO, logprobs=True, top_logprobs=21)
    assert alternatives.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model="tiny", messages=HELLO, extra_body={"mirostat": 2})
    assert unknown.value.body["code"] == "unsupported_parameter"
    raw = httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny"})
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "messages"
    assert set(raw.json()["error"]) == {"message", "type", "code", "param"}
    for messages, param in (([{"content": "hi"}], "messages[0].role"), ([{"role": "robot", "content": "hi"}],
                            "messages[0].role"), ([*HELLO, {"role": "user"}], "messages[1].content")):
        with pytest.raises(openai.BadRequestError) as malformed:
            client.chat.completions.create(model="tiny", messages=messages)
        assert malformed.value.body["param"] == param
    # neutral values of unimplemented fields are accepted (they change nothing)
    ok = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2, frequency_penalty=0,
                                        response_format={"type": "text"}, user="u1")
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_a_finished_session_refuses_more_calls(gateway):
    import openai

    url, _, _ = gateway
    client = _client(url, "done-1")
    client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2)
    assert httpx.post(f"{url}/sessions/done-1/finish", json={}).status_code == 200
    with pytest.raises(openai.ConflictError) as conflict:
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2)
    assert conflict.value.body["code"] == "session_finished"


def test_the_json_reply_has_openais_shape(gateway):
    url, _, _ = gateway
    body = httpx.post(f"{url}/sessions/shape/v1/chat/completions",
                      json={"model": "tiny", "messages": HELLO, "max_tokens": 5, "logprobs": True}).json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    entries = choice["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"]
    assert {"token", "logprob", "bytes", "top_logprobs"} <= set(entries[0])
    sent = b"".join(bytes(entry["bytes"]) for entry in entries).decode(errors="replace")
    assert sent.startswith(choice["message"]["content"])  # each token's own bytes (the eos may follow)
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_stream_is_server_sent_chunks_ending_in_done(gateway):
    url, _, _ = gateway
    request = {"model": "tiny", "messages": HELLO, "max_tokens": 6, "stream": True,
               "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{url}/sessions/sse/v1/chat/completions", json=request) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-session-id"] == "sse"
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert all(c["usage"] is None for c in chunks[:-1])


def test_sessions_by_header_and_one_call_sessions(gateway):
    import openai

    url, gw, out = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0,
                           default_headers={"X-Session-Id": "by-header"})
    client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=3)
    assert len(gw.session("by-header").calls) == 1 and not gw.session("by-header").finished
    plain = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    raw = plain.chat.completions.with_raw_response.create(model="tiny", messages=HELLO, max_tokens=3)
    one_call = gw.session(raw.headers["x-session-id"])
    assert one_call.finished and len(one_call.calls) == 1  # finished and written at once
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert one_call.session_id in {row["info"]["gateway"]["session_id"] for row in written}
    assert [m.id for m in plain.models.list().data] == ["tiny"]
    assert plain.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        plain.models.retrieve("gpt-4o")


def test_what_the_local_model_cannot_honour_is_refused_not_dropped(gateway):
    from tests.agents.test_serve_openai_client import REFUSED_REQUESTS, refused_param

    url, _, _ = gateway
    client = _client(url, "refusals")
    for request, param in REFUSED_REQUESTS:
        assert refused_param(client, {**request, "model": "tiny"}) == param
    # harmless choices without tools still work
    reply = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2, tool_choice="none")
    assert reply.choices[0].finish_reason in ("stop", "length")
