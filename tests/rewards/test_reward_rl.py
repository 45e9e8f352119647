"""The RL loop trains on the composed reward: group terms and DAPO's overlong term are scored
over each complete group by the same code as ``coa eval -k``; the config takes a task list."""

from __future__ import annotations

import json

import pytest

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus
from coa_envs.rewards import EpisodeView, build_reward
from coa_envs.rewards.compose import total_of
from coa_envs.types import Task
from trainers.rl.shaping import shape_groups, training_reward_config

TASK = Task("t", "q", gold=("Seine",))


def test_the_overlong_term_is_appended_at_the_rollout_cap():
    assert training_reward_config({"name": "em_f1"}, 256, 0, 1.0) == {"name": "em_f1"}
    config = training_reward_config({"name": "em_f1", "metric": "f1"}, 256, 64, 0.5)
    assert config == {"terms": [{"name": "em_f1", "metric": "f1"},
                                {"name": "overlong", "label": "overlong", "weight": 0.5, "max_length": 256,
                                 "buffer": 64}]}
    composed = training_reward_config({"terms": [{"name": "format"}, {"name": "em_f1"}], "primary": "em_f1"},
                                      256, 64, 1.0)
    assert composed["primary"] == "em_f1" and [t["name"] for t in composed["terms"]] == ["format", "em_f1",
                                                                                         "overlong"]
    with pytest.raises(ValueError, match="already has an overlong term"):
        training_reward_config({"terms": [{"name": "em_f1"}, {"name": "overlong", "max_length": 9, "buffer": 1}]},
                               256, 64, 1.0)


def _episode(generated: int, observed: int, reward_answer: str | None, status=EpisodeStatus.OK):
    recorder = EpisodeRecorder.start("coa/SynthHop-v0", "p", {"task_id": "t"}, prompt_ids=[1])
    recorder.generated("g" * generated, token_ids=[2] * generated)
    if observed:
        recorder.observation("o" * observed, token_ids=[3] * observed)
    if status is EpisodeStatus.OK:
        result = build_reward({"name": "em_f1"}).score_episode(EpisodeView(task=TASK, answer=reward_answer))
        recorder.step("", result.score, True, False, {"answer": reward_answer, "reward_details": result.details})
    else:
        recorder.end(status)
    return recorder.finish()


def test_overlong_reads_the_length_the_cap_counts_observations_included():
    reward = build_reward(training_reward_config({"name": "em_f1"}, 20, 5, 1.0))
    long_observation = _episode(10, 500, "Seine")  # few generated tokens, but far over the cap
    long_generation = _episode(18, 0, "Seine")
    cut = _episode(12, 0, None, EpisodeStatus.TRUNCATED_RESPONSE_TOKENS)  # the next observation did not fit
    (shaped,) = shape_groups([[long_observation, long_generation, cut]], reward)
    assert shaped == pytest.approx([1.0 - 1.0, 1.0 - 3 / 5, 0.0 - 1.0])
    assert long_generation.info["reward_details"]["terms"]["overlong"]["details"]["length"] == 18


@pytest.fixture()
def rl_config(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import gymnasium as gym

    from trainers.rl.config import load_config

    env_kwargs = {"task_options": {"difficulty": "easy", "num_tasks": 16},
                  "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
                  "system_prompt": "Search the wiki, then answer.",
                  "reward": {"terms": [{"name": "em_f1"}, {"name": "format", "weight": 0.1},
                                       {"name": "group_length", "weight": 0.2}]}}
    probe = gym.make("coa/SynthHop-v0", **{**env_kwargs, "task_options": {**env_kwargs["task_options"],
                                                                         "split": "train"}})
    chosen = [t.task_id for t in probe.unwrapped.tasks[3:5]]
    probe.close()
    task_list = tmp_path / "tasks.jsonl"
    task_list.write_text("".join(json.dumps({"task_id": i, "pass_rate": 0.5}) + "\n" for i in chosen))
    config = load_config(values={
        "algorithm": {"name": "dapo", "total_steps": 1, "prompts_per_step": 2, "group_size": 3,
                      "minibatch_size": 6, "dynamic_sampling": False, "overlong_buffer": 30},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": env_kwargs, "max_turns": 2, "task_list": str(task_list)},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 40},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 3},
        "bookkeeping": {"output_dir": str(tmp_path), "tensorboard": False, "plot": False, "eval_every": 0},
    })
    return config, chosen


def test_collected_groups_carry_the_shaped_reward_of_every_term(rl_config):
    from trainers.rl.actors import LocalRollouts
    from trainers.rl.loop import TaskSampler, collect_groups
    from trainers.rl.rollout import make_env

    config, chosen = rl_config
    rollouts = LocalRollouts(config)
    try:
        assert rollouts.num_tasks() == 2  # the task list, not the 13 training tasks
        batch = collect_groups(config, [TaskSampler(rollouts.num_tasks(), 0)], rollouts, step=1)
    finally:
        rollouts.close()
    heldout = make_env(config, heldout=True)
    assert len(heldout.unwrapped.tasks) == 3 and not set(chosen) & {t.task_id for t in heldout.unwrapped.tasks}
    heldout.close()
    assert len(batch.groups) == 2 and all(len(g) == 3 for g in batch.groups)
    for group in batch.groups:
        for trajectory in group:
            assert trajectory.task_id in chosen
            details = trajectory.info["reward_details"]
            terms = details["terms"]
            assert {"group_length", "overlong"} <= set(terms) and not any(e.get("pending") for e in terms.values())
            length = len(trajectory.response_ids())
            expected_length = max(length, 40) if trajectory.status is EpisodeStatus.TRUNCATED_RESPONSE_TOKENS \
                else length
            assert terms["overlong"]["details"]["length"] == expected_length
            assert trajectory.reward == pytest.approx(total_of(details))
