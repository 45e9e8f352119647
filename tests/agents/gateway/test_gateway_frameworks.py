"""A third-party framework, unchanged, through the gateway: smolagents' ToolCallingAgent reads the
gateway's ``tool_calls``, runs the env's tool through the session, and its final answer is
scored by the env; every call it made is in the session's token-exact trajectories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.agents.gateway.conftest import SpyEngine, assert_token_exact, served_gateway

pytest.importorskip("smolagents", reason="needs the [agents] extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))


def _call(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call><|im_end|>"


def test_smolagents_tool_calling_agent_plays_an_env_task(tiny_tokenizer):
    import gymnasium as gym
    from gateway_smolagents import smolagents_agent

    import coa_envs  # noqa: F401
    from agents.engines.hf import HFEngine
    from agents.gateway.client import open_task
    from tests.agents.conftest import make_scripted_lm

    task_record = gym.make("coa/SynthHop-v0").unwrapped.tasks[1]
    gold = task_record.gold[0]
    turns = [_call("wiki_search", {"query": task_record.question}), _call("final_answer", {"answer": gold})]
    engine = SpyEngine(HFEngine(make_scripted_lm(tiny_tokenizer, turns), tiny_tokenizer))
    with served_gateway(engine, tiny_tokenizer, "policy") as (url, gateway):
        task = open_task(url, env_id="coa/SynthHop-v0", task_index=1)
        assert task.question == task_record.question
        answer = smolagents_agent(task, max_steps=3)
        outcome = task.finish(answer)
        trajectories = gateway.session(task.session_id).trajectories
    assert answer == gold and (outcome["reward"], outcome["status"]) == (1.0, "ok")
    assert trajectories[0].tool_calls == {"wiki_search": 1}
    assert len(engine.records) == 2
    assert_token_exact(trajectories, engine.records, tiny_tokenizer)
