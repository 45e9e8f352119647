"""Native function calling on the model side: LLMPolicy plays a ``protocol: tools`` env with a
local engine (token-exact, observations masked), ``coa serve`` answers ``tools`` requests
with ``tool_calls``, and the ``openai`` engine drives an episode through it in both modes."""

from __future__ import annotations

import json

import gymnasium as gym
import httpx
import pytest

pytest.importorskip("fastapi", reason="coa serve needs the [serve] extra")

import coa_envs  # noqa: F401
from agents.engines import SamplingParams
from agents.engines.hf import HFEngine
from agents.episode import run_episode
from agents.policy import LLMPolicy
from agents.server import create_app, serve_in_thread
from agents.toolcalls import observation_text, render_prompt
from tests.agents.test_token_exact import _assert_token_exact

CALL = '<tool_call>\n{"name": "code", "arguments": {"code": "print(6 * 7)"}}\n</tool_call><|im_end|>'
ANSWER = "It is <answer>\\boxed{42}</answer><|im_end|>"


def _env():
    return gym.make("coa/AIME24-v1", protocol="tools")


def test_local_policy_plays_a_tools_episode_token_exact(tiny_tokenizer, scripted_lm):
    env = _env()
    policy = LLMPolicy(HFEngine(scripted_lm([CALL, ANSWER]), tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=64, temperature=0))
    trajectory = run_episode(env, policy, seed=0)
    assert trajectory.status == "ok" and trajectory.answer == "\\boxed{42}"
    assert trajectory.tool_calls == {"code": 1}
    policy.fill_trajectory(trajectory)
    _assert_token_exact(trajectory, tiny_tokenizer)
    generated, observation, final = trajectory.segments
    assert generated.text == CALL and final.text == ANSWER
    # The observation is the template's own rendering of the tool result, masked out.
    assert "<tool_response>\n42\n</tool_response>" in observation.text
    assert observation.text.endswith("<|im_start|>assistant\n")
    # The whole episode is what the chat template renders for the conversation.
    _, info = env.reset(seed=0)
    reply = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1_0", "type": "function", "function": {
        "name": "code", "arguments": json.dumps({"code": "print(6 * 7)"})}}]}
    tool = {"role": "tool", "tool_call_id": "call_1_0", "name": "code", "content": "42"}
    prompt = render_prompt(tiny_tokenizer, info["messages"], info["tool_schemas"])
    assert trajectory.prompt_text == prompt
    assert observation.text == observation_text(tiny_tokenizer, info["messages"], reply, [tool],
                                                info["tool_schemas"])
    env.close()


def test_a_call_the_model_garbled_gets_a_correction(tiny_tokenizer, scripted_lm):
    env = _env()
    garbled = '<tool_call>\n{"name": "code", "arguments": {oops}}\n</tool_call><|im_end|>'
    policy = LLMPolicy(HFEngine(scripted_lm([garbled, ANSWER]), tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=64, temperature=0))
    trajectory = run_episode(env, policy, seed=0)
    assert trajectory.status == "ok" and trajectory.tool_errors == {"action": 1}
    assert "no function name" in trajectory.segments[1].text
    env.close()


def test_coa_serve_returns_tool_calls(tiny_tokenizer, scripted_lm):
    tools = [{"type": "function", "function": {"name": "code", "description": "run",
                                               "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "compute"}]
    app = create_app(HFEngine(scripted_lm([CALL, "plain words<|im_end|>"]), tiny_tokenizer), tiny_tokenizer, "tiny")
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        reply = http.post("/chat/completions", json={"model": "tiny", "messages": messages, "tools": tools,
                                                     "max_tokens": 64}).json()
        choice = reply["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        (call,) = choice["message"]["tool_calls"]
        assert call["function"] == {"name": "code", "arguments": json.dumps({"code": "print(6 * 7)"})}
        assert call["id"].startswith("call_")
        # history with the call and its result renders; a plain reply has no tool_calls
        history = [*messages, choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "42"}]
        plain = http.post("/chat/completions", json={"messages": history, "tools": tools, "max_tokens": 64}).json()
        assert plain["choices"][0]["message"] == {"role": "assistant", "content": "plain words"}
        assert plain["choices"][0]["finish_reason"] == "stop"


def test_coa_serve_refuses_tools_for_a_template_without_them(tiny_tokenizer, tiny_model):
    from copy import deepcopy

    plain = deepcopy(tiny_tokenizer)
    plain.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
                           "{% if add_generation_prompt %}assistant: {% endif %}")
    with serve_in_thread(create_app(HFEngine(tiny_model, plain), plain, "plain")) as url:
        refused = httpx.post(f"{url}/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
            "tools": [{"type": "function", "function": {"name": "code", "parameters": {}}}]})
        assert refused.status_code == 400 and "does not render tools" in refused.text


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_openai_engine_plays_a_tools_episode_through_coa_serve(tiny_tokenizer, scripted_lm, mode):
    from agents.engines.openai_compat import OpenAIEngine

    env = _env()
    app = create_app(HFEngine(scripted_lm([CALL, ANSWER]), tiny_tokenizer), tiny_tokenizer, "tiny")
    with serve_in_thread(app) as url:
        engine = OpenAIEngine(url, "tiny", mode=mode, tokenizer=tiny_tokenizer)
        policy = LLMPolicy(engine, sampling=SamplingParams(max_new_tokens=64, temperature=0))
        trajectory = run_episode(env, policy, seed=0)
        policy.fill_trajectory(trajectory)
        engine.close()
    assert trajectory.status == "ok" and trajectory.answer == "\\boxed{42}"
    assert trajectory.tool_calls == {"code": 1}
    if mode == "completions":  # ids go over the wire: the episode stays token-exact
        _assert_token_exact(trajectory, tiny_tokenizer)
    else:  # the server renders and parses: a text record of the messages
        assert json.loads(trajectory.segments[1].text)[0]["content"] == "42"
    env.close()
