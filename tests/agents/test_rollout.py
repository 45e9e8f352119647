"""The concurrent rollout runner: same results as sequential, bad output contained, resumable."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from agents.engines import SamplingParams
from agents.engines.hf import HFEngine
from agents.policy import LLMPolicy
from agents.rollout import play_episode, policy_factory, run_rollouts
from agents.trajectory import read_trajectories
from coa_envs.rewards import math_verify
from coa_envs.types import Task


def _math_env(**overrides):
    options = {"max_turns": 2, **overrides}
    return lambda: gym.make("coa/MATH500-v1", **options)


def test_concurrent_batched_rollouts_equal_sequential(tiny_tokenizer, tiny_model):
    """Per-episode seeds make results independent of scheduling and batch composition."""
    policy = LLMPolicy(HFEngine(tiny_model, tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=8))
    runs = {}
    for concurrency in (1, 3):
        factory, close = policy_factory(policy)
        result = run_rollouts(_math_env(), factory, task_indices=range(2), samples=2,
                              concurrency=concurrency, seed=5, end_on_length=False)
        close()
        runs[concurrency] = {(t.task_id, t.sample_index): t for t in result.trajectories}
    assert len(runs[1]) == 4 and runs[1].keys() == runs[3].keys()
    for key, trajectory in runs[1].items():
        assert runs[3][key].input_ids() == trajectory.input_ids()
        assert runs[3][key].has_token_ids
    # Two samples of one task differ (distinct seeds), as they must for pass@k.
    assert runs[1][(key[0], 0)].response_ids() != runs[1][(key[0], 1)].response_ids()


class _MisbehavingAgent:
    """Picks a failure mode from the task index it is given (one mode per episode)."""

    def __init__(self, env, mode: str, scripted_policy=None):
        self.mode, self.policy = mode, scripted_policy
        self.last_completion = None

    def reset(self, observation, info):
        if self.policy is not None:
            self.policy.reset(observation, info)

    def act(self, observation, info):
        if self.mode == "empty":
            return ""
        if self.mode == "tools":
            # an unavailable tool still counts as a call, and answers instantly
            return f"<web_search>q{info.get('turn', 0)}</web_search>"
        if self.mode == "raise":
            raise RuntimeError("agent bug")
        if self.mode == "slow":
            time.sleep(60)  # abandoned on a daemon thread when the deadline passes
            return "<answer>1</answer>"
        if self.mode == "unclosed":
            action = self.policy.act(observation, info)
            self.last_completion = self.policy.last_completion
            return action
        return "<answer>42</answer>"


def test_bad_outputs_end_their_episode_with_a_status(tiny_tokenizer, scripted_lm, tmp_path):
    from agents.engines.openai_compat import OpenAIEngine

    unclosed = LLMPolicy(HFEngine(scripted_lm(["<think>\nthe city river capital born"]),
                                  tiny_tokenizer), sampling=SamplingParams(max_new_tokens=4))
    down = OpenAIEngine("http://127.0.0.1:9/v1", "m", mode="chat", max_retries=0)
    modes = ["ok", "empty", "tools", "raise", "slow", "unclosed", "engine"]

    def agent_factory(env, seed):
        # jobs are (task i, sample 0); the seed identifies the job deterministically
        mode = modes[next(j for j in jobs if j[1] == seed)[0]]
        if mode == "engine":
            return LLMPolicy(down, tiny_tokenizer)
        return _MisbehavingAgent(env, mode, unclosed if mode == "unclosed" else None)

    from agents.rollout import episode_seed

    jobs = [(i, episode_seed(0, i, 0)) for i in range(len(modes))]
    # Start the math reward's helper process first: its cold start (sympy's LaTeX parser) took
    # past the 8 s episode deadline on a loaded machine, and the "ok" episode read error:timeout.
    assert math_verify.build()("\\boxed{1}", Task("warm", "q", gold=("1",))).score == 1.0
    result = run_rollouts(_math_env(max_turns=100), agent_factory,
                          task_indices=range(len(modes)), concurrency=3,
                          episode_timeout_s=8, max_tool_calls=5, out=tmp_path / "t.jsonl")
    env = _math_env()()
    by_task = {t.task_id: t for t in result.trajectories}
    status = {mode: by_task[env.unwrapped.tasks[i].task_id].status for i, mode in enumerate(modes)}
    env.close()
    assert status == {
        "ok": "ok",
        "empty": "error:empty_output",
        "tools": "truncated:max_tool_calls",
        "raise": "error:agent",
        "slow": "error:timeout",
        "unclosed": "truncated:max_new_tokens",
        "engine": "error:engine_http_error",
    }
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == len(modes)
    assert json.loads(lines[0])["status"] in status.values()


def test_resume_continues_after_a_crash(tmp_path):
    out = tmp_path / "run.jsonl"

    def answer(env, seed):
        from agents.base import CallableAgent

        return CallableAgent(lambda obs, info: "<answer>7</answer>")

    first = run_rollouts(_math_env(), answer, task_indices=range(4), samples=2, out=out)
    assert len(first.trajectories) == 8
    # Simulate a crash: drop the last three lines and tear the one before.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    resumed = run_rollouts(_math_env(), answer, task_indices=range(4), samples=2, out=out,
                           resume=True)
    assert resumed.skipped == 4
    records = list(read_trajectories(out))
    keys = [(t.task_id, t.sample_index) for t in records]
    assert len(keys) == 8 and len(set(keys)) == 8
    assert len(resumed.trajectories) == 8  # summary covers the whole run


def test_oracle_solves_synthhop_through_the_runner_with_real_retrieval():
    from agents.oracle import OracleAgent

    result = run_rollouts(lambda: gym.make("coa/SynthHop-v0"), lambda env, seed: OracleAgent(env),
                          task_indices=range(4), concurrency=2)
    assert [t.status for t in result.trajectories] == ["ok"] * 4
    assert all(t.reward == 1.0 and t.tool_calls.get("wiki_search", 0) >= 1
               for t in result.trajectories)


def test_play_episode_records_tool_stats(tiny_tokenizer, scripted_lm):
    turns = ["<think>\nthe city\n</think>\n<code>print(1+1)</code>\n<observation>\n",
             "<answer>2</answer>"]
    policy = LLMPolicy(HFEngine(scripted_lm(turns), tiny_tokenizer),
                       sampling=SamplingParams(max_new_tokens=64, temperature=0))
    env = _math_env()()
    trajectory = play_episode(env, policy, options={"task_index": 0})
    env.close()
    assert trajectory.tool_calls == {"code": 1} and trajectory.tool_errors == {}
    assert trajectory.info["response_tokens"] == len(trajectory.response_ids()) > 0
    assert trajectory.terminated and trajectory.status == "ok"


@pytest.mark.parametrize("samples", [1, 3])
def test_every_job_runs_once(samples):
    from agents.base import CallableAgent

    result = run_rollouts(_math_env(), lambda env, seed: CallableAgent(lambda o, i: "<answer>1</answer>"),
                          task_indices=range(5), samples=samples, concurrency=4)
    keys = sorted((t.task_id, t.sample_index) for t in result.trajectories)
    assert len(keys) == 5 * samples == len(set(keys))
