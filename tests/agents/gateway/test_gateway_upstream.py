"""Pass-through: the gateway in front of another OpenAI-compatible server (here ``coa serve``,
a real server on 127.0.0.1) records messages, and token ids and logprobs when the upstream
returns them; the client gets the upstream's answer without fields it did not ask for."""

from __future__ import annotations

import contextlib

import httpx
import pytest


@contextlib.contextmanager
def _through_upstream(tiny_model, tiny_tokenizer, token_ids: bool, tokenizer=None, upstream_model="served-tiny"):
    from agents.engines.hf import HFEngine
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.upstream import UpstreamBackend
    from agents.server import create_app, serve_in_thread
    from coa_envs.service.running import serve_in_thread as serve_app

    upstream = create_app(HFEngine(tiny_model, tiny_tokenizer), tiny_tokenizer, "served-tiny")
    with serve_in_thread(upstream) as upstream_url:
        backend = UpstreamBackend(upstream_url, model=upstream_model, token_ids=token_ids, tokenizer=tokenizer)
        gateway = Gateway(backend, "policy")
        with serve_app(create_gateway_app(gateway)) as url:
            yield url, gateway


def _conversation(url: str, sid: str, stream: bool) -> list[dict]:
    import openai

    client = openai.OpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "hello"}]
    replies = []
    for turn in range(2):
        if stream:
            chunks = list(client.chat.completions.create(model="policy", messages=messages, max_tokens=5,
                                                         stream=True))
            assert all(not c.choices or c.choices[0].logprobs is None for c in chunks)  # not asked for
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=5)
            assert reply.choices[0].logprobs is None and "token_ids" not in (reply.choices[0].model_extra or {})
            text = reply.choices[0].message.content
        replies.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"more {turn}"}]
    return replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_pass_through_records_the_upstreams_token_ids(tiny_model, tiny_tokenizer, stream):
    with _through_upstream(tiny_model, tiny_tokenizer, token_ids=True, tokenizer=tiny_tokenizer) as (url, gw):
        replies = _conversation(url, "up-1", stream)
        trajectories = gw.finish(gw.session("up-1"))
    calls = gw.session("up-1").snapshot()
    assert [c.source for c in calls] == ["upstream", "upstream"]
    assert all(c.prompt_ids and c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in calls)
    for trajectory in trajectories:
        assert trajectory.info["gateway"]["tokens"] == "exact"
    generated = [s for t in trajectories for s in t.segments if s.kind == "generated"]
    assert [s.token_ids for s in generated] == [c.completion_ids for c in calls]
    assert [tiny_tokenizer.decode(s.token_ids).replace("<|im_end|>", "") for s in generated] == replies


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_hosted_api_without_ids_is_recorded_as_text(tiny_model, tiny_tokenizer, stream):
    with _through_upstream(tiny_model, tiny_tokenizer, token_ids=False) as (url, gw):
        replies = _conversation(url, "up-2", stream)
        (trajectory,) = gw.finish(gw.session("up-2"))
    assert trajectory.info["gateway"]["tokens"] == "text_only" and not trajectory.has_token_ids
    assert [s.text for s in trajectory.segments if s.kind == "generated"] == replies
    observations = [s.text for s in trajectory.segments if s.kind == "observation"]
    assert observations == ["\n[user] more 0"]
    assert trajectory.prompt_messages == [{"role": "user", "content": "hello"}]


def test_upstream_errors_reach_the_client_with_their_status(tiny_model, tiny_tokenizer):
    """The gateway forwards the client's model name (no --upstream-model): the upstream does not
    serve 'policy' and says so; nothing is recorded, and the session is not left busy."""
    with _through_upstream(tiny_model, tiny_tokenizer, token_ids=True, upstream_model=None) as (url, gw):
        for stream in (False, True):
            response = httpx.post(f"{url}/sessions/up-3/v1/chat/completions",
                                  json={"model": "policy", "messages": [{"role": "user", "content": "x"}],
                                        "max_tokens": 2, "stream": stream})
            assert response.status_code == 404
            error = response.json()["error"]
            assert error["message"].startswith("upstream: ") and error["code"] == "model_not_found"
        assert gw.session("up-3").calls == [] and gw.session("up-3").wait_idle(1.0)


def test_line_separators_in_sampled_text_survive_every_sse_reader(tiny_tokenizer):
    """U+2028 and U+0085 are line breaks to ``str.splitlines`` (so to httpx's ``iter_lines``):
    ``coa serve`` sends them escaped, and the gateway reads an upstream's events by SSE's own
    line breaks, so a sampled separator neither cuts an event in two nor breaks the stream."""
    import json

    import openai

    from agents.engines.hf import HFEngine
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.upstream import UpstreamBackend
    from agents.server import create_app, serve_in_thread
    from coa_envs.service.running import serve_in_thread as serve_app
    from tests.agents.conftest import make_scripted_lm

    said = "one\u2028two\u0085three\u2029four"
    engine = HFEngine(make_scripted_lm(tiny_tokenizer, [said + "<|im_end|>"]), tiny_tokenizer)
    request = {"model": "served-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40,
               "stream": True}
    with serve_in_thread(create_app(engine, tiny_tokenizer, "served-tiny")) as upstream_url:
        with httpx.stream("POST", f"{upstream_url}/chat/completions", json=request, timeout=60) as response:
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: {")]
        assert "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events) == said
        backend = UpstreamBackend(upstream_url, model="served-tiny", token_ids=True, tokenizer=tiny_tokenizer)
        gateway = Gateway(backend, "policy")
        with serve_app(create_gateway_app(gateway)) as url:
            client = openai.OpenAI(base_url=f"{url}/sessions/sep/v1", api_key="x", max_retries=0)
            chunks = list(client.chat.completions.create(model="policy", messages=request["messages"],
                                                         max_tokens=40, stream=True))
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == said
            (trajectory,) = gateway.finish(gateway.session("sep"))
    assert trajectory.info["gateway"]["tokens"] == "exact"
