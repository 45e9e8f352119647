"""The seed's prompts, in our words: selectable per env, every tag they teach parses."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers ids)
from coa_envs.prompts import available_prompts, render_system_prompt
from coa_envs.protocol import RESERVED_TAGS, parse_turn, tool_tags

CASES = [("seed_mhqa", "coa/SynthHop-v0", {}), ("seed_web", "coa/MiniWeb-v0", {}),
         ("seed_code", "coa/LiveCodeBench-v5", {"data_path": "tests/sandbox/fixtures/livecodebench_oracle.jsonl"})]


@pytest.mark.parametrize(("prompt", "env_id", "kwargs"), CASES)
def test_a_seed_prompt_is_the_envs_system_message_with_its_tools(prompt, env_id, kwargs):
    assert prompt in available_prompts()
    env = gym.make(env_id, prompt=prompt, **kwargs)
    try:
        _, info = env.reset(seed=0)
        system = info["messages"][0]["content"]
    finally:
        env.close()
    assert "{tools}" not in system and system == render_system_prompt(prompt, info["tools"])
    for tool in info["tools"]:
        assert f"<{tool}>" in system  # the env's own tools are listed, each in its call syntax


@pytest.mark.parametrize("prompt", [c[0] for c in CASES])
def test_every_tag_a_seed_prompt_teaches_is_one_the_protocol_accepts(prompt):
    text = render_system_prompt(prompt, ["wiki_search", "web_search", "crawl_page", "code"])
    taught = set(re.findall(r"</?([a-z_]+)>", text))
    assert taught and taught <= RESERVED_TAGS | set(tool_tags())


def test_the_seed_multi_answer_format_parses_and_scores_with_multi_em():
    from coa_envs.rewards.multi_em import build
    from coa_envs.types import Task

    turn = parse_turn("<think>both found</think><answer>first|second</answer>")
    assert turn.ok and build(require_all=True)(turn.answer, Task("t", "q", gold=("first", "second"))).score == 1.0
