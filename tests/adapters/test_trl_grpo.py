"""TRL's GRPOTrainer trains on a coa env through its rollout_func hook (CoARollout): whole
multi-turn CoA episodes, token-exact, observations masked, rewards from the env."""

from __future__ import annotations

import pytest

from tests.adapters.conftest import ENV_ID, ENV_KWARGS, train_grpo


def _recording(rollout):
    """Keep every batch's trajectories (the rollout keeps only the last)."""
    batches = []

    def call(prompts, trainer):
        out = rollout(prompts, trainer)
        batches.append(list(rollout.last_trajectories))
        return out

    call.__name__ = "coa_rollout"
    return call, batches


def test_grpo_steps_on_episodes_the_env_scored(tmp_path, random_tiny):
    from trainers.adapters.trl_grpo import CoARollout

    tokenizer, model = random_tiny
    rollout = CoARollout(ENV_ID, env_kwargs=ENV_KWARGS, max_new_tokens=16, concurrency=4)
    dataset = rollout.dataset()
    assert len(dataset) == 4 and dataset[0]["prompt"][0]["content"] == "Search the wiki, then answer."
    hook, batches = _recording(rollout)
    trainer, logs = train_grpo(model, tokenizer, rollout, hook, tmp_path, dataset,
                               per_device_train_batch_size=4, num_generations=2, max_steps=2)
    assert len(logs) == 2
    for row, batch in zip(logs, batches, strict=True):
        assert len(batch) == 4  # 2 prompts x 2 generations, each its own episode
        assert row["reward"] == pytest.approx(sum(t.reward for t in batch) / len(batch))
        assert {t.status.split(":")[0] for t in batch} <= {"ok", "truncated", "error"}
        # TRL's "truncated" is exactly the episodes the env did not end (it was 1 every step)
        assert row["completions/clipped_ratio"] == pytest.approx(sum(not t.terminated for t in batch) / len(batch))
    # What TRL trained on is the token-exact trajectory: prompt = the env's messages
    # through the chat template, env_mask = 0 exactly on the observation tokens.
    out = rollout(dataset["prompt"][:1], trainer)
    trajectory = rollout.last_trajectories[0]
    expected_prompt = tokenizer.apply_chat_template(dataset[0]["prompt"], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False)
    assert out["prompt_ids"][0] == list(expected_prompt) == trajectory.prompt_ids
    observation_ids = [i for s in trajectory.segments if s.kind == "observation" for i in s.token_ids]
    masked = [i for i, m in zip(out["completion_ids"][0], out["env_mask"][0], strict=True) if m == 0]
    # an episode the env ended closes with eos (untrained), so TRL does not count it as truncated
    ended = [tokenizer.eos_token_id] if trajectory.terminated else []
    assert masked == observation_ids + ended
    assert len(out["logprobs"][0]) == len(out["completion_ids"][0])
    rollout.close()


def test_trl_counts_an_answered_episode_as_terminated_and_a_cut_one_as_truncated(random_tiny):
    """`completions/clipped_ratio: 1` every step: TRL read every episode as truncated."""
    from agents.trajectory import EpisodeStatus, Segment, Trajectory
    from trainers.adapters.trl_grpo import _token_record

    tokenizer, _ = random_tiny
    eos = tokenizer.eos_token_id

    def episode(terminated: bool) -> Trajectory:
        answer = tokenizer.encode("<answer>4</answer>", add_special_tokens=False)
        return Trajectory(env_id=ENV_ID, task_id="t", prompt_ids=[1, 2], terminated=terminated,
                          status=EpisodeStatus.OK if terminated else EpisodeStatus.TRUNCATED_MAX_TURNS,
                          segments=[Segment("generated", "<answer>4</answer>", answer, [-0.5] * len(answer))])

    prompt = [{"role": "user", "content": "q"}]
    _, done_ids, done_lp, done_mask = _token_record(episode(True), prompt, tokenizer)
    assert done_ids[-1] == eos and done_mask[-1] == 0 and done_lp[-1] == 0.0  # terminated for TRL
    assert len(done_ids) == len(done_lp) == len(done_mask)
    _, cut_ids, _, _ = _token_record(episode(False), prompt, tokenizer)
    assert cut_ids[-1] != eos and len(cut_ids) == len(done_ids) - 1  # truncated for TRL, as it was


def test_a_prompt_not_from_the_dataset_is_refused(random_tiny):
    from trainers.adapters.trl_grpo import CoARollout

    rollout = CoARollout(ENV_ID, env_kwargs=ENV_KWARGS)
    with pytest.raises(KeyError, match=r"rollout.dataset\(\)"):
        rollout([[{"role": "user", "content": "something else"}]], trainer=None)


@pytest.mark.slow
def test_grpo_from_a_warm_start_gets_rewards_and_gradients(tmp_path, warm_tiny_dir):
    import torch

    from agents.tiny import load_tiny
    from trainers.adapters.trl_grpo import CoARollout

    tokenizer, model = load_tiny(warm_tiny_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rollout = CoARollout(ENV_ID, env_kwargs=ENV_KWARGS, max_new_tokens=32, concurrency=4)
    hook, batches = _recording(rollout)
    _, logs = train_grpo(model, tokenizer, rollout, hook, tmp_path, max_steps=4)
    rewards = [t.reward for batch in batches for t in batch]
    assert 0 < sum(rewards) < len(rewards)  # some episodes solved, some not: the env decides
    assert any(row["grad_norm"] > 0 for row in logs)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    rollout.close()
