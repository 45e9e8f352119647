"""``coa serve`` is a real OpenAI-compatible server: the ``openai`` engine and the official
``openai`` client drive it on 127.0.0.1 and get what the in-process engine samples."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
pytest.importorskip("openai", reason="needs the [llm] extra")

import coa_envs  # noqa: F401
from agents.engines import GenerationRequest, SamplingParams
from agents.engines.hf import HFEngine
from agents.engines.openai_compat import OpenAIEngine
from agents.episode import run_episode
from agents.policy import LLMPolicy
from agents.server import create_app, serve_in_thread


@pytest.fixture(scope="module")
def served(tiny_dir):
    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as url:
        yield url, engine


def test_models_endpoint_lists_the_model(served):
    import openai

    url, _ = served
    client = openai.OpenAI(base_url=url, api_key="x")
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_http_episode_matches_in_process_and_is_token_exact(served, tiny_tokenizer):
    url, local = served
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0)
    remote = OpenAIEngine(url, "tiny", tokenizer=tiny_tokenizer, max_retries=0)
    results = []
    for engine in (remote, local):
        env = gym.make("coa/MATH500-v1", max_turns=3)
        policy = LLMPolicy(engine, tiny_tokenizer, sampling=sampling, seed=11)
        trajectory = run_episode(env, policy, options={"task_index": 2})
        policy.fill_trajectory(trajectory)
        env.close()
        results.append(trajectory)
    over_http, in_process = results
    assert over_http.status == in_process.status
    assert over_http.input_ids() == in_process.input_ids()
    assert over_http.has_token_ids
    text = over_http.prompt_text + over_http.response_text
    assert tiny_tokenizer.decode(over_http.input_ids(), skip_special_tokens=False) == text
    assert over_http.sampled_logprobs() == pytest.approx(in_process.sampled_logprobs(), abs=1e-4)
    remote.close()


def test_chat_mode_returns_text_and_logprobs(served):
    url, _ = served
    engine = OpenAIEngine(url, "tiny", mode="chat", max_retries=0)
    request = GenerationRequest(messages=({"role": "user", "content": "2+2?"},))
    (completion,) = engine.generate([request], SamplingParams(max_new_tokens=8, seed=1))
    assert completion.ok and completion.finish_reason in ("length", "eos", "stop")
    assert len(completion.logprobs) >= 1
    # continue_final_message: a prefix is continued, not restarted
    follow = GenerationRequest(messages=request.messages, prefix="<think>\n")
    (more,) = engine.generate([follow], SamplingParams(max_new_tokens=4, seed=1))
    assert more.ok
    engine.close()


def test_streaming_equals_non_streaming(served):
    import openai

    url, _ = served
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    args = {"model": "tiny", "prompt": "<|im_start|>assistant\n", "max_tokens": 24, "seed": 5}
    whole = client.completions.create(**args).choices[0].text
    pieces = [c.choices[0].text for c in client.completions.create(stream=True, **args)]
    assert "".join(pieces) == whole and len(pieces) > 2
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
            "seed": 2}
    message = client.chat.completions.create(**chat).choices[0].message.content
    deltas = [c.choices[0].delta.content or "" for c in
              client.chat.completions.create(stream=True, **chat)]
    assert "".join(deltas) == message


def test_stop_strings_follow_openai_semantics(tiny_tokenizer, scripted_lm):
    import openai

    turn = "<think>\nthe city\n</think>\n<code>print(1+1)</code>\n<observation>\n"
    engine = HFEngine(scripted_lm([turn] * 4), tiny_tokenizer)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "scripted")) as url:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        args = {"model": "scripted", "prompt": "q", "max_tokens": 40, "stop": ["</code>"]}
        plain = client.completions.create(**args).choices[0]
        assert plain.text == "<think>\nthe city\n</think>\n<code>print(1+1)"
        assert plain.finish_reason == "stop" and plain.model_extra["stop_reason"] == "</code>"
        kept = client.completions.create(extra_body={"include_stop_str_in_output": True},
                                         **args).choices[0]
        assert kept.text.endswith("print(1+1)</code>")
        streamed = client.completions.create(stream=True, **args)
        assert "".join(c.choices[0].text for c in streamed) == plain.text
        # The openai engine without server extensions restores the cut-off closing tag.
        bare = OpenAIEngine(url, "scripted", tokenizer=tiny_tokenizer, server_extensions=False,
                            max_retries=0)
        (completion,) = bare.generate([GenerationRequest(text="q")],
                                      SamplingParams(max_new_tokens=40))
        assert completion.action_text.endswith("<code>print(1+1)</code>")
        assert completion.stop_string == "</code>" and completion.token_ids == ()


def test_unreachable_endpoint_and_timeouts_are_error_completions(served):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "tiny", mode="chat", max_retries=0)
    (completion,) = down.generate([GenerationRequest(text="q")], SamplingParams())
    assert not completion.ok and completion.error_kind == "engine_http_error"
    url, _ = served
    slow = OpenAIEngine(url, "tiny", mode="chat", max_retries=0, timeout_s=0.0005)
    (completion,) = slow.generate([GenerationRequest(text="q")],
                                  SamplingParams(max_new_tokens=200))
    assert not completion.ok and completion.error_kind == "engine_timeout"


def test_context_overflow_is_a_400(tiny_tokenizer, tiny_model):
    engine = HFEngine(tiny_model, tiny_tokenizer, max_context=16)
    with serve_in_thread(create_app(engine, tiny_tokenizer, "tiny")) as url:
        client = OpenAIEngine(url, "tiny", tokenizer=tiny_tokenizer, max_retries=0)
        (completion,) = client.generate([GenerationRequest(token_ids=tuple(range(3, 40)))],
                                        SamplingParams())
        assert completion.error_kind == "context_overflow"


@pytest.mark.slow
def test_coa_serve_cli_starts_and_answers(tmp_path):
    """The real command in a subprocess: writes the tiny model, serves, answers, stops."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "coa_cli.main", "serve", "--tiny", str(tmp_path / "m"),
               "--port", str(port), "--served-model-name", "tiny-cli"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if process.poll() is not None:
                raise AssertionError(process.stdout.read().decode())
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        models = httpx.get(f"{base}/v1/models").json()
        assert models["data"][0]["id"] == "tiny-cli"
        reply = httpx.post(f"{base}/v1/chat/completions", json={
            "model": "tiny-cli", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5, "logprobs": True}).json()
        assert len(reply["choices"][0]["logprobs"]["content"]) >= 1
    finally:
        process.terminate()
        process.wait(timeout=30)
