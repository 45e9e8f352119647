"""A verifiers (v1) environment over a coa id, run by verifiers' own machinery (taskset,
env, agent interaction, interception, traces) against ``coa serve``; then trained with
TRL's GRPOTrainer on those traces (VerifiersRollout)."""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("verifiers.v1", reason="needs verifiers (extra adapters)")

import gymnasium as gym
import verifiers.v1 as vf

import coa_envs  # noqa: F401
from tests.adapters.conftest import ENV_ID, ENV_KWARGS, train_grpo
from trainers.adapters.verifiers_env import CoAChatHarnessConfig, CoAEnvConfig, CoATasksetConfig, CoAVerifiersEnv


def _local_env():
    return gym.make(ENV_ID, **{**ENV_KWARGS, "task_options": {**ENV_KWARGS["task_options"], "split": "train"}})


def _config(limit: int = 4, max_tokens: int = 16) -> CoAEnvConfig:
    return CoAEnvConfig(taskset=CoATasksetConfig(env_id=ENV_ID, env_kwargs=ENV_KWARGS, limit=limit),
                        player=vf.AgentConfig(runtime=vf.SubprocessConfig(), max_turns=3,
                                              harness=CoAChatHarnessConfig(max_tokens=max_tokens)))


def test_verifiers_loads_the_plugin_by_its_package_name():
    from verifiers.v1.utils.loaders import default_harness_id, environment_class, load_taskset

    assert environment_class("coa_verifiers") is CoAVerifiersEnv
    assert default_harness_id("coa_verifiers") == "coa_verifiers"
    tasks = list(load_taskset(CoATasksetConfig(env_id=ENV_ID, env_kwargs=ENV_KWARGS)))
    local = _local_env()
    assert [t.data.id for t in tasks] == [t.task_id for t in local.unwrapped.tasks]
    assert tasks[0].data.system_prompt == "Search the wiki, then answer."
    local.close()


def test_an_episode_through_verifiers_is_scored_by_the_coa_env(random_tiny):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    tokenizer, model = random_tiny
    env = CoAVerifiersEnv(_config(limit=2))
    task = list(env.taskset)[1]
    os.environ.setdefault("COA_TEST_KEY", "loopback")
    with serve_in_thread(create_app(HFEngine(model, tokenizer), tokenizer, "tiny")) as url:

        async def play():
            async with env.serving():
                context = vf.ModelContext(model="tiny", client=vf.EvalClientConfig(base_url=url,
                                                                                   api_key_var="COA_TEST_KEY"))
                return await env.run_episode(task, context)

        episode = asyncio.run(play())
    assert episode.ok and not episode.errors
    trace = episode.traces[-1]
    messages = [(m.role, m.content) for m in trace.branches[-1].messages]
    assert messages[:2] == [("system", "Search the wiki, then answer."), ("user", task.data.prompt)]
    # Replaying the model's replies in a fresh local env gives the same observations and reward.
    local = _local_env()
    local.reset(seed=0, options={"task_index": 1})
    replies = [content for role, content in messages if role == "assistant"]
    observations = [content for role, content in messages[2:] if role == "user"]
    reward, seen = 0.0, []
    for reply in replies:
        observation, reward, terminated, truncated, _ = local.step(reply.strip())
        if terminated or truncated:
            break
        seen.append(observation)
    # (an observation sent after the agent's last allowed turn is not in its transcript)
    assert observations == seen[: len(observations)] and len(observations) >= 1
    assert trace.rewards["coa_reward"].score == reward
    assert trace.info["coa_task_id"] == task.data.id
    local.close()


def test_trace_tokens_mask_exactly_the_models_turns(random_tiny):
    from trainers.adapters.verifiers_trl import trace_tokens

    tokenizer, _ = random_tiny
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"},
                {"role": "assistant", "content": "<wiki_search>q</wiki_search>"},
                {"role": "user", "content": "\n<observation>\nfacts\n</observation>\n\n"},
                {"role": "assistant", "content": "<answer>A</answer>"}]
    prompt, completion, mask = trace_tokens(messages, tokenizer)
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert tokenizer.decode(prompt + completion) == full
    trained = tokenizer.decode([t for t, m in zip(completion, mask, strict=True) if m])
    assert trained == "<wiki_search>q</wiki_search><|im_end|>\n<answer>A</answer><|im_end|>\n"
    assert "facts" in tokenizer.decode([t for t, m in zip(completion, mask, strict=True) if not m])


def test_grpo_trains_on_verifiers_episodes(tmp_path, random_tiny):
    from trainers.adapters.verifiers_trl import VerifiersRollout

    tokenizer, model = random_tiny
    rollout = VerifiersRollout(_config(), concurrency=4)
    rewards_seen = []

    def hook(prompts, trainer):
        out = rollout(prompts, trainer)
        rewards_seen.append([e.traces[-1].rewards["coa_reward"].score for e in rollout.last_episodes])
        return out

    _, logs = train_grpo(model, tokenizer, rollout, hook, tmp_path,
                         per_device_train_batch_size=4, num_generations=2, max_steps=2)
    assert len(logs) == 2
    for row, rewards in zip(logs, rewards_seen, strict=True):
        assert len(rewards) == 4 and row["reward"] == pytest.approx(sum(rewards) / 4)
    assert all(e.ok for e in rollout.last_episodes)


@pytest.mark.slow
def test_grpo_on_verifiers_episodes_from_a_warm_start(tmp_path, warm_tiny_dir):
    from agents.tiny import load_tiny
    from trainers.adapters.verifiers_trl import VerifiersRollout

    tokenizer, model = load_tiny(warm_tiny_dir)
    rollout = VerifiersRollout(_config(max_tokens=32), concurrency=4)
    rewards: list[float] = []

    def hook(prompts, trainer):
        out = rollout(prompts, trainer)
        rewards.extend(out["coa_reward"])
        return out

    train_grpo(model, tokenizer, rollout, hook, tmp_path, max_steps=3)
    assert sum(rewards) > 0  # the env scored some of the warm-started policy's answers right
