"""LLMPolicy renders the CoA system prompt through the model's chat template; the openai
engine never has more requests in flight than its concurrency cap."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from agents.engines import Completion, GenerationRequest, SamplingParams
from agents.engines.hf import HFEngine
from agents.policy import LLMPolicy, render_system_prompt


def test_policy_applies_chat_template_and_configurable_coa_prompt(tiny_tokenizer, tiny_model):
    env = gym.make("coa/SynthHop-v0")
    observation, info = env.reset(options={"task_index": 0})
    engine = HFEngine(tiny_model, tiny_tokenizer)
    default = LLMPolicy(engine)
    default.reset(observation, info)
    # the env's own system message (the seed's QA prompt with the env's tools) by default
    assert default.prompt_text.startswith("<|im_start|>system\n" + info["messages"][0]["content"])
    assert default.prompt_text.endswith("<|im_start|>assistant\n")
    assert default.prompt_ids == tiny_tokenizer.encode(default.prompt_text, add_special_tokens=False)
    web = LLMPolicy(engine, system_prompt="web")
    web.reset(observation, info)
    rendered = render_system_prompt("web", ["wiki_search"])
    assert "{tools}" not in rendered and "wiki_search" in rendered
    assert web.prompt_text.startswith("<|im_start|>system\n" + rendered + "<|im_end|>")
    custom = LLMPolicy(engine, system_prompt="Answer briefly. Tools: {tools}")
    custom.reset(observation, info)
    assert custom.prompt_text.startswith("<|im_start|>system\nAnswer briefly. Tools: - ")
    # the user turn (the question) is kept as the env rendered it
    assert info["messages"][-1]["content"] in web.prompt_text
    env.close()


class _SlowCountingEngine:
    """A local engine that takes 0.5 s per call and records how many requests each call got."""

    name = "hf"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    def generate(self, requests, params):
        with self.lock:
            self.sizes.append(len(requests))
        time.sleep(0.5)
        return [Completion(text="ok", token_ids=(5,), logprobs=(-0.1,)) for _ in requests]


def test_openai_engine_respects_its_concurrency_cap(tiny_tokenizer):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from agents.engines.openai_compat import OpenAIEngine
    from agents.server import create_app, serve_in_thread

    backend = _SlowCountingEngine(tiny_tokenizer)
    with serve_in_thread(create_app(backend, tiny_tokenizer, "slow")) as url:
        capped = OpenAIEngine(url, "slow", tokenizer=tiny_tokenizer, concurrency=2, max_retries=0)
        done = capped.generate([GenerationRequest(text=f"q{i}") for i in range(6)],
                               SamplingParams(max_new_tokens=4))
        capped.close()
        assert all(c.ok for c in done) and sum(backend.sizes) == 6
        assert max(backend.sizes) <= 2  # the server batches whatever is in flight: never > 2
        backend.sizes.clear()
        wide = OpenAIEngine(url, "slow", tokenizer=tiny_tokenizer, concurrency=6, max_retries=0)
        wide.generate([GenerationRequest(text=f"q{i}") for i in range(6)], SamplingParams(max_new_tokens=4))
        wide.close()
        assert max(backend.sizes) > 2  # the cap, not the server, limited the first run
